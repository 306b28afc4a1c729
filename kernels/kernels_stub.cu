// Placeholder until the CUDA kernels land (issue 5).
