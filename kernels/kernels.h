// Native CUDA kernels as plain host-callable launchers (llm.c style): raw device pointers,
// sizes, a stream. They never allocate, never synchronize (except where noted), never see a
// framework type, and check every launch (throwing remat::Error through REMAT_CUDA_CHECK).
// Plain C++ declarations: ops/*.cpp include this with the host compiler under REMAT_HAVE_CUDA.
//
// Note [kernel determinism]: every launcher gives bit-identical results when rerun on the same
// inputs (a recomputed node must equal its first computation). No floating-point atomics; every
// reduction sums in an order fixed by the shapes alone (fixed grid, fixed tree).
// Note [kernel vs CPU rounding]: elementwise kernels use the CPU reference's operation order and
// the round-to-nearest intrinsics (__fmul_rn, __fadd_rn, ...) so that nvcc does not contract
// them into FMAs: relu*, add, copy, concat*, upsample*, dropout*, global_avgpool_backward, sgd,
// adam and the column-wise bias_grad reduce (plane == 1) are meant to equal the CPU bit for bit.
// Reductions that are parallel over a long axis (softmax_xent, global_avgpool_forward, bias_grad
// with plane > 1) sum in double in a different (tree) order than the CPU: equal within ~1 ulp.
#pragma once

#include <cuda_runtime_api.h>

#include <climits>
#include <cstdint>

#include "kernels/adam_step.h"
#include "kernels/attention.h"  // the fused attention launchers
#include "kernels/curve_math.h"  // Curve, CurveParams
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
void relu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream);   // max(0, x)
void relu6_forward(float* out, const float* inp, int64_t n, cudaStream_t stream);  // min(max(0,x),6)
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

// Note [bf16 launchers]
// The launchers of the sections below (softmax cross-entropy, transformer layers but the token
// embedding, per-channel reductions, reductions) each have a bf16 overload of the same name:
// activation tensors are uint16_t* bf16 (__nv_bfloat16 inside the .cu files), parameters
// (layer-norm weight and bias, the position table) and everything they reduce into (losses,
// column sums, bias, weight and gamma gradients) stay float. The kernel is the F32 one templated
// on its storage type (kernels/common.cuh): it widens each bf16 value exactly, computes in FP32 /
// double in the F32 kernel's order, and rounds each bf16 output once from the FP32 value the F32
// kernel would store: it is meant to equal the F32 kernel run on widened copies with its output
// rounded (the backend's staging, Note [bf16 execution]) bit for bit, so a native bf16 node and
// a staged one agree, and it keeps Note [kernel determinism] (the grid and the order of every
// sum are those of the F32 kernel). Workspace sizes do not depend on the dtype.

// ---- softmax cross-entropy (softmax_xent.cu) ---------------------------------------------------
// Logits (outer, k, inner): [N, K] has outer = N, inner = 1; [N, K, H, W] has outer = N,
// inner = H * W (a softmax per pixel). Labels (outer, inner) int32. count = outer * inner.
//
// bf16 overloads (Note [bf16 launchers]): bf16 logits and dlogits; the loss stays float.
//
// Token losses ([N, T, V] logits as N*T rows) may skip rows whose label is `ignore_index`: they
// count neither in the mean nor get a gradient. kXentNoIgnore: no label is skipped. Only with
// inner == 1.
//
// Workspace (device, softmax_xent_workspace_bytes(outer, inner) bytes, 8-byte aligned):
//   [0, 8)   uint64 error slot: UINT64_MAX when every label is in [0, k) (or ignored), otherwise
//            the smallest flat sample index (o * inner + i) whose label is outside [0, k);
//   [8, ...) per-block partial sums and row counts (double) of the deterministic two-pass
//            reduction.
constexpr int64_t kXentNoIgnore = INT64_MIN;
int64_t softmax_xent_workspace_bytes(int64_t outer, int64_t inner);
// loss (1) = mean over counted samples of logsumexp(z) - z[label] (0 when none is counted).
// Writes the error slot (see above); the caller reads it back (softmax_xent_read_error) to
// report bad labels.
void softmax_xent_forward(float* loss, void* workspace, const float* logits,
                          const int32_t* labels, int64_t outer, int64_t k, int64_t inner,
                          int64_t ignore_index, cudaStream_t stream);
void softmax_xent_forward(float* loss, void* workspace, const uint16_t* logits,
                          const int32_t* labels, int64_t outer, int64_t k, int64_t inner,
                          int64_t ignore_index, cudaStream_t stream);
// dlogits (outer, k, inner) = (softmax - onehot(label)) / count, 0 for ignored rows; count =
// outer * inner, or with an ignore index the rows counted, computed on the device into the
// workspace (softmax_xent_backward_workspace_bytes: 8 bytes, or 0 without an ignore index).
// Samples with an out-of-range label get NaN gradients (the forward, which runs first in every
// step, reports them).
int64_t softmax_xent_backward_workspace_bytes(int64_t ignore_index);
void softmax_xent_backward(float* dlogits, const float* logits, const int32_t* labels,
                           int64_t outer, int64_t k, int64_t inner, int64_t ignore_index,
                           void* workspace, cudaStream_t stream);
void softmax_xent_backward(uint16_t* dlogits, const uint16_t* logits, const int32_t* labels,
                           int64_t outer, int64_t k, int64_t inner, int64_t ignore_index,
                           void* workspace, cudaStream_t stream);
// SYNCHRONIZES `stream`: returns the error slot of `workspace` (UINT64_MAX: no error) and, when
// set, the offending label in *bad_label.
uint64_t softmax_xent_read_error(const void* workspace, const int32_t* labels,
                                 int32_t* bad_label, cudaStream_t stream);

// ---- transformer layers (embedding.cu, layernorm.cu, gelu.cu, softmax.cu) ----------------------
// bf16 overloads (Note [bf16 launchers]) for all but the token embedding, which stays F32.
// Token embedding: out (rows, dim) = weight[ids[r]] for weight (vocab, dim); an id outside
// [0, vocab) gives a NaN row (the data sources reject such ids; the CPU path throws). Exact.
void embedding_forward(float* out, const int32_t* ids, const float* weight, int64_t rows,
                       int64_t dim, int64_t vocab, cudaStream_t stream);
// dweight (vocab, dim) = sum of dout rows per id, Note [deterministic embedding gradient] in
// ops/embedding.cpp: CUB's stable radix sort of (id, position), then each id's rows summed in
// double in position order; equal to the CPU bit for bit. Workspace: the sort's buffers.
int64_t embedding_backward_workspace_bytes(int64_t rows, int64_t vocab);
void embedding_backward(float* dweight, const float* dout, const int32_t* ids, int64_t rows,
                        int64_t dim, int64_t vocab, void* workspace, int64_t workspace_bytes,
                        cudaStream_t stream);
// Learned positions: out (n, inner) = inp (n, inner) + table (inner) (the first T rows of the
// position table, inner = T * C). Exact.
void position_embedding_forward(float* out, const float* inp, const float* table, int64_t n,
                                int64_t inner, cudaStream_t stream);
void position_embedding_forward(uint16_t* out, const uint16_t* inp, const float* table, int64_t n,
                                int64_t inner, cudaStream_t stream);
// ViT's class token: out (n, t + 1, c) = weight (c) in row 0 of each sample, inp (n, t, c) after
// it (a copy; the bf16 overload rounds the FP32 weight once). dweight (c) = the sum over n of
// dout (n, t + 1, c)[:, 0, :] in double, n in order, rounded once (as the CPU).
void class_token_forward(float* out, const float* inp, const float* weight, int64_t n, int64_t t,
                         int64_t c, cudaStream_t stream);
void class_token_forward(uint16_t* out, const uint16_t* inp, const float* weight, int64_t n,
                         int64_t t, int64_t c, cudaStream_t stream);
void class_token_backward(float* dweight, const float* dout, int64_t n, int64_t t, int64_t c,
                          cudaStream_t stream);
void class_token_backward(float* dweight, const uint16_t* dout, int64_t n, int64_t t, int64_t c,
                          cudaStream_t stream);

// Layer norm over rows of `cols` values (ops/layernorm.cpp is the spec: statistics and every
// output in double, rounded once; row sums in a warp's tree order, so within ~1 ulp of the
// CPU). weight and bias (cols) may be null (no affine).
void layernorm_forward(float* out, const float* inp, const float* weight, const float* bias,
                       int64_t rows, int64_t cols, double eps, cudaStream_t stream);
void layernorm_forward(uint16_t* out, const uint16_t* inp, const float* weight, const float* bias,
                       int64_t rows, int64_t cols, double eps, cudaStream_t stream);
void layernorm_backward_input(float* dinp, const float* dout, const float* inp,
                              const float* weight, int64_t rows, int64_t cols, double eps,
                              cudaStream_t stream);
void layernorm_backward_input(uint16_t* dinp, const uint16_t* dout, const uint16_t* inp,
                              const float* weight, int64_t rows, int64_t cols, double eps,
                              cudaStream_t stream);
// Column sums over rows (Note [column sums] in layernorm.cu: fixed row slices, partial sums in
// double, then the slices in order): out (cols) = sum over r of inp (rows, cols).
int64_t column_sum_workspace_bytes(int64_t rows, int64_t cols);
void column_sum(float* out, const float* inp, int64_t rows, int64_t cols, void* workspace,
                cudaStream_t stream);
void column_sum(float* out, const uint16_t* inp, int64_t rows, int64_t cols, void* workspace,
                cudaStream_t stream);
// dweight (cols) = sum over rows of dout * (inp - mean) * rstd, the row statistics recomputed.
int64_t layernorm_grad_weight_workspace_bytes(int64_t rows, int64_t cols);
void layernorm_grad_weight(float* dweight, const float* dout, const float* inp, int64_t rows,
                           int64_t cols, double eps, void* workspace, cudaStream_t stream);
void layernorm_grad_weight(float* dweight, const uint16_t* dout, const uint16_t* inp,
                           int64_t rows, int64_t cols, double eps, void* workspace,
                           cudaStream_t stream);

// GELU, tanh approximation, in double (ops/gelu.cpp is the spec). dinp from dout and the input.
void gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream);
void gelu_forward(uint16_t* out, const uint16_t* inp, int64_t n, cudaStream_t stream);
void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n,
                   cudaStream_t stream);
void gelu_backward(uint16_t* dinp, const uint16_t* dout, const uint16_t* inp, int64_t n,
                   cudaStream_t stream);

// sigmoid, tanh, hard sigmoid, hard swish, leaky relu, exact GELU, SiLU (activation_curves.cu): y = f(x) and
// dinp = dout f'(.) from `saved`, the output or the input as curve_grad_reads_output says, each
// in double and rounded once (Note [curve arithmetic] in kernels/curve_math.h).
void curve_forward(const CurveParams& p, float* out, const float* inp, int64_t n,
                   cudaStream_t stream);
void curve_forward(const CurveParams& p, uint16_t* out, const uint16_t* inp, int64_t n,
                   cudaStream_t stream);
void curve_backward(const CurveParams& p, float* dinp, const float* dout, const float* saved,
                    int64_t n, cudaStream_t stream);
void curve_backward(const CurveParams& p, uint16_t* dinp, const uint16_t* dout,
                    const uint16_t* saved, int64_t n, cudaStream_t stream);

// Softmax over rows of `len` values; causal: row r keeps entries 0 .. r % len, the rest are 0
// (square scores [.., T, T]). Max in float, exponentials and sums in double (ops/softmax.cpp).
void softmax_forward(float* out, const float* inp, int64_t rows, int64_t len, bool causal,
                     cudaStream_t stream);
void softmax_forward(uint16_t* out, const uint16_t* inp, int64_t rows, int64_t len, bool causal,
                     cudaStream_t stream);
// dinp = out * (dout - sum(dout * out)) per row, 0 where masked.
void softmax_backward(float* dinp, const float* dout, const float* out, int64_t rows,
                      int64_t len, bool causal, cudaStream_t stream);
void softmax_backward(uint16_t* dinp, const uint16_t* dout, const uint16_t* out, int64_t rows,
                      int64_t len, bool causal, cudaStream_t stream);

// ---- per-channel reductions (channel_reduce.cu), Note [channel reductions] ----------------------
// bf16 overloads (Note [bf16 launchers]): bf16 dout; dbias stays float.
// dbias (c) = sum over n and plane of dout (n, c, plane); conv2d: plane = H * W, dense: 1.
// workspace: bias_grad_workspace_bytes(n, c, plane) bytes (plane 1: none, and null allowed, up
// to 64 rows, summed in order as on the CPU; more rows: column_sum's).
int64_t bias_grad_workspace_bytes(int64_t n, int64_t c, int64_t plane);
void bias_grad_reduce(float* dbias, const float* dout, int64_t n, int64_t c, int64_t plane,
                      void* workspace, cudaStream_t stream);
void bias_grad_reduce(float* dbias, const uint16_t* dout, int64_t n, int64_t c, int64_t plane,
                      void* workspace, cudaStream_t stream);

// ---- batch normalisation in train mode (batchnorm.cu), Note [batchnorm kernels] ----------------
// x, y, dy, dx (n, c, plane) in F32 or bf16 (Note [bf16 launchers]); gamma (null: 1), beta,
// the running statistics and dgamma (c) are float. Batch statistics with the biased variance;
// running = (1 - momentum) running + momentum batch (unbiased variance), skipped when
// running_mean is null (a recomputation); the forward applies `act` before rounding (Note
// [batchnorm activation]). Each takes its *_workspace_bytes(n, c, plane) bytes.
int64_t batchnorm_train_forward_workspace_bytes(int64_t n, int64_t c, int64_t plane);
void batchnorm_train_forward(float* y, const float* x, const float* gamma, const float* beta,
                             float* running_mean, float* running_var, int64_t n, int64_t c,
                             int64_t plane, double eps, double momentum, KernelActivation act,
                             void* workspace, cudaStream_t stream);
void batchnorm_train_forward(uint16_t* y, const uint16_t* x, const float* gamma, const float* beta,
                             float* running_mean, float* running_var, int64_t n, int64_t c,
                             int64_t plane, double eps, double momentum, KernelActivation act,
                             void* workspace, cudaStream_t stream);
// dx = gamma / sigma (dy - mean(dy) - xhat mean(dy xhat)), the batch statistics of x.
int64_t batchnorm_train_backward_input_workspace_bytes(int64_t n, int64_t c, int64_t plane);
void batchnorm_train_backward_input(float* dx, const float* dy, const float* x, const float* gamma,
                                    int64_t n, int64_t c, int64_t plane, double eps,
                                    void* workspace, cudaStream_t stream);
void batchnorm_train_backward_input(uint16_t* dx, const uint16_t* dy, const uint16_t* x,
                                    const float* gamma, int64_t n, int64_t c, int64_t plane,
                                    double eps, void* workspace, cudaStream_t stream);
// dgamma (c) = sum over n and plane of dy * (x - mean) / sqrt(var + eps), in one read of x and
// dy.
int64_t batchnorm_grad_gamma_workspace_bytes(int64_t n, int64_t c, int64_t plane);
void batchnorm_grad_gamma(float* dgamma, const float* x, const float* dy, int64_t n, int64_t c,
                          int64_t plane, double eps, void* workspace, cudaStream_t stream);
void batchnorm_grad_gamma(float* dgamma, const uint16_t* x, const uint16_t* dy, int64_t n,
                          int64_t c, int64_t plane, double eps, void* workspace,
                          cudaStream_t stream);

// ---- batch normalisation in train mode, channels-last (batchnorm_nhwc.cu) ---------------------
// The three passes above over [rows, c] tensors (rows = N H W of an [N, H, W, C] tensor; Note
// [channels-last batch-norm kernels]), with the same arithmetic.
int64_t batchnorm_nhwc_train_forward_workspace_bytes(int64_t rows, int64_t c);
void batchnorm_nhwc_train_forward(float* y, const float* x, const float* gamma, const float* beta,
                                  float* running_mean, float* running_var, int64_t rows, int64_t c,
                                  double eps, double momentum, KernelActivation act,
                                  void* workspace, cudaStream_t stream);
void batchnorm_nhwc_train_forward(uint16_t* y, const uint16_t* x, const float* gamma,
                                  const float* beta, float* running_mean, float* running_var,
                                  int64_t rows, int64_t c, double eps, double momentum,
                                  KernelActivation act, void* workspace, cudaStream_t stream);
int64_t batchnorm_nhwc_train_backward_input_workspace_bytes(int64_t rows, int64_t c);
void batchnorm_nhwc_train_backward_input(float* dx, const float* dy, const float* x,
                                         const float* gamma, int64_t rows, int64_t c, double eps,
                                         void* workspace, cudaStream_t stream);
void batchnorm_nhwc_train_backward_input(uint16_t* dx, const uint16_t* dy, const uint16_t* x,
                                         const float* gamma, int64_t rows, int64_t c, double eps,
                                         void* workspace, cudaStream_t stream);
int64_t batchnorm_nhwc_grad_gamma_workspace_bytes(int64_t rows, int64_t c);
void batchnorm_nhwc_grad_gamma(float* dgamma, const float* x, const float* dy, int64_t rows,
                               int64_t c, double eps, void* workspace, cudaStream_t stream);
void batchnorm_nhwc_grad_gamma(float* dgamma, const uint16_t* x, const uint16_t* dy, int64_t rows,
                               int64_t c, double eps, void* workspace, cudaStream_t stream);

// ---- reductions (reduce.cu) --------------------------------------------------------------------
// bf16 overloads (Note [bf16 launchers]) with bf16 inputs and outputs.
// out (planes) = mean over hw of inp (planes, hw), accumulated in double. `pixel`: 1 for NCHW
// planes; C for NHWC (plane n * C + c, its values C apart).
void global_avgpool_forward(float* out, const float* inp, int64_t planes, int64_t hw,
                            int64_t pixel, cudaStream_t stream);
void global_avgpool_forward(uint16_t* out, const uint16_t* inp, int64_t planes, int64_t hw,
                            int64_t pixel, cudaStream_t stream);
// dinp (planes, hw) = dout[p] / hw (planes laid out as in the forward).
void global_avgpool_backward(float* dinp, const float* dout, int64_t planes, int64_t hw,
                             int64_t pixel, cudaStream_t stream);
void global_avgpool_backward(uint16_t* dinp, const uint16_t* dout, int64_t planes, int64_t hw,
                             int64_t pixel, cudaStream_t stream);

// channel_scale (channel_scale.cu), planes laid out as global_avgpool's: out (planes, hw) =
// x * s[p], one FP32 product as on the CPU; ds (planes) = sum over hw of dy * x, in double.
void channel_scale_forward(float* out, const float* x, const float* s, int64_t planes, int64_t hw,
                           int64_t pixel, cudaStream_t stream);
void channel_scale_forward(uint16_t* out, const uint16_t* x, const uint16_t* s, int64_t planes,
                           int64_t hw, int64_t pixel, cudaStream_t stream);
void channel_scale_backward(float* ds, const float* dy, const float* x, int64_t planes,
                            int64_t hw, int64_t pixel, cudaStream_t stream);
void channel_scale_backward(uint16_t* ds, const uint16_t* dy, const uint16_t* x, int64_t planes,
                            int64_t hw, int64_t pixel, cudaStream_t stream);
// bf16 data with an F32 scale and F32 scale gradient (mul_table's table, a persistent value).
void channel_scale_forward(uint16_t* out, const uint16_t* x, const float* s, int64_t planes,
                           int64_t hw, int64_t pixel, cudaStream_t stream);
void channel_scale_backward(float* ds, const uint16_t* dy, const uint16_t* x, int64_t planes,
                            int64_t hw, int64_t pixel, cudaStream_t stream);

// ---- finite check (finite.cu) ------------------------------------------------------------------
// Sets *flag = 1 when any of x (n) is NaN or +-inf; never clears it. `flag` is device memory or
// mapped pinned host memory (the CUDA backend's choice: no device allocation outside the pool).
void flag_nonfinite(const float* x, int64_t n, unsigned int* flag, cudaStream_t stream);
// The same over bf16 values (bf16.cu).
void flag_nonfinite_bf16(const uint16_t* x, int64_t n, unsigned int* flag, cudaStream_t stream);

// ---- bfloat16 conversions (bf16.cu) -------------------------------------------------------------
// bf16 tensors are uint16_t* here (__nv_bfloat16 inside the .cu files), so that host code
// includes this header without cuda_bf16.h. Rounding is to nearest even (__float2bfloat16_rn),
// as the CPU's bf16_from_float. out may equal inp for bf16_round.
void bf16_widen(float* out, const uint16_t* inp, int64_t n, cudaStream_t stream);   // exact
void bf16_narrow(uint16_t* out, const float* inp, int64_t n, cudaStream_t stream);  // rne
void bf16_round(float* out, const float* inp, int64_t n, cudaStream_t stream);      // rne, as f32
void bf16_widen_add(float* out, const uint16_t* inp, int64_t n, cudaStream_t stream);  // out += x

// ---- layout transposes (layout.cu), Note [staged NHWC convolutions] ------------------------------
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

// Global-norm gradient clipping (optimizer.cu), Note [gradient clipping] in runtime/graph/autodiff.cpp.
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
