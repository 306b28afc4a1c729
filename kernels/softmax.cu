// Softmax over the last dimension on the device (ops/softmax.cpp is the spec), one warp per row:
// the row maximum in float, exponentials and the sum in double, each output rounded once;
// causal rows keep entries 0 .. r % len and write 0 beyond.
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

constexpr int kWarpsPerBlock = kBlockSize / 32;

__global__ void softmax_forward_kernel(float* out, const float* inp, int64_t rows, int64_t len,
                                       bool causal) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * kWarpsPerBlock;
  for (int64_t r = blockIdx.x * int64_t{kWarpsPerBlock} + (threadIdx.x >> 5); r < rows; r += warps) {
    const float* x = inp + r * len;
    float* y = out + r * len;
    const int64_t w = causal ? r % len + 1 : len;
    float m = -INFINITY;
    for (int64_t j = lane; j < w; j += 32) m = fmaxf(m, x[j]);
    m = warp_max(m);
    double s = 0.0;
    for (int64_t j = lane; j < w; j += 32) s += exp(static_cast<double>(x[j]) - m);
    s = warp_sum(s);
    for (int64_t j = lane; j < len; j += 32)
      y[j] = j < w ? static_cast<float>(exp(static_cast<double>(x[j]) - m) / s) : 0.0f;
  }
}

__global__ void softmax_backward_kernel(float* dinp, const float* dout, const float* out,
                                        int64_t rows, int64_t len, bool causal) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * kWarpsPerBlock;
  for (int64_t r = blockIdx.x * int64_t{kWarpsPerBlock} + (threadIdx.x >> 5); r < rows; r += warps) {
    const float* dy = dout + r * len;
    const float* y = out + r * len;
    float* dx = dinp + r * len;
    const int64_t w = causal ? r % len + 1 : len;
    double dot = 0.0;
    for (int64_t j = lane; j < w; j += 32) dot += static_cast<double>(dy[j]) * y[j];
    dot = warp_sum(dot);
    for (int64_t j = lane; j < len; j += 32)
      dx[j] = j < w ? static_cast<float>(y[j] * (dy[j] - dot)) : 0.0f;
  }
}

}  // namespace

void softmax_forward(float* out, const float* inp, int64_t rows, int64_t len, bool causal,
                     cudaStream_t stream) {
  if (rows <= 0 || len <= 0) return;
  softmax_forward_kernel<<<grid_for(rows, kWarpsPerBlock), kBlockSize, 0, stream>>>(out, inp, rows,
                                                                                   len, causal);
  REMAT_CUDA_LAUNCH_CHECK();
}

void softmax_backward(float* dinp, const float* dout, const float* out, int64_t rows,
                      int64_t len, bool causal, cudaStream_t stream) {
  if (rows <= 0 || len <= 0) return;
  softmax_backward_kernel<<<grid_for(rows, kWarpsPerBlock), kBlockSize, 0, stream>>>(
      dinp, dout, out, rows, len, causal);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace remat
