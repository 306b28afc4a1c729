// Per-channel reductions over (n, plane) of NCHW tensors, deterministic and spread over the
// whole GPU: the bias gradient and batch-norm's gamma gradient. See Note [channel reductions].
// Templated on the storage type T of the activations read (dout, x, dy: float or __nv_bfloat16,
// kernels/common.cuh): bf16 values are widened exactly and summed as the F32 kernels sum them;
// the gradients written (dbias, dgamma) stay float.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

// Note [channel reductions]
// A block per channel starves the GPU when channels are few and planes large (VGG's first
// block: 64 channels of 64 x 224 x 224 values on 132 SMs). Instead each channel's m = n * plane
// values are cut into `splits` contiguous slices, fixed by the shapes alone (never by the
// device), a block sums one (channel, slice) into a workspace of partial sums in double, and a
// second kernel adds each channel's partials in slice order. The order of every addition is
// thus a function of the shapes: reruns are bit-identical (Note [kernel determinism]).
constexpr int kThreads = 256;
constexpr int64_t kBlocksWanted = 1024;      // enough (channel, slice) blocks to fill any GPU
constexpr int64_t kMinSliceValues = 4096;    // below this a slice is not worth a block

int64_t splits_for(int64_t n, int64_t c, int64_t plane) {
  const int64_t m = n * plane;
  int64_t s = (kBlocksWanted + c - 1) / c;
  s = std::min(s, (m + kMinSliceValues - 1) / kMinSliceValues);
  return std::max<int64_t>(s, 1);
}

// Walks the values of channel `ch` in slice [begin, end) of its m = n * plane values, thread
// by thread; `f(offset)` gets each value's offset in the (n, c, plane) tensor.
template <typename F>
__device__ __forceinline__ void for_slice(int64_t ch, int64_t c, int64_t plane, int64_t begin,
                                          int64_t end, F f) {
  int64_t idx = begin + threadIdx.x;
  if (idx >= end) return;
  int64_t i = idx / plane, p = idx - i * plane;  // one division per thread, then increments
  for (; idx < end; idx += blockDim.x) {
    f((i * c + ch) * plane + p);
    p += blockDim.x;
    while (p >= plane) p -= plane, ++i;
  }
}

// partial[(ch * splits + s)] = sum of dout over slice s of channel ch.
template <typename T>
__global__ void bias_grad_partial_kernel(double* partial, const T* dout, int64_t n, int64_t c,
                                         int64_t plane, int64_t splits) {
  __shared__ double scratch[32];
  const int64_t ch = blockIdx.x / splits, s = blockIdx.x % splits, m = n * plane;
  const int64_t len = (m + splits - 1) / splits, begin = s * len;
  const int64_t end = begin + len < m ? begin + len : m;
  double acc = 0.0;
  for_slice(ch, c, plane, begin, end, [&](int64_t o) { acc += ld(dout[o]); });
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void bias_grad_final_kernel(float* dbias, const double* partial, int64_t c,
                                       int64_t splits) {
  for (int64_t ch = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; ch < c;
       ch += int64_t{gridDim.x} * blockDim.x) {
    double s = 0.0;
    for (int64_t k = 0; k < splits; ++k) s += partial[ch * splits + k];
    dbias[ch] = static_cast<float>(s);
  }
}

// plane == 1 ([N, C], dense). Up to kDirectRows rows: a thread per column, rows summed in
// order in double like the CPU (bit-identical to it), consecutive threads reading consecutive
// columns, no workspace. More rows: column_sum (layernorm.cu's fixed row slices), since a thread
// per column over all rows starves the GPU (768 threads over GPT-2's 8,192 rows: milliseconds
// per bias).
constexpr int64_t kDirectRows = 64;

template <typename T>
__global__ void bias_grad_columns_kernel(float* dbias, const T* dout, int64_t n, int64_t c) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < c;
       j += int64_t{gridDim.x} * blockDim.x) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += ld(dout[i * c + j]);
    dbias[j] = static_cast<float>(s);
  }
}

void column_sum_of(float* out, const float* inp, int64_t n, int64_t c, void* ws, cudaStream_t s) {
  column_sum(out, inp, n, c, ws, s);
}
void column_sum_of(float* out, const __nv_bfloat16* inp, int64_t n, int64_t c, void* ws,
                   cudaStream_t s) {
  column_sum(out, reinterpret_cast<const uint16_t*>(inp), n, c, ws, s);
}

// Four sums per (channel, slice): x, x^2, dy, dy * x.
template <typename T>
__global__ void bn_gamma_partial_kernel(double* partial, const T* x, const T* dy, int64_t n,
                                        int64_t c, int64_t plane, int64_t splits) {
  __shared__ double scratch[32];
  const int64_t ch = blockIdx.x / splits, s = blockIdx.x % splits, m = n * plane;
  const int64_t len = (m + splits - 1) / splits, begin = s * len;
  const int64_t end = begin + len < m ? begin + len : m;
  double sx = 0.0, sxx = 0.0, sdy = 0.0, sdyx = 0.0;
  for_slice(ch, c, plane, begin, end, [&](int64_t o) {
    const double xv = ld(x[o]), g = ld(dy[o]);
    sx += xv;
    sxx += xv * xv;
    sdy += g;
    sdyx += g * xv;
  });
  double* out = partial + 4 * blockIdx.x;
  sx = block_sum(sx, scratch);
  if (threadIdx.x == 0) out[0] = sx;
  sxx = block_sum(sxx, scratch);
  if (threadIdx.x == 0) out[1] = sxx;
  sdy = block_sum(sdy, scratch);
  if (threadIdx.x == 0) out[2] = sdy;
  sdyx = block_sum(sdyx, scratch);
  if (threadIdx.x == 0) out[3] = sdyx;
}

// dgamma = sum dy * (x - mean) * invstd = invstd * (S(dy x) - mean S(dy)), with the biased
// batch variance, as the forward normalised.
__global__ void bn_gamma_final_kernel(float* dgamma, const double* partial, int64_t c,
                                      int64_t splits, double count, double eps) {
  for (int64_t ch = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; ch < c;
       ch += int64_t{gridDim.x} * blockDim.x) {
    double sx = 0.0, sxx = 0.0, sdy = 0.0, sdyx = 0.0;
    for (int64_t k = 0; k < splits; ++k) {
      const double* p = partial + 4 * (ch * splits + k);
      sx += p[0], sxx += p[1], sdy += p[2], sdyx += p[3];
    }
    const double mean = sx / count;
    const double var = fmax(sxx / count - mean * mean, 0.0);
    dgamma[ch] = static_cast<float>((sdyx - mean * sdy) / sqrt(var + eps));
  }
}

template <typename T>
void bias_grad_reduce_impl(float* dbias, const T* dout, int64_t n, int64_t c, int64_t plane,
                           void* workspace, cudaStream_t stream) {
  if (c <= 0) return;
  if (n <= 0 || plane <= 0) {
    fill(dbias, 0.0f, c, stream);
    return;
  }
  if (plane == 1 && n <= kDirectRows) {
    bias_grad_columns_kernel<T><<<grid_for(c, kThreads), kThreads, 0, stream>>>(dbias, dout, n,
                                                                               c);
    REMAT_CUDA_LAUNCH_CHECK();
    return;
  }
  REMAT_CHECK(workspace, "bias_grad_reduce: needs bias_grad_workspace_bytes of workspace");
  if (plane == 1) return column_sum_of(dbias, dout, n, c, workspace, stream);
  const int64_t splits = splits_for(n, c, plane);
  auto* partial = static_cast<double*>(workspace);
  bias_grad_partial_kernel<T><<<static_cast<unsigned>(c * splits), kThreads, 0, stream>>>(
      partial, dout, n, c, plane, splits);
  REMAT_CUDA_LAUNCH_CHECK();
  bias_grad_final_kernel<<<grid_for(c, kThreads), kThreads, 0, stream>>>(dbias, partial, c,
                                                                        splits);
  REMAT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void batchnorm_grad_gamma_impl(float* dgamma, const T* x, const T* dy, int64_t n, int64_t c,
                               int64_t plane, double eps, void* workspace, cudaStream_t stream) {
  if (c <= 0) return;
  if (n <= 0 || plane <= 0) {
    fill(dgamma, 0.0f, c, stream);
    return;
  }
  REMAT_CHECK(workspace, "batchnorm_grad_gamma: needs its workspace");
  const int64_t splits = splits_for(n, c, plane);
  REMAT_CHECK(c * splits < (int64_t{1} << 31), "batchnorm_grad_gamma: too many channels");
  auto* partial = static_cast<double*>(workspace);
  bn_gamma_partial_kernel<T><<<static_cast<unsigned>(c * splits), kThreads, 0, stream>>>(
      partial, x, dy, n, c, plane, splits);
  REMAT_CUDA_LAUNCH_CHECK();
  bn_gamma_final_kernel<<<grid_for(c, kThreads), kThreads, 0, stream>>>(
      dgamma, partial, c, splits, static_cast<double>(n * plane), eps);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace

int64_t bias_grad_workspace_bytes(int64_t n, int64_t c, int64_t plane) {
  if (n <= 0 || c <= 0 || plane <= 0) return 0;
  if (plane == 1) return n <= kDirectRows ? 0 : column_sum_workspace_bytes(n, c);
  return c * splits_for(n, c, plane) * static_cast<int64_t>(sizeof(double));
}

void bias_grad_reduce(float* dbias, const float* dout, int64_t n, int64_t c, int64_t plane,
                      void* workspace, cudaStream_t stream) {
  bias_grad_reduce_impl(dbias, dout, n, c, plane, workspace, stream);
}
void bias_grad_reduce(float* dbias, const uint16_t* dout, int64_t n, int64_t c, int64_t plane,
                      void* workspace, cudaStream_t stream) {
  bias_grad_reduce_impl(dbias, bf16_ptr(dout), n, c, plane, workspace, stream);
}

int64_t batchnorm_grad_gamma_workspace_bytes(int64_t n, int64_t c, int64_t plane) {
  if (n <= 0 || c <= 0 || plane <= 0) return 0;
  return 4 * c * splits_for(n, c, plane) * static_cast<int64_t>(sizeof(double));
}

void batchnorm_grad_gamma(float* dgamma, const float* x, const float* dy, int64_t n, int64_t c,
                          int64_t plane, double eps, void* workspace, cudaStream_t stream) {
  batchnorm_grad_gamma_impl(dgamma, x, dy, n, c, plane, eps, workspace, stream);
}
void batchnorm_grad_gamma(float* dgamma, const uint16_t* x, const uint16_t* dy, int64_t n,
                          int64_t c, int64_t plane, double eps, void* workspace,
                          cudaStream_t stream) {
  batchnorm_grad_gamma_impl(dgamma, bf16_ptr(x), bf16_ptr(dy), n, c, plane, eps, workspace,
                            stream);
}

}  // namespace remat
