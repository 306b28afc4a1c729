// bfloat16 conversions for the CUDA backend (Note [bf16 execution] in
// runtime/backends/bf16_staging.h): exact widening, round-to-nearest-even narrowing (the same
// rounding as the CPU's bf16_from_float), rounding in place, and the finite check over bf16.
#include <cuda_bf16.h>

#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

__global__ void widen_kernel(float* out, const __nv_bfloat16* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = __bfloat162float(in[i]);
}

__global__ void narrow_kernel(__nv_bfloat16* out, const float* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void round_kernel(float* out, const float* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = __bfloat162float(__float2bfloat16_rn(in[i]));
}

__global__ void widen_add_kernel(float* out, const __nv_bfloat16* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = __fadd_rn(out[i], __bfloat162float(in[i]));
}

// As flag_nonfinite_kernel (finite.cu): bf16 keeps FP32's exponent bits, all ones for NaN/inf.
__global__ void flag_nonfinite_bf16_kernel(const uint16_t* x, int64_t n, unsigned int* flag) {
  int bad = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    bad |= (x[i] & 0x7F80u) == 0x7F80u;
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1u;
}

}  // namespace

void bf16_widen(float* out, const uint16_t* inp, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  widen_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(
      out, reinterpret_cast<const __nv_bfloat16*>(inp), n);
  REMAT_CUDA_LAUNCH_CHECK();
}

void bf16_narrow(uint16_t* out, const float* inp, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  narrow_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(reinterpret_cast<__nv_bfloat16*>(out),
                                                          inp, n);
  REMAT_CUDA_LAUNCH_CHECK();
}

void bf16_widen_add(float* out, const uint16_t* inp, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  widen_add_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(
      out, reinterpret_cast<const __nv_bfloat16*>(inp), n);
  REMAT_CUDA_LAUNCH_CHECK();
}

void bf16_round(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  round_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(out, inp, n);
  REMAT_CUDA_LAUNCH_CHECK();
}

void flag_nonfinite_bf16(const uint16_t* x, int64_t n, unsigned int* flag, cudaStream_t stream) {
  if (n <= 0) return;
  flag_nonfinite_bf16_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(x, n, flag);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace remat
