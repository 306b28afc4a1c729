// The window copy behind zeropad and crop (ops/pad_crop.cpp) and behind conv2d's asymmetric
// padding on the GPU (ops/conv2d_pad_cuda.cpp): out[p, h, w] = inp[p, h + dh, w + dw], 0 where
// that lies outside inp. Values move unchanged (F32 or bf16): exact, deterministic.
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

template <typename T>
__global__ void window_copy_kernel(T* out, const T* inp, int64_t planes, int64_t H, int64_t W,
                                   int64_t Ho, int64_t Wo, int64_t dh, int64_t dw) {
  const int64_t total = planes * Ho * Wo;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t w = i % Wo, h = (i / Wo) % Ho, p = i / (Wo * Ho);
    const int64_t hi = h + dh, wi = w + dw;
    out[i] = (hi >= 0 && hi < H && wi >= 0 && wi < W) ? inp[(p * H + hi) * W + wi] : st<T>(0.0f);
  }
}

template <typename T>
void launch(T* out, const T* inp, int64_t planes, int64_t H, int64_t W, int64_t Ho, int64_t Wo,
            int64_t dh, int64_t dw, cudaStream_t stream) {
  const int64_t total = planes * Ho * Wo;
  if (total <= 0) return;
  window_copy_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(out, inp, planes, H, W, Ho, Wo,
                                                                  dh, dw);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void window_copy(float* out, const float* inp, int64_t planes, int64_t H, int64_t W, int64_t Ho,
                 int64_t Wo, int64_t dh, int64_t dw, cudaStream_t stream) {
  launch(out, inp, planes, H, W, Ho, Wo, dh, dw, stream);
}
void window_copy(uint16_t* out, const uint16_t* inp, int64_t planes, int64_t H, int64_t W,
                 int64_t Ho, int64_t Wo, int64_t dh, int64_t dw, cudaStream_t stream) {
  launch(bf16_ptr(out), bf16_ptr(inp), planes, H, W, Ho, Wo, dh, dw, stream);
}

}  // namespace remat
