// The fused attention op's launchers (attention.cu, attention_tiled*.cu), in the style of
// kernels/kernels.h, which includes this header: plain host-callable declarations, raw device
// pointers, a stream, the step as a StepSource (Note [step source] in kernels/rng.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/rng.h"

namespace remat {

// ---- fused attention (attention.cu), Note [fused attention] in ops/attention.cpp -------------
// q, k, v, out: bh = N * heads rows of [t, d] (row-major [N, heads, t, d]); t <= 4096 (else
// throws). For each block b and query row i, keys j < w_i (w_i = causal ? i + 1 : t):
// s_ij = scale * q_i . k_j, p = softmax_j(s), c_ij = dropout factor (1 when rate == 0, else
// rng_uniform(seed, step, first + (b * t + i) * t + j) >= rate ? 1 / (1 - rate) : 0),
// out_i = sum_j p_ij c_ij v_j; dot products and sums in double, each output rounded once.
// bf16 overloads (Note [bf16 launchers] in kernels/kernels.h): bf16 q, k, v, out, dout, grads.
// Deterministic (no atomics); Note [attention kernels] in attention.cu for the launch layout.
void attention_forward(float* out, const float* q, const float* k, const float* v, int64_t bh,
                       int64_t t, int64_t d, double scale, bool causal, float rate, uint64_t seed,
                       StepSource step, uint64_t first, cudaStream_t stream);
void attention_forward(uint16_t* out, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                       int64_t bh, int64_t t, int64_t d, double scale, bool causal, float rate,
                       uint64_t seed, StepSource step, uint64_t first, cudaStream_t stream);
// Workspace of attention_backward: 3 * bh * t doubles (row statistics m, l, delta).
int64_t attention_backward_workspace_bytes(int64_t bh, int64_t t);
// grads: [N, 3 * heads, t, d]: for sample n and head h (b = n * heads + h), dq at channel h,
// dk at channel heads + h, dv at channel 2 * heads + h (each a [t, d] block). dout: like out.
// The same dropout masks as the forward (same seed, step, first).
void attention_backward(float* grads, const float* dout, const float* q, const float* k,
                        const float* v, int64_t n, int64_t heads, int64_t t, int64_t d,
                        double scale, bool causal, float rate, uint64_t seed, StepSource step,
                        uint64_t first, void* workspace, cudaStream_t stream);
void attention_backward(uint16_t* grads, const uint16_t* dout, const uint16_t* q,
                        const uint16_t* k, const uint16_t* v, int64_t n, int64_t heads, int64_t t,
                        int64_t d, double scale, bool causal, float rate, uint64_t seed,
                        StepSource step, uint64_t first, void* workspace, cudaStream_t stream);
// The same two passes in tiles of 32 rows (attention_tiled.cu, Note [tiled attention kernels]):
// the same arguments, results within the attention tolerance of the row kernels', the same
// workspace (attention_backward_workspace_bytes), any t, head sizes d up to 128
// (attention_tiled_supports; throws above).
bool attention_tiled_supports(int64_t d);
void attention_forward_tiled(float* out, const float* q, const float* k, const float* v,
                             int64_t bh, int64_t t, int64_t d, double scale, bool causal,
                             float rate, uint64_t seed, StepSource step, uint64_t first,
                             cudaStream_t stream);
void attention_forward_tiled(uint16_t* out, const uint16_t* q, const uint16_t* k,
                             const uint16_t* v, int64_t bh, int64_t t, int64_t d, double scale,
                             bool causal, float rate, uint64_t seed, StepSource step,
                             uint64_t first, cudaStream_t stream);
void attention_backward_tiled(float* grads, const float* dout, const float* q, const float* k,
                              const float* v, int64_t n, int64_t heads, int64_t t, int64_t d,
                              double scale, bool causal, float rate, uint64_t seed, StepSource step,
                              uint64_t first, void* workspace, cudaStream_t stream);
void attention_backward_tiled(uint16_t* grads, const uint16_t* dout, const uint16_t* q,
                              const uint16_t* k, const uint16_t* v, int64_t n, int64_t heads,
                              int64_t t, int64_t d, double scale, bool causal, float rate,
                              uint64_t seed, StepSource step, uint64_t first, void* workspace,
                              cudaStream_t stream);
// Where head h of sample n of a tensor starts (n * sample + h * head elements) and how far apart
// its rows (tokens) are: [N, H, T, D] is {H T D, T D, D}; a token layout [N, T, k C] (Note
// [attention layouts] in ops/attention.h) is {T k C, D, k C}.
struct HeadStrides {
  int64_t sample, head, row;
};
// The same two passes on bf16 tensor cores (attention_flash*.cu, Note [flash attention
// kernels]) over tensors of any HeadStrides: bf16 only, head sizes d of 32, 64 and 128
// (attention_flash_supports), every pointer and stride 16-byte aligned (throws otherwise);
// products of bf16 operands summed in FP32, the probabilities and dS rounded to bf16 before
// their products, so the results are within Note [flash attention tolerance]
// (tests/attention_bounds.cpp) of the row kernels', not within their double sums' tolerance.
// The dropout numbering is the row kernels' with b = n heads + h. The backward keeps m, l and
// delta as 3 * n * heads * t floats in the workspace (half of
// attention_backward_workspace_bytes, which it takes).
bool attention_flash_supports(int64_t d);
void attention_forward_flash(uint16_t* out, HeadStrides out_s, const uint16_t* q,
                             const uint16_t* k, const uint16_t* v, HeadStrides in_s, int64_t n,
                             int64_t heads, int64_t t, int64_t d, double scale, bool causal,
                             float rate, uint64_t seed, StepSource step, uint64_t first,
                             cudaStream_t stream);
// dq, dk, dv with grad_s; dout with out_s (the output's strides); q, k, v with in_s.
void attention_backward_flash(uint16_t* dq, uint16_t* dk, uint16_t* dv, HeadStrides grad_s,
                              const uint16_t* dout, HeadStrides out_s, const uint16_t* q,
                              const uint16_t* k, const uint16_t* v, HeadStrides in_s, int64_t n,
                              int64_t heads, int64_t t, int64_t d, double scale, bool causal,
                              float rate, uint64_t seed, StepSource step, uint64_t first,
                              void* workspace, cudaStream_t stream);

}  // namespace remat
