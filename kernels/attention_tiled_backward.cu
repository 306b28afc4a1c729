// Fused scaled-dot-product attention in tiles, the backward: per query tile the row statistics
// (m, l, delta, kept in the workspace) and dq, then per key tile dk and dv (Note [tiled attention
// kernels] in attention_tiled.cu).
#include "kernels/attention_tiles.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

// ---- backward, per query tile: m, l, delta to the workspace; dq ---------------------------------
template <typename T>
__global__ void __launch_bounds__(kTileThreads)
    attention_tiled_dq_kernel(T* grads, double* ws, const T* dout, const T* q, const T* k,
                              const T* v, int64_t heads, int64_t t, int d, double scale,
                              bool causal, float rate, double keep_scale, uint64_t seed,
                              StepSource step_at, uint64_t first) {
  const uint64_t step = step_at.get();  // Note [step source]
  extern __shared__ double tile_smem[];
  TileSmem sm(tile_smem, d);
  const TileBlock blk(t);
  const int64_t tiles = blk.tiles, b = blk.b, i0 = blk.row0;
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
      add_key_tile(acc, sm.s, sm.k, d, i0, j0, t, causal);  // dq_i += dS_ij k_j
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
                               StepSource step_at, uint64_t first) {
  const uint64_t step = step_at.get();  // Note [step source]
  extern __shared__ double tile_smem[];
  TileSmem sm(tile_smem, d);
  const TileBlock blk(t);
  const int64_t tiles = blk.tiles, b = blk.b, j0 = blk.row0;
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


template <typename T>
void backward_impl(T* grads, const T* dout, const T* q, const T* k, const T* v, int64_t n,
                   int64_t heads, int64_t t, int64_t d, double scale, bool causal, float rate,
                   uint64_t seed, StepSource step, uint64_t first, void* workspace,
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
  allow_shared(attention_tiled_dq_kernel<T>, smem);
  attention_tiled_dq_kernel<T><<<blocks, kTileThreads, smem, stream>>>(
      grads, ws, dout, q, k, v, heads, t, static_cast<int>(d), scale, causal, rate, keep_scale,
      seed, step, first);
  REMAT_CUDA_LAUNCH_CHECK();
  allow_shared(attention_tiled_dkv_kernel<T>, smem);
  attention_tiled_dkv_kernel<T><<<blocks, kTileThreads, smem, stream>>>(
      grads, ws, dout, q, k, v, heads, t, static_cast<int>(d), scale, causal, rate, keep_scale,
      seed, step, first);
  REMAT_CUDA_LAUNCH_CHECK();
}


}  // namespace

void attention_backward_tiled(float* grads, const float* dout, const float* q, const float* k,
                              const float* v, int64_t n, int64_t heads, int64_t t, int64_t d,
                              double scale, bool causal, float rate, uint64_t seed, StepSource step,
                              uint64_t first, void* workspace, cudaStream_t stream) {
  backward_impl(grads, dout, q, k, v, n, heads, t, d, scale, causal, rate, seed, step, first,
                workspace, stream);
}
void attention_backward_tiled(uint16_t* grads, const uint16_t* dout, const uint16_t* q,
                              const uint16_t* k, const uint16_t* v, int64_t n, int64_t heads,
                              int64_t t, int64_t d, double scale, bool causal, float rate,
                              uint64_t seed, StepSource step, uint64_t first, void* workspace,
                              cudaStream_t stream) {
  backward_impl(bf16_ptr(grads), bf16_ptr(dout), bf16_ptr(q), bf16_ptr(k), bf16_ptr(v), n, heads,
                t, d, scale, causal, rate, seed, step, first, workspace, stream);
}


}  // namespace remat
