// conv2d's CPU reference kernels over channels-last tensors (Note [channels-last layout] in
// models/channels_last.cpp): x [N, H, W, C], y [N, Ho, Wo, K], weights KCRS as always. Each
// image is transposed to NCHW in the workspace and run through the channels-first kernels'
// per-image pieces (conv2d_cpu.cpp), and the result transposed back: the same products summed
// in the same order, so on the CPU a channels-last model computes bit for bit what the
// channels-first one does (tests/test_channels_last.cpp trains both). Workspace, in this order
// (alloc_bytes-aligned): the im2col buffer (none for 1 x 1), then two images in FP32: x and y
// (forward), dz and dx (input gradient), dz and x (weight gradient; bf16 data is widened on the
// way, exactly).
#include <type_traits>

#include "ops/conv2d.h"
#include "ops/cpu_storage.h"
#include "ops/op_common.h"

namespace remat {
namespace {

// Image n of an [N, H, W, C] tensor as a [C, H * W] float array (widened if bf16), and back.
template <typename T>
void image_to_nchw(const T* src, int64_t c, int64_t hw, float* dst) {
  for (int64_t i = 0; i < hw; ++i)
    for (int64_t ch = 0; ch < c; ++ch) dst[ch * hw + i] = load(src, i * c + ch);
}
void image_to_nhwc(const float* src, int64_t c, int64_t hw, float* dst) {
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t i = 0; i < hw; ++i) dst[i * c + ch] = src[ch * hw + i];
}

// The workspace pieces: the im2col buffer and two images of `first` and `second` floats.
struct NhwcScratch {
  float* col;
  float* first;
  float* second;
};
NhwcScratch scratch_of(const Conv2dAttrs& a, const ConvDims& d, const ExecContext& ctx,
                       int64_t first) {
  char* base = static_cast<char*>(ctx.workspace);
  const int64_t col = a.pointwise() ? 0 : d.geo.col_rows() * d.out_plane() * int64_t{4};
  NhwcScratch s;
  s.col = reinterpret_cast<float*>(base);
  s.first = reinterpret_cast<float*>(base + alloc_bytes(col));
  s.second = reinterpret_cast<float*>(base + alloc_bytes(col) + alloc_bytes(first * 4));
  return s;
}

}  // namespace

// y = act(conv(x, w) + b). inputs [x, w, (b)].
void conv2d_nhwc_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<Conv2dAttrs>(*ctx.node);
  const ConvDims d = conv_dims(a, ctx.inputs[0].shape());
  const float* x = ctx.inputs[0].f32();  // [N, H, W, C]
  float* y = ctx.output.f32();           // [N, Ho, Wo, K]
  const int64_t hw = d.geo.height * d.geo.width, plane = d.out_plane();
  const NhwcScratch s = scratch_of(a, d, ctx, d.in_image());
  for (int64_t n = 0; n < d.n; ++n) {
    image_to_nchw(x + n * d.in_image(), d.c, hw, s.first);
    conv2d_image_cpu(a, d, s.first, ctx.inputs[1].f32(), s.second, s.col);
    if (a.bias) conv2d_bias_image_cpu(d, ctx.inputs[2].f32(), s.second);
    image_to_nhwc(s.second, d.k, plane, y + n * d.k * plane);
  }
  activation_forward_cpu(a.activation, y, ctx.output.numel());
}

// dx = conv_transpose(dz, w). inputs [dz, w]; output has x's shape.
void conv2d_grad_input_nhwc_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<Conv2dAttrs>(*ctx.node);
  const ConvDims d = conv_dims(a, ctx.output.shape());
  const float* dz = ctx.inputs[0].f32();  // [N, Ho, Wo, K]
  float* dx = ctx.output.f32();           // [N, H, W, C]
  const int64_t hw = d.geo.height * d.geo.width, plane = d.out_plane();
  const NhwcScratch s = scratch_of(a, d, ctx, d.k * plane);
  for (int64_t n = 0; n < d.n; ++n) {
    image_to_nchw(dz + n * d.k * plane, d.k, plane, s.first);
    conv2d_grad_input_image_cpu(a, d, s.first, ctx.inputs[1].f32(), s.second, s.col);
    image_to_nhwc(s.second, d.c, hw, dx + n * d.in_image());
  }
}

// dw = sum_n dz_n * im2col(x_n)^T, per group, images in order (the channels-first kernel's
// order for every group). inputs [dz, x]; output [K, C/g, R, S]; bf16: rounded to bf16 after.
template <typename T>
void conv2d_grad_weight_nhwc_cpu_t(const ExecContext& ctx) {
  const auto& a = attrs_of<Conv2dAttrs>(*ctx.node);
  const ConvDims d = conv_dims(a, ctx.inputs[1].shape());
  const T* dz = storage<T>(ctx.inputs[0]);  // [N, Ho, Wo, K]
  const T* x = storage<T>(ctx.inputs[1]);   // [N, H, W, C]
  float* dw = ctx.output.f32();             // [K, C/g, R, S]
  const int64_t hw = d.geo.height * d.geo.width, plane = d.out_plane();
  const NhwcScratch s = scratch_of(a, d, ctx, d.k * plane);
  for (int64_t n = 0; n < d.n; ++n) {
    image_to_nchw(dz + n * d.k * plane, d.k, plane, s.first);
    image_to_nchw(x + n * d.in_image(), d.c, hw, s.second);
    for (int64_t g = 0; g < a.groups; ++g)
      conv2d_grad_weight_group_cpu(a, d, s.first + g * d.kg * plane, s.second + g * d.cg * hw,
                                   dw + g * d.weight_group(), s.col, n == 0);
  }
  if constexpr (!std::is_same_v<T, float>) bf16_round_in_place(dw, ctx.output.numel());
}

void conv2d_grad_weight_nhwc_cpu(const ExecContext& ctx) {
  with_storage(ctx.inputs[0].desc->dtype,
               [&](auto tag) { conv2d_grad_weight_nhwc_cpu_t<decltype(tag)>(ctx); });
}

// db[k] = sum over n, h, w of dz: the columns of [N Ho Wo, K], in the channels-first kernel's
// order.
void conv2d_grad_bias_nhwc_cpu(const ExecContext& ctx) {
  column_sums_cpu(ctx.inputs[0], ctx.output);
}

}  // namespace remat
