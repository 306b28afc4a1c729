// Deterministic reductions: global average pooling with its gradient (the per-channel ones are
// in channel_reduce.cu). Sums are in double in an order fixed by the shapes
// (Note [kernel determinism]); no atomics. Templated on the storage type T of the activations
// (float or __nv_bfloat16, kernels/common.cuh): loads widen, the math is the F32 kernel's, and a
// bf16 output is rounded from the FP32 result (Note [bf16 execution]).
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

constexpr int kReduceThreads = 256;

// A warp per plane: out[p] = mean of its hw values. Plane p = (n, c) of C = `pixel` channels
// starts at (p / pixel) * hw * pixel + p % pixel, its values `pixel` apart: NCHW is pixel 1,
// NHWC pixel C.
template <typename T>
__global__ void global_avgpool_forward_kernel(T* out, const T* inp, int64_t planes, int64_t hw,
                                              int64_t pixel) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x >> 5);
  for (int64_t p = blockIdx.x * int64_t{blockDim.x >> 5} + (threadIdx.x >> 5); p < planes;
       p += warps) {
    const T* x = inp + (p / pixel) * hw * pixel + p % pixel;
    double s = 0.0;
    for (int64_t i = lane; i < hw; i += 32) s += ld(x[i * pixel]);
    s = warp_sum(s);
    if (lane == 0) out[p] = st<T>(static_cast<float>(s / static_cast<double>(hw)));
  }
}

// A thread per plane for NHWC (pixel C > 1): consecutive threads take consecutive channels, so
// each of the hw loads of a warp is one coalesced row of C values (a warp per plane would read
// 32 values C apart per load); the sum runs over the pixels in order.
template <typename T>
__global__ void global_avgpool_forward_nhwc_kernel(T* out, const T* inp, int64_t planes, int64_t hw,
                                                   int64_t pixel) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < planes;
       p += int64_t{gridDim.x} * blockDim.x) {
    const T* x = inp + (p / pixel) * hw * pixel + p % pixel;
    double s = 0.0;
    for (int64_t i = 0; i < hw; ++i) s += ld(x[i * pixel]);
    out[p] = st<T>(static_cast<float>(s / static_cast<double>(hw)));
  }
}

template <typename T>
__global__ void global_avgpool_backward_kernel(T* dinp, const T* dout, int64_t planes,
                                               int64_t hw, int64_t pixel) {
  const float div = static_cast<float>(hw);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < planes * hw;
       i += int64_t{gridDim.x} * blockDim.x)
    dinp[i] = st<T>(__fdiv_rn(ld(dout[(i / (hw * pixel)) * pixel + i % pixel]), div));
}

template <typename T>
void global_avgpool_forward_impl(T* out, const T* inp, int64_t planes, int64_t hw,
                                 int64_t pixel, cudaStream_t stream) {
  REMAT_CHECK(hw > 0, "global_avgpool_forward: empty plane");
  if (planes <= 0) return;
  if (pixel > 1)
    global_avgpool_forward_nhwc_kernel<T>
        <<<grid_for(planes), kBlockSize, 0, stream>>>(out, inp, planes, hw, pixel);
  else
    global_avgpool_forward_kernel<T>
        <<<grid_for(planes, kReduceThreads / 32), kReduceThreads, 0, stream>>>(out, inp, planes, hw,
                                                                               pixel);
  REMAT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void global_avgpool_backward_impl(T* dinp, const T* dout, int64_t planes, int64_t hw,
                                  int64_t pixel, cudaStream_t stream) {
  if (planes <= 0 || hw <= 0) return;
  global_avgpool_backward_kernel<T><<<grid_for(planes * hw), kBlockSize, 0, stream>>>(
      dinp, dout, planes, hw, pixel);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void global_avgpool_forward(float* out, const float* inp, int64_t planes, int64_t hw,
                            int64_t pixel, cudaStream_t stream) {
  global_avgpool_forward_impl(out, inp, planes, hw, pixel, stream);
}
void global_avgpool_forward(uint16_t* out, const uint16_t* inp, int64_t planes, int64_t hw,
                            int64_t pixel, cudaStream_t stream) {
  global_avgpool_forward_impl(bf16_ptr(out), bf16_ptr(inp), planes, hw, pixel, stream);
}

void global_avgpool_backward(float* dinp, const float* dout, int64_t planes, int64_t hw,
                             int64_t pixel, cudaStream_t stream) {
  global_avgpool_backward_impl(dinp, dout, planes, hw, pixel, stream);
}
void global_avgpool_backward(uint16_t* dinp, const uint16_t* dout, int64_t planes, int64_t hw,
                             int64_t pixel, cudaStream_t stream) {
  global_avgpool_backward_impl(bf16_ptr(dinp), bf16_ptr(dout), planes, hw, pixel, stream);
}

}  // namespace remat
