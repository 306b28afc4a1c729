// Dropout forward and backward on the device with the counter-based RNG of kernels/rng.h: element
// e keeps its value iff rng_uniform(seed, step, first + e) >= rate, exactly as ops/dropout.cpp
// on the host, so the masks agree bit for bit and replay under recomputation. Templated on the
// storage type T (float or __nv_bfloat16, common.cuh): a kept bf16 value is widened, scaled in
// FP32 and rounded once (Note [bf16 execution]).
#include "kernels/common.cuh"
#include "kernels/kernels.h"
#include "kernels/rng.h"

namespace remat {
namespace {

// Eight bf16 values: one 16-byte load or store, as a float4 is for F32.
struct alignas(16) Bf16x8 {
  __nv_bfloat16 v[8];
};

__device__ __forceinline__ float dropout_one(float x, uint64_t e, float rate, float scale,
                                             uint64_t seed, uint64_t step) {
  return rng_uniform(seed, step, e) >= rate ? __fmul_rn(x, scale) : 0.0f;
}

template <typename T>
__global__ void dropout_kernel(T* out, const T* inp, int64_t begin, int64_t n, float rate,
                               float scale, uint64_t seed, StepSource step_at, uint64_t first) {
  const uint64_t step = step_at.get();  // Note [step source]
  for (int64_t e = begin + blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x)
    out[e] = st<T>(dropout_one(ld(inp[e]), first + static_cast<uint64_t>(e), rate, scale, seed,
                               step));
}

// A pack whose first value is element e.
__device__ __forceinline__ float4 dropout_pack(float4 v, uint64_t e, float rate, float scale,
                                               uint64_t seed, uint64_t step) {
  return make_float4(dropout_one(v.x, e, rate, scale, seed, step),
                     dropout_one(v.y, e + 1, rate, scale, seed, step),
                     dropout_one(v.z, e + 2, rate, scale, seed, step),
                     dropout_one(v.w, e + 3, rate, scale, seed, step));
}
__device__ __forceinline__ Bf16x8 dropout_pack(Bf16x8 v, uint64_t e, float rate, float scale,
                                               uint64_t seed, uint64_t step) {
  Bf16x8 r;
#pragma unroll
  for (int j = 0; j < 8; ++j)
    r.v[j] = st<__nv_bfloat16>(dropout_one(ld(v.v[j]), e + j, rate, scale, seed, step));
  return r;
}

// P: float4 (kLanes 4) or Bf16x8 (kLanes 8); nv packs.
template <typename P, int kLanes>
__global__ void dropout_kernel_vec(P* out, const P* inp, int64_t nv, float rate, float scale,
                                   uint64_t seed, StepSource step_at, uint64_t first) {
  const uint64_t step = step_at.get();  // Note [step source]
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < nv;
       i += int64_t{gridDim.x} * blockDim.x) {
    const P v = inp[i];
    const uint64_t e = first + kLanes * static_cast<uint64_t>(i);
    out[i] = dropout_pack(v, e, rate, scale, seed, step);
  }
}

// T: float or __nv_bfloat16; P: its 16-byte pack of kLanes values.
template <typename T, typename P, int kLanes>
void dropout_apply(T* out, const T* inp, int64_t n, float rate, uint64_t seed, StepSource step,
                   uint64_t first, cudaStream_t stream) {
  static_assert(sizeof(P) == 16 && kLanes * sizeof(T) == 16, "a pack is 16 bytes of T");
  REMAT_CHECK(rate >= 0.0f && rate < 1.0f, "dropout: rate " << rate << " outside [0, 1)");
  if (n <= 0) return;
  if (rate == 0.0f) {  // the CPU copies; so do we (copy_forward's copy, for either type)
    if (out != inp)
      REMAT_CUDA_CHECK(cudaMemcpyAsync(out, inp, static_cast<size_t>(n) * sizeof(T),
                                       cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const float scale = 1.0f / (1.0f - rate);  // the same float expression as the CPU
  const int64_t nv = aligned16(out, inp) ? n / kLanes : 0;
  if (nv > 0) {
    dropout_kernel_vec<P, kLanes><<<grid_for(nv), kBlockSize, 0, stream>>>(
        reinterpret_cast<P*>(out), reinterpret_cast<const P*>(inp), nv, rate, scale, seed, step,
        first);
    REMAT_CUDA_LAUNCH_CHECK();
  }
  if (n > kLanes * nv) {
    dropout_kernel<<<grid_for(n - kLanes * nv), kBlockSize, 0, stream>>>(
        out, inp, kLanes * nv, n, rate, scale, seed, step, first);
    REMAT_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace

void dropout_forward(float* out, const float* inp, int64_t n, float rate, uint64_t seed,
                     StepSource step, uint64_t first, cudaStream_t stream) {
  dropout_apply<float, float4, 4>(out, inp, n, rate, seed, step, first, stream);
}
void dropout_forward(uint16_t* out, const uint16_t* inp, int64_t n, float rate, uint64_t seed,
                     StepSource step, uint64_t first, cudaStream_t stream) {
  dropout_apply<__nv_bfloat16, Bf16x8, 8>(bf16_ptr(out), bf16_ptr(inp), n, rate, seed, step,
                                          first, stream);
}

void dropout_backward(float* dinp, const float* dout, int64_t n, float rate, uint64_t seed,
                      StepSource step, uint64_t first, cudaStream_t stream) {
  dropout_apply<float, float4, 4>(dinp, dout, n, rate, seed, step, first, stream);
}
void dropout_backward(uint16_t* dinp, const uint16_t* dout, int64_t n, float rate, uint64_t seed,
                      StepSource step, uint64_t first, cudaStream_t stream) {
  dropout_apply<__nv_bfloat16, Bf16x8, 8>(bf16_ptr(dinp), bf16_ptr(dout), n, rate, seed, step,
                                          first, stream);
}

}  // namespace remat
