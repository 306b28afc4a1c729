// channel_scale on the device: every value of an H x W plane times its plane's scale, and the
// scale's gradient, a sum over each plane. Planes are laid out as global_avgpool's (reduce.cu):
// `pixel` 1 for NCHW, C for NHWC (plane n C + c, its values C apart). The product is one FP32
// rounding as on the CPU (ops/channel_scale.cpp); the sums run in double in another order. The
// scale (and its gradient) may be F32 with bf16 data: mul_table's table (ops/mul_table.cpp).
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

constexpr int kReduceThreads = 256;  // a warp per plane, 8 planes a block

// Element i of a tensor of planes: its plane.
__device__ __forceinline__ int64_t plane_of(int64_t i, int64_t hw, int64_t pixel) {
  return (i / (hw * pixel)) * pixel + i % pixel;
}

template <typename T, typename S>
__global__ void channel_scale_kernel(T* out, const T* x, const S* s, int64_t n, int64_t hw,
                                     int64_t pixel) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = st<T>(__fmul_rn(ld(x[i]), ld(s[plane_of(i, hw, pixel)])));
}

// A warp per NCHW plane (its values contiguous), as global_avgpool_forward_kernel.
template <typename S, typename T>
__global__ void channel_scale_grad_kernel(S* ds, const T* dy, const T* x, int64_t planes,
                                          int64_t hw) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x >> 5);
  for (int64_t p = blockIdx.x * int64_t{blockDim.x >> 5} + (threadIdx.x >> 5); p < planes;
       p += warps) {
    const T* a = dy + p * hw;
    const T* b = x + p * hw;
    double sum = 0.0;
    for (int64_t i = lane; i < hw; i += 32)
      sum += static_cast<double>(ld(a[i])) * static_cast<double>(ld(b[i]));
    sum = warp_sum(sum);
    if (lane == 0) ds[p] = st<S>(static_cast<float>(sum));
  }
}

// A thread per NHWC plane: consecutive threads read consecutive channels of a pixel.
template <typename S, typename T>
__global__ void channel_scale_grad_nhwc_kernel(S* ds, const T* dy, const T* x, int64_t planes,
                                               int64_t hw, int64_t pixel) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < planes;
       p += int64_t{gridDim.x} * blockDim.x) {
    const int64_t start = (p / pixel) * hw * pixel + p % pixel;
    double sum = 0.0;
    for (int64_t i = 0; i < hw; ++i)
      sum += static_cast<double>(ld(dy[start + i * pixel])) *
             static_cast<double>(ld(x[start + i * pixel]));
    ds[p] = st<S>(static_cast<float>(sum));
  }
}

template <typename T, typename S>
void forward_impl(T* out, const T* x, const S* s, int64_t planes, int64_t hw, int64_t pixel,
                  cudaStream_t stream) {
  const int64_t n = planes * hw;
  if (n <= 0) return;
  channel_scale_kernel<T, S><<<grid_for(n), kBlockSize, 0, stream>>>(out, x, s, n, hw, pixel);
  REMAT_CUDA_LAUNCH_CHECK();
}

template <typename S, typename T>
void grad_impl(S* ds, const T* dy, const T* x, int64_t planes, int64_t hw, int64_t pixel,
               cudaStream_t stream) {
  if (planes <= 0) return;
  if (pixel > 1)
    channel_scale_grad_nhwc_kernel<S, T>
        <<<grid_for(planes), kBlockSize, 0, stream>>>(ds, dy, x, planes, hw, pixel);
  else
    channel_scale_grad_kernel<S, T>
        <<<grid_for(planes, kReduceThreads / 32), kReduceThreads, 0, stream>>>(ds, dy, x, planes,
                                                                               hw);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void channel_scale_forward(float* out, const float* x, const float* s, int64_t planes, int64_t hw,
                           int64_t pixel, cudaStream_t stream) {
  forward_impl(out, x, s, planes, hw, pixel, stream);
}
void channel_scale_forward(uint16_t* out, const uint16_t* x, const uint16_t* s, int64_t planes,
                           int64_t hw, int64_t pixel, cudaStream_t stream) {
  forward_impl(bf16_ptr(out), bf16_ptr(x), bf16_ptr(s), planes, hw, pixel, stream);
}
void channel_scale_backward(float* ds, const float* dy, const float* x, int64_t planes,
                            int64_t hw, int64_t pixel, cudaStream_t stream) {
  grad_impl(ds, dy, x, planes, hw, pixel, stream);
}
void channel_scale_backward(uint16_t* ds, const uint16_t* dy, const uint16_t* x, int64_t planes,
                            int64_t hw, int64_t pixel, cudaStream_t stream) {
  grad_impl(bf16_ptr(ds), bf16_ptr(dy), bf16_ptr(x), planes, hw, pixel, stream);
}
void channel_scale_forward(uint16_t* out, const uint16_t* x, const float* s, int64_t planes,
                           int64_t hw, int64_t pixel, cudaStream_t stream) {
  forward_impl(bf16_ptr(out), bf16_ptr(x), s, planes, hw, pixel, stream);
}
void channel_scale_backward(float* ds, const uint16_t* dy, const uint16_t* x, int64_t planes,
                            int64_t hw, int64_t pixel, cudaStream_t stream) {
  grad_impl(ds, bf16_ptr(dy), bf16_ptr(x), planes, hw, pixel, stream);
}

}  // namespace remat
