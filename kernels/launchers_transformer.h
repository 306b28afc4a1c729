// Launchers of the softmax cross-entropy and transformer-layer kernels (embeddings, layer norm,
// GELU, the activation curves, softmax), each with a bf16 overload but the token embedding (Note
// [bf16 launchers] in kernels/kernels.h, which includes this).
#pragma once

#include <cuda_runtime_api.h>

#include <climits>
#include <cstdint>

#include "kernels/curve_math.h"  // Curve, CurveParams

namespace remat {

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

// sigmoid, tanh, hard sigmoid, hard swish, leaky relu, exact GELU, SiLU (activation_curves.cu):
// y = f(x) and dinp = dout f'(.) from `saved`, the output or the input as curve_grad_reads_output
// says, each in double and rounded once (Note [curve arithmetic] in kernels/curve_math.h).
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

}  // namespace remat
