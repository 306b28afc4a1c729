// GELU (tanh approximation) on the device, elementwise in double with ops/gelu.cpp's expressions.
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;

__global__ void gelu_forward_kernel(float* out, const float* inp, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const double v = inp[i];
    const double t = tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
    out[i] = static_cast<float>(0.5 * v * (1.0 + t));
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* dout, const float* inp, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const double v = inp[i];
    const double t = tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
    const double du = kSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * v * v);
    dinp[i] = static_cast<float>(dout[i] * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du));
  }
}

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  gelu_forward_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(out, inp, n);
  REMAT_CUDA_LAUNCH_CHECK();
}

void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n,
                   cudaStream_t stream) {
  if (n <= 0) return;
  gelu_backward_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(dinp, dout, inp, n);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace remat
