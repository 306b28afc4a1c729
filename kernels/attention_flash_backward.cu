// Fused scaled-dot-product attention on tensor cores, the backward: per query tile the row
// statistics (m, l, delta, kept in the workspace) and dq, then per key tile dk and dv (Note
// [flash attention kernels] in attention_flash.cu).
#include "kernels/attention_flash.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

// Per warp two FP32 tiles (scores, dW; the 16 x (D + 4) store scratch spans both).
template <int D>
__host__ __device__ constexpr FlashSmem flash_dq_smem() {
  return FlashSmem{4, 2, 1, 0};  // tiles: Q, dO (the block's rows), K, V (swept)
}
template <int D>
__host__ __device__ constexpr FlashSmem flash_dkv_smem() {
  return FlashSmem{4, 2, 2, 3};  // tiles: K, V (the block's keys), Q, dO (swept); m, l, delta
}
static_assert(2 * kFlashSld >= 128 + 4, "the store scratch of a warp spans its two FP32 tiles");

// The arguments both backward kernels take.
struct FlashGrad : FlashArgs {
  __nv_bfloat16* grads[3];                // dq, dk, dv, each with grad_s
  float* stats;                           // workspace: m, l, delta of row (b, i) at 3 (b t + i)
  const __nv_bfloat16 *dout, *q, *k, *v;  // dout with out_s, q, k, v with in_s
  HeadStrides grad_s, out_s, in_s;
};

// Row i of gradient g (0 dq, 1 dk, 2 dv) of (sample, head) b.
__device__ __forceinline__ __nv_bfloat16* grad_rows(const FlashGrad& a, int64_t b, int g,
                                                    int64_t i) {
  return a.grads[g] + flash_offset(a.grad_s, b, a.heads) + i * a.grad_s.row;
}

// ---- per query tile: m, l, delta to the workspace; dq ------------------------------------------
template <int D>
__global__ void __launch_bounds__(kFlashThreads) attention_flash_dq_kernel(FlashGrad a) {
  const uint64_t step = a.step.get();  // Note [step source]
  extern __shared__ __align__(128) unsigned char flash_smem[];
  constexpr FlashSmem L = flash_dq_smem<D>();
  const int64_t t = a.t;
  const FlashBlock blk(t, true);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t i0 = blk.tile * kFlashRows, in = flash_offset(a.in_s, blk.b, a.heads);
  const int64_t out = flash_offset(a.out_s, blk.b, a.heads), rs = a.in_s.row;
  __nv_bfloat16* qt = L.tile<D>(flash_smem, 0);
  __nv_bfloat16* dot = L.tile<D>(flash_smem, 1);
  __nv_bfloat16* kt = L.tile<D>(flash_smem, 2);
  __nv_bfloat16* vt = L.tile<D>(flash_smem, 3);
  float* s = L.ftile<D>(flash_smem, warp, 0);
  float* w = L.ftile<D>(flash_smem, warp, 1);
  __nv_bfloat16* ds = L.ptile<D>(flash_smem, warp, 0);
  flash_load<D>(qt, a.q + in, i0, t, rs);
  flash_load<D>(dot, a.dout + out, i0, t, a.out_s.row);
  const int r = lane / 2, h = lane % 2;  // lane pair (2r, 2r + 1): row r, columns h + 2x
  const int64_t i = i0 + warp * 16 + r;
  const uint64_t row = a.first + static_cast<uint64_t>((blk.b * t + i) * t);
  const int64_t last = a.causal ? blk.tile : blk.tiles - 1;
  float m = -INFINITY, l = 0.0f, dl = 0.0f;  // dl = delta l, rescaled with l
  FlashAcc acc[D / 16];
#pragma unroll
  for (int x = 0; x < D / 16; ++x) wmma::fill_fragment(acc[x], 0.0f);
  for (int sweep = 1; sweep <= 2; ++sweep) {
    const float delta = sweep == 2 ? dl / l : 0.0f;
    for (int64_t kt_i = 0; kt_i <= last; ++kt_i) {
      const int64_t j0 = kt_i * kFlashCols;
      __syncthreads();
      flash_load<D>(kt, a.k + in, j0, t, rs);
      flash_load<D>(vt, a.v + in, j0, t, rs);
      __syncthreads();
      flash_dots<D>(s, qt + warp * 16 * kFlashLd<D>, kt);   // q_i . k_j
      flash_dots<D>(w, dot + warp * 16 * kFlashLd<D>, vt);  // dO_i . v_j
      __syncwarp();
      if (sweep == 1) {
        float mx = -INFINITY;
        for (int x = 0; x < kFlashCols / 2; ++x) {
          const int c = h + 2 * x;
          if (flash_visible(i, j0 + c, t, a.causal)) mx = fmaxf(mx, a.scale * s[r * kFlashSld + c]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float m_new = fmaxf(m, mx);
        const float alpha = m == -INFINITY ? 0.0f : expf(m - m_new);
        float sum = 0.0f, dsum = 0.0f;
        for (int x = 0; x < kFlashCols / 2; ++x) {
          const int c = h + 2 * x;
          const int64_t j = j0 + c;
          if (!flash_visible(i, j, t, a.causal)) continue;
          const float e = expf(a.scale * s[r * kFlashSld + c] - m_new);
          const float cf =
              flash_keep(a.rate, a.keep_scale, a.seed, step, row + static_cast<uint64_t>(j));
          sum += e;
          dsum += e * (cf * w[r * kFlashSld + c]);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        dsum += __shfl_xor_sync(0xffffffffu, dsum, 1);
        l = l * alpha + sum;
        dl = dl * alpha + dsum;
        m = m_new;
        continue;
      }
      for (int x = 0; x < kFlashCols / 2; ++x) {  // dS = p (c dW - delta), rounded to bf16
        const int c = h + 2 * x;
        const int64_t j = j0 + c;
        float v = 0.0f;
        if (flash_visible(i, j, t, a.causal)) {
          const float p = expf(a.scale * s[r * kFlashSld + c] - m) / l;
          const float cf =
              flash_keep(a.rate, a.keep_scale, a.seed, step, row + static_cast<uint64_t>(j));
          v = p * (cf * w[r * kFlashSld + c] - delta);
        }
        ds[r * kFlashPld + c] = __float2bfloat16_rn(v);
      }
      __syncwarp();
      flash_accumulate<D>(acc, ds, kt);  // dq_i += dS_ij k_j
    }
  }
  if (h == 0 && i < t) {
    float* row_stats = a.stats + 3 * (blk.b * t + i);
    row_stats[0] = m;
    row_stats[1] = l;
    row_stats[2] = dl / l;
  }
  const int64_t rows = t - (i0 + warp * 16);
  flash_store<D>(grad_rows(a, blk.b, 0, i0 + warp * 16), rows, acc, a.scale, s, a.grad_s.row);
}

// ---- per key tile: dk, dv over the query tiles that see it -------------------------------------
template <int D>
__global__ void __launch_bounds__(kFlashThreads) attention_flash_dkv_kernel(FlashGrad a) {
  const uint64_t step = a.step.get();  // Note [step source]
  extern __shared__ __align__(128) unsigned char flash_smem[];
  constexpr FlashSmem L = flash_dkv_smem<D>();
  const int64_t t = a.t;
  const FlashBlock blk(t, false);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t j0 = blk.tile * kFlashRows, in = flash_offset(a.in_s, blk.b, a.heads);
  const int64_t out = flash_offset(a.out_s, blk.b, a.heads), rs = a.in_s.row;
  __nv_bfloat16* kt = L.tile<D>(flash_smem, 0);
  __nv_bfloat16* vt = L.tile<D>(flash_smem, 1);
  __nv_bfloat16* qt = L.tile<D>(flash_smem, 2);
  __nv_bfloat16* dot = L.tile<D>(flash_smem, 3);
  float* s = L.ftile<D>(flash_smem, warp, 0);  // s[c][x]: k_j . q_i (key row c of the warp's 16)
  float* w = L.ftile<D>(flash_smem, warp, 1);  // w[c][x]: v_j . dO_i
  __nv_bfloat16* pc = L.ptile<D>(flash_smem, warp, 0);
  __nv_bfloat16* ds = L.ptile<D>(flash_smem, warp, 1);
  float* sm_m = L.stat<D>(flash_smem, 0);
  float* sm_l = L.stat<D>(flash_smem, 1);
  float* sm_delta = L.stat<D>(flash_smem, 2);
  flash_load<D>(kt, a.k + in, j0, t, rs);
  flash_load<D>(vt, a.v + in, j0, t, rs);
  const int c = lane / 2, h = lane % 2;  // lane pair: key row c, query columns h + 2x
  const int64_t j = j0 + warp * 16 + c;
  FlashAcc dk[D / 16], dv[D / 16];
#pragma unroll
  for (int x = 0; x < D / 16; ++x) {
    wmma::fill_fragment(dk[x], 0.0f);
    wmma::fill_fragment(dv[x], 0.0f);
  }
  for (int64_t qt_i = a.causal ? blk.tile : 0; qt_i < blk.tiles; ++qt_i) {
    const int64_t i0 = qt_i * kFlashCols;
    __syncthreads();
    flash_load<D>(qt, a.q + in, i0, t, rs);
    flash_load<D>(dot, a.dout + out, i0, t, a.out_s.row);
    for (int x = threadIdx.x; x < kFlashCols; x += kFlashThreads) {
      const bool in = i0 + x < t;
      const float* in_row = a.stats + 3 * (blk.b * t + i0 + x);
      sm_m[x] = in ? in_row[0] : 0.0f;
      sm_l[x] = in ? in_row[1] : 1.0f;
      sm_delta[x] = in ? in_row[2] : 0.0f;
    }
    __syncthreads();
    flash_dots<D>(s, kt + warp * 16 * kFlashLd<D>, qt);
    flash_dots<D>(w, vt + warp * 16 * kFlashLd<D>, dot);
    __syncwarp();
    for (int x = 0; x < kFlashCols / 2; ++x) {
      const int col = h + 2 * x;
      const int64_t i = i0 + col;
      float pcv = 0.0f, dsv = 0.0f;
      if (flash_visible(i, j, t, a.causal)) {
        const float p = expf(a.scale * s[c * kFlashSld + col] - sm_m[col]) / sm_l[col];
        const float cf = flash_keep(a.rate, a.keep_scale, a.seed, step,
                                    a.first + static_cast<uint64_t>((blk.b * t + i) * t + j));
        pcv = p * cf;
        dsv = p * (cf * w[c * kFlashSld + col] - sm_delta[col]);
      }
      pc[c * kFlashPld + col] = __float2bfloat16_rn(pcv);
      ds[c * kFlashPld + col] = __float2bfloat16_rn(dsv);
    }
    __syncwarp();
    flash_accumulate<D>(dv, pc, dot);  // dv_j += p_ij c_ij dO_i
    flash_accumulate<D>(dk, ds, qt);   // dk_j += dS_ij q_i
  }
  const int64_t rows = t - (j0 + warp * 16);
  flash_store<D>(grad_rows(a, blk.b, 1, j0 + warp * 16), rows, dk, a.scale, s, a.grad_s.row);
  flash_store<D>(grad_rows(a, blk.b, 2, j0 + warp * 16), rows, dv, 1.0f, s, a.grad_s.row);
}

template <int D>
void backward_launch(const FlashGrad& a, int64_t bh, cudaStream_t stream) {
  constexpr size_t dq_smem = flash_dq_smem<D>().template bytes<D>();
  static_assert(dq_smem <= 160 * 1024, "more shared memory than an A100 block may take");
  constexpr size_t dkv_smem = flash_dkv_smem<D>().template bytes<D>();
  static_assert(dkv_smem <= 160 * 1024, "more shared memory than an A100 block may take");
  allow_shared(attention_flash_dq_kernel<D>, dq_smem);
  attention_flash_dq_kernel<D><<<flash_grid(bh, a.t), kFlashThreads, dq_smem, stream>>>(a);
  REMAT_CUDA_LAUNCH_CHECK();
  allow_shared(attention_flash_dkv_kernel<D>, dkv_smem);
  attention_flash_dkv_kernel<D><<<flash_grid(bh, a.t), kFlashThreads, dkv_smem, stream>>>(a);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void attention_backward_flash(uint16_t* dq, uint16_t* dk, uint16_t* dv, HeadStrides grad_s,
                              const uint16_t* dout, HeadStrides out_s, const uint16_t* q,
                              const uint16_t* k, const uint16_t* v, HeadStrides in_s, int64_t n,
                              int64_t heads, int64_t t, int64_t d, double scale, bool causal,
                              float rate, uint64_t seed, StepSource step, uint64_t first,
                              void* workspace, cudaStream_t stream) {
  REMAT_CHECK(n >= 0 && heads >= 0,
              "attention: negative size (n " << n << ", heads " << heads << ")");
  const int64_t bh = n * heads;
  check_flash_args(bh, t, d, rate, {grad_s, out_s, in_s}, dout, q, k, v);
  REMAT_CHECK(aligned16(dq, dk, dv), "attention: the flash kernels need 16-byte aligned tensors");
  if (bh == 0 || t == 0) return;
  REMAT_CHECK(workspace != nullptr, "attention_backward: null workspace");
  const FlashGrad a{{flash_args(heads, t, scale, causal, rate, seed, step, first)},
                    {bf16_ptr(dq), bf16_ptr(dk), bf16_ptr(dv)},
                    static_cast<float*>(workspace),
                    bf16_ptr(dout), bf16_ptr(q), bf16_ptr(k), bf16_ptr(v),
                    grad_s, out_s, in_s};
  if (d == 32)
    backward_launch<32>(a, bh, stream);
  else if (d == 64)
    backward_launch<64>(a, bh, stream);
  else
    backward_launch<128>(a, bh, stream);
}

}  // namespace remat
