// Optimizer updates in place (SGD with momentum / Nesterov / weight decay, Adam, AdamW), written
// with round-to-nearest intrinsics in the CPU reference's operation order so nvcc cannot contract
// them into FMAs (Note [kernel vs CPU rounding]): ops/sgd.cpp and ops/adam.cpp are the spec.
// Also global-norm gradient clipping (ops/clip_grad_norm.cpp), a deterministic reduction.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

__global__ void sgd_kernel(float* param, const float* grad, float* buf, int64_t n, float lr,
                           float mu, float wd, bool nesterov) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float p = param[i];
    const float g = __fadd_rn(grad[i], __fmul_rn(wd, p));
    float step = g;
    if (buf) {
      const float b = __fadd_rn(__fmul_rn(mu, buf[i]), g);
      buf[i] = b;
      step = nesterov ? __fadd_rn(g, __fmul_rn(mu, b)) : b;
    }
    param[i] = __fsub_rn(p, __fmul_rn(lr, step));
  }
}

__global__ void grad_accumulate_kernel(float* acc, const float* g, int64_t n, float scale) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float sum = __fadd_rn(acc[i], g[i]);
    acc[i] = scale == 1.0f ? sum : __fmul_rn(sum, scale);
  }
}

// torch.lerp(m, g, w): the small-weight branch below 0.5 (ATen's formula).
__device__ __forceinline__ float lerp_rn(float m, float g, float w) {
  return fabsf(w) < 0.5f ? __fadd_rn(m, __fmul_rn(w, __fsub_rn(g, m)))
                         : __fsub_rn(g, __fmul_rn(__fsub_rn(g, m), __fsub_rn(1.0f, w)));
}

__global__ void adam_kernel(float* param, const float* grad, float* m, float* v, int64_t n,
                            AdamStep s) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float p0 = param[i];
    const float p = __fmul_rn(p0, s.decay_factor);
    const float g = __fadd_rn(grad[i], __fmul_rn(s.l2, p0));
    const float mi = lerp_rn(m[i], g, s.lerp_weight);
    const float vi = __fadd_rn(__fmul_rn(s.beta2, v[i]), __fmul_rn(__fmul_rn(s.one_minus_beta2, g), g));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
    param[i] = __fsub_rn(p, __fmul_rn(s.step_size, __fdiv_rn(mi, denom)));
  }
}

// Clip state layout (floats): [0] norm, [1] scale, then doubles from float offset 2: [0] the
// running sum of squares, [1 .. kGradClipBlocks] one tensor's partial sums.
__device__ __forceinline__ double* clip_sums(float* state) {
  return reinterpret_cast<double*>(state + 2);
}

// partial[b] = sum of squares of grad's slice b (a fixed split of n into gridDim.x slices).
__global__ void sumsq_partial_kernel(double* partial, const float* grad, int64_t n) {
  __shared__ double scratch[32];
  const int64_t len = (n + gridDim.x - 1) / gridDim.x, begin = blockIdx.x * len;
  const int64_t end = begin + len < n ? begin + len : n;
  double acc = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double x = grad[i];
    acc += x * x;
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// One block of kGradClipBlocks threads: total += sum(partial) in a fixed tree; with `finish`,
// also state[0] = norm and state[1] = scale, and the sums are cleared: the state then holds what
// the CPU path leaves in it ([norm, scale, zeros]), so checkpoints and comparisons agree.
__global__ void sumsq_accumulate_kernel(float* state, int blocks, bool first, bool finish,
                                        double max_norm) {
  __shared__ double scratch[32];
  double* sums = clip_sums(state);
  const double v = static_cast<int>(threadIdx.x) < blocks ? sums[1 + threadIdx.x] : 0.0;
  const double total = block_sum(v, scratch);  // every thread has read its slot after this
  if (finish) sums[1 + threadIdx.x] = 0.0;
  if (threadIdx.x != 0) return;
  const double acc = (first ? 0.0 : sums[0]) + total;
  sums[0] = finish ? 0.0 : acc;
  if (!finish) return;
  const double norm = sqrt(acc);
  const double scale = fmin(1.0, max_norm / (norm + 1e-6));
  state[0] = static_cast<float>(norm);
  state[1] = static_cast<float>(scale);
}

__global__ void scale_kernel(float* x, int64_t n, const float* scale) {
  const float s = *scale;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    x[i] = __fmul_rn(x[i], s);
}

}  // namespace

void sgd_update(float* param, const float* grad, float* momentum_buf, int64_t n, float lr,
                float momentum, float weight_decay, bool nesterov, cudaStream_t stream) {
  if (n <= 0) return;
  sgd_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(param, grad, momentum_buf, n, lr, momentum,
                                                     weight_decay, nesterov);
  REMAT_CUDA_LAUNCH_CHECK();
}

void grad_accumulate(float* acc, const float* grad, int64_t n, float scale, cudaStream_t stream) {
  if (n <= 0) return;
  grad_accumulate_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(acc, grad, n, scale);
  REMAT_CUDA_LAUNCH_CHECK();
}

void adam_update(float* param, const float* grad, float* m, float* v, int64_t n,
                 const AdamStep& s, cudaStream_t stream) {
  if (n <= 0) return;
  adam_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(param, grad, m, v, n, s);
  REMAT_CUDA_LAUNCH_CHECK();
}

void clip_grad_norm(float* const* grads, const int64_t* sizes, int k, double max_norm,
                    float* state, cudaStream_t stream) {
  REMAT_CHECK(k >= 1 && state != nullptr && (reinterpret_cast<uintptr_t>(state) & 7u) == 0,
              "clip_grad_norm: " << k << " tensors, state " << static_cast<void*>(state));
  double* partial = reinterpret_cast<double*>(state + 2) + 1;
  for (int t = 0; t < k; ++t) {
    const int64_t n = sizes[t];
    const int blocks = static_cast<int>(std::min<int64_t>(kGradClipBlocks, std::max<int64_t>(1, n / 4096)));
    if (n > 0) {
      sumsq_partial_kernel<<<blocks, kBlockSize, 0, stream>>>(partial, grads[t], n);
      REMAT_CUDA_LAUNCH_CHECK();
    }
    sumsq_accumulate_kernel<<<1, kGradClipBlocks, 0, stream>>>(state, n > 0 ? blocks : 0, t == 0,
                                                               t == k - 1, max_norm);
    REMAT_CUDA_LAUNCH_CHECK();
  }
  for (int t = 0; t < k; ++t) {
    if (sizes[t] <= 0) continue;
    scale_kernel<<<grid_for(sizes[t]), kBlockSize, 0, stream>>>(grads[t], sizes[t], state + 1);
    REMAT_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace remat
