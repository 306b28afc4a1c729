// Bilinear upsampling by integer factors with half-pixel centres (TensorFlow 2's
// resize(method=bilinear), PyTorch's interpolate(mode='bilinear', align_corners=False)): the taps
// and weights of one output row or column, and the arithmetic of one output value and of one
// input gradient, shared by the CPU reference (ops/upsample.cpp) and the CUDA kernels
// (kernels/upsample.cu) so both round identically (Note [bilinear arithmetic]).
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define REMAT_BILINEAR_FN __host__ __device__ __forceinline__
#else
#define REMAT_BILINEAR_FN inline
#endif

namespace remat {

// Note [bilinear arithmetic]
// Output index o of a dimension upsampled by f reads source position s = (o + 0.5) / f - 0.5,
// clamped below at 0; its taps are i0 = floor(s) and i1 = min(i0 + 1, n - 1) with weights
// 1 - l and l, l = s - i0 (at the last input both taps are n - 1). s is computed in FP32 as
// (o + 0.5f) * (1.0f / f) - 0.5f. A value is (w0 (v00 c0 + v01 c1)) + (w1 (v10 c0 + v11 c1)),
// with row weights w and column weights c, every product and sum rounded separately (the
// device code uses __fmul_rn / __fadd_rn: no FMA contraction), so the CPU and the GPU agree bit
// for bit. The gradient of input (i, j) gathers, in row-major order over the outputs that tap
// it, dy * (row weight * column weight), a tap's weight being the sum of its weights when both
// taps of an output are the same index (the last row): the same order on both sides, and no
// atomics (Note [kernel determinism]).

REMAT_BILINEAR_FN float bilinear_mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
REMAT_BILINEAR_FN float bilinear_add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// The two taps of output index o along a dimension of n inputs upsampled by f.
struct BilinearTap {
  int64_t i0, i1;
  float w0, w1;
};

REMAT_BILINEAR_FN BilinearTap bilinear_tap(int64_t o, int64_t f, int64_t n) {
  float s = bilinear_add(bilinear_mul(static_cast<float>(o) + 0.5f, 1.0f / static_cast<float>(f)),
                         -0.5f);
  if (s < 0.0f) s = 0.0f;
  BilinearTap t;
  t.i0 = static_cast<int64_t>(s);
  if (t.i0 > n - 1) t.i0 = n - 1;
  t.i1 = t.i0 + 1 < n ? t.i0 + 1 : n - 1;
  t.w1 = bilinear_add(s, -static_cast<float>(t.i0));
  t.w0 = bilinear_add(1.0f, -t.w1);
  return t;
}

// The weight with which output index o reads input index i (0 when it does not tap it).
REMAT_BILINEAR_FN float bilinear_weight(const BilinearTap& t, int64_t i) {
  float w = 0.0f;
  if (t.i0 == i) w = t.w0;
  if (t.i1 == i) w = bilinear_add(w, t.w1);
  return w;
}

// The output rows (or columns) [lo, hi) that can tap input index i: the taps of o lie within
// one input of o / f.
REMAT_BILINEAR_FN void bilinear_range(int64_t i, int64_t f, int64_t out_n, int64_t* lo,
                                      int64_t* hi) {
  *lo = i >= 1 ? (i - 1) * f : 0;
  *hi = (i + 2) * f < out_n ? (i + 2) * f : out_n;
}

// Output (oh, ow) of a plane of H x W inputs upsampled by (fh, fw); x(i) loads input element i
// of the plane as a float.
template <typename Load>
REMAT_BILINEAR_FN float bilinear_value(const Load& x, int64_t oh, int64_t ow, int64_t H,
                                       int64_t W, int64_t fh, int64_t fw) {
  const BilinearTap r = bilinear_tap(oh, fh, H), c = bilinear_tap(ow, fw, W);
  const float top =
      bilinear_add(bilinear_mul(x(r.i0 * W + c.i0), c.w0), bilinear_mul(x(r.i0 * W + c.i1), c.w1));
  const float bottom =
      bilinear_add(bilinear_mul(x(r.i1 * W + c.i0), c.w0), bilinear_mul(x(r.i1 * W + c.i1), c.w1));
  return bilinear_add(bilinear_mul(r.w0, top), bilinear_mul(r.w1, bottom));
}

// The gradient of input (h, w) of a plane of H x W inputs from dy(o), the output gradient
// element o of the (H fh) x (W fw) plane.
template <typename Load>
REMAT_BILINEAR_FN float bilinear_grad(const Load& dy, int64_t h, int64_t w, int64_t H, int64_t W,
                                      int64_t fh, int64_t fw) {
  const int64_t Ho = H * fh, Wo = W * fw;
  int64_t oh0, oh1, ow0, ow1;
  bilinear_range(h, fh, Ho, &oh0, &oh1);
  bilinear_range(w, fw, Wo, &ow0, &ow1);
  float s = 0.0f;
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    const float wr = bilinear_weight(bilinear_tap(oh, fh, H), h);
    if (wr == 0.0f) continue;
    for (int64_t ow = ow0; ow < ow1; ++ow) {
      const float wc = bilinear_weight(bilinear_tap(ow, fw, W), w);
      if (wc == 0.0f) continue;
      s = bilinear_add(s, bilinear_mul(dy(oh * Wo + ow), bilinear_mul(wr, wc)));
    }
  }
  return s;
}

}  // namespace remat
