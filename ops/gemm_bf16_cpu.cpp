// dense's and matmul's bf16 CPU kernels: widen a block, run the F32 kernel's GEMM on it, round
// the result once (see gemm_bf16_cpu.h).
#include "ops/gemm_bf16_cpu.h"

#include <algorithm>

#include "ops/cpu_gemm.h"
#include "runtime/core/bf16.h"
#include "runtime/core/tensor.h"

namespace remat {
namespace {

constexpr int64_t kBlock = 256;  // rows (or columns) widened at a time

int64_t f32_bytes(int64_t n) { return alloc_bytes(n * int64_t{4}); }

// Carves FP32 buffers off a workspace, each on a kAllocAlignment boundary (as f32_bytes counts).
struct Carve {
  char* p;
  float* take(int64_t n) {
    float* out = reinterpret_cast<float*>(p);
    p += f32_bytes(n);
    return out;
  }
};

// rne(W) as FP32: the weight as a bf16 GEMM reads it.
float* rounded_weight(const float* w, int64_t n, Carve& ws) {
  float* out = ws.take(n);
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_round(w[i]);
  return out;
}

// Columns [c0, c0 + cols) of the row-major bf16 matrix m[rows, ld], widened into out[rows, cols].
void widen_columns(const uint16_t* m, int64_t rows, int64_t ld, int64_t c0, int64_t cols,
                   float* out) {
  for (int64_t r = 0; r < rows; ++r) bf16_widen(m + r * ld + c0, out + r * cols, cols);
}

}  // namespace

int64_t dense_bf16_workspace(DensePass pass, int64_t rows, int64_t f, int64_t u) {
  const int64_t rb = std::min(rows, kBlock);
  switch (pass) {
    case DensePass::Forward: return f32_bytes(u * f) + f32_bytes(rb * f) + f32_bytes(rb * u);
    case DensePass::GradInput: return f32_bytes(u * f) + f32_bytes(rb * u) + f32_bytes(rb * f);
    case DensePass::GradWeight:
      return f32_bytes(rows * std::min(f, u)) + f32_bytes(rows * std::min(kBlock, std::max(f, u)));
  }
  return 0;
}

// out[rows, n_out] = gemm(in[rows, n_in] widened, wr) a block of rows at a time, `epilogue` on
// each FP32 block before it is rounded into `out`.
template <typename Gemm, typename Epilogue>
void by_row_blocks(const uint16_t* in, int64_t rows, int64_t n_in, int64_t n_out, uint16_t* out,
                   Carve& c, Gemm gemm, Epilogue epilogue) {
  const int64_t rb = std::min(rows, kBlock);
  float* ib = c.take(rb * n_in);
  float* ob = c.take(rb * n_out);
  for (int64_t r0 = 0; r0 < rows; r0 += rb) {
    const int64_t n = std::min(rb, rows - r0);
    bf16_widen(in + r0 * n_in, ib, n * n_in);
    gemm(n, ib, ob);
    epilogue(n, ob);
    bf16_narrow(ob, out + r0 * n_out, n * n_out);
  }
}

void dense_forward_bf16_cpu(const uint16_t* x, const float* w, const float* b, Activation act,
                            int64_t rows, int64_t f, int64_t u, uint16_t* y, void* ws) {
  Carve c{static_cast<char*>(ws)};
  const float* wr = rounded_weight(w, u * f, c);
  by_row_blocks(
      x, rows, f, u, y, c,
      [&](int64_t n, const float* xb, float* yb) {
        cpu_gemm(false, true, n, u, f, 1.0f, xb, f, wr, f, 0.0f, yb, u);
      },
      [&](int64_t n, float* yb) {
        if (b)
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < u; ++j) yb[i * u + j] += b[j];
        activation_forward_cpu(act, yb, n * u);
      });
}

void dense_grad_input_bf16_cpu(const uint16_t* dz, const float* w, int64_t rows, int64_t u,
                               int64_t f, uint16_t* dx, void* ws) {
  Carve c{static_cast<char*>(ws)};
  const float* wr = rounded_weight(w, u * f, c);
  by_row_blocks(
      dz, rows, u, f, dx, c,
      [&](int64_t n, const float* dzb, float* dxb) {
        cpu_gemm(false, false, n, f, u, 1.0f, dzb, u, wr, f, 0.0f, dxb, f);
      },
      [](int64_t, float*) {});
}

// dW = dz^T x with the narrower operand widened whole and the wider one a block of columns at a
// time: blocks of dz's columns are blocks of dW's rows, blocks of x's columns blocks of dW's
// columns.
void dense_grad_weight_bf16_cpu(const uint16_t* dz, const uint16_t* x, int64_t rows, int64_t u,
                                int64_t f, float* dw, void* ws) {
  Carve c{static_cast<char*>(ws)};
  if (f <= u) {
    float* xf = c.take(rows * f);
    bf16_widen(x, xf, rows * f);
    const int64_t ub = std::min(u, kBlock);
    float* dzb = c.take(rows * ub);
    for (int64_t u0 = 0; u0 < u; u0 += ub) {
      const int64_t m = std::min(ub, u - u0);
      widen_columns(dz, rows, u, u0, m, dzb);
      cpu_gemm(true, false, m, f, rows, 1.0f, dzb, m, xf, f, 0.0f, dw + u0 * f, f);
    }
  } else {
    float* dzf = c.take(rows * u);
    bf16_widen(dz, dzf, rows * u);
    const int64_t fb = std::min(f, kBlock);
    float* xb = c.take(rows * fb);
    for (int64_t f0 = 0; f0 < f; f0 += fb) {
      const int64_t m = std::min(fb, f - f0);
      widen_columns(x, rows, f, f0, m, xb);
      cpu_gemm(true, false, u, m, rows, 1.0f, dzf, u, xb, m, 0.0f, dw + f0, f);
    }
  }
  bf16_round_in_place(dw, u * f);
}

int64_t matmul_bf16_workspace(int64_t m, int64_t n, int64_t k) {
  return f32_bytes(m * k) + f32_bytes(k * n) + f32_bytes(m * n);
}

void matmul_bf16_cpu(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float scale,
                     const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, uint16_t* c,
                     void* ws) {
  Carve w{static_cast<char*>(ws)};
  float* af = w.take(m * k);
  float* bf = w.take(k * n);
  float* cf = w.take(m * n);
  bf16_widen(a, af, m * k);
  bf16_widen(b, bf, k * n);
  cpu_gemm(trans_a, trans_b, m, n, k, scale, af, lda, bf, ldb, 0.0f, cf, n);
  bf16_narrow(cf, c, m * n);
}

}  // namespace remat
