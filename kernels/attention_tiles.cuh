// Shared by kernels/attention_tiled.cu (forward) and attention_tiled_backward.cu: the tile
// geometry, loads and dot products of Note [tiled attention kernels], the online row
// statistics, the probability of one (query, key) pair, the argument checks.
#pragma once

#include <cstdint>

#include "kernels/attention_launch.cuh"
#include "kernels/common.cuh"
#include "kernels/rng.h"

namespace remat {
namespace {

constexpr int kTile = 32;                  // rows of a tile: one warp's lanes
constexpr int kTileThreads = 256;          // 8 warps
constexpr int kMaxTiledD = 128;            // head sizes the tiles hold
constexpr int kPerThread = kTile * kMaxTiledD / kTileThreads;  // outputs a thread accumulates
constexpr int kSs = kTile + 1;             // row stride of the double score tiles

static_assert(kTileThreads % 32 == 0 && kTile == 32, "a warp per tile row, a lane per column");

__device__ __forceinline__ double warp_max_d(double v) {
  for (int off = 16; off > 0; off >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Rows [r0, r0 + kTile) of a [t, d] matrix into dst (floats, row stride d + 1 against bank
// conflicts), zeros past row t.
template <typename T>
__device__ inline void load_tile(float* dst, const T* src, int64_t r0, int64_t t, int d) {
  const int stride = d + 1;
  for (int idx = threadIdx.x; idx < kTile * d; idx += blockDim.x) {
    const int r = idx / d, e = idx - r * d;
    dst[r * stride + e] = r0 + r < t ? ld(src[(r0 + r) * d + e]) : 0.0f;
  }
}

// out[r][c] = sum_e a[r][e] b[c][e] in double, ascending e; a, b tiles of row stride d + 1.
__device__ inline void tile_dots(double* out, const float* a, const float* b, int d) {
  const int stride = d + 1;
  for (int idx = threadIdx.x; idx < kTile * kTile; idx += blockDim.x) {
    const int r = idx / kTile, c = idx - r * kTile;
    const float* ar = a + r * stride;
    const float* bc = b + c * stride;
    double s = 0.0;
    for (int e = 0; e < d; ++e) s += static_cast<double>(ar[e]) * static_cast<double>(bc[e]);
    out[r * kSs + c] = s;
  }
}

// Whether query row i sees key j.
__device__ __forceinline__ bool visible(int64_t i, int64_t j, int64_t t, bool causal) {
  return i < t && j < t && (!causal || j <= i);
}

// The layout of a block's shared memory: double tiles first, then float tiles.
struct TileSmem {
  double *s, *w, *m, *l, *delta;
  float *q, *k, *v, *dout;
  __device__ TileSmem(double* base, int d) {
    s = base;
    w = s + kTile * kSs;
    m = w + kTile * kSs;
    l = m + kTile;
    delta = l + kTile;
    q = reinterpret_cast<float*>(delta + kTile);
    k = q + kTile * (d + 1);
    v = k + kTile * (d + 1);
    dout = v + kTile * (d + 1);
  }
};
inline size_t tile_smem_bytes(int d) {
  return (2 * kTile * kSs + 3 * kTile) * sizeof(double) + 4 * kTile * (d + 1) * sizeof(float);
}

// Sweep 1 of a query tile (rows i0..): m_i and l_i into sm.m, sm.l over key tiles 0..last,
// online (l rescaled when m grows). sm.q holds the query tile; uses sm.k and sm.s.
template <typename T>
__device__ inline void row_stats(TileSmem& sm, const T* kb, int64_t i0, int64_t last, int64_t t, int d,
                          double scale, bool causal) {
  if (threadIdx.x < kTile) {
    sm.m[threadIdx.x] = -INFINITY;
    sm.l[threadIdx.x] = 0.0;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t kt = 0; kt <= last; ++kt) {
    __syncthreads();  // the previous tile's readers are done (and m, l are initialised)
    load_tile(sm.k, kb, kt * kTile, t, d);
    __syncthreads();
    tile_dots(sm.s, sm.q, sm.k, d);
    __syncthreads();
    for (int r = warp; r < kTile; r += kTileThreads / 32) {
      const bool vis = visible(i0 + r, kt * kTile + lane, t, causal);
      const double s = vis ? __dmul_rn(scale, sm.s[r * kSs + lane]) : -INFINITY;
      const double m_old = sm.m[r];
      const double m_new = fmax(m_old, warp_max_d(s));
      const double sum = warp_sum(vis ? exp(s - m_new) : 0.0);
      __syncwarp();  // every lane has read m_old
      if (lane == 0 && m_new != -INFINITY) {
        sm.l[r] = (m_old == -INFINITY ? 0.0 : sm.l[r] * exp(m_old - m_new)) + sum;
        sm.m[r] = m_new;
      }
    }
  }
  __syncthreads();
}

// p_ij c_ij of a visible (i, j) from its dot product (the row kernels' expressions), with the
// probability p_ij in *p.
__device__ __forceinline__ double prob_dropped(double dot, double scale, double m, double l,
                                               float rate, double keep_scale, uint64_t seed,
                                               uint64_t step, uint64_t index, double* p,
                                               double* c) {
  const double s = __dmul_rn(scale, dot);
  *p = exp(s - m) / l;
  *c = rng_dropout_factor(rate, keep_scale, seed, step, index);
  return __dmul_rn(*p, *c);
}


// For the outputs o = r * d + e of a query tile this thread owns (o = threadIdx.x + u
// kTileThreads): acc[u] += sum_c a[r][c] b[c][e] over the keys j = j0 + c that row i = i0 + r
// sees in this key tile, in ascending j (the reference's set and order). a: a double tile of
// row stride kSs; b: a float tile of row stride d + 1. The forward's p c v and dq's dS k.
__device__ __forceinline__ void add_key_tile(double* acc, const double* a, const float* b, int d,
                                             int64_t i0, int64_t j0, int64_t t, bool causal) {
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int o = threadIdx.x + u * kTileThreads;
    if (o < kTile * d) {
      const int r = o / d, e = o - r * d;
      const int64_t i = i0 + r;
      int64_t cend = t - j0 < kTile ? t - j0 : kTile;
      if (causal && i - j0 + 1 < cend) cend = i - j0 + 1;
      double sum = acc[u];
      for (int c = 0; c < cend; ++c)
        sum = __dadd_rn(sum, __dmul_rn(a[r * kSs + c], static_cast<double>(b[c * (d + 1) + e])));
      acc[u] = sum;
    }
  }
}

// A block's (sample and head) b and the first row of its tile, for a grid of bh * tiles blocks.
struct TileBlock {
  int64_t tiles, b, row0;
  __device__ explicit TileBlock(int64_t t)
      : tiles((t + kTile - 1) / kTile), b(blockIdx.x / tiles), row0((blockIdx.x % tiles) * kTile) {}
};

inline void check_tiled_args(int64_t bh, int64_t t, int64_t d, float rate) {
  check_attention_sizes(bh, t, d, rate);
  REMAT_CHECK(d <= kMaxTiledD, "attention: the tiled kernels hold head sizes up to "
                                   << kMaxTiledD << " (D = " << d << ")");
  REMAT_CHECK(bh * ((t + kTile - 1) / kTile) < (int64_t{1} << 31),
              "attention: " << bh << " x " << t << " rows exceed the tiled kernels' grid");
}


}  // namespace
}  // namespace remat
