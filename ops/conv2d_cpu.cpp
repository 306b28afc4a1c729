// conv2d's CPU reference kernels (ops/conv2d.h): per image and group, im2col + GEMM (Caffe's
// scheme), the im2col buffer in the op's workspace; the weight and bias gradients also for
// bf16 data (widened into the workspace, so the GEMMs and their order are the F32 kernel's).
// The per-image pieces are shared with the channels-last kernels (conv2d_cpu_nhwc.cpp).
#include <algorithm>
#include <type_traits>

#include "ops/conv2d.h"
#include "ops/cpu_gemm.h"
#include "ops/cpu_storage.h"
#include "ops/op_common.h"

namespace remat {

void conv2d_image_cpu(const Conv2dAttrs& a, const ConvDims& d, const float* x, const float* w,
                      float* y, float* col) {
  const int64_t rows = d.geo.col_rows(), plane = d.out_plane();
  for (int64_t g = 0; g < a.groups; ++g) {
    const float* xg = x + g * d.cg * d.geo.height * d.geo.width;
    const float* cm = xg;
    if (!a.pointwise()) {
      im2col_cpu(xg, d.geo, col);
      cm = col;
    }
    cpu_gemm(false, false, d.kg, plane, rows, 1.0f, w + g * d.weight_group(), rows, cm, plane,
             0.0f, y + g * d.kg * plane, plane);
  }
}

void conv2d_bias_image_cpu(const ConvDims& d, const float* b, float* y) {
  const int64_t plane = d.out_plane();
  for (int64_t k = 0; k < d.k; ++k) {
    float* yk = y + k * plane;
    for (int64_t i = 0; i < plane; ++i) yk[i] += b[k];
  }
}

void conv2d_grad_input_image_cpu(const Conv2dAttrs& a, const ConvDims& d, const float* dz,
                                 const float* w, float* dx, float* col) {
  const int64_t rows = d.geo.col_rows(), plane = d.out_plane();
  const int64_t group_in = d.cg * d.geo.height * d.geo.width;
  if (!a.pointwise()) std::fill(dx, dx + d.in_image(), 0.0f);
  for (int64_t g = 0; g < a.groups; ++g) {
    const float* dzg = dz + g * d.kg * plane;
    float* dxg = dx + g * group_in;
    if (a.pointwise()) {  // col == dx: write it directly
      cpu_gemm(true, false, rows, plane, d.kg, 1.0f, w + g * d.weight_group(), rows, dzg, plane,
               0.0f, dxg, plane);
      continue;
    }
    cpu_gemm(true, false, rows, plane, d.kg, 1.0f, w + g * d.weight_group(), rows, dzg, plane,
             0.0f, col, plane);
    col2im_add_cpu(col, d.geo, dxg);
  }
}

void conv2d_grad_weight_group_cpu(const Conv2dAttrs& a, const ConvDims& d, const float* dzg,
                                  const float* xg, float* dwg, float* col, bool first) {
  const int64_t rows = d.geo.col_rows(), plane = d.out_plane();
  const float* cm = xg;
  if (!a.pointwise()) {
    im2col_cpu(xg, d.geo, col);
    cm = col;
  }
  cpu_gemm(false, true, d.kg, rows, plane, 1.0f, dzg, plane, cm, plane, first ? 0.0f : 1.0f,
           dwg, rows);
}

// y = act(conv(x, w) + b). inputs [x, w, (b)].
void conv2d_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<Conv2dAttrs>(*ctx.node);
  if (a.channels_last) return conv2d_nhwc_cpu(ctx);
  ConvDims d = conv_dims(a, ctx.inputs[0].shape());
  const float* x = ctx.inputs[0].f32();  // [N, C, H, W]
  const float* w = ctx.inputs[1].f32();  // [K, C/g, R, S]
  float* y = ctx.output.f32();           // [N, K, Ho, Wo]
  float* col = static_cast<float*>(ctx.workspace);  // [C/g*R*S, Ho*Wo]
  const int64_t out_image = d.k * d.out_plane();
  for (int64_t n = 0; n < d.n; ++n) {
    conv2d_image_cpu(a, d, x + n * d.in_image(), w, y + n * out_image, col);
    if (a.bias) conv2d_bias_image_cpu(d, ctx.inputs[2].f32(), y + n * out_image);
  }
  activation_forward_cpu(a.activation, y, ctx.output.numel());
}

// dx = conv_transpose(dz, w). inputs [dz, w]; output has x's shape.
void conv2d_grad_input_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<Conv2dAttrs>(*ctx.node);
  if (a.channels_last) return conv2d_grad_input_nhwc_cpu(ctx);
  ConvDims d = conv_dims(a, ctx.output.shape());
  const float* dz = ctx.inputs[0].f32();  // [N, K, Ho, Wo]
  const float* w = ctx.inputs[1].f32();   // [K, C/g, R, S]
  float* dx = ctx.output.f32();           // [N, C, H, W]
  float* col = static_cast<float*>(ctx.workspace);
  for (int64_t n = 0; n < d.n; ++n)
    conv2d_grad_input_image_cpu(a, d, dz + n * d.k * d.out_plane(), w, dx + n * d.in_image(),
                                col);
}

// dw = sum_n dz_n * im2col(x_n)^T. inputs [dz, x]; output [K, C/g, R, S]. T: dz's and x's
// storage (ops/cpu_storage.h): bf16 slices of one image and group are widened into the
// workspace after the im2col buffer (conv2d_grad_weight_workspace), so the GEMMs and their
// order are the F32 kernel's; the gradient is then rounded to bf16 (OpDef::bf16_rounds_output).
template <typename T>
void conv2d_grad_weight_cpu_t(const ExecContext& ctx) {
  const auto& a = attrs_of<Conv2dAttrs>(*ctx.node);
  ConvDims d = conv_dims(a, ctx.inputs[1].shape());
  const T* dz = storage<T>(ctx.inputs[0]);  // [N, K, Ho, Wo]
  const T* x = storage<T>(ctx.inputs[1]);   // [N, C, H, W]
  float* dw = ctx.output.f32();             // [K, C/g, R, S]
  const int64_t rows = d.geo.col_rows(), plane = d.out_plane();
  const int64_t group_in = d.cg * d.geo.height * d.geo.width;
  float* col = static_cast<float*>(ctx.workspace);
  float *dz_f = nullptr, *x_f = nullptr;  // one image's group of dz and of x, widened (bf16)
  if constexpr (!std::is_same_v<T, float>) {
    char* next = static_cast<char*>(ctx.workspace) +
                 (a.pointwise() ? 0 : alloc_bytes(rows * plane * int64_t{4}));
    dz_f = reinterpret_cast<float*>(next);
    x_f = reinterpret_cast<float*>(next + alloc_bytes(d.kg * plane * int64_t{4}));
  }
  for (int64_t g = 0; g < a.groups; ++g) {
    for (int64_t n = 0; n < d.n; ++n) {
      const T* xg = x + n * d.in_image() + g * group_in;
      const T* dzg = dz + (n * d.k + g * d.kg) * plane;
      const float *xs, *dzs;
      if constexpr (std::is_same_v<T, float>) {
        xs = xg, dzs = dzg;
      } else {
        bf16_widen(xg, x_f, group_in);
        bf16_widen(dzg, dz_f, d.kg * plane);
        xs = x_f, dzs = dz_f;
      }
      conv2d_grad_weight_group_cpu(a, d, dzs, xs, dw + g * d.weight_group(), col, n == 0);
    }
  }
  if constexpr (!std::is_same_v<T, float>) bf16_round_in_place(dw, ctx.output.numel());
}

void conv2d_grad_weight_cpu(const ExecContext& ctx) {
  if (attrs_of<Conv2dAttrs>(*ctx.node).channels_last) return conv2d_grad_weight_nhwc_cpu(ctx);
  with_storage(ctx.inputs[0].desc->dtype,
               [&](auto tag) { conv2d_grad_weight_cpu_t<decltype(tag)>(ctx); });
}

// db[k] = sum over n, h, w of dz. inputs [dz]; output [K].
template <typename T>
void conv2d_grad_bias_cpu_t(const ExecContext& ctx) {
  const T* dz = storage<T>(ctx.inputs[0]);
  const int64_t n = ctx.inputs[0].dim(0), k = ctx.inputs[0].dim(1);
  const int64_t plane = ctx.inputs[0].dim(2) * ctx.inputs[0].dim(3);
  float* db = ctx.output.f32();
  for (int64_t kk = 0; kk < k; ++kk) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < plane; ++p) s += load(dz, (i * k + kk) * plane + p);
    db[kk] = static_cast<float>(s);
  }
}

void conv2d_grad_bias_cpu(const ExecContext& ctx) {
  if (attrs_of<Conv2dAttrs>(*ctx.node).channels_last) return conv2d_grad_bias_nhwc_cpu(ctx);
  with_storage(ctx.inputs[0].desc->dtype,
               [&](auto tag) { conv2d_grad_bias_cpu_t<decltype(tag)>(ctx); });
}

}  // namespace remat
