// Shared by kernels/attention_flash.cu (forward) and attention_flash_backward.cu: the tile
// geometry and shared-memory layout of Note [flash attention kernels], the tile loads, the
// tensor-core products (WMMA, bf16 operands, FP32 accumulation) and the probability of one
// (query, key) pair.
#pragma once

#include <mma.h>

#include <cstdint>
#include <initializer_list>

#include "kernels/attention.h"  // HeadStrides
#include "kernels/attention_launch.cuh"
#include "kernels/common.cuh"
#include "kernels/rng.h"

namespace remat {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kFlashRows = 64;  // rows of a block's own tile: 16 a warp
constexpr int kFlashCols = 64;  // rows of the swept tile (keys, or queries for dk / dv)
constexpr int kFlashWarps = kFlashRows / 16;
constexpr int kFlashThreads = 32 * kFlashWarps;
constexpr int kFlashSld = kFlashCols + 4;  // row stride of a warp's FP32 score tiles (floats)
constexpr int kFlashPld = kFlashCols + 8;  // row stride of a warp's bf16 probability tiles

using FlashA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
using FlashBt = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major>;
using FlashB = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
using FlashAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Row stride (elements) of a bf16 [rows, D] tile in shared memory: 16 bytes of padding move
// consecutive rows to other banks and keep every 16-row block 32-byte aligned (WMMA's rule).
template <int D>
constexpr int kFlashLd = D + 8;

// The shared memory of a block, carved in this order (every piece a multiple of 32 bytes, the
// base 128-byte aligned): `tiles` bf16 tiles of 64 x kFlashLd<D>; per warp `ftiles` FP32
// tiles of 16 x kFlashSld; per warp `ptiles` bf16 tiles of 16 x kFlashPld; `stats` rows of
// kFlashCols floats.
struct FlashSmem {
  int tiles, ftiles, ptiles, stats;
  template <int D>
  __host__ __device__ constexpr size_t bytes() const {
    return static_cast<size_t>(tiles) * kFlashRows * kFlashLd<D> * 2 +
           static_cast<size_t>(kFlashWarps) * ftiles * 16 * kFlashSld * 4 +
           static_cast<size_t>(kFlashWarps) * ptiles * 16 * kFlashPld * 2 +
           static_cast<size_t>(stats) * kFlashCols * 4;
  }
  // Tile k (0-based) of the bf16 tiles.
  template <int D>
  __device__ __nv_bfloat16* tile(unsigned char* base, int k) const {
    return reinterpret_cast<__nv_bfloat16*>(base) +
           static_cast<size_t>(k) * kFlashRows * kFlashLd<D>;
  }
  // This warp's FP32 tile k: 16 x kFlashSld floats (the ftiles of a warp are contiguous).
  template <int D>
  __device__ float* ftile(unsigned char* base, int warp, int k) const {
    float* f = reinterpret_cast<float*>(tile<D>(base, tiles));
    return f + (static_cast<size_t>(warp) * ftiles + k) * 16 * kFlashSld;
  }
  // This warp's bf16 tile k: 16 x kFlashPld.
  template <int D>
  __device__ __nv_bfloat16* ptile(unsigned char* base, int warp, int k) const {
    auto* p = reinterpret_cast<__nv_bfloat16*>(ftile<D>(base, kFlashWarps, 0));
    return p + (static_cast<size_t>(warp) * ptiles + k) * 16 * kFlashPld;
  }
  template <int D>
  __device__ float* stat(unsigned char* base, int k) const {
    return reinterpret_cast<float*>(ptile<D>(base, kFlashWarps, 0)) + k * kFlashCols;
  }
};

// Rows [r0, r0 + 64) of a block of t rows `stride` elements apart (row i at src + i stride) into
// a tile (row stride kFlashLd<D>), 16 bytes a load; zeros past row t. src and stride are
// 16-byte aligned (the launchers check).
template <int D>
__device__ __forceinline__ void flash_load(__nv_bfloat16* dst, const __nv_bfloat16* src, int64_t r0,
                                           int64_t t, int64_t stride) {
  constexpr int kChunks = D / 8;
  for (int idx = threadIdx.x; idx < kFlashRows * kChunks; idx += kFlashThreads) {
    const int r = idx / kChunks, c = idx - r * kChunks;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (r0 + r < t) v = *reinterpret_cast<const uint4*>(src + (r0 + r) * stride + c * 8);
    *reinterpret_cast<uint4*>(dst + r * kFlashLd<D> + c * 8) = v;
  }
}

// out[r][c] = sum_e a[r][e] b[c][e] for this warp's 16 rows r of `a` (a points at them) and
// the 64 rows c of `b`: bf16 products, FP32 sums over e in blocks of 16 ascending (the same
// order every call). out: 16 x kFlashSld floats.
template <int D>
__device__ __forceinline__ void flash_dots(float* out, const __nv_bfloat16* a,
                                           const __nv_bfloat16* b) {
  FlashAcc acc[kFlashCols / 16];
#pragma unroll
  for (int n = 0; n < kFlashCols / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
  for (int e = 0; e < D; e += 16) {
    FlashA fa;
    wmma::load_matrix_sync(fa, a + e, kFlashLd<D>);
#pragma unroll
    for (int n = 0; n < kFlashCols / 16; ++n) {
      FlashBt fb;  // b's rows n*16.. as the columns of a 16 x 16 (e x c) block
      wmma::load_matrix_sync(fb, b + n * 16 * kFlashLd<D> + e, kFlashLd<D>);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
#pragma unroll
  for (int n = 0; n < kFlashCols / 16; ++n)
    wmma::store_matrix_sync(out + n * 16, acc[n], kFlashSld, wmma::mem_row_major);
}

// acc[x] += sum_c p[r][c] b[c][16 x + e] for this warp's 16 x 64 bf16 tile p (row stride
// kFlashPld) and a 64-row bf16 tile b (row stride kFlashLd<D>): P V, dS K, (P c)^T dO,
// dS^T Q. FP32 sums over c in blocks of 16 ascending.
template <int D>
__device__ __forceinline__ void flash_accumulate(FlashAcc (&acc)[D / 16], const __nv_bfloat16* p,
                                                 const __nv_bfloat16* b) {
#pragma unroll
  for (int c = 0; c < kFlashCols; c += 16) {
    FlashA fa;
    wmma::load_matrix_sync(fa, p + c, kFlashPld);
#pragma unroll
    for (int x = 0; x < D / 16; ++x) {
      FlashB fb;
      wmma::load_matrix_sync(fb, b + c * kFlashLd<D> + x * 16, kFlashLd<D>);
      wmma::mma_sync(acc[x], fa, fb, acc[x]);
    }
  }
}

// Stores a warp's 16 x D accumulators, times `scale`, as bf16 rows r < rows of dst (`stride`
// elements apart), through `scratch` (this warp's 16 x (D + 4) floats).
template <int D>
__device__ __forceinline__ void flash_store(__nv_bfloat16* dst, int64_t rows,
                                            FlashAcc (&acc)[D / 16], float scale, float* scratch,
                                            int64_t stride) {
#pragma unroll
  for (int x = 0; x < D / 16; ++x)
    wmma::store_matrix_sync(scratch + x * 16, acc[x], D + 4, wmma::mem_row_major);
  __syncwarp();
  const int lane = threadIdx.x % 32;
  for (int idx = lane; idx < 16 * D; idx += 32) {
    const int r = idx / D, e = idx - r * D;
    if (r < rows) dst[r * stride + e] = __float2bfloat16_rn(scale * scratch[r * (D + 4) + e]);
  }
  __syncwarp();
}

// Whether query row i sees key j.
__device__ __forceinline__ bool flash_visible(int64_t i, int64_t j, int64_t t, bool causal) {
  return i < t && j < t && (!causal || j <= i);
}

// The dropout factor c_ij of Note [fused attention] in FP32 (keep_scale rounded to float).
__device__ __forceinline__ float flash_keep(float rate, float keep_scale, uint64_t seed,
                                            uint64_t step, uint64_t index) {
  if (rate == 0.0f) return 1.0f;
  return rng_uniform(seed, step, index) >= rate ? keep_scale : 0.0f;
}

// The tile of a block's own rows and its (sample, head) b = blockIdx.x. Under a causal mask the
// last query tiles and the first key tiles have the most to sweep: `last_first` puts the last
// tiles at blockIdx.y = 0 (query tiles), so in either kernel the long blocks start early.
struct FlashBlock {
  int64_t b, tiles, tile;
  __device__ FlashBlock(int64_t t, bool last_first)
      : b(blockIdx.x),
        tiles((t + kFlashRows - 1) / kFlashRows),
        tile(last_first ? tiles - 1 - static_cast<int64_t>(blockIdx.y)
                        : static_cast<int64_t>(blockIdx.y)) {}
};

// What every flash kernel takes besides its tensors: the sizes, the softmax scale, the mask and
// the dropout numbering (Note [fused attention] in ops/attention.cpp).
struct FlashArgs {
  int64_t heads, t;
  float scale;
  bool causal;
  float rate, keep_scale;
  uint64_t seed;
  StepSource step;
  uint64_t first;
};
inline FlashArgs flash_args(int64_t heads, int64_t t, double scale, bool causal, float rate,
                            uint64_t seed, StepSource step, uint64_t first) {
  return {heads, t, static_cast<float>(scale), causal, rate,
          static_cast<float>(rng_keep_scale(rate)), seed, step, first};
}

// Element offset of (sample, head) b's row 0 in a tensor with strides `s`.
__device__ __forceinline__ int64_t flash_offset(const HeadStrides& s, int64_t b, int64_t heads) {
  return (b / heads) * s.sample + (b % heads) * s.head;
}

// Grid of the flash kernels: bh x tiles blocks.
inline dim3 flash_grid(int64_t bh, int64_t t) {
  return dim3(static_cast<unsigned>(bh), static_cast<unsigned>((t + kFlashRows - 1) / kFlashRows));
}

inline void check_flash_args(int64_t bh, int64_t t, int64_t d, float rate,
                             std::initializer_list<HeadStrides> strides, const void* a,
                             const void* b, const void* c, const void* e = nullptr) {
  check_attention_sizes(bh, t, d, rate);
  REMAT_CHECK(d == 32 || d == 64 || d == 128,
              "attention: the flash kernels hold head sizes 32, 64 and 128 (D = " << d << ")");
  REMAT_CHECK(bh < (int64_t{1} << 31) && (t + kFlashRows - 1) / kFlashRows < 65536,
              "attention: " << bh << " x " << t << " rows exceed the flash kernels' grid");
  bool rows16 = true;  // every row of every block starts 16 bytes aligned
  for (const HeadStrides& s : strides)
    rows16 &= s.sample % 8 == 0 && s.head % 8 == 0 && s.row % 8 == 0;
  REMAT_CHECK(aligned16(a, b, c) && aligned16(e) && rows16,
              "attention: the flash kernels need 16-byte aligned tensors and rows");
}

}  // namespace
}  // namespace remat
