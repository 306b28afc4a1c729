// PLACEHOLDER: runtime/executor.cpp — being written.
