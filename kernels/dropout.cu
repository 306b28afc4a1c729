// Dropout forward and backward on the device with the counter-based RNG of kernels/rng.h: element
// e keeps its value iff rng_uniform(seed, step, first + e) >= rate, exactly as ops/dropout.cpp
// on the host, so the masks agree bit for bit and replay under recomputation.
#include "kernels/common.cuh"
#include "kernels/kernels.h"
#include "kernels/rng.h"

namespace remat {
namespace {

__device__ __forceinline__ float dropout_one(float x, uint64_t e, float rate, float scale,
                                             uint64_t seed, uint64_t step) {
  return rng_uniform(seed, step, e) >= rate ? __fmul_rn(x, scale) : 0.0f;
}

__global__ void dropout_kernel(float* out, const float* inp, int64_t begin, int64_t n, float rate,
                               float scale, uint64_t seed, uint64_t step, uint64_t first) {
  for (int64_t e = begin + blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x)
    out[e] = dropout_one(inp[e], first + static_cast<uint64_t>(e), rate, scale, seed, step);
}

__global__ void dropout_kernel_vec4(float4* out, const float4* inp, int64_t n4, float rate,
                                    float scale, uint64_t seed, uint64_t step, uint64_t first) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n4;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float4 v = inp[i];
    const uint64_t e = first + 4 * static_cast<uint64_t>(i);
    out[i] = make_float4(dropout_one(v.x, e, rate, scale, seed, step),
                         dropout_one(v.y, e + 1, rate, scale, seed, step),
                         dropout_one(v.z, e + 2, rate, scale, seed, step),
                         dropout_one(v.w, e + 3, rate, scale, seed, step));
  }
}

void dropout_apply(float* out, const float* inp, int64_t n, float rate, uint64_t seed,
                   uint64_t step, uint64_t first, cudaStream_t stream) {
  REMAT_CHECK(rate >= 0.0f && rate < 1.0f, "dropout: rate " << rate << " outside [0, 1)");
  if (n <= 0) return;
  if (rate == 0.0f) {  // the CPU copies; so do we
    copy_forward(out, inp, n, stream);
    return;
  }
  const float scale = 1.0f / (1.0f - rate);  // the same float expression as the CPU
  const int64_t n4 = aligned16(out, inp) ? n / 4 : 0;
  if (n4 > 0) {
    dropout_kernel_vec4<<<grid_for(n4), kBlockSize, 0, stream>>>(
        reinterpret_cast<float4*>(out), reinterpret_cast<const float4*>(inp), n4, rate, scale,
        seed, step, first);
    REMAT_CUDA_LAUNCH_CHECK();
  }
  if (n > 4 * n4) {
    dropout_kernel<<<grid_for(n - 4 * n4), kBlockSize, 0, stream>>>(out, inp, 4 * n4, n, rate,
                                                                     scale, seed, step, first);
    REMAT_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace

void dropout_forward(float* out, const float* inp, int64_t n, float rate, uint64_t seed,
                     uint64_t step, uint64_t first, cudaStream_t stream) {
  dropout_apply(out, inp, n, rate, seed, step, first, stream);
}

void dropout_backward(float* dinp, const float* dout, int64_t n, float rate, uint64_t seed,
                      uint64_t step, uint64_t first, cudaStream_t stream) {
  dropout_apply(dinp, dout, n, rate, seed, step, first, stream);
}

}  // namespace remat
