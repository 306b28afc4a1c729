// Launchers of the elementwise, copy, resampling, pooling and dropout kernels (Note [kernel
// determinism] and Note [kernel vs CPU rounding] in kernels/kernels.h, which includes this).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/rng.h"  // StepSource

namespace remat {

// ---- fill / copy (copy.cu) ---------------------------------------------------------------------
// From here to dropout, each launcher but fill has a bf16 overload of the same name taking
// uint16_t* for its bf16 tensors (Note [bf16 execution] in runtime/backends/bf16_staging.h): it
// loads bf16, computes in FP32 in the F32 launcher's order and rounds each stored value once to
// nearest even, so it equals the backends' staging of the F32 launcher (bit for bit where the
// F32 launcher equals the CPU, Note [kernel vs CPU rounding]) and is deterministic the same way.
// Copies and permutations move bf16 values unchanged.
void fill(float* out, float value, int64_t n, cudaStream_t stream);      // out: (n)
void copy_forward(float* out, const float* inp, int64_t n, cudaStream_t stream);  // (n) -> (n)
void copy_forward(uint16_t* out, const uint16_t* inp, int64_t n, cudaStream_t stream);
// out[r * out_stride + j] = inp[r * inp_stride + j] for r < rows, j < row_len (elements: floats,
// or bf16 values for the overload, which copies in the widest unit the addresses allow).
void strided_copy(float* out, int64_t out_stride, const float* inp, int64_t inp_stride,
                  int64_t rows, int64_t row_len, cudaStream_t stream);
void strided_copy(uint16_t* out, int64_t out_stride, const uint16_t* inp, int64_t inp_stride,
                  int64_t rows, int64_t row_len, cudaStream_t stream);

// ---- activations (elementwise.cu); out may equal inp (in place) --------------------------------
// The bf16 overloads select or zero values, so their results are exact.
// relu: max(0, x); relu6: min(max(0, x), 6).
void relu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream);
void relu6_forward(float* out, const float* inp, int64_t n, cudaStream_t stream);
void relu_forward(uint16_t* out, const uint16_t* inp, int64_t n, cudaStream_t stream);
void relu6_forward(uint16_t* out, const uint16_t* inp, int64_t n, cudaStream_t stream);
// dinp = dout * (0 < out) / dout * (0 < out < 6), with `out` the forward OUTPUT y. dinp may
// equal dout.
void relu_backward(float* dinp, const float* dout, const float* out, int64_t n,
                   cudaStream_t stream);
void relu6_backward(float* dinp, const float* dout, const float* out, int64_t n,
                    cudaStream_t stream);
void relu_backward(uint16_t* dinp, const uint16_t* dout, const uint16_t* out, int64_t n,
                   cudaStream_t stream);
void relu6_backward(uint16_t* dinp, const uint16_t* dout, const uint16_t* out, int64_t n,
                    cudaStream_t stream);

// Activation applied after a bias add (for fused conv2d / dense epilogues).
enum class KernelActivation { None, Relu, Relu6 };
// out[i, c, p] = act(out[i, c, p] + bias[c]) in place; out: (n, c, plane), bias: (c) or null
// (then only the activation is applied). dense: plane = 1. The bf16 overload keeps the bias
// FP32 (a parameter): out + bias and the activation in FP32, then one rounding per value.
void bias_act_forward(float* out, const float* bias, int64_t n, int64_t c, int64_t plane,
                      KernelActivation act, cudaStream_t stream);
void bias_act_forward(uint16_t* out, const float* bias, int64_t n, int64_t c, int64_t plane,
                      KernelActivation act, cudaStream_t stream);

// ---- add (elementwise.cu) ----------------------------------------------------------------------
// out = inps[0] + inps[1] + ... + inps[k-1], summed left to right like the CPU; any k >= 1.
// `inps` is a HOST array of k device pointers (passed to the kernel by value in chunks).
// The bf16 overload keeps the whole sum in FP32 and rounds it once, so it passes every pointer
// in one launch: at most kAddMaxBf16Inputs inputs (2 KB of kernel parameters), else it throws.
constexpr int kAddMaxBf16Inputs = 256;
void add_forward(float* out, const float* const* inps, int k, int64_t n, cudaStream_t stream);
void add_forward(uint16_t* out, const uint16_t* const* inps, int k, int64_t n,
                 cudaStream_t stream);

// ---- concat along axis 1 (copy.cu) -------------------------------------------------------------
// Strided copies (the bf16 overloads: of bf16 values).
// Copies inp (n, c_in, inner) into out (n, c_out, inner) at channels [offset, offset + c_in).
void concat_forward(float* out, const float* inp, int64_t n, int64_t c_in, int64_t c_out,
                    int64_t offset, int64_t inner, cudaStream_t stream);
void concat_forward(uint16_t* out, const uint16_t* inp, int64_t n, int64_t c_in, int64_t c_out,
                    int64_t offset, int64_t inner, cudaStream_t stream);
// dinp (n, channels, inner) = dout (n, c_total, inner)[:, offset : offset + channels].
void concat_slice_forward(float* dinp, const float* dout, int64_t n, int64_t c_total,
                          int64_t offset, int64_t channels, int64_t inner, cudaStream_t stream);
void concat_slice_forward(uint16_t* dinp, const uint16_t* dout, int64_t n, int64_t c_total,
                          int64_t offset, int64_t channels, int64_t inner, cudaStream_t stream);

// ---- permutation (copy.cu) --------------------------------------------------------------------
// out[a, c, b, d] = inp[a, b, c, d] for inp (d0, d1, d2, d3): attention's head split
// ([N, T, H, D] -> [N, H, T, D]) and merge ([N, H, T, D] -> [N, T, H, D]). Exact, in F32 and
// in bf16 (the overload).
void permute_0213(float* out, const float* inp, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                  cudaStream_t stream);
void permute_0213(uint16_t* out, const uint16_t* inp, int64_t d0, int64_t d1, int64_t d2,
                  int64_t d3, cudaStream_t stream);

// ---- upsample nearest and bilinear (upsample.cu) -----------------------------------------------
// The bf16 overloads copy bf16 values (nearest forward) or compute in FP32 and round each result
// once. `pixel`: 1 for NCHW planes (planes = N C); C for channels-last [N, H, W, C] (plane
// n C + c, its pixels C apart; Note [channels-last layout]).
// out (planes, H*fh, W*fw) from inp (planes, H, W); out[p, h, w] = inp[p, h / fh, w / fw].
void upsample_nearest_forward(float* out, const float* inp, int64_t planes, int64_t H, int64_t W,
                              int64_t fh, int64_t fw, int64_t pixel, cudaStream_t stream);
void upsample_nearest_forward(uint16_t* out, const uint16_t* inp, int64_t planes, int64_t H,
                              int64_t W, int64_t fh, int64_t fw, int64_t pixel,
                              cudaStream_t stream);
// dinp (planes, H, W) = sum of each fh x fw block of dout (planes, H*fh, W*fw), row-major order.
void upsample_nearest_backward(float* dinp, const float* dout, int64_t planes, int64_t H,
                               int64_t W, int64_t fh, int64_t fw, int64_t pixel,
                               cudaStream_t stream);
void upsample_nearest_backward(uint16_t* dinp, const uint16_t* dout, int64_t planes, int64_t H,
                               int64_t W, int64_t fh, int64_t fw, int64_t pixel,
                               cudaStream_t stream);
// Bilinear with half-pixel centres (kernels/bilinear.h, Note [bilinear arithmetic]): out
// (planes, H*fh, W*fw) from inp (planes, H, W); the backward gathers dinp (planes, H, W) from
// dout. Both equal the CPU reference bit for bit.
void upsample_bilinear_forward(float* out, const float* inp, int64_t planes, int64_t H, int64_t W,
                               int64_t fh, int64_t fw, int64_t pixel, cudaStream_t stream);
void upsample_bilinear_forward(uint16_t* out, const uint16_t* inp, int64_t planes, int64_t H,
                               int64_t W, int64_t fh, int64_t fw, int64_t pixel,
                               cudaStream_t stream);
void upsample_bilinear_backward(float* dinp, const float* dout, int64_t planes, int64_t H,
                                int64_t W, int64_t fh, int64_t fw, int64_t pixel,
                                cudaStream_t stream);
void upsample_bilinear_backward(uint16_t* dinp, const uint16_t* dout, int64_t planes, int64_t H,
                                int64_t W, int64_t fh, int64_t fw, int64_t pixel,
                                cudaStream_t stream);

// ---- window copy (pad.cu): zeropad, crop, conv2d's asymmetric padding ---------------------------
// out (planes, Ho, Wo)[p, h, w] = inp (planes, H, W)[p, h + dh, w + dw], 0 outside inp. Exact.
void window_copy(float* out, const float* inp, int64_t planes, int64_t H, int64_t W, int64_t Ho,
                 int64_t Wo, int64_t dh, int64_t dw, cudaStream_t stream);
void window_copy(uint16_t* out, const uint16_t* inp, int64_t planes, int64_t H, int64_t W,
                 int64_t Ho, int64_t Wo, int64_t dh, int64_t dw, cudaStream_t stream);

// ---- pooling with per-side padding (pool.cu) ---------------------------------------------------
// Windows of kh x kw with strides (sh, sw) over (planes, H, W) inputs padded by `top` rows above
// and `left` columns to the left (the bottom and right pads only set Ho, Wo), windows clipped to
// the input: padding never wins a maximum, and an average divides by kh * kw (count_pad) or by
// the window's real elements. Each equals the CPU reference (ops/pool.cpp) bit for bit: the
// same scan order and FP32 rounding; the backward gathers over the outputs covering an input.
// `pixel`: 1 for NCHW planes; C for channels-last [N, H, W, C] (plane n * C + c starts at
// n H W C + c, its elements C apart; Note [channels-last layout]).
struct PoolWindow {
  int64_t planes, H, W, Ho, Wo;
  int64_t kh, kw, sh, sw, top, left;
  int64_t pixel = 1;
};
void pool_max_forward(float* out, const float* inp, const PoolWindow& g, cudaStream_t stream);
void pool_max_forward(uint16_t* out, const uint16_t* inp, const PoolWindow& g,
                      cudaStream_t stream);
// dinp (planes, H, W): each dout element goes to its window's first maximum of inp.
void pool_max_backward(float* dinp, const float* dout, const float* inp, const PoolWindow& g,
                       cudaStream_t stream);
void pool_max_backward(uint16_t* dinp, const uint16_t* dout, const uint16_t* inp,
                       const PoolWindow& g, cudaStream_t stream);
void pool_avg_forward(float* out, const float* inp, const PoolWindow& g, bool count_pad,
                      cudaStream_t stream);
void pool_avg_forward(uint16_t* out, const uint16_t* inp, const PoolWindow& g, bool count_pad,
                      cudaStream_t stream);
void pool_avg_backward(float* dinp, const float* dout, const PoolWindow& g, bool count_pad,
                       cudaStream_t stream);
void pool_avg_backward(uint16_t* dinp, const uint16_t* dout, const PoolWindow& g, bool count_pad,
                       cudaStream_t stream);

// ---- dropout (dropout.cu), mask from kernels/rng.h ---------------------------------------------
// out[e] = rng_uniform(seed, step, first + e) >= rate ? inp[e] * (1 / (1 - rate)) : 0, rate in
// [0, 1); `first` is the global index of element 0 (data parallel: this rank's part of the
// global batch). The backward is the same map applied to dout. out may equal inp. The bf16
// overloads draw the same mask and round each kept inp[e] * scale (an FP32 product) once.
void dropout_forward(float* out, const float* inp, int64_t n, float rate, uint64_t seed,
                     StepSource step, uint64_t first, cudaStream_t stream);
void dropout_backward(float* dinp, const float* dout, int64_t n, float rate, uint64_t seed,
                      StepSource step, uint64_t first, cudaStream_t stream);
void dropout_forward(uint16_t* out, const uint16_t* inp, int64_t n, float rate, uint64_t seed,
                     StepSource step, uint64_t first, cudaStream_t stream);
void dropout_backward(uint16_t* dinp, const uint16_t* dout, int64_t n, float rate, uint64_t seed,
                      StepSource step, uint64_t first, cudaStream_t stream);

}  // namespace remat
