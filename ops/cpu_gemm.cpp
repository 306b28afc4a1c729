// cpu_gemm over cblas_sgemm (row-major).
#include "ops/cpu_gemm.h"

#include <cblas.h>

#include <algorithm>

#include "runtime/core/check.h"

namespace remat {

void cpu_gemm_set_threads(int threads) { openblas_set_num_threads(std::max(threads, 1)); }

void cpu_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
              int64_t ldc) {
  REMAT_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm sizes " << m << "x" << n << "x" << k);
  if (m == 0 || n == 0) return;
  if (k == 0) {  // BLAS may leave C untouched when K = 0; define it as beta * C
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  // OpenBLAS's sgemm does not read C when beta == 0 (NaN in C does not propagate).
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(std::max<int64_t>(lda, 1)), b,
              static_cast<blasint>(std::max<int64_t>(ldb, 1)), beta, c,
              static_cast<blasint>(std::max<int64_t>(ldc, 1)));
}

}  // namespace remat
