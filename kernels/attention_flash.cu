// Fused scaled-dot-product attention on tensor cores, the forward (Note [flash attention
// kernels]; the backward is attention_flash_backward.cu, the shared pieces attention_flash.cuh).
// bf16 q, k, v and output only, head sizes 32, 64 and 128. Chosen by CudaOptions::
// attention_kernel (REMAT_ATTENTION_KERNEL=flash).
//
// Note [flash attention kernels]
// The row and tiled kernels (attention.cu, attention_tiled*.cu) reproduce the CPU reference's
// double sums, so they run on the FP64 units: GPT-2 with the fused op trained at 8.9
// sequences/s on an H200 against the written-out form's 99 (GPU_RESULTS.md, 2026-11-27). These
// kernels follow flash attention 2 (Dao, 2023) on bf16 tensor cores through WMMA, with the math
// of Note [fused attention] in ops/attention.cpp and its dropout numbering, as autocast's bf16
// SDPA does: products of bf16 operands summed in FP32, the softmax in FP32.
//   forward (one block per 64 query rows of one (sample, head), 4 warps of 16 rows; key tiles of
//     64 swept in order): S = Q K^T (FP32), per row the running max m and sum l of exp(scale S -
//     m) (l rescaled by exp(m_old - m_new) as m grows), P = exp(scale S - m) c rounded to bf16,
//     O = O exp(m_old - m_new) + P V; at the end o = O / l, rounded to bf16.
//   backward, per query tile: sweep 1 computes m, l and delta_i = sum_j p_ij c_ij dW_ij (dW = dO
//     V^T) online (delta l rescaled like l), so delta needs neither the output o nor a third
//     sweep; m, l, delta go to the workspace as floats; sweep 2 forms dS = p (c dW - delta),
//     rounded to bf16, and dq = scale dS K;
//   backward, per key tile (a second kernel): over the query tiles that see it, S^T = K Q^T and
//     dW^T = V dO^T again, dv = (p c)^T dO and dk = scale dS^T Q (p c and dS rounded to bf16).
// Nine T x T x D products in the backward against flash attention 2's five (it stores the row
// statistics from the forward; the op has one output, Note [fused attention]), two in the
// forward. Deterministic: no atomics, every sum in a fixed order, so a recomputation is
// bit-identical; the results differ from the CPU's double sums by the bf16 roundings of p c and
// dS, bounded in tests/test_cuda_attention_flash.cpp (Note [flash attention tolerance]).
// Shared memory: Q, K, V tiles of 64 x (D + 8) bf16, per warp a 16 x 68 FP32 score tile, a
// 16 x 72 bf16 probability tile and the 16 x (D + 4) FP32 output: 70 KB at D = 64 (three
// blocks an SM on an H100), 111 KB at D = 128; the backward kernels 79 and 89 KB at D = 64, 111
// and 121 KB at D = 128.
#include "kernels/attention_flash.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

// Per warp: the score tile, then the output rows (16 x (D + 4) floats, in score-tile units).
template <int D>
__host__ __device__ constexpr FlashSmem flash_forward_smem() {
  return FlashSmem{3, 1 + (D + 4 + kFlashSld - 1) / kFlashSld, 1, 0};
}

// The forward kernel's arguments: q, k, v and out with their strides (kernels/attention.h).
struct FlashForward : FlashArgs {
  __nv_bfloat16* out;
  const __nv_bfloat16 *q, *k, *v;
  HeadStrides out_s, in_s;
};

template <int D>
__global__ void __launch_bounds__(kFlashThreads) attention_flash_forward_kernel(FlashForward a) {
  const uint64_t step = a.step.get();  // Note [step source]
  const int64_t t = a.t;
  const bool causal = a.causal;
  const float scale = a.scale;
  extern __shared__ __align__(128) unsigned char flash_smem[];
  constexpr FlashSmem L = flash_forward_smem<D>();
  const FlashBlock blk(t, true);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t i0 = blk.tile * kFlashRows, in = flash_offset(a.in_s, blk.b, a.heads);
  const int64_t rs = a.in_s.row;
  __nv_bfloat16* qt = L.tile<D>(flash_smem, 0);
  __nv_bfloat16* kt = L.tile<D>(flash_smem, 1);
  __nv_bfloat16* vt = L.tile<D>(flash_smem, 2);
  float* s = L.ftile<D>(flash_smem, warp, 0);
  float* o = L.ftile<D>(flash_smem, warp, 1);  // 16 x (D + 4)
  __nv_bfloat16* p = L.ptile<D>(flash_smem, warp, 0);
  flash_load<D>(qt, a.q + in, i0, t, rs);
  for (int idx = lane; idx < 16 * (D + 4); idx += 32) o[idx] = 0.0f;
  // Lane pair (2r, 2r + 1) owns row r of the warp's 16: columns c = h + 2x, h = lane % 2.
  const int r = lane / 2, h = lane % 2;
  const int64_t i = i0 + warp * 16 + r;
  float m = -INFINITY, l = 0.0f;
  const int64_t last = causal ? blk.tile : blk.tiles - 1;
  for (int64_t kt_i = 0; kt_i <= last; ++kt_i) {
    const int64_t j0 = kt_i * kFlashCols;
    __syncthreads();  // every warp is done with the previous K and V tiles
    flash_load<D>(kt, a.k + in, j0, t, rs);
    flash_load<D>(vt, a.v + in, j0, t, rs);
    __syncthreads();
    flash_dots<D>(s, qt + warp * 16 * kFlashLd<D>, kt);
    __syncwarp();
    float mx = -INFINITY;
    for (int x = 0; x < kFlashCols / 2; ++x) {
      const int c = h + 2 * x;
      if (flash_visible(i, j0 + c, t, causal)) mx = fmaxf(mx, scale * s[r * kFlashSld + c]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m, mx);
    const float alpha = m == -INFINITY ? 0.0f : expf(m - m_new);
    float sum = 0.0f;
    const uint64_t row = a.first + static_cast<uint64_t>((blk.b * t + i) * t);
    for (int x = 0; x < kFlashCols / 2; ++x) {
      const int c = h + 2 * x;
      const int64_t j = j0 + c;
      float pc = 0.0f;
      if (flash_visible(i, j, t, causal)) {
        const float e = expf(scale * s[r * kFlashSld + c] - m_new);
        sum += e;
        pc = e * flash_keep(a.rate, a.keep_scale, a.seed, step, row + static_cast<uint64_t>(j));
      }
      p[r * kFlashPld + c] = __float2bfloat16_rn(pc);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * alpha + sum;
    m = m_new;
    for (int e = h; e < D; e += 2) o[r * (D + 4) + e] *= alpha;
    __syncwarp();
    FlashA pa[kFlashCols / 16];  // P, loaded once for every sixteen output columns
#pragma unroll
    for (int c = 0; c < kFlashCols / 16; ++c) wmma::load_matrix_sync(pa[c], p + c * 16, kFlashPld);
#pragma unroll
    for (int x = 0; x < D / 16; ++x) {  // O += P V, sixteen output columns at a time
      FlashAcc acc;
      wmma::load_matrix_sync(acc, o + x * 16, D + 4, wmma::mem_row_major);
#pragma unroll
      for (int c = 0; c < kFlashCols / 16; ++c) {
        FlashB fb;
        wmma::load_matrix_sync(fb, vt + c * 16 * kFlashLd<D> + x * 16, kFlashLd<D>);
        wmma::mma_sync(acc, pa[c], fb, acc);
      }
      wmma::store_matrix_sync(o + x * 16, acc, D + 4, wmma::mem_row_major);
    }
    __syncwarp();
  }
  // o = O / l. Both lanes of a row hold the same l; lane h writes the columns e = h + 2y.
  if (i < t) {
    const float inv = 1.0f / l;
    __nv_bfloat16* dst = a.out + flash_offset(a.out_s, blk.b, a.heads) + i * a.out_s.row;
    for (int e = h; e < D; e += 2) dst[e] = __float2bfloat16_rn(o[r * (D + 4) + e] * inv);
  }
}

template <int D>
void forward_launch(const FlashForward& a, int64_t bh, cudaStream_t stream) {
  constexpr size_t smem = flash_forward_smem<D>().template bytes<D>();
  static_assert(smem <= 160 * 1024, "more shared memory than an A100 block may take");
  allow_shared(attention_flash_forward_kernel<D>, smem);
  attention_flash_forward_kernel<D><<<flash_grid(bh, a.t), kFlashThreads, smem, stream>>>(a);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace

bool attention_flash_supports(int64_t d) { return d == 32 || d == 64 || d == 128; }

void attention_forward_flash(uint16_t* out, HeadStrides out_s, const uint16_t* q, const uint16_t* k,
                             const uint16_t* v, HeadStrides in_s, int64_t n, int64_t heads,
                             int64_t t, int64_t d, double scale, bool causal, float rate,
                             uint64_t seed, StepSource step, uint64_t first, cudaStream_t stream) {
  REMAT_CHECK(n >= 0 && heads >= 0,
              "attention: negative size (n " << n << ", heads " << heads << ")");
  const int64_t bh = n * heads;
  check_flash_args(bh, t, d, rate, {out_s, in_s}, q, k, v, out);
  if (bh == 0 || t == 0) return;
  const FlashForward a{{flash_args(heads, t, scale, causal, rate, seed, step, first)},
                       bf16_ptr(out), bf16_ptr(q), bf16_ptr(k), bf16_ptr(v), out_s, in_s};
  if (d == 32)
    forward_launch<32>(a, bh, stream);
  else if (d == 64)
    forward_launch<64>(a, bh, stream);
  else
    forward_launch<128>(a, bh, stream);
}

}  // namespace remat
