// Fused scaled-dot-product attention in tiles (Note [tiled attention kernels]): the same math,
// dropout numbering and workspace as kernels/attention.cu's row kernels (Note [fused attention]
// in ops/attention.cpp is the spec), with blocks that hold 32 query rows and 32 key rows of one
// (sample, head) in shared memory at a time. Chosen by CudaOptions::attention_kernel
// (REMAT_ATTENTION_KERNEL=tiled); head sizes up to kMaxTiledD.
//
// Note [tiled attention kernels]
// The row kernels give each query row a block and re-read all of K and V for every row, one
// double sum at a time: GPT-2 with the fused op trained at 8.9 sequences/s on an H200 against
// the written-out form's 99 (GPU_RESULTS.md, 2026-11-27). Here a block of 256 threads takes a
// tile of 32 query rows (forward, and the dq pass) or 32 key rows (the dk / dv pass) and sweeps
// the other side in tiles of 32, so each K, V, Q or dO element loaded into shared memory serves
// 32 rows. The arithmetic stays the row kernels': values widened to float (exact), every dot
// product in double in ascending e (products of two floats are exact, so contraction cannot
// change them), s = scale * dot, p = exp(s - m) / l, dropout factors of rng_dropout_factor at
// first + (b t + i) t + j, and every output a double sum in ascending j (o, dq) or i (dk, dv)
// with __dmul_rn / __dadd_rn, rounded once. What differs is the order of the row statistics:
// m and l come from one online sweep (l rescaled by exp(m_old - m_new) as m grows) and delta
// from per-tile warp sums, where the row kernels use block trees; both are double sums of
// positive or mixed terms within a few ulps of the CPU's ascending sums, far inside the
// attention tolerance. Deterministic: no atomics, every order fixed by the shapes.
//   forward:  per query tile, sweep 1 finds m_i and l_i, sweep 2 recomputes the scores and adds
//             p_ij c_ij v_j into registers (kTile * d / 256 outputs a thread);
//   backward: per query tile, sweep 1 (m, l), sweep 2 (delta_i = sum_j p_ij dP_ij with dW =
//             dO_i . v_j, dP = c dW), sweep 3 (dq_i = scale sum_j dS_ij k_j, dS = p (dP -
//             delta)); m, l, delta go to the workspace (3 doubles a row, as the row kernels'),
//             and a second kernel takes each key tile over the query tiles that see it for
//             dk_j = scale sum_i dS_ij q_i and dv_j = sum_i p_ij c_ij dO_i.
#include "kernels/common.cuh"
#include "kernels/kernels.h"
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
__device__ void load_tile(float* dst, const T* src, int64_t r0, int64_t t, int d) {
  const int stride = d + 1;
  for (int idx = threadIdx.x; idx < kTile * d; idx += blockDim.x) {
    const int r = idx / d, e = idx - r * d;
    dst[r * stride + e] = r0 + r < t ? ld(src[(r0 + r) * d + e]) : 0.0f;
  }
}

// out[r][c] = sum_e a[r][e] b[c][e] in double, ascending e; a, b tiles of row stride d + 1.
__device__ void tile_dots(double* out, const float* a, const float* b, int d) {
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
size_t tile_smem_bytes(int d) {
  return (2 * kTile * kSs + 3 * kTile) * sizeof(double) + 4 * kTile * (d + 1) * sizeof(float);
}

// Sweep 1 of a query tile (rows i0..): m_i and l_i into sm.m, sm.l over key tiles 0..last,
// online (l rescaled when m grows). sm.q holds the query tile; uses sm.k and sm.s.
template <typename T>
__device__ void row_stats(TileSmem& sm, const T* kb, int64_t i0, int64_t last, int64_t t, int d,
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

// ---- forward ------------------------------------------------------------------------------------
template <typename T>
__global__ void __launch_bounds__(kTileThreads)
    attention_tiled_forward_kernel(T* out, const T* q, const T* k, const T* v, int64_t t, int d,
                                   double scale, bool causal, float rate, double keep_scale,
                                   uint64_t seed, uint64_t step, uint64_t first) {
  extern __shared__ double tile_smem[];
  TileSmem sm(tile_smem, d);
  const int64_t tiles = (t + kTile - 1) / kTile;
  const int64_t b = blockIdx.x / tiles, i0 = (blockIdx.x % tiles) * kTile;
  const T* qb = q + b * t * d;
  const T* kb = k + b * t * d;
  const T* vb = v + b * t * d;
  const int64_t last = causal ? i0 / kTile : tiles - 1;
  load_tile(sm.q, qb, i0, t, d);
  row_stats(sm, kb, i0, last, t, d, scale, causal);
  double acc[kPerThread];
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) acc[u] = 0.0;
  for (int64_t kt = 0; kt <= last; ++kt) {
    const int64_t j0 = kt * kTile;
    __syncthreads();
    load_tile(sm.k, kb, j0, t, d);
    load_tile(sm.v, vb, j0, t, d);
    __syncthreads();
    tile_dots(sm.s, sm.q, sm.k, d);
    __syncthreads();
    for (int idx = threadIdx.x; idx < kTile * kTile; idx += blockDim.x) {
      const int r = idx / kTile, c = idx - r * kTile;
      const int64_t i = i0 + r, j = j0 + c;
      double pc = 0.0, p, cf;
      if (visible(i, j, t, causal))
        pc = prob_dropped(sm.s[r * kSs + c], scale, sm.m[r], sm.l[r], rate, keep_scale, seed,
                          step, first + static_cast<uint64_t>((b * t + i) * t + j), &p, &cf);
      sm.w[r * kSs + c] = pc;
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) {
      const int o = threadIdx.x + u * kTileThreads;  // r * d + e
      if (o < kTile * d) {
        const int r = o / d, e = o - r * d;
        const int64_t i = i0 + r;
        // the keys row i sees in this tile, in ascending j (the reference's set and order)
        int64_t cend = t - j0 < kTile ? t - j0 : kTile;
        if (causal && i - j0 + 1 < cend) cend = i - j0 + 1;
        double a = acc[u];
        for (int c = 0; c < cend; ++c)
          a = __dadd_rn(a, __dmul_rn(sm.w[r * kSs + c], static_cast<double>(sm.v[c * (d + 1) + e])));
        acc[u] = a;
      }
    }
  }
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int o = threadIdx.x + u * kTileThreads;
    if (o < kTile * d) {
      const int r = o / d, e = o - r * d;
      if (i0 + r < t) out[(b * t + i0 + r) * d + e] = st<T>(static_cast<float>(acc[u]));
    }
  }
}

// ---- backward, per query tile: m, l, delta to the workspace; dq ---------------------------------
template <typename T>
__global__ void __launch_bounds__(kTileThreads)
    attention_tiled_dq_kernel(T* grads, double* ws, const T* dout, const T* q, const T* k,
                              const T* v, int64_t heads, int64_t t, int d, double scale,
                              bool causal, float rate, double keep_scale, uint64_t seed,
                              uint64_t step, uint64_t first) {
  extern __shared__ double tile_smem[];
  TileSmem sm(tile_smem, d);
  const int64_t tiles = (t + kTile - 1) / kTile;
  const int64_t b = blockIdx.x / tiles, i0 = (blockIdx.x % tiles) * kTile;
  const T* kb = k + b * t * d;
  const T* vb = v + b * t * d;
  const int64_t last = causal ? i0 / kTile : tiles - 1;
  load_tile(sm.q, q + b * t * d, i0, t, d);
  load_tile(sm.dout, dout + b * t * d, i0, t, d);
  row_stats(sm, kb, i0, last, t, d, scale, causal);
  if (threadIdx.x < kTile) sm.delta[threadIdx.x] = 0.0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Sweep 2: delta_i. Sweep 3: dq_i. Both recompute the scores and dW = dO . v of each tile.
  double acc[kPerThread];
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) acc[u] = 0.0;
  for (int sweep = 2; sweep <= 3; ++sweep) {
    for (int64_t kt = 0; kt <= last; ++kt) {
      const int64_t j0 = kt * kTile;
      __syncthreads();
      load_tile(sm.k, kb, j0, t, d);
      load_tile(sm.v, vb, j0, t, d);
      __syncthreads();
      tile_dots(sm.s, sm.q, sm.k, d);
      tile_dots(sm.w, sm.dout, sm.v, d);
      __syncthreads();
      if (sweep == 2) {
        for (int r = warp; r < kTile; r += kTileThreads / 32) {
          const int64_t i = i0 + r, j = j0 + lane;
          double part = 0.0, p, cf;
          if (visible(i, j, t, causal)) {
            prob_dropped(sm.s[r * kSs + lane], scale, sm.m[r], sm.l[r], rate, keep_scale, seed,
                         step, first + static_cast<uint64_t>((b * t + i) * t + j), &p, &cf);
            part = __dmul_rn(p, __dmul_rn(cf, sm.w[r * kSs + lane]));
          }
          const double sum = warp_sum(part);
          if (lane == 0) sm.delta[r] = __dadd_rn(sm.delta[r], sum);
        }
        continue;
      }
      for (int idx = threadIdx.x; idx < kTile * kTile; idx += blockDim.x) {
        const int r = idx / kTile, c = idx - r * kTile;
        const int64_t i = i0 + r, j = j0 + c;
        double ds = 0.0, p, cf;
        if (visible(i, j, t, causal)) {
          prob_dropped(sm.s[r * kSs + c], scale, sm.m[r], sm.l[r], rate, keep_scale, seed, step,
                       first + static_cast<uint64_t>((b * t + i) * t + j), &p, &cf);
          const double dp = __dmul_rn(cf, sm.w[r * kSs + c]);
          ds = __dmul_rn(p, dp - sm.delta[r]);
        }
        sm.s[r * kSs + c] = ds;  // each entry read and written by its own thread
      }
      __syncthreads();
#pragma unroll
      for (int u = 0; u < kPerThread; ++u) {
        const int o = threadIdx.x + u * kTileThreads;
        if (o < kTile * d) {
          const int r = o / d, e = o - r * d;
          const int64_t i = i0 + r;
          int64_t cend = t - j0 < kTile ? t - j0 : kTile;
          if (causal && i - j0 + 1 < cend) cend = i - j0 + 1;
          double a = acc[u];
          for (int c = 0; c < cend; ++c)
            a = __dadd_rn(a, __dmul_rn(sm.s[r * kSs + c], static_cast<double>(sm.k[c * (d + 1) + e])));
          acc[u] = a;
        }
      }
    }
    __syncthreads();  // delta complete before sweep 3 reads it
  }
  if (threadIdx.x < kTile && i0 + threadIdx.x < t) {
    double* row = ws + 3 * (b * t + i0 + threadIdx.x);
    row[0] = sm.m[threadIdx.x];
    row[1] = sm.l[threadIdx.x];
    row[2] = sm.delta[threadIdx.x];
  }
  const int64_t n = b / heads, h = b % heads;
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int o = threadIdx.x + u * kTileThreads;
    if (o < kTile * d) {
      const int r = o / d, e = o - r * d;
      if (i0 + r < t)
        grads[((n * 3 * heads + h) * t + i0 + r) * d + e] =
            st<T>(static_cast<float>(__dmul_rn(scale, acc[u])));
    }
  }
}

// ---- backward, per key tile: dk, dv over the query tiles that see it ----------------------------
template <typename T>
__global__ void __launch_bounds__(kTileThreads)
    attention_tiled_dkv_kernel(T* grads, const double* ws, const T* dout, const T* q, const T* k,
                               const T* v, int64_t heads, int64_t t, int d, double scale,
                               bool causal, float rate, double keep_scale, uint64_t seed,
                               uint64_t step, uint64_t first) {
  extern __shared__ double tile_smem[];
  TileSmem sm(tile_smem, d);
  const int64_t tiles = (t + kTile - 1) / kTile;
  const int64_t b = blockIdx.x / tiles, j0 = (blockIdx.x % tiles) * kTile;
  const T* qb = q + b * t * d;
  const T* dob = dout + b * t * d;
  load_tile(sm.k, k + b * t * d, j0, t, d);
  load_tile(sm.v, v + b * t * d, j0, t, d);
  double ak[kPerThread], av[kPerThread];
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) ak[u] = av[u] = 0.0;
  for (int64_t qt = causal ? j0 / kTile : 0; qt < tiles; ++qt) {
    const int64_t i0 = qt * kTile;
    __syncthreads();
    load_tile(sm.q, qb, i0, t, d);
    load_tile(sm.dout, dob, i0, t, d);
    if (threadIdx.x < kTile) {
      const bool in = i0 + threadIdx.x < t;
      const double* row = ws + 3 * (b * t + i0 + threadIdx.x);
      sm.m[threadIdx.x] = in ? row[0] : 0.0;
      sm.l[threadIdx.x] = in ? row[1] : 1.0;
      sm.delta[threadIdx.x] = in ? row[2] : 0.0;
    }
    __syncthreads();
    tile_dots(sm.s, sm.q, sm.k, d);     // q_i . k_j
    tile_dots(sm.w, sm.dout, sm.v, d);  // dO_i . v_j
    __syncthreads();
    for (int idx = threadIdx.x; idx < kTile * kTile; idx += blockDim.x) {
      const int r = idx / kTile, c = idx - r * kTile;
      const int64_t i = i0 + r, j = j0 + c;
      double ds = 0.0, pc = 0.0, p, cf;
      if (visible(i, j, t, causal)) {
        pc = prob_dropped(sm.s[r * kSs + c], scale, sm.m[r], sm.l[r], rate, keep_scale, seed, step,
                          first + static_cast<uint64_t>((b * t + i) * t + j), &p, &cf);
        const double dp = __dmul_rn(cf, sm.w[r * kSs + c]);
        ds = __dmul_rn(p, dp - sm.delta[r]);
      }
      sm.s[r * kSs + c] = ds;
      sm.w[r * kSs + c] = pc;
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) {
      const int o = threadIdx.x + u * kTileThreads;  // c * d + e
      if (o < kTile * d) {
        const int c = o / d, e = o - c * d;
        const int64_t j = j0 + c;
        // the query rows that see key j in this tile, in ascending i
        int64_t rbeg = causal && j > i0 ? j - i0 : 0;
        const int64_t rend = t - i0 < kTile ? t - i0 : kTile;
        double a = ak[u], w = av[u];
        for (int64_t r = rbeg; r < rend; ++r) {
          a = __dadd_rn(a, __dmul_rn(sm.s[r * kSs + c], static_cast<double>(sm.q[r * (d + 1) + e])));
          w = __dadd_rn(w, __dmul_rn(sm.w[r * kSs + c], static_cast<double>(sm.dout[r * (d + 1) + e])));
        }
        ak[u] = a;
        av[u] = w;
      }
    }
  }
  const int64_t n = b / heads, h = b % heads;
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int o = threadIdx.x + u * kTileThreads;
    if (o < kTile * d) {
      const int c = o / d, e = o - c * d;
      const int64_t j = j0 + c;
      if (j < t) {
        grads[((n * 3 * heads + heads + h) * t + j) * d + e] =
            st<T>(static_cast<float>(__dmul_rn(scale, ak[u])));
        grads[((n * 3 * heads + 2 * heads + h) * t + j) * d + e] = st<T>(static_cast<float>(av[u]));
      }
    }
  }
}

void check_tiled_args(int64_t bh, int64_t t, int64_t d, float rate) {
  REMAT_CHECK(bh >= 0 && t >= 0 && d >= 0,
              "attention: negative size (bh " << bh << ", t " << t << ", d " << d << ")");
  REMAT_CHECK(d <= kMaxTiledD, "attention: the tiled kernels hold head sizes up to "
                                   << kMaxTiledD << " (D = " << d << ")");
  REMAT_CHECK(rate >= 0.0f && rate < 1.0f, "attention: dropout rate " << rate << " outside [0, 1)");
  REMAT_CHECK(bh * ((t + kTile - 1) / kTile) < (int64_t{1} << 31),
              "attention: " << bh << " x " << t << " rows exceed the tiled kernels' grid");
}

template <typename K>
void allow_tile_smem(K* kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    REMAT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(bytes)));
}

template <typename T>
void forward_impl(T* out, const T* q, const T* k, const T* v, int64_t bh, int64_t t, int64_t d,
                  double scale, bool causal, float rate, uint64_t seed, uint64_t step,
                  uint64_t first, cudaStream_t stream) {
  check_tiled_args(bh, t, d, rate);
  if (bh == 0 || t == 0 || d == 0) return;
  const size_t smem = tile_smem_bytes(static_cast<int>(d));
  allow_tile_smem(attention_tiled_forward_kernel<T>, smem);
  const auto blocks = static_cast<unsigned>(bh * ((t + kTile - 1) / kTile));
  attention_tiled_forward_kernel<T><<<blocks, kTileThreads, smem, stream>>>(
      out, q, k, v, t, static_cast<int>(d), scale, causal, rate, rng_keep_scale(rate), seed, step,
      first);
  REMAT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void backward_impl(T* grads, const T* dout, const T* q, const T* k, const T* v, int64_t n,
                   int64_t heads, int64_t t, int64_t d, double scale, bool causal, float rate,
                   uint64_t seed, uint64_t step, uint64_t first, void* workspace,
                   cudaStream_t stream) {
  REMAT_CHECK(n >= 0 && heads >= 0, "attention: negative size (n " << n << ", heads " << heads
                                                                     << ")");
  const int64_t bh = n * heads;
  check_tiled_args(bh, t, d, rate);
  if (bh == 0 || t == 0 || d == 0) return;
  REMAT_CHECK(workspace != nullptr, "attention_backward: null workspace");
  auto* ws = static_cast<double*>(workspace);
  const size_t smem = tile_smem_bytes(static_cast<int>(d));
  const double keep_scale = rng_keep_scale(rate);
  const auto blocks = static_cast<unsigned>(bh * ((t + kTile - 1) / kTile));
  allow_tile_smem(attention_tiled_dq_kernel<T>, smem);
  attention_tiled_dq_kernel<T><<<blocks, kTileThreads, smem, stream>>>(
      grads, ws, dout, q, k, v, heads, t, static_cast<int>(d), scale, causal, rate, keep_scale,
      seed, step, first);
  REMAT_CUDA_LAUNCH_CHECK();
  allow_tile_smem(attention_tiled_dkv_kernel<T>, smem);
  attention_tiled_dkv_kernel<T><<<blocks, kTileThreads, smem, stream>>>(
      grads, ws, dout, q, k, v, heads, t, static_cast<int>(d), scale, causal, rate, keep_scale,
      seed, step, first);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace

bool attention_tiled_supports(int64_t d) { return d <= kMaxTiledD; }

void attention_forward_tiled(float* out, const float* q, const float* k, const float* v,
                             int64_t bh, int64_t t, int64_t d, double scale, bool causal,
                             float rate, uint64_t seed, uint64_t step, uint64_t first,
                             cudaStream_t stream) {
  forward_impl(out, q, k, v, bh, t, d, scale, causal, rate, seed, step, first, stream);
}
void attention_forward_tiled(uint16_t* out, const uint16_t* q, const uint16_t* k,
                             const uint16_t* v, int64_t bh, int64_t t, int64_t d, double scale,
                             bool causal, float rate, uint64_t seed, uint64_t step,
                             uint64_t first, cudaStream_t stream) {
  forward_impl(bf16_ptr(out), bf16_ptr(q), bf16_ptr(k), bf16_ptr(v), bh, t, d, scale, causal,
               rate, seed, step, first, stream);
}

void attention_backward_tiled(float* grads, const float* dout, const float* q, const float* k,
                              const float* v, int64_t n, int64_t heads, int64_t t, int64_t d,
                              double scale, bool causal, float rate, uint64_t seed, uint64_t step,
                              uint64_t first, void* workspace, cudaStream_t stream) {
  backward_impl(grads, dout, q, k, v, n, heads, t, d, scale, causal, rate, seed, step, first,
                workspace, stream);
}
void attention_backward_tiled(uint16_t* grads, const uint16_t* dout, const uint16_t* q,
                              const uint16_t* k, const uint16_t* v, int64_t n, int64_t heads,
                              int64_t t, int64_t d, double scale, bool causal, float rate,
                              uint64_t seed, uint64_t step, uint64_t first, void* workspace,
                              cudaStream_t stream) {
  backward_impl(bf16_ptr(grads), bf16_ptr(dout), bf16_ptr(q), bf16_ptr(k), bf16_ptr(v), n, heads,
                t, d, scale, causal, rate, seed, step, first, workspace, stream);
}

}  // namespace remat
