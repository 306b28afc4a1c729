// Op test cases shared by the CPU gradient tests (test_ops_a.cpp) and the CUDA-vs-CPU tests
// (test_cuda_ops_a.cpp), so both backends are checked on exactly the same shapes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/attrs.h"
#include "runtime/core/tensor.h"
#include "tests/op_harness.h"

namespace remat {

struct ConvCase {
  const char* name;
  AttrMap attrs;
  Shape x;
  float x_scale;  // inputs uniform in [-x_scale, x_scale)
};

// conv2d: stride, asymmetric kernel/stride/padding, dilation, groups, depthwise (multiplier 1
// and 2), grouped pointwise, no bias, fused relu and relu6 (relu6 with inputs scaled so both
// clips are exercised).
inline std::vector<ConvCase> conv2d_cases() {
  using Ints = std::vector<int64_t>;
  return {
      {"basic", attr_map({{"filters", 4}, {"kernel", 3}, {"padding", 1}}), {2, 3, 5, 5}, 1},
      {"stride_asym",
       attr_map({{"filters", 3}, {"kernel", Ints{3, 2}}, {"stride", Ints{2, 1}}, {"padding", Ints{1, 0}}}),
       {2, 2, 6, 5}, 1},
      {"stride2_pad2", attr_map({{"filters", 2}, {"kernel", 3}, {"stride", 2}, {"padding", 2}}), {1, 2, 5, 5}, 1},
      {"dilation", attr_map({{"filters", 2}, {"kernel", 3}, {"dilation", 2}, {"padding", 1}}), {2, 2, 6, 6}, 1},
      {"groups", attr_map({{"filters", 6}, {"kernel", 3}, {"groups", 2}}), {2, 4, 5, 4}, 1},
      {"depthwise", attr_map({{"filters", 3}, {"kernel", 3}, {"groups", 3}, {"padding", 1}}), {2, 3, 4, 4}, 1},
      {"depthwise_x2", attr_map({{"filters", 6}, {"kernel", 2}, {"groups", 3}, {"stride", 2}}), {1, 3, 5, 5}, 1},
      {"pointwise_groups", attr_map({{"filters", 4}, {"kernel", 1}, {"groups", 2}}), {2, 4, 3, 3}, 1},
      {"no_bias", attr_map({{"filters", 3}, {"kernel", 2}, {"bias", false}}), {2, 2, 4, 4}, 1},
      {"relu", attr_map({{"filters", 3}, {"kernel", 3}, {"padding", 1}, {"activation", std::string("relu")}}),
       {2, 2, 4, 4}, 1},
      {"relu6", attr_map({{"filters", 3}, {"kernel", 3}, {"padding", 1}, {"activation", std::string("relu6")}}),
       {2, 2, 4, 4}, 4},
  };
}

// The transformer ops (and dense over rank 3) at small shapes: every op of a GPT block, both
// softmax modes, every matmul transpose combination with batch dimensions, the token loss with
// an ignored target, fused attention (causal, scaled, with dropout, packed qkv), and the optimizer ops GPT
// training uses. `tol` is the gradient check's.
struct TransformerCase {
  const char* name;
  OpCase c;
  GradTolerance tol;
};

inline std::vector<TransformerCase> transformer_cases() {
  auto mm = [](bool ta, bool tb, double scale) {
    return attr_map({{"transpose_a", ta}, {"transpose_b", tb}, {"scale", scale}});
  };
  return {
      {"embedding", {"embedding", attr_map({{"vocab", 7}, {"dim", 5}}), {i32({2, 6})}, {}, 3, 7}, kTolLinear},
      {"position_embedding", {"position_embedding", attr_map({{"max_len", 8}}), {f32({2, 5, 3})}}, kTolLinear},
      // A constant [3, 4] table added to [2, 2, 3, 4] (broadcast over the first two axes).
      {"add_constant",
       {"add_constant", attr_map({{"shape", std::vector<int64_t>{3, 4}}}), {f32({2, 2, 3, 4})},
        {{}, {0.5f, -1, 2, 0, 0.25f, -3, 1, 4, -0.5f, 8, -2, 0.125f}}},
       kTolLinear},
      // A learned bias of the last axis (its gradient sums dy over 6 rows).
      {"add_constant_learned",
       {"add_constant", attr_map({{"shape", std::vector<int64_t>{4}}, {"learned", true}}),
        {f32({2, 3, 4})}},
       kTolLinear},
      // A constant [3, 4] factor of [2, 2, 3, 4], and a learned one of the last axis (a layer
      // scale, RMSNorm's weight: its gradient sums dy x over 6 rows).
      {"mul_table",
       {"mul_table", attr_map({{"shape", std::vector<int64_t>{3, 4}}}), {f32({2, 2, 3, 4})},
        {{}, {0.5f, -1, 2, 0, 0.25f, -3, 1, 4, -0.5f, 8, -2, 0.125f}}},
       kTolLinear},
      {"mul_table_learned",
       {"mul_table", attr_map({{"shape", std::vector<int64_t>{5}}, {"learned", true}}),
        {f32({2, 3, 5})}, {{}, {0.5f, -1, 2, 1.5f, -0.25f}}},
       kTolLinear},
      // The mean of each row of [2, 3, 5] (RMSNorm's), and of each [3, 4] of [2, 3, 4].
      {"row_mean", {"row_mean", {}, {f32({2, 3, 5})}}, kTolLinear},
      {"row_mean_axes1", {"row_mean", attr_map({{"axes", int64_t{1}}}), {f32({2, 3, 4})}}, kTolLinear},
      // Means over middle axes (Note [kept axes]): an image's channels ([2, 3, 4, 5] -> [2, 4, 5],
      // CBAM's), the tokens of [2, 6, 4] and the [3, 2] of [2, 3, 2, 4] (-> [2, 4]).
      {"row_mean_channels", {"row_mean", attr_map({{"axes", int64_t{1}}, {"keep_last", int64_t{2}}}),
                             {f32({2, 3, 4, 5})}}, kTolLinear},
      {"row_mean_tokens", {"row_mean", attr_map({{"axes", int64_t{1}}, {"keep_last", int64_t{1}}}),
                           {f32({2, 6, 4})}}, kTolLinear},
      {"row_mean_middle2", {"row_mean", attr_map({{"axes", int64_t{1}}, {"keep_last", int64_t{1}}}),
                            {f32({2, 3, 2, 4})}}, kTolLinear},
      // A learned bias [3, 1, 1] of an image's channels (its gradient sums 2 x 4 x 5 values each).
      {"add_constant_channels",
       {"add_constant", attr_map({{"shape", std::vector<int64_t>{3, 1, 1}}, {"learned", true}}),
        {f32({2, 3, 4, 5})}, {{}, {0.5f, -1, 2}}},
       kTolLinear},
      // Swin's and MaxViT's bias on scores [N, G, H, T, T] of 2 x 2 windows, and of 2 x 3 ones.
      {"relative_position_bias", {"relative_position_bias", attr_map({{"window", 2}, {"init_std", 0.5}}),
                                  {f32({2, 3, 2, 4, 4})}}, kTolLinear},
      {"relative_position_bias_rect", {"relative_position_bias", attr_map({{"window", std::vector<int64_t>{2, 3}}, {"init_std", 0.5}}),
                                       {f32({3, 1, 6, 6})}}, kTolLinear},
      // Swin's shifted windows: a 2 x 2 grid of 2 x 2 windows shifted by 1, the mask added too.
      {"relative_position_bias_shifted",
       {"relative_position_bias",
        attr_map({{"window", 2}, {"shift", std::vector<int64_t>{1, 1}}, {"windows", 2}, {"init_std", 0.5}}),
        {f32({2, 4, 2, 4, 4})}}, kTolLinear},
      {"layernorm", {"layernorm", {}, {f32({2, 3, 6})}}, kTolNormalize},
      {"layernorm_plain", {"layernorm", attr_map({{"affine", false}, {"eps", 1e-3}}), {f32({4, 5})}}, kTolNormalize},
      // Over the last two axes: nn.LayerNorm([H, W]) (weight [3, 4]); instance normalization.
      {"layernorm_axes2", {"layernorm", attr_map({{"axes", 2}}), {f32({2, 2, 3, 4})}}, kTolNormalize},
      {"layernorm_instance", {"layernorm", attr_map({{"axes", 2}, {"affine", false}}), {f32({2, 3, 3, 3})}},
       kTolNormalize},
      // nn.GroupNorm's normalization: 2 groups of 2 channels of [4, 3, 3].
      {"layernorm_groups",
       {"layernorm", attr_map({{"axes", 3}, {"groups", 2}, {"affine", false}}), {f32({2, 4, 3, 3})}},
       kTolNormalize},
      {"gelu", {"gelu", {}, {f32({3, 7})}}, kTolNormalize},
      {"dense_rank3", {"dense", attr_map({{"units", 4}}), {f32({2, 3, 5})}}, kTolLinear},
      {"linear_rank4", {"linear", attr_map({{"units", 3}, {"bias", false}}), {f32({2, 2, 3, 4})}}, kTolLinear},
      {"matmul_nn", {"matmul", mm(false, false, 1.0), {f32({2, 3, 4}), f32({2, 4, 5})}}, kTolLinear},
      {"matmul_nt_scaled", {"matmul", mm(false, true, 0.5), {f32({2, 2, 3, 4}), f32({2, 2, 5, 4})}}, kTolLinear},
      {"matmul_tn", {"matmul", mm(true, false, -2.0), {f32({3, 4, 2}), f32({3, 4, 5})}}, kTolLinear},
      {"matmul_tt", {"matmul", mm(true, true, 1.5), {f32({4, 3}), f32({5, 4})}}, kTolLinear},
      {"split_heads", {"split_heads", attr_map({{"heads", 3}}), {f32({2, 4, 6})}}, kTolLinear},
      {"merge_heads", {"merge_heads", {}, {f32({2, 3, 4, 2})}}, kTolLinear},
      {"softmax", {"softmax", {}, {f32({3, 6})}}, kTolNormalize},
      {"softmax_causal", {"softmax", attr_map({{"causal", true}}), {f32({2, 2, 5, 5})}}, kTolNormalize},
      {"token_xent", {"token_xent", {}, {f32({2, 3, 6}), i32({2, 3})}, {}, 4, 6}, kTolLoss},
      {"attention_causal", {"attention", {}, {f32({2, 2, 5, 3}), f32({2, 2, 5, 3}), f32({2, 2, 5, 3})}},
       kTolNormalize},
      {"attention_scaled", {"attention", attr_map({{"causal", false}, {"scale", 0.7}}),
                            {f32({1, 3, 4, 2}), f32({1, 3, 4, 2}), f32({1, 3, 4, 2})}}, kTolNormalize},
      {"attention_dropout", {"attention", attr_map({{"dropout", 0.3}}),
                             {f32({1, 2, 6, 2}), f32({1, 2, 6, 2}), f32({1, 2, 6, 2})}}, kTolNormalize},
      // the token layout (Note [attention layouts]): qkv [N, T, 3C] of 2 heads of 3
      {"attention_packed", {"attention", attr_map({{"heads", int64_t{2}}, {"dropout", 0.2}}),
                            {f32({2, 5, 18})}}, kTolNormalize},
  };
}

// The spatial ops and attributes of the Keras networks (tests/test_ops_spatial.cpp,
// test_cuda_ops_spatial.cpp and the bf16 list below): zeropad (per-side and 'same') and crop,
// per-side and 'same' padding of conv2d and the pools (even and odd inputs, strides 1 and 2,
// depthwise, 1x7), averages over the real elements, batch norm without a scale, bilinear and
// per-axis upsampling.
struct SpatialCase {
  const char* name;
  OpCase c;
  GradTolerance tol;
};

// n distinct values 0.1 apart, scrambled and centred (no max-pooling ties within eps).
inline std::vector<float> spread_values(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j)
    v[static_cast<size_t>(j)] = 0.1f * static_cast<float>((j * 37) % n) - 0.05f * n;
  return v;
}

// spread_values(n) stretched 3.5 times: 0.35 apart, -4.2 to 3.85 for n = 24.
inline std::vector<float> wide_values(int64_t n) {
  std::vector<float> v = spread_values(n);
  for (float& x : v) x *= 3.5f;
  return v;
}

// wide_values moved above 0: [0.5, 8.55] for n = 24 (sqrt, fractional powers).
inline std::vector<float> positive_values(int64_t n) {
  std::vector<float> v = wide_values(n);
  for (float& x : v) x += 4.7f;
  return v;
}

inline std::vector<SpatialCase> spatial_op_cases() {
  using Ints = std::vector<int64_t>;
  const AttrValue same = std::string("same");
  const AttrValue bilinear = std::string("bilinear");
  return {
      {"zeropad_all", {"zeropad", attr_map({{"padding", 1}}), {f32({2, 2, 3, 4})}}, kTolLinear},
      {"zeropad_sides", {"zeropad", attr_map({{"padding", Ints{1, 0, 2, 1}}}), {f32({1, 3, 2, 3})}}, kTolLinear},
      {"zeropad_same_s2", {"zeropad", attr_map({{"padding", same}, {"kernel", 3}, {"stride", 2}}),
                           {f32({1, 2, 5, 6})}}, kTolLinear},
      {"crop_sides", {"crop", attr_map({{"cropping", Ints{1, 0, 0, 2}}}), {f32({2, 2, 4, 5})}}, kTolLinear},
      {"conv_same_s2", {"conv2d", attr_map({{"filters", 3}, {"kernel", 3}, {"stride", 2}, {"padding", same}}),
                        {f32({2, 2, 6, 6})}}, kTolLinear},
      {"conv_same_s2_odd", {"conv2d", attr_map({{"filters", 2}, {"kernel", 3}, {"stride", 2}, {"padding", same}}),
                            {f32({1, 2, 7, 5})}}, kTolLinear},
      {"conv_sides", {"conv2d", attr_map({{"filters", 2}, {"kernel", 3}, {"padding", Ints{0, 1, 2, 0}}}),
                      {f32({2, 2, 5, 5})}}, kTolLinear},
      {"depthwise_same_s2", {"conv2d", attr_map({{"filters", 4}, {"groups", 4}, {"kernel", 3}, {"stride", 2},
                                                 {"padding", same}, {"bias", false}}),
                             {f32({1, 4, 6, 6})}}, kTolLinear},
      {"conv_same_1x7", {"conv2d", attr_map({{"filters", 2}, {"kernel", Ints{1, 7}}, {"padding", same}}),
                         {f32({1, 2, 5, 9})}}, kTolLinear},
      // A signal [N, C, L] as ONNX's 1-D ops run it (Note [signals]): H = 1, strided, dilated.
      {"conv_signal", {"conv2d", attr_map({{"filters", 3}, {"kernel", Ints{1, 3}}, {"stride", Ints{1, 2}},
                                           {"dilation", Ints{1, 2}}, {"padding", Ints{0, 0, 2, 1}}}),
                       {f32({2, 2, 1, 11})}}, kTolLinear},
      {"maxpool_same_s2", {"maxpool", attr_map({{"kernel", 3}, {"stride", 2}, {"padding", same}}),
                           {f32({1, 2, 6, 6})}, {spread_values(72)}}, kTolPiecewise},
      {"maxpool_sides", {"maxpool", attr_map({{"kernel", 2}, {"padding", Ints{0, 1, 0, 1}}}),
                         {f32({2, 1, 5, 5})}, {spread_values(50)}}, kTolPiecewise},
      {"avgpool_same_exclude", {"avgpool", attr_map({{"kernel", 3}, {"stride", 1}, {"padding", same},
                                                     {"count_include_pad", false}}),
                                {f32({2, 2, 5, 4})}}, kTolLinear},
      {"avgpool_same_s2_exclude", {"avgpool", attr_map({{"kernel", 3}, {"stride", 2}, {"padding", same},
                                                        {"count_include_pad", false}}),
                                   {f32({1, 2, 6, 7})}}, kTolLinear},
      {"avgpool_sides_include", {"avgpool", attr_map({{"kernel", 3}, {"stride", 2}, {"padding", Ints{1, 0, 0, 1}}}),
                                 {f32({1, 2, 6, 6})}}, kTolLinear},
      {"avgpool_pyramid", {"avgpool", attr_map({{"kernel", Ints{2, 3}}, {"padding", same},
                                                {"count_include_pad", false}}),
                           {f32({1, 2, 4, 6})}}, kTolLinear},
      {"batchnorm_no_scale", {"batchnorm", attr_map({{"scale", false}}), {f32({2, 3, 2, 2})}}, kTolNormalize},
      {"batchnorm_no_scale_inference",
       {"batchnorm", attr_map({{"scale", false}, {"mode", std::string("inference")}}), {f32({2, 2, 2, 2})}},
       kTolNormalize},
      {"upsample_bilinear", {"upsample", attr_map({{"factor", 2}, {"mode", bilinear}}), {f32({2, 2, 3, 3})}}, kTolLinear},
      {"upsample_bilinear_rect", {"upsample", attr_map({{"factor", Ints{3, 2}}, {"mode", bilinear}}),
                                  {f32({1, 2, 2, 3})}}, kTolLinear},
      {"upsample_bilinear_1", {"upsample", attr_map({{"factor", 1}, {"mode", bilinear}}), {f32({1, 1, 2, 3})}}, kTolLinear},
      {"upsample_nearest_rect", {"upsample", attr_map({{"factor", Ints{1, 3}}}), {f32({1, 2, 2, 2})}}, kTolLinear},
      {"channel_shuffle_2", {"channel_shuffle", attr_map({{"groups", 2}}), {f32({2, 6, 3, 2})}}, kTolLinear},
      {"channel_shuffle_3", {"channel_shuffle", attr_map({{"groups", 3}}), {f32({1, 6, 2, 3})}}, kTolLinear},
      {"channel_slice", {"channel_slice", attr_map({{"offset", 2}, {"channels", 3}}), {f32({2, 6, 3, 2})}}, kTolLinear},
      {"channel_slice_flat", {"channel_slice", attr_map({{"offset", 1}, {"channels", 2}}), {f32({3, 5})}}, kTolLinear},
      {"reshape_to_image", {"reshape", attr_map({{"shape", Ints{4, 1, 1}}}), {f32({2, 4})}}, kTolLinear},
      {"reshape_image", {"reshape", attr_map({{"shape", Ints{3, 8}}}), {f32({2, 2, 3, 4})}}, kTolLinear},
      // PyTorch's permute(0, 2, 3, 1), permute(0, 3, 1, 2) and transpose(1, 2) of data.
      {"transpose_to_last", {"transpose", attr_map({{"perm", Ints{0, 2, 3, 1}}}), {f32({2, 3, 4, 5})}}, kTolLinear},
      {"transpose_to_first", {"transpose", attr_map({{"perm", Ints{0, 3, 1, 2}}}), {f32({2, 4, 5, 3})}}, kTolLinear},
      // An imported layer scale (ConvNeXt's Mul by a [C, 1, 1] parameter).
      {"conv_layer_scale", {"conv2d", attr_map({{"filters", 3}, {"kernel", 1}, {"groups", 3}, {"bias", false}}),
                            {f32({2, 3, 4, 5})}}, kTolLinear},
      // A ViT's class token before its patch tokens, and x[:, 0] of tokens (channel_slice along T).
      {"class_token", {"class_token", attr_map({{"init_std", 0.5}}), {f32({3, 4, 5})}}, kTolLinear},
      {"channel_slice_tokens", {"channel_slice", attr_map({{"offset", 0}, {"channels", 1}}), {f32({2, 4, 3})}},
       kTolLinear},
      {"transpose_tokens", {"transpose", attr_map({{"perm", Ints{0, 2, 1}}}), {f32({3, 4, 6})}}, kTolLinear},
      // Swin's qkv[1] of [N, nW, T, 3, H, D] (channel_slice along a middle axis).
      {"channel_slice_axis",
       {"channel_slice", attr_map({{"axis", 3}, {"offset", 1}, {"channels", 1}}), {f32({2, 2, 3, 3, 2, 2})}},
       kTolLinear},
      // concat along an axis other than the channels: the joined gradient of a split along
      // the rows (Note [split gradients]) and of GPT-2's qkv along the last axis of [N, T, C].
      {"concat_axis", {"concat", attr_map({{"axis", 2}}), {f32({2, 2, 3, 2}), f32({2, 2, 1, 2})}},
       kTolLinear},
      {"concat_tokens", {"concat", attr_map({{"axis", 2}}), {f32({2, 3, 2}), f32({2, 3, 4}),
                                                           f32({2, 3, 1})}},
       kTolLinear},
      // Rows along T of [N, T, C] (a recurrent layer's steps, Note [unrolled recurrent
      // layers]; the joined gradient of channel_slices along T).
      {"concat_rows", {"concat", {}, {f32({2, 1, 3}), f32({2, 2, 3}), f32({2, 1, 3})}}, kTolLinear},
      // Block swaps in the middle: k.transpose(-2, -1) of [N, G, T, D], a window partition's
      // permute(0, 1, 3, 2, 4, 5) and Swin's patch merging permute(0, 1, 3, 4, 2, 5) (vectors of
      // inner elements: the CUDA path's two transposes through its workspace).
      {"transpose_last_two", {"transpose", attr_map({{"perm", Ints{0, 1, 3, 2}}}), {f32({2, 3, 4, 5})}}, kTolLinear},
      {"transpose_windows", {"transpose", attr_map({{"perm", Ints{0, 1, 3, 2, 4, 5}}}), {f32({2, 2, 3, 2, 3, 4})}},
       kTolLinear},
      // torch.roll: Swin's cyclic shift of [N, H, W, C] along (1, 2), one axis, a shift past n.
      {"roll_two", {"roll", attr_map({{"shifts", Ints{-1, 2}}, {"dims", Ints{1, 2}}}), {f32({2, 3, 4, 5})}}, kTolLinear},
      {"roll_one", {"roll", attr_map({{"shifts", Ints{7}}, {"dims", Ints{2}}}), {f32({2, 3, 4, 5})}}, kTolLinear},
      {"transpose_patch_merge", {"transpose", attr_map({{"perm", Ints{0, 1, 3, 4, 2, 5}}}), {f32({2, 2, 2, 3, 2, 3})}},
       kTolLinear},
      // The activations past relu, over [-4.2, 3.85] (both clips of the hard ones, 0.35 apart,
      // none on a kink), and the squeeze-excitation scale, NCHW and flat.
      {"sigmoid", {"sigmoid", {}, {f32({2, 3, 4})}, {wide_values(24)}}, kTolNormalize},
      {"tanh", {"tanh", {}, {f32({2, 3, 4})}, {wide_values(24)}}, kTolNormalize},
      {"hardsigmoid", {"hardsigmoid", {}, {f32({2, 3, 4})}, {wide_values(24)}}, kTolPiecewise},
      {"hardsigmoid_onnx", {"hardsigmoid", attr_map({{"alpha", 0.2}, {"beta", 0.6}}), {f32({2, 12})},
                            {wide_values(24)}}, kTolPiecewise},
      {"hardswish", {"hardswish", {}, {f32({1, 2, 3, 4})}, {wide_values(24)}}, kTolPiecewise},
      {"leaky_relu", {"leaky_relu", attr_map({{"alpha", 0.1}}), {f32({2, 3, 4})}, {wide_values(24)}},
       kTolPiecewise},
      {"gelu_erf", {"gelu_erf", {}, {f32({2, 3, 4})}, {wide_values(24)}}, kTolNormalize},
      {"erf", {"erf", {}, {f32({2, 3, 4})}, {wide_values(24)}}, kTolNormalize},
      {"silu", {"silu", {}, {f32({2, 3, 4})}, {wide_values(24)}}, kTolNormalize},
      {"affine", {"affine", attr_map({{"scale", -1.5}, {"shift", 0.25}}), {f32({2, 3, 4})}}, kTolLinear},
      // sqrt over [0.5, 8.55] (its gradient 1 / (2 y) grows at 0), x^3 over the wide values, x^1.5
      // (the library's pow) over positive ones.
      {"sqrt", {"sqrt", {}, {f32({2, 3, 4})}, {positive_values(24)}}, kTolNormalize},
      {"pow_3", {"pow", attr_map({{"exponent", 3.0}}), {f32({2, 3, 4})}, {wide_values(24)}}, kTolNormalize},
      {"pow_1_5", {"pow", attr_map({{"exponent", 1.5}}), {f32({2, 12})}, {positive_values(24)}}, kTolNormalize},
      {"pow_reciprocal", {"pow", attr_map({{"exponent", -1.0}}), {f32({2, 12})}, {positive_values(24)}},
       kTolNormalize},
      {"channel_scale", {"channel_scale", {}, {f32({2, 3, 4, 5}), f32({2, 3})}}, kTolLinear},
      {"channel_scale_plane1", {"channel_scale", {}, {f32({3, 4, 1, 1}), f32({3, 4})}}, kTolLinear},
      // Rows of [N, T, D] by s [N, T] (RMSNorm's x * r), of [N, C, L] by s [N] (axes 1).
      {"channel_scale_rows", {"channel_scale", attr_map({{"axes", int64_t{2}}}), {f32({2, 3, 5}), f32({2, 3})}},
       kTolLinear},
      {"channel_scale_axes1", {"channel_scale", attr_map({{"axes", int64_t{1}}}), {f32({3, 2, 4}), f32({3})}},
       kTolLinear},
      // x + s over the rows of [N, T, D], the planes of an image and the [C, L] of [N, C, L].
      {"channel_shift_rows", {"channel_shift", {}, {f32({2, 3, 5}), f32({2, 3})}}, kTolLinear},
      {"channel_shift_image", {"channel_shift", {}, {f32({2, 3, 4, 4}), f32({2, 3})}}, kTolLinear},
      {"channel_shift_axes1", {"channel_shift", attr_map({{"axes", int64_t{1}}}),
                               {f32({3, 2, 4}), f32({3})}}, kTolLinear},
      // adaLN's and FiLM's x * s[:, None, :] and x + s[:, None, :] of tokens [N, T, D] by s [N, D]
      // (axes 1, keep_last 1), and by s [N, C, D] over the middle axis of [N, C, L, D].
      {"channel_scale_tokens", {"channel_scale", attr_map({{"axes", int64_t{1}}, {"keep_last", int64_t{1}}}),
                                {f32({2, 5, 3}), f32({2, 3})}}, kTolLinear},
      {"channel_scale_middle", {"channel_scale", attr_map({{"axes", int64_t{2}}, {"keep_last", int64_t{1}}}),
                                {f32({2, 3, 4, 2}), f32({2, 3, 2})}}, kTolLinear},
      {"channel_shift_tokens", {"channel_shift", attr_map({{"axes", int64_t{1}}, {"keep_last", int64_t{1}}}),
                                {f32({2, 5, 3}), f32({2, 3})}}, kTolLinear},
      {"channel_shift_middle", {"channel_shift", attr_map({{"axes", int64_t{2}}, {"keep_last", int64_t{1}}}),
                                {f32({2, 3, 4, 2}), f32({2, 3, 2})}}, kTolLinear},
      // An elementwise product (axes = the rank: a gate's x * sigmoid(y)).
      {"channel_scale_elementwise", {"channel_scale", attr_map({{"axes", int64_t{3}}}),
                                     {f32({2, 3, 4}), f32({2, 3, 4})}}, kTolLinear},
      // ConvTranspose2d: stride 2 with output_padding (a U-Net's upsampling), groups, dilation
      // and per-side padding without a bias.
      {"conv_transpose_s2", {"conv2d_transpose", attr_map({{"filters", 3}, {"kernel", 3}, {"stride", 2},
                                                           {"padding", 1}, {"output_padding", 1}}),
                             {f32({2, 2, 3, 4})}}, kTolLinear},
      {"conv_transpose_groups", {"conv2d_transpose", attr_map({{"filters", 4}, {"kernel", Ints{2, 3}},
                                                               {"groups", 2}, {"dilation", 2},
                                                               {"padding", Ints{0, 1, 1, 0}}, {"bias", false}}),
                                 {f32({1, 4, 3, 3})}}, kTolLinear},
  };
}

// ---- bf16 (Note [bf16 execution]): every op with a bf16 path, shared by test_ops_bf16.cpp and
// test_cuda_ops_bf16.cpp -------------------------------------------------------------------
// How the bf16 result relates to the FP32 one when both start from the same bf16-representable
// data (the FP32 run's accumulation order is the bf16 run's: the same kernels).
enum class Bf16Family {
  // Every node reads the data, dy or values that bf16 stores exactly (relu's and max-pool's
  // outputs are inputs' values), so each result is the FP32 result rounded once: bit-equal to
  // rne(fp32) for BF16 results, equal for F32 ones (the loss, parameter gradients of reductions).
  Exact,
  // conv2d, dense: the weight is rounded (|dw| <= u |w|), so y = sum_k x_k w_k moves by at most
  // u sum_k |x_k w_k| <= K u max |x_k w_k| (K the reduction length), and the result is rounded
  // once more: |y16 - y32| <= u |y32| + u mag, mag = the same op on |x|, |w|, |dy| (computed by
  // running the FP32 graph on absolute values). grad_input reads the rounded weight the same way;
  // grad_weight and grad_bias read exact data (bit-equal after rounding), within the same bound.
  Gemm,
  // softmax: the forward is Exact; its gradient dx_i = y_i (dy_i - s), s = sum_j dy_j y_j, reads
  // the stored (rounded) probabilities y16 = y (1 + d), |d| <= u, so before its own rounding it
  // moves by at most E_i = u y_i |dy_i - s| + (1 + u) u y_i sum_j |dy_j| y_j, and after it by
  // u |dx_i| + (1 + u) E_i.
  Softmax,
};

struct Bf16OpCase {
  const char* name;
  OpCase c;
  Bf16Family family;
  bool compare_fp32 = true;  // false: emulation check only (fused activations, see below)
};

// The case with its float data inputs in BF16.
inline OpCase as_bf16(OpCase c) {
  for (TensorDesc& d : c.inputs)
    if (d.dtype == DType::F32) d.dtype = DType::BF16;
  return c;
}

inline std::vector<Bf16OpCase> bf16_op_cases() {
  std::vector<Bf16OpCase> out = {
      {"relu", {"relu", {}, {f32({2, 3, 4})}}, Bf16Family::Exact},
      {"relu6", {"relu6", {}, {f32({2, 3, 4})}}, Bf16Family::Exact},
      {"add3", {"add", {}, {f32({2, 5}), f32({2, 5}), f32({2, 5})}}, Bf16Family::Exact},
      {"concat", {"concat", {}, {f32({2, 1, 3, 2}), f32({2, 2, 3, 2})}}, Bf16Family::Exact},
      {"concat_tokens", {"concat", attr_map({{"axis", 2}}), {f32({2, 3, 2}), f32({2, 3, 4})}},
       Bf16Family::Exact},
      {"flatten", {"flatten", {}, {f32({2, 3, 2, 2})}}, Bf16Family::Exact},
      {"transpose", {"transpose", attr_map({{"perm", std::vector<int64_t>{0, 2, 3, 1}}}), {f32({2, 3, 2, 2})}}, Bf16Family::Exact},
      {"roll", {"roll", attr_map({{"shifts", std::vector<int64_t>{-1, 1}}, {"dims", std::vector<int64_t>{1, 2}}}),
                {f32({2, 3, 3, 2})}}, Bf16Family::Exact},
      {"transpose_windows", {"transpose", attr_map({{"perm", std::vector<int64_t>{0, 1, 3, 2, 4, 5}}}),
                             {f32({2, 2, 2, 2, 2, 3})}}, Bf16Family::Exact},
      {"class_token", {"class_token", attr_map({{"init_std", 0.5}}), {f32({2, 3, 4})}}, Bf16Family::Exact},
      {"relative_position_bias", {"relative_position_bias", attr_map({{"window", 2}, {"init_std", 0.5}}),
                                  {f32({2, 2, 2, 4, 4})}}, Bf16Family::Exact},
      {"relative_position_bias_shifted_rows",
       {"relative_position_bias", attr_map({{"window", 2},
                                            {"shift", std::vector<int64_t>{1, 0}},
                                            {"windows", std::vector<int64_t>{2, 1}},
                                            {"init_std", 0.5}}),
        {f32({2, 2, 2, 4, 4})}}, Bf16Family::Exact},
      {"affine", {"affine", attr_map({{"scale", 0.3}, {"shift", -1.0}}), {f32({2, 3, 4})}}, Bf16Family::Exact},
      {"upsample", {"upsample", attr_map({{"factor", int64_t{2}}}), {f32({2, 2, 3, 3})}}, Bf16Family::Exact},
      {"dropout", {"dropout", attr_map({{"rate", 0.3}}), {f32({2, 3, 4, 4})}}, Bf16Family::Exact},
      {"maxpool", {"maxpool", attr_map({{"kernel", int64_t{2}}}), {f32({2, 3, 4, 4})}}, Bf16Family::Exact},
      {"avgpool", {"avgpool", attr_map({{"kernel", int64_t{3}}, {"stride", int64_t{2}}, {"padding", int64_t{1}}}),
                   {f32({2, 2, 5, 5})}}, Bf16Family::Exact},
      {"global_avgpool", {"global_avgpool", {}, {f32({2, 3, 3, 4})}}, Bf16Family::Exact},
      {"batchnorm", {"batchnorm", {}, {f32({2, 3, 4, 4})}}, Bf16Family::Exact},
      {"batchnorm_2d", {"batchnorm", {}, {f32({6, 4})}}, Bf16Family::Exact},
      {"batchnorm_inference", {"batchnorm", attr_map({{"mode", std::string("inference")}}), {f32({2, 3, 2, 2})}},
       Bf16Family::Exact},
      {"softmax_xent", {"softmax_xent", {}, {f32({4, 5}), i32({4})}, {}, 3, 5}, Bf16Family::Exact},
      {"softmax_xent_pixel", {"softmax_xent_pixel", {}, {f32({2, 3, 2, 2}), i32({2, 2, 2})}, {}, 5, 3},
       Bf16Family::Exact},
      {"cast_to_f32", {"cast", attr_map({{"to", std::string("f32")}}), {f32({2, 7})}}, Bf16Family::Exact},
      {"dense", {"dense", attr_map({{"units", 5}}), {f32({3, 8})}}, Bf16Family::Gemm},
      // Large enough for OpenBLAS's blocked kernels: staged one sample (32 rows) at a time, the
      // rows must still equal the whole-batch GEMM's.
      {"dense_blocked", {"dense", attr_map({{"units", 96}}), {f32({4, 32, 160})}}, Bf16Family::Gemm},
      // Weight gradients blocked over dW's rows (U > F) and columns (F > U), and a forward
      // over several row blocks (ops/gemm_bf16_cpu.h).
      {"dense_wide", {"dense", attr_map({{"units", 300}}), {f32({2, 8, 40})}}, Bf16Family::Gemm},
      {"dense_tall", {"dense", attr_map({{"units", 20}}), {f32({2, 150, 300})}}, Bf16Family::Gemm},
      {"conv_blocked", {"conv2d", attr_map({{"filters", 32}, {"kernel", 3}, {"padding", 1}}),
                        {f32({3, 16, 12, 12})}}, Bf16Family::Gemm},
      {"dense_relu", {"dense", attr_map({{"units", 4}, {"activation", std::string("relu")}}), {f32({3, 6})}},
       Bf16Family::Gemm, false},
      {"softmax", {"softmax", {}, {f32({3, 6})}}, Bf16Family::Softmax},
      {"softmax_causal", {"softmax", attr_map({{"causal", true}}), {f32({2, 2, 5, 5})}}, Bf16Family::Softmax},
  };
  for (const ConvCase& cc : conv2d_cases()) {
    // A fused activation reads the stored output, whose sign can differ from FP32's where the
    // rounded weights move a pre-activation across 0: emulation check only (relu alone is Exact).
    const bool fused = cc.attrs.values.count("activation") > 0;
    out.push_back({cc.name, {"conv2d", cc.attrs, {f32(cc.x)}}, Bf16Family::Gemm, !fused});
  }
  for (const SpatialCase& sc : spatial_op_cases()) {
    // sigmoid's, tanh's and sqrt's gradients read the stored output, rounded in a bf16 run: not Exact,
    // emulation check only.
    const bool reads_rounded = sc.c.op == "sigmoid" || sc.c.op == "tanh" || sc.c.op == "sqrt";
    const bool gemm = sc.c.op == "conv2d" || sc.c.op == "conv2d_transpose";
    out.push_back({sc.name, sc.c, gemm ? Bf16Family::Gemm : Bf16Family::Exact, !reads_rounded});
  }
  for (const TransformerCase& tc : transformer_cases()) {
    const std::string op = tc.c.op;
    if (op == "embedding") continue;  // int ids in, the F32 table's rows out: no bf16 path
    Bf16Family f = Bf16Family::Exact;  // layernorm, gelu, heads, matmul (no weights), token_xent, ...
    if (op == "dense" || op == "linear") f = Bf16Family::Gemm;
    if (op == "softmax") f = Bf16Family::Softmax;
    if (op == "softmax") continue;  // listed above
    out.push_back({tc.name, tc.c, f});
  }
  return out;
}

}  // namespace remat
