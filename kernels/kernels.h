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

#include <cstdint>

namespace remat {

// ---- fill / copy (elementwise.cu) --------------------------------------------------------------
void fill(float* out, float value, int64_t n, cudaStream_t stream);      // out: (n)
void copy_forward(float* out, const float* inp, int64_t n, cudaStream_t stream);  // (n) -> (n)
// out[r * out_stride + j] = inp[r * inp_stride + j] for r < rows, j < row_len (floats).
void strided_copy(float* out, int64_t out_stride, const float* inp, int64_t inp_stride,
                  int64_t rows, int64_t row_len, cudaStream_t stream);

// ---- activations (elementwise.cu); out may equal inp (in place) --------------------------------
void relu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream);   // max(0, x)
void relu6_forward(float* out, const float* inp, int64_t n, cudaStream_t stream);  // min(max(0,x),6)
// dinp = dout * (0 < out) / dout * (0 < out < 6), with `out` the forward OUTPUT y. dinp may
// equal dout.
void relu_backward(float* dinp, const float* dout, const float* out, int64_t n,
                   cudaStream_t stream);
void relu6_backward(float* dinp, const float* dout, const float* out, int64_t n,
                    cudaStream_t stream);

// Activation applied after a bias add (for fused conv2d / dense epilogues).
enum class KernelActivation { None, Relu, Relu6 };
// out[i, c, p] = act(out[i, c, p] + bias[c]) in place; out: (n, c, plane), bias: (c) or null
// (then only the activation is applied). dense: plane = 1.
void bias_act_forward(float* out, const float* bias, int64_t n, int64_t c, int64_t plane,
                      KernelActivation act, cudaStream_t stream);

// ---- add (elementwise.cu) ----------------------------------------------------------------------
// out = inps[0] + inps[1] + ... + inps[k-1], summed left to right like the CPU; any k >= 1.
// `inps` is a HOST array of k device pointers (passed to the kernel by value in chunks).
void add_forward(float* out, const float* const* inps, int k, int64_t n, cudaStream_t stream);

// ---- concat along axis 1 (elementwise.cu) ------------------------------------------------------
// Copies inp (n, c_in, inner) into out (n, c_out, inner) at channels [offset, offset + c_in).
void concat_forward(float* out, const float* inp, int64_t n, int64_t c_in, int64_t c_out,
                    int64_t offset, int64_t inner, cudaStream_t stream);
// dinp (n, channels, inner) = dout (n, c_total, inner)[:, offset : offset + channels].
void concat_slice_forward(float* dinp, const float* dout, int64_t n, int64_t c_total,
                          int64_t offset, int64_t channels, int64_t inner, cudaStream_t stream);

// ---- upsample nearest (upsample.cu) ------------------------------------------------------------
// out (planes, H*f, W*f) from inp (planes, H, W); out[p, h, w] = inp[p, h / f, w / f].
void upsample_nearest_forward(float* out, const float* inp, int64_t planes, int64_t H, int64_t W,
                              int64_t factor, cudaStream_t stream);
// dinp (planes, H, W) = sum of each f x f block of dout (planes, H*f, W*f), row-major order.
void upsample_nearest_backward(float* dinp, const float* dout, int64_t planes, int64_t H,
                               int64_t W, int64_t factor, cudaStream_t stream);

// ---- dropout (dropout.cu), mask from kernels/rng.h ---------------------------------------------
// out[e] = rng_uniform(seed, step, first + e) >= rate ? inp[e] * (1 / (1 - rate)) : 0, rate in
// [0, 1); `first` is the global index of element 0 (data parallel: this rank's part of the
// global batch). The backward is the same map applied to dout. out may equal inp.
void dropout_forward(float* out, const float* inp, int64_t n, float rate, uint64_t seed,
                     uint64_t step, uint64_t first, cudaStream_t stream);
void dropout_backward(float* dinp, const float* dout, int64_t n, float rate, uint64_t seed,
                      uint64_t step, uint64_t first, cudaStream_t stream);

// ---- softmax cross-entropy (softmax_xent.cu) ---------------------------------------------------
// Logits (outer, k, inner): [N, K] has outer = N, inner = 1; [N, K, H, W] has outer = N,
// inner = H * W (a softmax per pixel). Labels (outer, inner) int32. count = outer * inner.
//
// Workspace (device, softmax_xent_workspace_bytes(outer, inner) bytes, 8-byte aligned):
//   [0, 8)   uint64 error slot: UINT64_MAX when every label is in [0, k), otherwise the smallest
//            flat sample index (o * inner + i) whose label is outside [0, k);
//   [8, ...) per-block partial sums (double) of the deterministic two-pass reduction.
int64_t softmax_xent_workspace_bytes(int64_t outer, int64_t inner);
// loss (1) = mean over samples of logsumexp(z) - z[label]. Writes the error slot (see above);
// the caller reads it back (softmax_xent_read_error) to report bad labels.
void softmax_xent_forward(float* loss, void* workspace, const float* logits,
                          const int32_t* labels, int64_t outer, int64_t k, int64_t inner,
                          cudaStream_t stream);
// dlogits (outer, k, inner) = (softmax - onehot(label)) / count. Samples with an out-of-range
// label get NaN gradients (the forward, which runs first in every step, reports them).
void softmax_xent_backward(float* dlogits, const float* logits, const int32_t* labels,
                           int64_t outer, int64_t k, int64_t inner, cudaStream_t stream);
// SYNCHRONIZES `stream`: returns the error slot of `workspace` (UINT64_MAX: no error) and, when
// set, the offending label in *bad_label.
uint64_t softmax_xent_read_error(const void* workspace, const int32_t* labels,
                                 int32_t* bad_label, cudaStream_t stream);

// ---- per-channel reductions (channel_reduce.cu), Note [channel reductions] ----------------------
// dbias (c) = sum over n and plane of dout (n, c, plane); conv2d: plane = H * W, dense: 1.
// workspace: bias_grad_workspace_bytes(n, c, plane) bytes (0, and null allowed, for plane 1).
int64_t bias_grad_workspace_bytes(int64_t n, int64_t c, int64_t plane);
void bias_grad_reduce(float* dbias, const float* dout, int64_t n, int64_t c, int64_t plane,
                      void* workspace, cudaStream_t stream);
// dgamma (c) = sum over n and plane of dy * (x - mean) / sqrt(var + eps), mean and biased var
// the batch statistics of x (n, c, plane) per channel: batch-norm's scale gradient in train
// mode, in one read of x and dy. workspace: batchnorm_grad_gamma_workspace_bytes bytes.
int64_t batchnorm_grad_gamma_workspace_bytes(int64_t n, int64_t c, int64_t plane);
void batchnorm_grad_gamma(float* dgamma, const float* x, const float* dy, int64_t n, int64_t c,
                          int64_t plane, double eps, void* workspace, cudaStream_t stream);

// ---- reductions (reduce.cu) --------------------------------------------------------------------
// out (planes) = mean over hw of inp (planes, hw), accumulated in double.
void global_avgpool_forward(float* out, const float* inp, int64_t planes, int64_t hw,
                            cudaStream_t stream);
// dinp (planes, hw) = dout[p] / hw.
void global_avgpool_backward(float* dinp, const float* dout, int64_t planes, int64_t hw,
                             cudaStream_t stream);

// ---- finite check (finite.cu) ------------------------------------------------------------------
// Sets *flag = 1 when any of x (n) is NaN or +-inf; never clears it. `flag` is device memory or
// mapped pinned host memory (the CUDA backend's choice: no device allocation outside the pool).
void flag_nonfinite(const float* x, int64_t n, unsigned int* flag, cudaStream_t stream);

// ---- optimizer updates (optimizer.cu), in place, PyTorch semantics like ops/sgd.cpp, adam.cpp -
// g = grad + wd * p; with momentum: buf = momentum * buf + g, step = nesterov ? g + momentum *
// buf : buf; p -= lr * step. momentum_buf null: plain SGD. param, grad, buf: (n).
void sgd_update(float* param, const float* grad, float* momentum_buf, int64_t n, float lr,
                float momentum, float weight_decay, bool nesterov, cudaStream_t stream);
// Scalars of one Adam step, computed on the host exactly as ops/adam.cpp does.
struct AdamStep {
  float step_size;  // lr / (1 - beta1^t)
  float bc2_sqrt;   // sqrt(1 - beta2^t)
  float beta1, beta2, eps, weight_decay;
};
// g = grad + wd * p; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g;
// p -= step_size * (m / (sqrt(v) / bc2_sqrt + eps)). param, grad, m, v: (n).
void adam_update(float* param, const float* grad, float* m, float* v, int64_t n,
                 const AdamStep& s, cudaStream_t stream);

}  // namespace remat
