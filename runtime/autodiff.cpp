// PLACEHOLDER: runtime/autodiff.cpp — being written.
