// GELU (tanh approximation) on the device, elementwise in double with ops/gelu.cpp's expressions.
// Templated on the activations' storage type T (float or __nv_bfloat16, kernels/common.cuh):
// bf16 values are widened exactly and each result is rounded once more, from the FP32 value,
// as the backend's staging would (Note [bf16 execution]).
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const double v = ld(inp[i]);
    const double t = tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
    out[i] = st<T>(static_cast<float>(0.5 * v * (1.0 + t)));
  }
}

template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* dout, const T* inp, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const double v = ld(inp[i]);
    const double t = tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
    const double du = kSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * v * v);
    dinp[i] = st<T>(
        static_cast<float>(ld(dout[i]) * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du)));
  }
}

template <typename T>
void gelu_forward_impl(T* out, const T* inp, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  gelu_forward_kernel<T><<<grid_for(n), kBlockSize, 0, stream>>>(out, inp, n);
  REMAT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void gelu_backward_impl(T* dinp, const T* dout, const T* inp, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  gelu_backward_kernel<T><<<grid_for(n), kBlockSize, 0, stream>>>(dinp, dout, inp, n);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  gelu_forward_impl(out, inp, n, stream);
}
void gelu_forward(uint16_t* out, const uint16_t* inp, int64_t n, cudaStream_t stream) {
  gelu_forward_impl(bf16_ptr(out), bf16_ptr(inp), n, stream);
}

void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n,
                   cudaStream_t stream) {
  gelu_backward_impl(dinp, dout, inp, n, stream);
}
void gelu_backward(uint16_t* dinp, const uint16_t* dout, const uint16_t* inp, int64_t n,
                   cudaStream_t stream) {
  gelu_backward_impl(bf16_ptr(dinp), bf16_ptr(dout), bf16_ptr(inp), n, stream);
}

}  // namespace remat
