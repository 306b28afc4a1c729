// Row-major single-precision GEMM for the CPU kernels, over OpenBLAS cblas_sgemm:
// C[M, N] = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T. Deterministic for a given
// shape within one process (OpenBLAS splits work by M/N, never by the K reduction order).
#pragma once

#include <cstdint>

namespace remat {

// A is [M, K] (or [K, M] when trans_a), B is [K, N] (or [N, K] when trans_b); lda/ldb/ldc are
// row strides in elements. beta = 0 overwrites C without reading it.
void cpu_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
              int64_t ldc);

// Threads OpenBLAS uses for the GEMMs of this process (several CPU ranks on one host share
// its cores: each takes its part instead of all of them).
void cpu_gemm_set_threads(int threads);

}  // namespace remat
