// Fused scaled-dot-product attention on the device, forward and backward (Note [fused attention]
// in ops/attention.cpp is the spec): for each of the bh = N * heads [t, d] blocks, the scores
// s_ij = scale * q_i . k_j, a softmax over the visible keys j < w_i (w_i = i + 1 when causal,
// else t), dropout on the probabilities with the counter-based RNG of kernels/rng.h (index
// first + (b * t + i) * t + j, as the CPU), and the weighted sum of v. Every dot product and sum
// is in double over values widened with ld(); each output is rounded once (st<T>).
//
// Note [attention kernels]
//   forward:   one block of kAttnThreads threads per query row (b, i) (grid-stride over rows);
//              the row's scores in dynamic shared memory (t doubles); max and exponential sum by
//              fixed-tree block reductions; then threads over e sum over j in ascending order.
//   backward:  pass 1, one block per query row (b, i): scores, m_i, l_i, p_ij, dW_ij = dO_i .
//              v_j, dP_ij = c_ij dW_ij, delta_i = sum_j p_ij dP_ij (block reduction); m_i, l_i,
//              delta_i go to the workspace (3 doubles per row, interleaved); dq row from dS_ij.
//              pass 2, one block per key row (b, j): for the rows i that see j, p_ij recomputed
//              from the stored m_i, l_i (the same expression as pass 1, so the same bits), dS_ij
//              and p_ij c_ij in shared memory (2 t doubles), then dk and dv rows summed over i in
//              ascending order.
// The dot products over e are accumulated in ascending e, chunk by chunk (the fixed vector is
// staged kAttnChunk values at a time in shared memory; the running sum stays in the shared score
// array, so the order of additions is that of one sequential loop). Products of two widened
// floats are exact in double, so FMA contraction cannot change those sums; the other products
// use __dmul_rn so that nvcc does not fuse them into the additions (the CPU rounds each).
// Deterministic (Note [kernel determinism]): no atomics, every sum in an order fixed by the
// shapes and kAttnThreads. The row sums l_i and delta_i are block-tree sums (within ~1 ulp of
// the CPU's ascending sums); the sums behind each output element are in the CPU's order.
// Templated on the storage type T (float or __nv_bfloat16, kernels/common.cuh; Note [bf16
// launchers]).
#include "kernels/attention_launch.cuh"
#include "kernels/common.cuh"
#include "kernels/kernels.h"
#include "kernels/rng.h"

namespace remat {
namespace {

constexpr int kAttnThreads = 128;     // threads per block (a multiple of 32)
constexpr int kAttnChunk = 256;       // values of a staged row per chunk of a dot product
constexpr int64_t kAttnMaxT = 4096;   // shared memory: t (forward) or 2 t (backward) doubles

static_assert(kAttnThreads % 32 == 0 && kAttnThreads <= 1024, "block_sum needs whole warps");

// Max over a block in double, broadcast to every thread. Every thread must call it. `scratch`
// holds 33 doubles in shared memory. (Max is exact, so the order does not matter.)
__device__ __forceinline__ double block_max_all(double v, double* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int off = 16; off > 0; off >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, off));
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    double m = scratch[0];
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) m = fmax(m, scratch[w]);
    scratch[32] = m;
  }
  __syncthreads();
  const double m = scratch[32];
  __syncthreads();
  return m;
}

// block_sum (common.cuh: a fixed tree) broadcast to every thread. `scratch`: 33 doubles.
__device__ __forceinline__ double block_sum_all(double v, double* scratch) {
  const double s = block_sum(v, scratch);
  if (threadIdx.x == 0) scratch[32] = s;
  __syncthreads();
  const double r = scratch[32];
  __syncthreads();
  return r;
}

// acc1[j] = x1 . m1[j] and (when x2) acc2[j] = x2 . m2[j] for j in [j0, j1): rows of d values,
// summed in double in ascending e. x1, x2 are staged in `stage` (2 * kAttnChunk floats) one
// chunk at a time; the running sums live in acc1 / acc2 (shared), each owned by one thread.
// Every thread must call it; it ends with a barrier (the sums are visible to the block).
template <typename T>
__device__ void block_dots(double* acc1, const T* x1, const T* m1, double* acc2, const T* x2,
                           const T* m2, int64_t j0, int64_t j1, int64_t d, float* stage) {
  const bool two = x2 != nullptr;
  for (int64_t e0 = 0; e0 < d; e0 += kAttnChunk) {
    const int n = static_cast<int>(d - e0 < kAttnChunk ? d - e0 : kAttnChunk);
    __syncthreads();  // the previous chunk (or the previous row's readers) are done
    for (int e = threadIdx.x; e < n; e += blockDim.x) {
      stage[e] = ld(x1[e0 + e]);
      if (two) stage[kAttnChunk + e] = ld(x2[e0 + e]);
    }
    __syncthreads();
    for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
      const T* r1 = m1 + j * d + e0;
      double a1 = e0 == 0 ? 0.0 : acc1[j];
      for (int e = 0; e < n; ++e)
        a1 += static_cast<double>(stage[e]) * static_cast<double>(ld(r1[e]));  // exact product
      acc1[j] = a1;
      if (two) {
        const T* r2 = m2 + j * d + e0;
        double a2 = e0 == 0 ? 0.0 : acc2[j];
        for (int e = 0; e < n; ++e)
          a2 += static_cast<double>(stage[kAttnChunk + e]) * static_cast<double>(ld(r2[e]));
        acc2[j] = a2;
      }
    }
  }
  __syncthreads();
}

// A row's dot products dots[0, w) become s_j = scale * dots[j] and then exp(s_j - m); m (the
// max of the s_j) and l (the sum of the exponentials, a fixed-tree block sum) are returned to
// every thread. Every thread must call it; each thread touches the j it owns in block_dots.
__device__ __forceinline__ void softmax_row_stats(double* dots, int64_t w, double scale,
                                                  double* red, double* m_out, double* l_out) {
  double mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < w; j += blockDim.x) {
    const double s = __dmul_rn(scale, dots[j]);
    dots[j] = s;
    mx = fmax(mx, s);
  }
  const double m = block_max_all(mx, red);
  double part = 0.0;
  for (int64_t j = threadIdx.x; j < w; j += blockDim.x) {
    const double ex = exp(dots[j] - m);
    dots[j] = ex;
    part += ex;
  }
  *m_out = m;
  *l_out = block_sum_all(part, red);
}

// ---- forward ------------------------------------------------------------------------------------
// Dynamic shared memory: t doubles.
template <typename T>
__global__ void __launch_bounds__(kAttnThreads)
    attention_forward_kernel(T* out, const T* q, const T* k, const T* v, int64_t bh, int64_t t,
                             int64_t d, double scale, bool causal, float rate, double keep_scale,
                             uint64_t seed, StepSource step_at, uint64_t first) {
  const uint64_t step = step_at.get();  // Note [step source]
  extern __shared__ double attn_smem[];
  __shared__ float stage[2 * kAttnChunk];
  __shared__ double red[33];
  double* sc = attn_smem;  // [t]: scores, then exponentials, then p_ij * c_ij
  const int64_t rows = bh * t;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {  // row = b * t + i
    const int64_t b = row / t, i = row % t;
    const int64_t w = causal ? i + 1 : t;
    const T* kb = k + b * t * d;
    const T* vb = v + b * t * d;
    block_dots<T>(sc, q + row * d, kb, nullptr, nullptr, nullptr, 0, w, d, stage);
    double m, l;
    softmax_row_stats(sc, w, scale, red, &m, &l);
    const uint64_t base = first + static_cast<uint64_t>(row * t);  // + j: (b t + i) t + j
    for (int64_t j = threadIdx.x; j < w; j += blockDim.x) {
      const double p = sc[j] / l;
      const double c =
          rng_dropout_factor(rate, keep_scale, seed, step, base + static_cast<uint64_t>(j));
      sc[j] = __dmul_rn(p, c);
    }
    __syncthreads();
    T* o = out + row * d;
    for (int64_t e = threadIdx.x; e < d; e += blockDim.x) {
      double acc = 0.0;
      for (int64_t j = 0; j < w; ++j)
        acc = __dadd_rn(acc, __dmul_rn(sc[j], static_cast<double>(ld(vb[j * d + e]))));
      o[e] = st<T>(static_cast<float>(acc));
    }
    __syncthreads();  // sc is reused by the next row
  }
}

// ---- backward, pass 1: per query row (b, i) -----------------------------------------------------
// Dynamic shared memory: 2 t doubles. ws: 3 doubles per row (m_i, l_i, delta_i).
template <typename T>
__global__ void __launch_bounds__(kAttnThreads)
    attention_backward_rows_kernel(T* grads, double* ws, const T* dout, const T* q, const T* k,
                                   const T* v, int64_t heads, int64_t bh, int64_t t, int64_t d,
                                   double scale, bool causal, float rate, double keep_scale,
                                   uint64_t seed, StepSource step_at, uint64_t first) {
  const uint64_t step = step_at.get();  // Note [step source]
  extern __shared__ double attn_smem[];
  __shared__ float stage[2 * kAttnChunk];
  __shared__ double red[33];
  double* A = attn_smem;      // [t]: q_i . k_j, s_ij, exp, p_ij, then dS_ij
  double* B = attn_smem + t;  // [t]: dW_ij, then dP_ij
  const int64_t rows = bh * t;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {  // row = b * t + i
    const int64_t b = row / t, i = row % t;
    const int64_t w = causal ? i + 1 : t;
    const T* kb = k + b * t * d;
    const T* vb = v + b * t * d;
    block_dots<T>(A, q + row * d, kb, B, dout + row * d, vb, 0, w, d, stage);
    double m, l;
    softmax_row_stats(A, w, scale, red, &m, &l);
    const uint64_t base = first + static_cast<uint64_t>(row * t);
    double dpart = 0.0;
    for (int64_t j = threadIdx.x; j < w; j += blockDim.x) {
      const double p = A[j] / l;
      const double c =
          rng_dropout_factor(rate, keep_scale, seed, step, base + static_cast<uint64_t>(j));
      const double dp = __dmul_rn(c, B[j]);
      A[j] = p;
      B[j] = dp;
      dpart = __dadd_rn(dpart, __dmul_rn(p, dp));
    }
    const double delta = block_sum_all(dpart, red);
    if (threadIdx.x == 0) {
      ws[3 * row] = m;
      ws[3 * row + 1] = l;
      ws[3 * row + 2] = delta;
    }
    for (int64_t j = threadIdx.x; j < w; j += blockDim.x) A[j] = __dmul_rn(A[j], B[j] - delta);
    __syncthreads();
    // dq of (n, h) = (b / heads, b % heads) at channel h of [N, 3 heads, t, d].
    const int64_t n = b / heads, h = b % heads;
    T* dq = grads + ((n * 3 * heads + h) * t + i) * d;
    for (int64_t e = threadIdx.x; e < d; e += blockDim.x) {
      double acc = 0.0;
      for (int64_t j = 0; j < w; ++j)
        acc = __dadd_rn(acc, __dmul_rn(A[j], static_cast<double>(ld(kb[j * d + e]))));
      dq[e] = st<T>(static_cast<float>(__dmul_rn(scale, acc)));
    }
    __syncthreads();
  }
}

// ---- backward, pass 2: per key row (b, j) -------------------------------------------------------
// Dynamic shared memory: 2 t doubles. ws: pass 1's (m_i, l_i, delta_i).
template <typename T>
__global__ void __launch_bounds__(kAttnThreads)
    attention_backward_cols_kernel(T* grads, const double* ws, const T* dout, const T* q,
                                   const T* k, const T* v, int64_t heads, int64_t bh, int64_t t,
                                   int64_t d, double scale, bool causal, float rate,
                                   double keep_scale, uint64_t seed, StepSource step_at,
                                   uint64_t first) {
  const uint64_t step = step_at.get();  // Note [step source]
  extern __shared__ double attn_smem[];
  __shared__ float stage[2 * kAttnChunk];
  double* A = attn_smem;      // [t] by i: q_i . k_j, then dS_ij
  double* B = attn_smem + t;  // [t] by i: dW_ij, then p_ij * c_ij
  const int64_t rows = bh * t;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {  // row = b * t + j
    const int64_t b = row / t, j = row % t;
    const int64_t i0 = causal ? j : 0;  // the rows i that see key j: [i0, t)
    const T* qb = q + b * t * d;
    const T* dob = dout + b * t * d;
    block_dots<T>(A, k + row * d, qb, B, v + row * d, dob, i0, t, d, stage);
    for (int64_t i = i0 + threadIdx.x; i < t; i += blockDim.x) {
      const int64_t ri = b * t + i;
      const double m = ws[3 * ri], l = ws[3 * ri + 1], delta = ws[3 * ri + 2];
      const double s = __dmul_rn(scale, A[i]);  // as pass 1: no FMA with - m
      const double p = exp(s - m) / l;
      const double c = rng_dropout_factor(rate, keep_scale, seed, step,
                                   first + static_cast<uint64_t>(ri * t + j));
      const double dp = __dmul_rn(c, B[i]);
      A[i] = __dmul_rn(p, dp - delta);
      B[i] = __dmul_rn(p, c);
    }
    __syncthreads();
    const int64_t n = b / heads, h = b % heads;
    T* dk = grads + ((n * 3 * heads + heads + h) * t + j) * d;
    T* dv = grads + ((n * 3 * heads + 2 * heads + h) * t + j) * d;
    for (int64_t e = threadIdx.x; e < d; e += blockDim.x) {
      double ak = 0.0, av = 0.0;
      for (int64_t i = i0; i < t; ++i) {
        ak = __dadd_rn(ak, __dmul_rn(A[i], static_cast<double>(ld(qb[i * d + e]))));
        av = __dadd_rn(av, __dmul_rn(B[i], static_cast<double>(ld(dob[i * d + e]))));
      }
      dk[e] = st<T>(static_cast<float>(__dmul_rn(scale, ak)));
      dv[e] = st<T>(static_cast<float>(av));
    }
    __syncthreads();
  }
}

void check_attention_args(int64_t bh, int64_t t, int64_t d, float rate) {
  check_attention_sizes(bh, t, d, rate);
  REMAT_CHECK(t <= kAttnMaxT, "attention: sequence length T > 4096 not supported on CUDA (T = "
                                  << t << ")");
}

template <typename T>
void attention_forward_impl(T* out, const T* q, const T* k, const T* v, int64_t bh, int64_t t,
                            int64_t d, double scale, bool causal, float rate, uint64_t seed,
                            StepSource step, uint64_t first, cudaStream_t stream) {
  check_attention_args(bh, t, d, rate);
  if (bh == 0 || t == 0 || d == 0) return;
  const size_t smem = static_cast<size_t>(t) * sizeof(double);
  allow_shared(attention_forward_kernel<T>, smem);
  attention_forward_kernel<T><<<grid_for(bh * t, 1), kAttnThreads, smem, stream>>>(
      out, q, k, v, bh, t, d, scale, causal, rate, rng_keep_scale(rate), seed, step, first);
  REMAT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void attention_backward_impl(T* grads, const T* dout, const T* q, const T* k, const T* v,
                             int64_t n, int64_t heads, int64_t t, int64_t d, double scale,
                             bool causal, float rate, uint64_t seed, StepSource step,
                             uint64_t first, void* workspace, cudaStream_t stream) {
  REMAT_CHECK(n >= 0 && heads >= 0, "attention: negative size (n " << n << ", heads " << heads
                                                                     << ")");
  const int64_t bh = n * heads;
  check_attention_args(bh, t, d, rate);
  if (bh == 0 || t == 0 || d == 0) return;
  REMAT_CHECK(workspace != nullptr, "attention_backward: null workspace");
  auto* ws = static_cast<double*>(workspace);
  const size_t smem = 2 * static_cast<size_t>(t) * sizeof(double);
  const double keep_scale = rng_keep_scale(rate);
  const unsigned grid = grid_for(bh * t, 1);
  allow_shared(attention_backward_rows_kernel<T>, smem);
  attention_backward_rows_kernel<T><<<grid, kAttnThreads, smem, stream>>>(
      grads, ws, dout, q, k, v, heads, bh, t, d, scale, causal, rate, keep_scale, seed, step,
      first);
  REMAT_CUDA_LAUNCH_CHECK();
  allow_shared(attention_backward_cols_kernel<T>, smem);
  attention_backward_cols_kernel<T><<<grid, kAttnThreads, smem, stream>>>(
      grads, ws, dout, q, k, v, heads, bh, t, d, scale, causal, rate, keep_scale, seed, step,
      first);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void attention_forward(float* out, const float* q, const float* k, const float* v, int64_t bh,
                       int64_t t, int64_t d, double scale, bool causal, float rate, uint64_t seed,
                       StepSource step, uint64_t first, cudaStream_t stream) {
  attention_forward_impl(out, q, k, v, bh, t, d, scale, causal, rate, seed, step, first, stream);
}
void attention_forward(uint16_t* out, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                       int64_t bh, int64_t t, int64_t d, double scale, bool causal, float rate,
                       uint64_t seed, StepSource step, uint64_t first, cudaStream_t stream) {
  attention_forward_impl(bf16_ptr(out), bf16_ptr(q), bf16_ptr(k), bf16_ptr(v), bh, t, d, scale,
                         causal, rate, seed, step, first, stream);
}

int64_t attention_backward_workspace_bytes(int64_t bh, int64_t t) {
  return bh > 0 && t > 0 ? 3 * bh * t * static_cast<int64_t>(sizeof(double)) : 0;
}

void attention_backward(float* grads, const float* dout, const float* q, const float* k,
                        const float* v, int64_t n, int64_t heads, int64_t t, int64_t d,
                        double scale, bool causal, float rate, uint64_t seed, StepSource step,
                        uint64_t first, void* workspace, cudaStream_t stream) {
  attention_backward_impl(grads, dout, q, k, v, n, heads, t, d, scale, causal, rate, seed, step,
                          first, workspace, stream);
}
void attention_backward(uint16_t* grads, const uint16_t* dout, const uint16_t* q,
                        const uint16_t* k, const uint16_t* v, int64_t n, int64_t heads, int64_t t,
                        int64_t d, double scale, bool causal, float rate, uint64_t seed,
                        StepSource step, uint64_t first, void* workspace, cudaStream_t stream) {
  attention_backward_impl(bf16_ptr(grads), bf16_ptr(dout), bf16_ptr(q), bf16_ptr(k), bf16_ptr(v),
                          n, heads, t, d, scale, causal, rate, seed, step, first, workspace,
                          stream);
}

}  // namespace remat
