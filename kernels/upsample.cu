// Nearest-neighbour upsampling by an integer factor and its gradient (block sums), and bilinear
// upsampling by integer factors and its gradient (kernels/bilinear.h), on (planes, H, W) images,
// planes = N * C, NCHW or channels-last (`pixel` = C: common.cuh's pixel_at). Templated on the
// storage type T (float or __nv_bfloat16, common.cuh): the forward moves T values unchanged,
// the backward sums in FP32 and rounds each sum once (Note [bf16 execution]).
#include "kernels/bilinear.h"
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

// One thread per output element: out[p, h, w] = inp[p, h / fh, w / fw].
template <typename T>
__global__ void upsample_forward_kernel(T* out, const T* inp, int64_t planes, int64_t H,
                                        int64_t W, int64_t fh, int64_t fw, int64_t pixel) {
  const int64_t Wo = W * fw, Ho = H * fh, total = planes * Ho * Wo;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const PixelAt o = pixel_at(i, Ho, Wo, pixel);
    out[i] = inp[plane_start(o, H, W, pixel) + ((o.row / fh) * W + o.col / fw) * pixel];
  }
}

// One thread per input element: the sum of its fh x fw block of dout, rows then columns,
// starting from 0 like the CPU (same additions in the same order: bit-identical).
template <typename T>
__global__ void upsample_backward_kernel(T* dinp, const T* dout, int64_t planes, int64_t H,
                                         int64_t W, int64_t fh, int64_t fw, int64_t pixel) {
  const int64_t Ho = H * fh, Wo = W * fw, total = planes * H * W;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const PixelAt x = pixel_at(i, H, W, pixel);
    const T* src = dout + plane_start(x, Ho, Wo, pixel) + (x.row * fh * Wo + x.col * fw) * pixel;
    float s = 0.0f;
    for (int64_t a = 0; a < fh; ++a)
      for (int64_t b = 0; b < fw; ++b) s = __fadd_rn(s, ld(src[(a * Wo + b) * pixel]));
    dinp[i] = st<T>(s);
  }
}

template <typename T>
void launch_forward(T* out, const T* inp, int64_t planes, int64_t H, int64_t W, int64_t fh,
                    int64_t fw, int64_t pixel, cudaStream_t stream) {
  REMAT_CHECK(fh >= 1 && fw >= 1, "upsample_nearest_forward: factor " << fh << "x" << fw);
  const int64_t total = planes * H * W * fh * fw;
  if (total <= 0) return;
  upsample_forward_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(out, inp, planes, H, W,
                                                                      fh, fw, pixel);
  REMAT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void launch_backward(T* dinp, const T* dout, int64_t planes, int64_t H, int64_t W, int64_t fh,
                     int64_t fw, int64_t pixel, cudaStream_t stream) {
  REMAT_CHECK(fh >= 1 && fw >= 1, "upsample_nearest_backward: factor " << fh << "x" << fw);
  const int64_t total = planes * H * W;
  if (total <= 0) return;
  upsample_backward_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(dinp, dout, planes, H, W,
                                                                       fh, fw, pixel);
  REMAT_CUDA_LAUNCH_CHECK();
}

// Loads pixel i of a plane as a float (kernels/bilinear.h's accessor), its pixels `pixel` apart.
template <typename T>
struct PlaneLoad {
  const T* p;
  int64_t pixel;
  __device__ float operator()(int64_t i) const { return ld(p[i * pixel]); }
};

// One thread per output element (Note [bilinear arithmetic]).
template <typename T>
__global__ void bilinear_forward_kernel(T* out, const T* inp, int64_t planes, int64_t H,
                                        int64_t W, int64_t fh, int64_t fw, int64_t pixel) {
  const int64_t Ho = H * fh, Wo = W * fw, total = planes * Ho * Wo;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const PixelAt o = pixel_at(i, Ho, Wo, pixel);
    const PlaneLoad<T> x{inp + plane_start(o, H, W, pixel), pixel};
    out[i] = st<T>(bilinear_value(x, o.row, o.col, H, W, fh, fw));
  }
}

// One thread per input element: a gather over the outputs that tap it (no atomics).
template <typename T>
__global__ void bilinear_backward_kernel(T* dinp, const T* dout, int64_t planes, int64_t H,
                                         int64_t W, int64_t fh, int64_t fw, int64_t pixel) {
  const int64_t total = planes * H * W;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const PixelAt x = pixel_at(i, H, W, pixel);
    const PlaneLoad<T> dy{dout + plane_start(x, H * fh, W * fw, pixel), pixel};
    dinp[i] = st<T>(bilinear_grad(dy, x.row, x.col, H, W, fh, fw));
  }
}

template <typename T>
void launch_bilinear(T* out, const T* inp, int64_t planes, int64_t H, int64_t W, int64_t fh,
                     int64_t fw, int64_t pixel, bool backward, cudaStream_t stream) {
  REMAT_CHECK(fh >= 1 && fw >= 1, "upsample_bilinear: factor " << fh << "x" << fw);
  const int64_t total = planes * H * W * (backward ? 1 : fh * fw);
  if (total <= 0) return;
  if (backward)
    bilinear_backward_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(out, inp, planes, H, W,
                                                                         fh, fw, pixel);
  else
    bilinear_forward_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(out, inp, planes, H, W,
                                                                        fh, fw, pixel);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void upsample_bilinear_forward(float* out, const float* inp, int64_t planes, int64_t H, int64_t W,
                               int64_t fh, int64_t fw, int64_t pixel,
                               cudaStream_t stream) {
  launch_bilinear(out, inp, planes, H, W, fh, fw, pixel, false, stream);
}
void upsample_bilinear_forward(uint16_t* out, const uint16_t* inp, int64_t planes, int64_t H,
                               int64_t W, int64_t fh, int64_t fw, int64_t pixel,
                               cudaStream_t stream) {
  launch_bilinear(bf16_ptr(out), bf16_ptr(inp), planes, H, W, fh, fw, pixel, false, stream);
}
void upsample_bilinear_backward(float* dinp, const float* dout, int64_t planes, int64_t H,
                                int64_t W, int64_t fh, int64_t fw, int64_t pixel,
                                cudaStream_t stream) {
  launch_bilinear(dinp, dout, planes, H, W, fh, fw, pixel, true, stream);
}
void upsample_bilinear_backward(uint16_t* dinp, const uint16_t* dout, int64_t planes, int64_t H,
                                int64_t W, int64_t fh, int64_t fw, int64_t pixel,
                                cudaStream_t stream) {
  launch_bilinear(bf16_ptr(dinp), bf16_ptr(dout), planes, H, W, fh, fw, pixel, true, stream);
}

void upsample_nearest_forward(float* out, const float* inp, int64_t planes, int64_t H, int64_t W,
                              int64_t fh, int64_t fw, int64_t pixel,
                              cudaStream_t stream) {
  launch_forward(out, inp, planes, H, W, fh, fw, pixel, stream);
}
void upsample_nearest_forward(uint16_t* out, const uint16_t* inp, int64_t planes, int64_t H,
                              int64_t W, int64_t fh, int64_t fw, int64_t pixel,
                              cudaStream_t stream) {
  launch_forward(bf16_ptr(out), bf16_ptr(inp), planes, H, W, fh, fw, pixel, stream);
}

void upsample_nearest_backward(float* dinp, const float* dout, int64_t planes, int64_t H,
                               int64_t W, int64_t fh, int64_t fw, int64_t pixel,
                               cudaStream_t stream) {
  launch_backward(dinp, dout, planes, H, W, fh, fw, pixel, stream);
}
void upsample_nearest_backward(uint16_t* dinp, const uint16_t* dout, int64_t planes, int64_t H,
                               int64_t W, int64_t fh, int64_t fw, int64_t pixel,
                               cudaStream_t stream) {
  launch_backward(bf16_ptr(dinp), bf16_ptr(dout), planes, H, W, fh, fw, pixel, stream);
}

}  // namespace remat
