// Batch normalisation in train mode over channels-last tensors, seen as [rows, c] with rows =
// N H W (Note [channels-last layout] in models/channels_last.cpp): the forward with the batch
// statistics and the running-statistics update, the input gradient and the scale gradient, with
// the arithmetic of the NCHW kernels (batchnorm.cu, Note [batchnorm kernels]): the same moments
// in double, the same per-channel coefficients (batchnorm_stats.cuh), the same elementwise
// expressions. Only the walks differ.
//
// Note [channels-last batch-norm kernels]
// A channel's values are a column of the [rows, c] matrix. The moments kernel gives each block
// 32 channels (threadIdx.x: consecutive channels, so a warp reads 32 consecutive values of a
// row) and one of `splits` contiguous slices of the rows; its 8 rows of threads (threadIdx.y)
// take every 8th row of the slice, and their sums are added in threadIdx.y order into the
// slice's partial sum. The slices, fixed by the shapes alone, are added in order by the final
// kernels: every sum's order is a function of the shapes, so reruns are bit-identical (Note
// [kernel determinism]).
//
// Note [channels-last elementwise walks]
// The elementwise passes take a pack of V consecutive channels of one row per load (V =
// pack_width over c, channel_slices.cuh: 8 bf16 or 4 floats where c and the pointers allow,
// else 4 or 1). Thread (x, y) of a block takes pack x of row r0 + y, with blockDim.x = c / V
// packs (up to 256; wider rows loop over their packs): a block reads one contiguous run of
// rows, a warp 32 consecutive packs, and each thread loads its V channels' coefficients once
// for all the rows it visits. The first form took one value per thread, its channel i % c (a
// 64-bit division per element) and its coefficients per element. The arithmetic per value is
// unchanged. Templated on the storage type T (float or __nv_bfloat16).
#include <algorithm>

#include "kernels/batchnorm_stats.cuh"
#include "kernels/channel_slices.cuh"
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

constexpr int kChannelsPerBlock = 32;
constexpr int kRowThreads = 8;
constexpr int64_t kMinSliceRows = 64;

// Row slices per group of 32 channels: enough blocks to fill the GPU, slices of at least
// kMinSliceRows rows.
int64_t nhwc_splits(int64_t rows, int64_t c) {
  const int64_t groups = (c + kChannelsPerBlock - 1) / kChannelsPerBlock;
  int64_t s = (kBlocksWanted + groups - 1) / groups;
  s = std::min(s, (rows + kMinSliceRows - 1) / kMinSliceRows);
  return std::max<int64_t>(s, 1);
}

// K moments (x, x^2; then dy, dy x) of each channel over slice blockIdx.y of the rows, into
// partial[K (ch splits + s) + k] (batchnorm_stats.cuh's layout).
template <int K, typename T>
__global__ void bn_nhwc_moments_kernel(double* partial, const T* x, const T* dy, int64_t rows,
                                       int64_t c, int64_t splits) {
  __shared__ double acc[K][kRowThreads][kChannelsPerBlock];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t ch = int64_t{blockIdx.x} * kChannelsPerBlock + tx, s = blockIdx.y;
  const int64_t begin = rows * s / splits, end = rows * (s + 1) / splits;
  double m[4] = {0.0, 0.0, 0.0, 0.0};
  if (ch < c) {
    for (int64_t r = begin + ty; r < end; r += kRowThreads) {
      const double xv = ld(x[r * c + ch]);
      m[0] += xv;
      m[1] += xv * xv;
      if (K == 4) {
        const double dv = ld(dy[r * c + ch]);
        m[2] += dv;
        m[3] += dv * xv;
      }
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k][ty][tx] = m[k];
  __syncthreads();
  if (ty != 0 || ch >= c) return;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    double t = 0.0;
    for (int j = 0; j < kRowThreads; ++j) t += acc[k][j][tx];
    partial[K * (ch * splits + s) + k] = t;
  }
}

template <int K, typename T>
int64_t nhwc_moments(double* partial, const T* x, const T* dy, int64_t rows, int64_t c,
                     cudaStream_t stream) {
  const int64_t splits = nhwc_splits(rows, c);
  const int64_t groups = (c + kChannelsPerBlock - 1) / kChannelsPerBlock;
  REMAT_CHECK(groups < (int64_t{1} << 31) && splits < 65536,
              "batchnorm (channels-last): " << c << " channels in " << splits << " slices");
  const dim3 grid(static_cast<unsigned>(groups), static_cast<unsigned>(splits));
  bn_nhwc_moments_kernel<K, T><<<grid, dim3(kChannelsPerBlock, kRowThreads), 0, stream>>>(
      partial, x, dy, rows, c, splits);
  REMAT_CUDA_LAUNCH_CHECK();
  return splits;
}

// y = act(x * scale + shift) (float, no contraction), as batchnorm.cu's ForwardApply.
template <typename T, int V>
__global__ void bn_nhwc_forward_apply_kernel(T* y, const T* x, const float* coef, int64_t rows,
                                             int64_t c, KernelActivation act) {
  using P = Pack<T, V>;
  for (int64_t q = threadIdx.x; q < c / V; q += blockDim.x) {
    float scale[V], shift[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      scale[i] = coef[2 * (q * V + i)];
      shift[i] = coef[2 * (q * V + i) + 1];
    }
    for (int64_t r = blockIdx.x * int64_t{blockDim.y} + threadIdx.y; r < rows;
         r += int64_t{gridDim.x} * blockDim.y) {
      const int64_t o = r * c + q * V;
      const P in = *reinterpret_cast<const P*>(x + o);
      P out;
#pragma unroll
      for (int i = 0; i < V; ++i)
        out.v[i] = st<T>(activate(__fadd_rn(__fmul_rn(ld(in.v[i]), scale[i]), shift[i]), act));
      *reinterpret_cast<P*>(y + o) = out;
    }
  }
}

// dx = A dy + B x + C in double, as batchnorm.cu's BackwardApply.
template <typename T, int V>
__global__ void bn_nhwc_backward_apply_kernel(T* dx, const T* dy, const T* x, const double* coef,
                                              int64_t rows, int64_t c) {
  using P = Pack<T, V>;
  for (int64_t q = threadIdx.x; q < c / V; q += blockDim.x) {
    double a[V], b[V], k[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      a[i] = coef[3 * (q * V + i)];
      b[i] = coef[3 * (q * V + i) + 1];
      k[i] = coef[3 * (q * V + i) + 2];
    }
    for (int64_t r = blockIdx.x * int64_t{blockDim.y} + threadIdx.y; r < rows;
         r += int64_t{gridDim.x} * blockDim.y) {
      const int64_t o = r * c + q * V;
      const P g = *reinterpret_cast<const P*>(dy + o), in = *reinterpret_cast<const P*>(x + o);
      P out;
#pragma unroll
      for (int i = 0; i < V; ++i)
        out.v[i] = st<T>(static_cast<float>(a[i] * ld(g.v[i]) + b[i] * ld(in.v[i]) + k[i]));
      *reinterpret_cast<P*>(dx + o) = out;
    }
  }
}

// The elementwise passes' block over rows of `packs` packs: x a row's packs (up to
// kBlockSize), y the rows (Note [channels-last elementwise walks]).
dim3 nhwc_apply_block(int64_t packs) {
  const int64_t bx = std::min<int64_t>(packs, kBlockSize);
  return dim3(static_cast<unsigned>(bx),
              static_cast<unsigned>(std::max<int64_t>(kBlockSize / bx, 1)));
}

int64_t round_up256(int64_t b) { return (b + 255) / 256 * 256; }
int64_t partial_bytes(int k, int64_t rows, int64_t c) {
  return round_up256(k * c * nhwc_splits(rows, c) * static_cast<int64_t>(sizeof(double)));
}

template <typename T>
void forward_impl(T* y, const T* x, const float* gamma, const float* beta, float* running_mean,
                  float* running_var, int64_t rows, int64_t c, double eps, double momentum,
                  KernelActivation act, void* workspace, cudaStream_t stream) {
  if (rows * c <= 0) return;
  REMAT_CHECK(workspace, "batchnorm_nhwc_train_forward: needs its workspace");
  auto* partial = static_cast<double*>(workspace);
  auto* coef = reinterpret_cast<float*>(static_cast<char*>(workspace) + partial_bytes(2, rows, c));
  const int64_t splits =
      nhwc_moments<2>(partial, x, static_cast<const T*>(nullptr), rows, c, stream);
  bn_forward_final_kernel<<<grid_for(c), kBlockSize, 0, stream>>>(
      coef, running_mean, running_var, gamma, beta, partial, c, splits, static_cast<double>(rows),
      eps, momentum);
  REMAT_CUDA_LAUNCH_CHECK();
  with_pack_width<T>(pack_width<T>(c, y, x), [&](auto w) {
    constexpr int V = decltype(w)::value;
    const dim3 block = nhwc_apply_block(c / V);
    bn_nhwc_forward_apply_kernel<T, V>
        <<<grid_for(rows, block.y), block, 0, stream>>>(y, x, coef, rows, c, act);
    REMAT_CUDA_LAUNCH_CHECK();
  });
}

template <typename T>
void backward_input_impl(T* dx, const T* dy, const T* x, const float* gamma, int64_t rows,
                         int64_t c, double eps, void* workspace, cudaStream_t stream) {
  if (rows * c <= 0) return;
  REMAT_CHECK(workspace, "batchnorm_nhwc_train_backward_input: needs its workspace");
  auto* partial = static_cast<double*>(workspace);
  auto* coef = reinterpret_cast<double*>(static_cast<char*>(workspace) + partial_bytes(4, rows, c));
  const int64_t splits = nhwc_moments<4>(partial, x, dy, rows, c, stream);
  bn_backward_final_kernel<<<grid_for(c), kBlockSize, 0, stream>>>(
      coef, gamma, partial, c, splits, static_cast<double>(rows), eps);
  REMAT_CUDA_LAUNCH_CHECK();
  with_pack_width<T>(pack_width<T>(c, dx, dy, x), [&](auto w) {
    constexpr int V = decltype(w)::value;
    const dim3 block = nhwc_apply_block(c / V);
    bn_nhwc_backward_apply_kernel<T, V>
        <<<grid_for(rows, block.y), block, 0, stream>>>(dx, dy, x, coef, rows, c);
    REMAT_CUDA_LAUNCH_CHECK();
  });
}

template <typename T>
void grad_gamma_impl(float* dgamma, const T* x, const T* dy, int64_t rows, int64_t c, double eps,
                     void* workspace, cudaStream_t stream) {
  if (c <= 0) return;
  if (rows <= 0) {
    fill(dgamma, 0.0f, c, stream);
    return;
  }
  REMAT_CHECK(workspace, "batchnorm_nhwc_grad_gamma: needs its workspace");
  auto* partial = static_cast<double*>(workspace);
  const int64_t splits = nhwc_moments<4>(partial, x, dy, rows, c, stream);
  bn_gamma_final_kernel<<<grid_for(c), kBlockSize, 0, stream>>>(
      dgamma, partial, c, splits, static_cast<double>(rows), eps);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace

int64_t batchnorm_nhwc_train_forward_workspace_bytes(int64_t rows, int64_t c) {
  if (rows <= 0 || c <= 0) return 0;
  return partial_bytes(2, rows, c) + round_up256(2 * c * static_cast<int64_t>(sizeof(float)));
}

void batchnorm_nhwc_train_forward(float* y, const float* x, const float* gamma, const float* beta,
                                  float* running_mean, float* running_var, int64_t rows, int64_t c,
                                  double eps, double momentum, KernelActivation act,
                                  void* workspace, cudaStream_t stream) {
  forward_impl(y, x, gamma, beta, running_mean, running_var, rows, c, eps, momentum, act, workspace,
               stream);
}
void batchnorm_nhwc_train_forward(uint16_t* y, const uint16_t* x, const float* gamma,
                                  const float* beta, float* running_mean, float* running_var,
                                  int64_t rows, int64_t c, double eps, double momentum,
                                  KernelActivation act, void* workspace, cudaStream_t stream) {
  forward_impl(bf16_ptr(y), bf16_ptr(x), gamma, beta, running_mean, running_var, rows, c, eps,
               momentum, act, workspace, stream);
}

int64_t batchnorm_nhwc_train_backward_input_workspace_bytes(int64_t rows, int64_t c) {
  if (rows <= 0 || c <= 0) return 0;
  return partial_bytes(4, rows, c) + round_up256(3 * c * static_cast<int64_t>(sizeof(double)));
}

void batchnorm_nhwc_train_backward_input(float* dx, const float* dy, const float* x,
                                         const float* gamma, int64_t rows, int64_t c, double eps,
                                         void* workspace, cudaStream_t stream) {
  backward_input_impl(dx, dy, x, gamma, rows, c, eps, workspace, stream);
}
void batchnorm_nhwc_train_backward_input(uint16_t* dx, const uint16_t* dy, const uint16_t* x,
                                         const float* gamma, int64_t rows, int64_t c, double eps,
                                         void* workspace, cudaStream_t stream) {
  backward_input_impl(bf16_ptr(dx), bf16_ptr(dy), bf16_ptr(x), gamma, rows, c, eps, workspace,
                      stream);
}

int64_t batchnorm_nhwc_grad_gamma_workspace_bytes(int64_t rows, int64_t c) {
  if (rows <= 0 || c <= 0) return 0;
  return partial_bytes(4, rows, c);
}

void batchnorm_nhwc_grad_gamma(float* dgamma, const float* x, const float* dy, int64_t rows,
                               int64_t c, double eps, void* workspace, cudaStream_t stream) {
  grad_gamma_impl(dgamma, x, dy, rows, c, eps, workspace, stream);
}
void batchnorm_nhwc_grad_gamma(float* dgamma, const uint16_t* x, const uint16_t* dy, int64_t rows,
                               int64_t c, double eps, void* workspace, cudaStream_t stream) {
  grad_gamma_impl(dgamma, bf16_ptr(x), bf16_ptr(dy), rows, c, eps, workspace, stream);
}

}  // namespace remat
