// PLACEHOLDER: runtime/cpu_backend.cpp — being written.
