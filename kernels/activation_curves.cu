// sigmoid, tanh, hard sigmoid, hard swish, leaky relu, the exact GELU and SiLU on the device:
// kernels/curve_math.h's functions elementwise (Note [curve arithmetic]). Templated on the
// storage type T (float or __nv_bfloat16, kernels/common.cuh): bf16 values are widened exactly
// and each result is rounded once more, from the FP32 value, as the backend's staging would
// (Note [bf16 execution]).
#include "kernels/common.cuh"
#include "kernels/curve_math.h"
#include "kernels/kernels.h"

namespace remat {
namespace {

template <typename T>
__global__ void curve_forward_kernel(T* out, const T* inp, int64_t n, CurveParams p) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = st<T>(curve_value(p, ld(inp[i])));
}

template <typename T>
__global__ void curve_backward_kernel(T* dinp, const T* dout, const T* saved, int64_t n,
                                      CurveParams p) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    dinp[i] = st<T>(curve_grad(p, ld(dout[i]), ld(saved[i])));
}

template <typename T>
void curve_forward_impl(const CurveParams& p, T* out, const T* inp, int64_t n,
                        cudaStream_t stream) {
  if (n <= 0) return;
  curve_forward_kernel<T><<<grid_for(n), kBlockSize, 0, stream>>>(out, inp, n, p);
  REMAT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void curve_backward_impl(const CurveParams& p, T* dinp, const T* dout, const T* saved, int64_t n,
                         cudaStream_t stream) {
  if (n <= 0) return;
  curve_backward_kernel<T><<<grid_for(n), kBlockSize, 0, stream>>>(dinp, dout, saved, n, p);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void curve_forward(const CurveParams& p, float* out, const float* inp, int64_t n,
                   cudaStream_t stream) {
  curve_forward_impl(p, out, inp, n, stream);
}
void curve_forward(const CurveParams& p, uint16_t* out, const uint16_t* inp, int64_t n,
                   cudaStream_t stream) {
  curve_forward_impl(p, bf16_ptr(out), bf16_ptr(inp), n, stream);
}
void curve_backward(const CurveParams& p, float* dinp, const float* dout, const float* saved,
                    int64_t n, cudaStream_t stream) {
  curve_backward_impl(p, dinp, dout, saved, n, stream);
}
void curve_backward(const CurveParams& p, uint16_t* dinp, const uint16_t* dout,
                    const uint16_t* saved, int64_t n, cudaStream_t stream) {
  curve_backward_impl(p, bf16_ptr(dinp), bf16_ptr(dout), bf16_ptr(saved), n, stream);
}

}  // namespace remat
