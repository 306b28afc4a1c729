// Nearest-neighbour upsampling by an integer factor and its gradient (block sums), on
// (planes, H, W) images, planes = N * C. Templated on the storage type T (float or
// __nv_bfloat16, common.cuh): the forward moves T values unchanged, the backward sums in FP32
// and rounds each sum once (Note [bf16 execution]).
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

// One thread per output element: out[p, h, w] = inp[p, h / f, w / f].
template <typename T>
__global__ void upsample_forward_kernel(T* out, const T* inp, int64_t planes, int64_t H,
                                        int64_t W, int64_t f) {
  const int64_t Wo = W * f, Ho = H * f, total = planes * Ho * Wo;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t w = i % Wo, h = (i / Wo) % Ho, p = i / (Wo * Ho);
    out[i] = inp[(p * H + h / f) * W + w / f];
  }
}

// One thread per input element: the sum of its f x f block of dout, rows then columns, starting
// from 0 like the CPU (same additions in the same order: bit-identical).
template <typename T>
__global__ void upsample_backward_kernel(T* dinp, const T* dout, int64_t planes, int64_t H,
                                         int64_t W, int64_t f) {
  const int64_t Wo = W * f, total = planes * H * W;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t w = i % W, h = (i / W) % H, p = i / (W * H);
    const T* src = dout + (p * H * f + h * f) * Wo + w * f;
    float s = 0.0f;
    for (int64_t a = 0; a < f; ++a)
      for (int64_t b = 0; b < f; ++b) s = __fadd_rn(s, ld(src[a * Wo + b]));
    dinp[i] = st<T>(s);
  }
}

template <typename T>
void launch_forward(T* out, const T* inp, int64_t planes, int64_t H, int64_t W, int64_t factor,
                    cudaStream_t stream) {
  REMAT_CHECK(factor >= 1, "upsample_nearest_forward: factor " << factor);
  const int64_t total = planes * H * W * factor * factor;
  if (total <= 0) return;
  upsample_forward_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(out, inp, planes, H, W,
                                                                      factor);
  REMAT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void launch_backward(T* dinp, const T* dout, int64_t planes, int64_t H, int64_t W,
                     int64_t factor, cudaStream_t stream) {
  REMAT_CHECK(factor >= 1, "upsample_nearest_backward: factor " << factor);
  const int64_t total = planes * H * W;
  if (total <= 0) return;
  upsample_backward_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(dinp, dout, planes, H, W,
                                                                       factor);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void upsample_nearest_forward(float* out, const float* inp, int64_t planes, int64_t H, int64_t W,
                              int64_t factor, cudaStream_t stream) {
  launch_forward(out, inp, planes, H, W, factor, stream);
}
void upsample_nearest_forward(uint16_t* out, const uint16_t* inp, int64_t planes, int64_t H,
                              int64_t W, int64_t factor, cudaStream_t stream) {
  launch_forward(bf16_ptr(out), bf16_ptr(inp), planes, H, W, factor, stream);
}

void upsample_nearest_backward(float* dinp, const float* dout, int64_t planes, int64_t H,
                               int64_t W, int64_t factor, cudaStream_t stream) {
  launch_backward(dinp, dout, planes, H, W, factor, stream);
}
void upsample_nearest_backward(uint16_t* dinp, const uint16_t* dout, int64_t planes, int64_t H,
                               int64_t W, int64_t factor, cudaStream_t stream) {
  launch_backward(bf16_ptr(dinp), bf16_ptr(dout), planes, H, W, factor, stream);
}

}  // namespace remat
