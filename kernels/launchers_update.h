// Launchers of the bf16 conversions, layout transposes, gradient accumulation and optimizer
// updates (kernels/kernels.h includes this).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/adam_step.h"

namespace remat {

// ---- bfloat16 conversions (bf16.cu) -------------------------------------------------------------
// bf16 tensors are uint16_t* here (__nv_bfloat16 inside the .cu files), so that host code
// includes this header without cuda_bf16.h. Rounding is to nearest even (__float2bfloat16_rn),
// as the CPU's bf16_from_float. out may equal inp for bf16_round.
void bf16_widen(float* out, const uint16_t* inp, int64_t n, cudaStream_t stream);   // exact
void bf16_narrow(uint16_t* out, const float* inp, int64_t n, cudaStream_t stream);  // rne
void bf16_round(float* out, const float* inp, int64_t n, cudaStream_t stream);      // rne, as f32
void bf16_widen_add(float* out, const uint16_t* inp, int64_t n, cudaStream_t stream);  // out += x

// ---- layout transposes (layout.cu), Note [staged NHWC convolutions] -----------------------------
// Each of `batch` row-major [rows, cols] matrices in src becomes its [cols, rows] transpose in
// dst (dst != src): NCHW -> NHWC is rows = C, cols = H * W per sample; NHWC -> NCHW rows = H * W,
// cols = C; KCRS -> KRSC rows = C/g, cols = R * S per filter. narrow rounds F32 to bf16 (rne),
// widen is exact; accumulate adds into dst in FP32 instead of storing.
void transpose_batched(float* dst, const float* src, int64_t batch, int64_t rows, int64_t cols,
                       bool accumulate, cudaStream_t stream);
void transpose_batched(uint16_t* dst, const uint16_t* src, int64_t batch, int64_t rows,
                       int64_t cols, cudaStream_t stream);
void transpose_batched_narrow(uint16_t* dst, const float* src, int64_t batch, int64_t rows,
                              int64_t cols, cudaStream_t stream);
void transpose_batched_widen(float* dst, const uint16_t* src, int64_t batch, int64_t rows,
                             int64_t cols, bool accumulate, cudaStream_t stream);

// ---- gradient accumulation (optimizer.cu), ops/grad_accumulate.cpp's spec ----------------------
// acc = (acc + grad) * scale, the product skipped when scale is 1. acc, grad: (n).
void grad_accumulate(float* acc, const float* grad, int64_t n, float scale, cudaStream_t stream);

// ---- optimizer updates (optimizer.cu), in place, PyTorch semantics like ops/sgd.cpp, adam.cpp -
// g = grad + wd * p; with momentum: buf = momentum * buf + g, step = nesterov ? g + momentum *
// buf : buf; p -= lr * step. momentum_buf null: plain SGD. param, grad, buf: (n).
void sgd_update(float* param, const float* grad, float* momentum_buf, int64_t n, float lr,
                float momentum, float weight_decay, bool nesterov, cudaStream_t stream);
// One Adam / AdamW step with the scalars of kernels/adam_step.h:
// p' = p * decay_factor; g = grad + l2 * p; m = lerp(m, g, lerp_weight) (torch.lerp);
// v = b2 v + ((1 - b2) g) g; p = p' - step_size * (m / (sqrt(v) / bc2_sqrt + eps)).
// param, grad, m, v: (n).
void adam_update(float* param, const float* grad, float* m, float* v, int64_t n,
                 const AdamStep& s, cudaStream_t stream);

// Global-norm gradient clipping (optimizer.cu), Note [gradient clipping] in
// runtime/graph/autodiff.cpp.
// grads: a HOST array of k device pointers to tensors of sizes[k] floats; state: device scratch
// of kGradClipStateFloats floats (8-byte aligned). Computes norm = sqrt(sum of squares over all
// tensors) in double (tensors in order, each by a fixed grid of partial sums: deterministic),
// scale = min(1, max_norm / (norm + 1e-6)), multiplies every tensor by float(scale) in place,
// and leaves state[0] = float(norm), state[1] = float(scale).
constexpr int64_t kGradClipBlocks = 256;  // partial sums per tensor
constexpr int64_t kGradClipStateFloats = 2 + 2 * (kGradClipBlocks + 1);
void clip_grad_norm(float* const* grads, const int64_t* sizes, int k, double max_norm,
                    float* state, cudaStream_t stream);

}  // namespace remat
