// Nearest-neighbour upsampling by an integer factor and its gradient (block sums), and bilinear
// upsampling by integer factors and its gradient (kernels/bilinear.h), on (planes, H, W) images,
// planes = N * C. Templated on the storage type T (float or
// __nv_bfloat16, common.cuh): the forward moves T values unchanged, the backward sums in FP32
// and rounds each sum once (Note [bf16 execution]).
#include "kernels/bilinear.h"
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

// One thread per output element: out[p, h, w] = inp[p, h / fh, w / fw].
template <typename T>
__global__ void upsample_forward_kernel(T* out, const T* inp, int64_t planes, int64_t H,
                                        int64_t W, int64_t fh, int64_t fw) {
  const int64_t Wo = W * fw, Ho = H * fh, total = planes * Ho * Wo;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t w = i % Wo, h = (i / Wo) % Ho, p = i / (Wo * Ho);
    out[i] = inp[(p * H + h / fh) * W + w / fw];
  }
}

// One thread per input element: the sum of its fh x fw block of dout, rows then columns,
// starting from 0 like the CPU (same additions in the same order: bit-identical).
template <typename T>
__global__ void upsample_backward_kernel(T* dinp, const T* dout, int64_t planes, int64_t H,
                                         int64_t W, int64_t fh, int64_t fw) {
  const int64_t Wo = W * fw, total = planes * H * W;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t w = i % W, h = (i / W) % H, p = i / (W * H);
    const T* src = dout + (p * H * fh + h * fh) * Wo + w * fw;
    float s = 0.0f;
    for (int64_t a = 0; a < fh; ++a)
      for (int64_t b = 0; b < fw; ++b) s = __fadd_rn(s, ld(src[a * Wo + b]));
    dinp[i] = st<T>(s);
  }
}

template <typename T>
void launch_forward(T* out, const T* inp, int64_t planes, int64_t H, int64_t W, int64_t fh,
                    int64_t fw, cudaStream_t stream) {
  REMAT_CHECK(fh >= 1 && fw >= 1, "upsample_nearest_forward: factor " << fh << "x" << fw);
  const int64_t total = planes * H * W * fh * fw;
  if (total <= 0) return;
  upsample_forward_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(out, inp, planes, H, W,
                                                                      fh, fw);
  REMAT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void launch_backward(T* dinp, const T* dout, int64_t planes, int64_t H, int64_t W, int64_t fh,
                     int64_t fw, cudaStream_t stream) {
  REMAT_CHECK(fh >= 1 && fw >= 1, "upsample_nearest_backward: factor " << fh << "x" << fw);
  const int64_t total = planes * H * W;
  if (total <= 0) return;
  upsample_backward_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(dinp, dout, planes, H, W,
                                                                       fh, fw);
  REMAT_CUDA_LAUNCH_CHECK();
}

// Loads element i of a plane as a float (kernels/bilinear.h's accessor).
template <typename T>
struct PlaneLoad {
  const T* p;
  __device__ float operator()(int64_t i) const { return ld(p[i]); }
};

// One thread per output element (Note [bilinear arithmetic]).
template <typename T>
__global__ void bilinear_forward_kernel(T* out, const T* inp, int64_t planes, int64_t H,
                                        int64_t W, int64_t fh, int64_t fw) {
  const int64_t Ho = H * fh, Wo = W * fw, total = planes * Ho * Wo;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t w = i % Wo, h = (i / Wo) % Ho, p = i / (Wo * Ho);
    out[i] = st<T>(bilinear_value(PlaneLoad<T>{inp + p * H * W}, h, w, H, W, fh, fw));
  }
}

// One thread per input element: a gather over the outputs that tap it (no atomics).
template <typename T>
__global__ void bilinear_backward_kernel(T* dinp, const T* dout, int64_t planes, int64_t H,
                                         int64_t W, int64_t fh, int64_t fw) {
  const int64_t total = planes * H * W;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t w = i % W, h = (i / W) % H, p = i / (W * H);
    dinp[i] = st<T>(bilinear_grad(PlaneLoad<T>{dout + p * H * fh * W * fw}, h, w, H, W, fh, fw));
  }
}

template <typename T>
void launch_bilinear(T* out, const T* inp, int64_t planes, int64_t H, int64_t W, int64_t fh,
                     int64_t fw, bool backward, cudaStream_t stream) {
  REMAT_CHECK(fh >= 1 && fw >= 1, "upsample_bilinear: factor " << fh << "x" << fw);
  const int64_t total = planes * H * W * (backward ? 1 : fh * fw);
  if (total <= 0) return;
  if (backward)
    bilinear_backward_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(out, inp, planes, H, W,
                                                                         fh, fw);
  else
    bilinear_forward_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(out, inp, planes, H, W,
                                                                        fh, fw);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void upsample_bilinear_forward(float* out, const float* inp, int64_t planes, int64_t H, int64_t W,
                               int64_t fh, int64_t fw, cudaStream_t stream) {
  launch_bilinear(out, inp, planes, H, W, fh, fw, false, stream);
}
void upsample_bilinear_forward(uint16_t* out, const uint16_t* inp, int64_t planes, int64_t H,
                               int64_t W, int64_t fh, int64_t fw, cudaStream_t stream) {
  launch_bilinear(bf16_ptr(out), bf16_ptr(inp), planes, H, W, fh, fw, false, stream);
}
void upsample_bilinear_backward(float* dinp, const float* dout, int64_t planes, int64_t H,
                                int64_t W, int64_t fh, int64_t fw, cudaStream_t stream) {
  launch_bilinear(dinp, dout, planes, H, W, fh, fw, true, stream);
}
void upsample_bilinear_backward(uint16_t* dinp, const uint16_t* dout, int64_t planes, int64_t H,
                                int64_t W, int64_t fh, int64_t fw, cudaStream_t stream) {
  launch_bilinear(bf16_ptr(dinp), bf16_ptr(dout), planes, H, W, fh, fw, true, stream);
}

void upsample_nearest_forward(float* out, const float* inp, int64_t planes, int64_t H, int64_t W,
                              int64_t fh, int64_t fw, cudaStream_t stream) {
  launch_forward(out, inp, planes, H, W, fh, fw, stream);
}
void upsample_nearest_forward(uint16_t* out, const uint16_t* inp, int64_t planes, int64_t H,
                              int64_t W, int64_t fh, int64_t fw, cudaStream_t stream) {
  launch_forward(bf16_ptr(out), bf16_ptr(inp), planes, H, W, fh, fw, stream);
}

void upsample_nearest_backward(float* dinp, const float* dout, int64_t planes, int64_t H,
                               int64_t W, int64_t fh, int64_t fw, cudaStream_t stream) {
  launch_backward(dinp, dout, planes, H, W, fh, fw, stream);
}
void upsample_nearest_backward(uint16_t* dinp, const uint16_t* dout, int64_t planes, int64_t H,
                               int64_t W, int64_t fh, int64_t fw, cudaStream_t stream) {
  launch_backward(bf16_ptr(dinp), bf16_ptr(dout), planes, H, W, fh, fw, stream);
}

}  // namespace remat
