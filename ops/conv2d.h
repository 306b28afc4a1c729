// What conv2d.cpp (the op: attributes, shapes, cost, gradient rule, registration) and
// conv2d_cpu.cpp (its CPU reference kernels) share: the attributes, one convolution's sizes,
// and the CPU kernels' entry points.
#pragma once

#include <cstdint>

#include "ops/data_format.h"
#include "ops/fused_activation.h"
#include "ops/im2col.h"
#include "ops/padding.h"
#include "runtime/graph/op.h"

namespace remat {

struct Conv2dAttrs : OpAttrs {
  int64_t filters = 0;                          // K
  int64_t kernel_h = 1, kernel_w = 1;           // R, S
  int64_t stride_h = 1, stride_w = 1;
  PaddingSpec pad;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
  bool bias = true;
  Activation activation = Activation::None;
  bool channels_last = false;  // data_format: x [N, H, W, C], y [N, Ho, Wo, K] (weights KCRS)
  // 1x1, stride 1, no padding: the input already is the im2col matrix (no workspace). ('same'
  // pads nothing at 1x1, stride 1.)
  bool pointwise() const {
    return kernel_h == 1 && kernel_w == 1 && stride_h == 1 && stride_w == 1 &&
           (pad.same || (pad.top == 0 && pad.bottom == 0 && pad.left == 0 && pad.right == 0));
  }
  Pads pads(int64_t h, int64_t w) const {
    return padding_resolve(pad, h, w, kernel_h, kernel_w, stride_h, stride_w, dilation_h,
                           dilation_w);
  }
};

// Sizes of one convolution: x [N, C, H, W], y [N, K, Ho, Wo] (or NHWC), per-group geometry.
struct ConvDims {
  int64_t n, c, k, cg, kg;
  ConvGeometry geo;  // one group of one image
  bool channels_last = false;
  int64_t in_image() const { return c * geo.height * geo.width; }
  int64_t out_plane() const { return geo.out_h * geo.out_w; }
  int64_t weight_group() const { return kg * geo.col_rows(); }
};

// Output size along one dimension; `pads` is the sum of both sides' padding.
int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pads, int64_t dil);
// The sizes of convolving x (stored as a.channels_last says) with `a`; the geometry's pad_h /
// pad_w are the top and left pads.
ConvDims conv_dims(const Conv2dAttrs& a, const Shape& x);

// The bias [filters] of a convolution with `weight`: zeros, the weight's fans (conv2d.cpp).
ParamSpec conv_bias_spec(int64_t filters, const ParamSpec& weight);

// The CPU reference (conv2d_cpu.cpp): y = act(conv(x, w) + b) from [x, w, (b)]; dx from
// [dz, w]; dw from [dz, x] (F32 or bf16 data); db from [dz].
void conv2d_cpu(const ExecContext& ctx);
void conv2d_grad_input_cpu(const ExecContext& ctx);
void conv2d_grad_weight_cpu(const ExecContext& ctx);
void conv2d_grad_bias_cpu(const ExecContext& ctx);
// One image of the kernels above (NCHW, FP32; `col` the im2col buffer): y = conv(x, w) (no
// bias), y += b, dx = conv_transpose(dz, w), and one group's dw (+)= dz_g * im2col(x_g)^T
// (overwriting when `first`).
void conv2d_image_cpu(const Conv2dAttrs& a, const ConvDims& d, const float* x, const float* w,
                      float* y, float* col);
void conv2d_bias_image_cpu(const ConvDims& d, const float* b, float* y);
void conv2d_grad_input_image_cpu(const Conv2dAttrs& a, const ConvDims& d, const float* dz,
                                 const float* w, float* dx, float* col);
void conv2d_grad_weight_group_cpu(const Conv2dAttrs& a, const ConvDims& d, const float* dzg,
                                  const float* xg, float* dwg, float* col, bool first);
// The same over channels-last tensors (conv2d_cpu_nhwc.cpp), called by the four above.
void conv2d_nhwc_cpu(const ExecContext& ctx);
void conv2d_grad_input_nhwc_cpu(const ExecContext& ctx);
void conv2d_grad_weight_nhwc_cpu(const ExecContext& ctx);
void conv2d_grad_bias_nhwc_cpu(const ExecContext& ctx);

}  // namespace remat
