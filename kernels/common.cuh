// Shared device helpers for kernels/*.cu: launch geometry for grid-stride loops, float4
// alignment tests, deterministic warp / block reductions in double, and the storage types of
// kernels templated on their tensors' dtype. Launch checks use REMAT_CUDA_LAUNCH_CHECK from
// runtime/backends/cuda_context.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kernels.h"                // KernelActivation
#include "runtime/backends/cuda_context.h"  // REMAT_CUDA_CHECK, REMAT_CUDA_LAUNCH_CHECK

namespace remat {

constexpr int kBlockSize = 256;   // threads per block of the elementwise kernels
constexpr int kMaxGridBlocks = 65535 * 4;  // grid-stride loops cover the rest

// Blocks for `work` items at `per_block` items per block, capped (grid-stride loops).
inline unsigned grid_for(int64_t work, int64_t per_block = kBlockSize) {
  int64_t blocks = (work + per_block - 1) / per_block;
  if (blocks < 1) blocks = 1;
  if (blocks > kMaxGridBlocks) blocks = kMaxGridBlocks;
  return static_cast<unsigned>(blocks);
}

// True when every pointer is 16-byte aligned (float4 loads and stores are legal).
inline bool aligned16(const void* a, const void* b = nullptr, const void* c = nullptr) {
  auto ok = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  return ok(a) && ok(b) && ok(c);
}

// Sum over the 32 lanes of a warp, the same tree every time (deterministic); every lane gets it.
__device__ __forceinline__ double warp_sum(double v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024) in a fixed order:
// each warp reduces, then warp 0 reduces the warp sums. Every thread must call it; thread 0
// gets the result. `scratch` holds 32 doubles in shared memory.
__device__ __forceinline__ double block_sum(double v, double* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = threadIdx.x < warps ? scratch[threadIdx.x] : 0.0;
  if (warp == 0) v = warp_sum(v);
  return v;
}

// ---- image elements, NCHW or channels-last (Note [channels-last layout] in
// models/channels_last.cpp) -------------------------------------------------------------------
// Element i of a tensor of `rows` x `cols` planes with `pixel` values per pixel (1 for NCHW,
// where the planes are N C; C for [N, H, W, C]): n (the plane, or the sample), c (the channel
// within the pixel; 0 for NCHW), its row and column.
struct PixelAt {
  int64_t n, c, row, col;
};
__device__ __forceinline__ PixelAt pixel_at(int64_t i, int64_t rows, int64_t cols,
                                            int64_t pixel) {
  const int64_t r = i / pixel;
  return {r / (rows * cols), i % pixel, (r / cols) % rows, r % cols};
}
// The first element of a's plane in a tensor of `rows` x `cols` planes; its pixel k is `pixel`
// k further.
__device__ __forceinline__ int64_t plane_start(const PixelAt& a, int64_t rows, int64_t cols,
                                               int64_t pixel) {
  return a.n * rows * cols * pixel + a.c;
}

// ---- storage types (Note [bf16 execution] in runtime/backends/bf16_staging.h) -----------------
// A kernel templated on T in {float, __nv_bfloat16} loads every element as a float, computes in
// FP32 (or double) exactly as its F32 version does, and stores through st<T>(), which rounds to
// nearest even: the CPU's load() / store() (ops/cpu_storage.h), so a bf16 kernel that follows
// the CPU's operation order equals it bit for bit. The launchers in kernels.h take uint16_t*
// for bf16 tensors (host code never sees __nv_bfloat16); bf16_ptr() converts.
__device__ __forceinline__ float ld(float x) { return x; }
__device__ __forceinline__ float ld(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T st(float v);
template <>
__device__ __forceinline__ float st<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 st<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

inline __nv_bfloat16* bf16_ptr(uint16_t* p) { return reinterpret_cast<__nv_bfloat16*>(p); }
inline const __nv_bfloat16* bf16_ptr(const uint16_t* p) {
  return reinterpret_cast<const __nv_bfloat16*>(p);
}

// The fused activations of the epilogues (bias_act_forward, batch norm's apply pass), in float
// before the one rounding into the stored type.
__device__ __forceinline__ float activate(float x, KernelActivation act) {
  if (act == KernelActivation::Relu)
    x = x > 0.0f ? x : 0.0f;
  else if (act == KernelActivation::Relu6)
    x = fminf(x > 0.0f ? x : 0.0f, 6.0f);
  return x;
}

}  // namespace remat
