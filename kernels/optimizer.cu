// Optimizer updates in place (SGD with momentum / Nesterov / weight decay, Adam), written with
// round-to-nearest intrinsics in the CPU reference's operation order so nvcc cannot contract
// them into FMAs (Note [kernel vs CPU rounding]): ops/sgd.cpp and ops/adam.cpp are the spec.
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

__global__ void adam_kernel(float* param, const float* grad, float* m, float* v, int64_t n,
                            AdamStep s) {
  const float one_minus_b1 = 1.0f - s.beta1, one_minus_b2 = 1.0f - s.beta2;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float p = param[i];
    const float g = __fadd_rn(grad[i], __fmul_rn(s.weight_decay, p));
    const float mi = __fadd_rn(__fmul_rn(s.beta1, m[i]), __fmul_rn(one_minus_b1, g));
    const float vi = __fadd_rn(__fmul_rn(s.beta2, v[i]), __fmul_rn(__fmul_rn(one_minus_b2, g), g));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
    param[i] = __fsub_rn(p, __fmul_rn(s.step_size, __fdiv_rn(mi, denom)));
  }
}

}  // namespace

void sgd_update(float* param, const float* grad, float* momentum_buf, int64_t n, float lr,
                float momentum, float weight_decay, bool nesterov, cudaStream_t stream) {
  if (n <= 0) return;
  sgd_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(param, grad, momentum_buf, n, lr, momentum,
                                                     weight_decay, nesterov);
  REMAT_CUDA_LAUNCH_CHECK();
}

void adam_update(float* param, const float* grad, float* m, float* v, int64_t n,
                 const AdamStep& s, cudaStream_t stream) {
  if (n <= 0) return;
  adam_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(param, grad, m, v, n, s);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace remat
