// Layer normalization on the device (ops/layernorm.cpp is the spec): one warp per row for the
// forward and the input gradient (statistics in double, two passes), and the parameter
// gradients as deterministic column sums (Note [column sums]). Templated on the storage type T
// of the activations (x, y, dy, dx: float or __nv_bfloat16, kernels/common.cuh): loads widen,
// the math is the F32 kernel's, and a bf16 output is rounded from the FP32 result (Note [bf16
// execution]); the weight, the bias and their gradients stay float.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

constexpr int kWarpsPerBlock = kBlockSize / 32;

// Mean and 1 / sqrt(biased variance + eps) of a row, every lane gets them.
template <typename T>
__device__ __forceinline__ void row_stats(const T* x, int64_t cols, double eps, int lane,
                                          double* mean, double* rstd) {
  double s = 0.0;
  for (int64_t j = lane; j < cols; j += 32) s += ld(x[j]);
  const double m = warp_sum(s) / static_cast<double>(cols);
  double v = 0.0;
  for (int64_t j = lane; j < cols; j += 32) {
    const double d = ld(x[j]) - m;
    v += d * d;
  }
  *mean = m;
  *rstd = 1.0 / sqrt(warp_sum(v) / static_cast<double>(cols) + eps);
}

template <typename T>
__global__ void layernorm_forward_kernel(T* out, const T* inp, const float* weight,
                                         const float* bias, int64_t rows, int64_t cols,
                                         double eps) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * kWarpsPerBlock;
  for (int64_t r = blockIdx.x * int64_t{kWarpsPerBlock} + (threadIdx.x >> 5); r < rows; r += warps) {
    const T* x = inp + r * cols;
    T* y = out + r * cols;
    double mean, rstd;
    row_stats(x, cols, eps, lane, &mean, &rstd);
    for (int64_t j = lane; j < cols; j += 32) {
      const double xhat = (ld(x[j]) - mean) * rstd;
      y[j] = st<T>(static_cast<float>(weight ? xhat * weight[j] + bias[j] : xhat));
    }
  }
}

template <typename T>
__global__ void layernorm_backward_input_kernel(T* dinp, const T* dout, const T* inp,
                                                const float* weight, int64_t rows, int64_t cols,
                                                double eps) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * kWarpsPerBlock;
  for (int64_t r = blockIdx.x * int64_t{kWarpsPerBlock} + (threadIdx.x >> 5); r < rows; r += warps) {
    const T* x = inp + r * cols;
    const T* dy = dout + r * cols;
    T* dx = dinp + r * cols;
    double mean, rstd;
    row_stats(x, cols, eps, lane, &mean, &rstd);
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t j = lane; j < cols; j += 32) {
      const double g = weight ? static_cast<double>(ld(dy[j])) * weight[j] : ld(dy[j]);
      sum_g += g;
      sum_gx += g * (ld(x[j]) - mean) * rstd;
    }
    const double mg = warp_sum(sum_g) / static_cast<double>(cols);
    const double mgx = warp_sum(sum_gx) / static_cast<double>(cols);
    for (int64_t j = lane; j < cols; j += 32) {
      const double g = weight ? static_cast<double>(ld(dy[j])) * weight[j] : ld(dy[j]);
      dx[j] = st<T>(static_cast<float>(rstd * (g - mg - (ld(x[j]) - mean) * rstd * mgx)));
    }
  }
}

// Per-row mean and rstd into stats (rows, 2) doubles.
template <typename T>
__global__ void layernorm_stats_kernel(double* stats, const T* inp, int64_t rows, int64_t cols,
                                       double eps) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * kWarpsPerBlock;
  for (int64_t r = blockIdx.x * int64_t{kWarpsPerBlock} + (threadIdx.x >> 5); r < rows; r += warps) {
    double mean, rstd;
    row_stats(inp + r * cols, cols, eps, lane, &mean, &rstd);
    if (lane == 0) {
      stats[2 * r] = mean;
      stats[2 * r + 1] = rstd;
    }
  }
}

// Note [column sums]
// out[c] = sum over rows r of f(r, c) for a matrix (rows, cols), deterministic and spread over
// the GPU: rows are cut into `slices` contiguous slices, a function of the shape alone; a block
// of 32 x 8 threads takes 32 columns of one slice, thread (x, y) summing rows y, y + 8, ... of
// it in double, the 8 partial sums of a column added in y order into partial[slice, c]; a
// second kernel adds each column's slices in order. Every addition happens in an order fixed
// by the shape (Note [kernel determinism]).
constexpr int kColTile = 32, kRowThreads = 8;
constexpr int64_t kWantedBlocks = 1024, kMinSliceRows = 64;

int64_t slices_for(int64_t rows, int64_t cols) {
  const int64_t tiles = (cols + kColTile - 1) / kColTile;
  int64_t s = std::max<int64_t>(1, kWantedBlocks / tiles);
  s = std::min(s, (rows + kMinSliceRows - 1) / kMinSliceRows);
  return std::max<int64_t>(s, 1);
}

// f(r, c): the value summed. Identity for the bias, dy * xhat for layer norm's weight.
template <typename T>
struct PlainValue {
  const T* inp;
  int64_t cols;
  __device__ double operator()(int64_t r, int64_t c) const { return ld(inp[r * cols + c]); }
};
template <typename T>
struct NormWeightValue {
  const T* dout;
  const T* inp;
  const double* stats;  // (rows, 2): mean, rstd
  int64_t cols;
  __device__ double operator()(int64_t r, int64_t c) const {
    const int64_t e = r * cols + c;
    return ld(dout[e]) * ((ld(inp[e]) - stats[2 * r]) * stats[2 * r + 1]);
  }
};

template <typename F>
__global__ void column_partial_kernel(double* partial, F f, int64_t rows, int64_t cols,
                                      int64_t slices) {
  __shared__ double sums[kRowThreads][kColTile];
  const int64_t slice = blockIdx.y, c = blockIdx.x * int64_t{kColTile} + threadIdx.x;
  const int64_t len = (rows + slices - 1) / slices, begin = slice * len;
  const int64_t end = begin + len < rows ? begin + len : rows;
  double s = 0.0;
  if (c < cols)
    for (int64_t r = begin + threadIdx.y; r < end; r += kRowThreads) s += f(r, c);
  sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    double t = 0.0;
    for (int y = 0; y < kRowThreads; ++y) t += sums[y][threadIdx.x];
    partial[slice * cols + c] = t;
  }
}

__global__ void column_finish_kernel(float* out, const double* partial, int64_t cols,
                                     int64_t slices) {
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < cols;
       c += int64_t{gridDim.x} * blockDim.x) {
    double t = 0.0;
    for (int64_t s = 0; s < slices; ++s) t += partial[s * cols + c];
    out[c] = static_cast<float>(t);
  }
}

template <typename F>
void column_sums(float* out, F f, int64_t rows, int64_t cols, double* partial,
                 cudaStream_t stream) {
  const int64_t slices = slices_for(rows, cols);
  REMAT_CHECK(slices <= 65535, "column sums: " << slices << " slices");
  const dim3 grid(static_cast<unsigned>((cols + kColTile - 1) / kColTile), static_cast<unsigned>(slices));
  column_partial_kernel<<<grid, dim3(kColTile, kRowThreads), 0, stream>>>(partial, f, rows, cols,
                                                                          slices);
  REMAT_CUDA_LAUNCH_CHECK();
  column_finish_kernel<<<grid_for(cols), kBlockSize, 0, stream>>>(out, partial, cols, slices);
  REMAT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void layernorm_forward_impl(T* out, const T* inp, const float* weight, const float* bias,
                            int64_t rows, int64_t cols, double eps, cudaStream_t stream) {
  if (rows <= 0) return;
  layernorm_forward_kernel<T><<<grid_for(rows, kWarpsPerBlock), kBlockSize, 0, stream>>>(
      out, inp, weight, bias, rows, cols, eps);
  REMAT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void layernorm_backward_input_impl(T* dinp, const T* dout, const T* inp, const float* weight,
                                   int64_t rows, int64_t cols, double eps, cudaStream_t stream) {
  if (rows <= 0) return;
  layernorm_backward_input_kernel<T><<<grid_for(rows, kWarpsPerBlock), kBlockSize, 0, stream>>>(
      dinp, dout, inp, weight, rows, cols, eps);
  REMAT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void column_sum_impl(float* out, const T* inp, int64_t rows, int64_t cols, void* workspace,
                     cudaStream_t stream) {
  if (cols <= 0) return;
  column_sums(out, PlainValue<T>{inp, cols}, rows, cols, static_cast<double*>(workspace), stream);
}

template <typename T>
void layernorm_grad_weight_impl(float* dweight, const T* dout, const T* inp, int64_t rows,
                                int64_t cols, double eps, void* workspace, cudaStream_t stream) {
  if (cols <= 0) return;
  auto* stats = static_cast<double*>(workspace);
  double* partial = stats + 2 * rows;
  if (rows > 0) {
    layernorm_stats_kernel<T><<<grid_for(rows, kWarpsPerBlock), kBlockSize, 0, stream>>>(
        stats, inp, rows, cols, eps);
    REMAT_CUDA_LAUNCH_CHECK();
  }
  column_sums(dweight, NormWeightValue<T>{dout, inp, stats, cols}, rows, cols, partial, stream);
}

}  // namespace

void layernorm_forward(float* out, const float* inp, const float* weight, const float* bias,
                       int64_t rows, int64_t cols, double eps, cudaStream_t stream) {
  layernorm_forward_impl(out, inp, weight, bias, rows, cols, eps, stream);
}
void layernorm_forward(uint16_t* out, const uint16_t* inp, const float* weight, const float* bias,
                       int64_t rows, int64_t cols, double eps, cudaStream_t stream) {
  layernorm_forward_impl(bf16_ptr(out), bf16_ptr(inp), weight, bias, rows, cols, eps, stream);
}

void layernorm_backward_input(float* dinp, const float* dout, const float* inp,
                              const float* weight, int64_t rows, int64_t cols, double eps,
                              cudaStream_t stream) {
  layernorm_backward_input_impl(dinp, dout, inp, weight, rows, cols, eps, stream);
}
void layernorm_backward_input(uint16_t* dinp, const uint16_t* dout, const uint16_t* inp,
                              const float* weight, int64_t rows, int64_t cols, double eps,
                              cudaStream_t stream) {
  layernorm_backward_input_impl(bf16_ptr(dinp), bf16_ptr(dout), bf16_ptr(inp), weight, rows, cols,
                                eps, stream);
}

int64_t column_sum_workspace_bytes(int64_t rows, int64_t cols) {
  return slices_for(rows, cols) * cols * static_cast<int64_t>(sizeof(double));
}

void column_sum(float* out, const float* inp, int64_t rows, int64_t cols, void* workspace,
                cudaStream_t stream) {
  column_sum_impl(out, inp, rows, cols, workspace, stream);
}
void column_sum(float* out, const uint16_t* inp, int64_t rows, int64_t cols, void* workspace,
                cudaStream_t stream) {
  column_sum_impl(out, bf16_ptr(inp), rows, cols, workspace, stream);
}

int64_t layernorm_grad_weight_workspace_bytes(int64_t rows, int64_t cols) {
  return 2 * rows * static_cast<int64_t>(sizeof(double)) + column_sum_workspace_bytes(rows, cols);
}

void layernorm_grad_weight(float* dweight, const float* dout, const float* inp, int64_t rows,
                           int64_t cols, double eps, void* workspace, cudaStream_t stream) {
  layernorm_grad_weight_impl(dweight, dout, inp, rows, cols, eps, workspace, stream);
}
void layernorm_grad_weight(float* dweight, const uint16_t* dout, const uint16_t* inp,
                           int64_t rows, int64_t cols, double eps, void* workspace,
                           cudaStream_t stream) {
  layernorm_grad_weight_impl(dweight, bf16_ptr(dout), bf16_ptr(inp), rows, cols, eps, workspace,
                             stream);
}

}  // namespace remat
