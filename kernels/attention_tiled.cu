// Fused scaled-dot-product attention in tiles, the forward (Note [tiled attention kernels]; the
// backward is attention_tiled_backward.cu, the shared pieces attention_tiles.cuh): the same math,
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
#include "kernels/attention_tiles.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

// ---- forward ------------------------------------------------------------------------------------
template <typename T>
__global__ void __launch_bounds__(kTileThreads)
    attention_tiled_forward_kernel(T* out, const T* q, const T* k, const T* v, int64_t t, int d,
                                   double scale, bool causal, float rate, double keep_scale,
                                   uint64_t seed, StepSource step_at, uint64_t first) {
  const uint64_t step = step_at.get();  // Note [step source]
  extern __shared__ double tile_smem[];
  TileSmem sm(tile_smem, d);
  const TileBlock blk(t);
  const int64_t tiles = blk.tiles, b = blk.b, i0 = blk.row0;
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
    add_key_tile(acc, sm.w, sm.v, d, i0, j0, t, causal);  // o_i += p_ij c_ij v_j
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


template <typename T>
void forward_impl(T* out, const T* q, const T* k, const T* v, int64_t bh, int64_t t, int64_t d,
                  double scale, bool causal, float rate, uint64_t seed, StepSource step,
                  uint64_t first, cudaStream_t stream) {
  check_tiled_args(bh, t, d, rate);
  if (bh == 0 || t == 0 || d == 0) return;
  const size_t smem = tile_smem_bytes(static_cast<int>(d));
  allow_shared(attention_tiled_forward_kernel<T>, smem);
  const auto blocks = static_cast<unsigned>(bh * ((t + kTile - 1) / kTile));
  attention_tiled_forward_kernel<T><<<blocks, kTileThreads, smem, stream>>>(
      out, q, k, v, t, static_cast<int>(d), scale, causal, rate, rng_keep_scale(rate), seed, step,
      first);
  REMAT_CUDA_LAUNCH_CHECK();
}


}  // namespace

bool attention_tiled_supports(int64_t d) { return d <= kMaxTiledD; }

void attention_forward_tiled(float* out, const float* q, const float* k, const float* v,
                             int64_t bh, int64_t t, int64_t d, double scale, bool causal,
                             float rate, uint64_t seed, StepSource step, uint64_t first,
                             cudaStream_t stream) {
  forward_impl(out, q, k, v, bh, t, d, scale, causal, rate, seed, step, first, stream);
}
void attention_forward_tiled(uint16_t* out, const uint16_t* q, const uint16_t* k,
                             const uint16_t* v, int64_t bh, int64_t t, int64_t d, double scale,
                             bool causal, float rate, uint64_t seed, StepSource step,
                             uint64_t first, cudaStream_t stream) {
  forward_impl(bf16_ptr(out), bf16_ptr(q), bf16_ptr(k), bf16_ptr(v), bh, t, d, scale, causal,
               rate, seed, step, first, stream);
}

}  // namespace remat
