// Softmax over the last dimension on the device (ops/softmax.cpp is the spec), one warp per row:
// the row maximum in float, exponentials and the sum in double, each output rounded once;
// causal rows keep entries 0 .. r % len and write 0 beyond. Templated on the storage type T of
// the activations (float or __nv_bfloat16, kernels/common.cuh): loads widen, the math is the
// F32 kernel's, and a bf16 output is rounded from the FP32 result (Note [bf16 execution]).
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

constexpr int kWarpsPerBlock = kBlockSize / 32;

template <typename T>
__global__ void softmax_forward_kernel(T* out, const T* inp, int64_t rows, int64_t len,
                                       bool causal) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * kWarpsPerBlock;
  for (int64_t r = blockIdx.x * int64_t{kWarpsPerBlock} + (threadIdx.x >> 5); r < rows; r += warps) {
    const T* x = inp + r * len;
    T* y = out + r * len;
    const int64_t w = causal ? r % len + 1 : len;
    float m = -INFINITY;
    for (int64_t j = lane; j < w; j += 32) m = fmaxf(m, ld(x[j]));
    m = warp_max(m);
    double s = 0.0;
    for (int64_t j = lane; j < w; j += 32) s += exp(static_cast<double>(ld(x[j])) - m);
    s = warp_sum(s);
    for (int64_t j = lane; j < len; j += 32)
      y[j] = st<T>(j < w ? static_cast<float>(exp(static_cast<double>(ld(x[j])) - m) / s) : 0.0f);
  }
}

template <typename T>
__global__ void softmax_backward_kernel(T* dinp, const T* dout, const T* out, int64_t rows,
                                        int64_t len, bool causal) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * kWarpsPerBlock;
  for (int64_t r = blockIdx.x * int64_t{kWarpsPerBlock} + (threadIdx.x >> 5); r < rows; r += warps) {
    const T* dy = dout + r * len;
    const T* y = out + r * len;
    T* dx = dinp + r * len;
    const int64_t w = causal ? r % len + 1 : len;
    double dot = 0.0;
    for (int64_t j = lane; j < w; j += 32) dot += static_cast<double>(ld(dy[j])) * ld(y[j]);
    dot = warp_sum(dot);
    for (int64_t j = lane; j < len; j += 32)
      dx[j] = st<T>(j < w ? static_cast<float>(ld(y[j]) * (ld(dy[j]) - dot)) : 0.0f);
  }
}

template <typename T>
void softmax_forward_impl(T* out, const T* inp, int64_t rows, int64_t len, bool causal,
                          cudaStream_t stream) {
  if (rows <= 0 || len <= 0) return;
  softmax_forward_kernel<T><<<grid_for(rows, kWarpsPerBlock), kBlockSize, 0, stream>>>(
      out, inp, rows, len, causal);
  REMAT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void softmax_backward_impl(T* dinp, const T* dout, const T* out, int64_t rows, int64_t len,
                           bool causal, cudaStream_t stream) {
  if (rows <= 0 || len <= 0) return;
  softmax_backward_kernel<T><<<grid_for(rows, kWarpsPerBlock), kBlockSize, 0, stream>>>(
      dinp, dout, out, rows, len, causal);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void softmax_forward(float* out, const float* inp, int64_t rows, int64_t len, bool causal,
                     cudaStream_t stream) {
  softmax_forward_impl(out, inp, rows, len, causal, stream);
}
void softmax_forward(uint16_t* out, const uint16_t* inp, int64_t rows, int64_t len, bool causal,
                     cudaStream_t stream) {
  softmax_forward_impl(bf16_ptr(out), bf16_ptr(inp), rows, len, causal, stream);
}

void softmax_backward(float* dinp, const float* dout, const float* out, int64_t rows,
                      int64_t len, bool causal, cudaStream_t stream) {
  softmax_backward_impl(dinp, dout, out, rows, len, causal, stream);
}
void softmax_backward(uint16_t* dinp, const uint16_t* dout, const uint16_t* out, int64_t rows,
                      int64_t len, bool causal, cudaStream_t stream) {
  softmax_backward_impl(bf16_ptr(dinp), bf16_ptr(dout), bf16_ptr(out), rows, len, causal,
                        stream);
}

}  // namespace remat
