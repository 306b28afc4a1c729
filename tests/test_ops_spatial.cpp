// The spatial ops and attributes Keras's networks need: zeropad (per-side, or 'same' as Keras's
// correct_pad) and crop, per-side and 'same' padding of conv2d and the pools (Note [same
// padding] in ops/padding.h), average pooling over the real elements (count_include_pad: false),
// batch norm without a learned scale, bilinear and per-axis upsampling. Shapes, hand-computed
// (or PyTorch-computed) forward values, gradients against central differences
// (tests/op_harness.h) for every case of spatial_op_cases(), and the errors of each attribute,
// at the field's file:line:col.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ops/padding.h"
#include "tests/op_cases.h"
#include "tests/op_harness.h"
#include "tests/op_test_util.h"

namespace remat {
namespace {

using Ints = std::vector<int64_t>;
using Floats = std::vector<float>;

Shape out_shape(const OpCase& c) { return OpHarness(builtin_registry(), c).output_desc().shape; }

// 1..n as floats.
Floats iota(int64_t n) {
  Floats v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i + 1);
  return v;
}

// An error located at `field`: "<file:line:col>: layer 'l': field '<field>'".
std::string located_error(OpCase c, const std::string& field) {
  c.attrs.where[field] = "configs/x.yaml:9:7";
  c.attrs.origin = "configs/x.yaml:8:5: layer 'l'";
  return case_error(c);
}

TEST(SpatialOps, EveryCaseMatchesCentralDifferences) {
  for (const SpatialCase& sc : spatial_op_cases()) {
    SCOPED_TRACE(sc.name);
    OpHarness h(builtin_registry(), sc.c);
    EXPECT_TRUE(h.check_gradients(sc.tol));
  }
}

// ---------------------------------------------------------------- zeropad, crop

TEST(ZeroPad, ShapesValuesAndCropIsItsInverse) {
  EXPECT_EQ(out_shape({"zeropad", attr_map({{"padding", 1}}), {f32({2, 3, 4, 5})}}),
            (Shape{2, 3, 6, 7}));
  EXPECT_EQ(out_shape({"zeropad", attr_map({{"padding", Ints{1, 2}}}), {f32({1, 1, 4, 5})}}),
            (Shape{1, 1, 6, 9}));
  // [top, bottom, left, right] = [1, 0, 2, 1] around a 2x2 plane.
  OpHarness p(builtin_registry(),
              {"zeropad", attr_map({{"padding", Ints{1, 0, 2, 1}}}), {f32({1, 1, 2, 2})}, {{1, 2, 3, 4}}});
  EXPECT_EQ(p.output_desc().shape, (Shape{1, 1, 3, 5}));
  EXPECT_EQ(p.forward(), (Floats{0, 0, 0, 0, 0,  //
                                 0, 0, 1, 2, 0,  //
                                 0, 0, 3, 4, 0}));
  // The gradient is dy cropped back: the border's gradient is dropped.
  EXPECT_EQ(p.gradients(iota(15))[0], (Floats{8, 9, 13, 14}));

  OpHarness c(builtin_registry(),
              {"crop", attr_map({{"cropping", Ints{1, 0, 0, 1}}}), {f32({1, 1, 3, 3})}, {iota(9)}});
  EXPECT_EQ(c.output_desc().shape, (Shape{1, 1, 2, 2}));
  EXPECT_EQ(c.forward(), (Floats{4, 5, 7, 8}));
  EXPECT_EQ(c.gradients({1, 2, 3, 4})[0], (Floats{0, 0, 0, 1, 2, 0, 3, 4, 0}));
}

TEST(ZeroPad, BackwardNodesAreTheInverseOps) {
  OpHarness p(builtin_registry(), {"zeropad", attr_map({{"padding", Ints{0, 1, 0, 1}}}), {f32({1, 2, 3, 3})}});
  p.gradients(p.random_dy(1));
  ASSERT_EQ(p.backward_nodes().size(), 1u);
  EXPECT_EQ(p.graph().node(p.backward_nodes()[0]).op, "crop");
  OpHarness c(builtin_registry(), {"crop", attr_map({{"cropping", 1}}), {f32({1, 2, 4, 4})}});
  c.gradients(c.random_dy(1));
  ASSERT_EQ(c.backward_nodes().size(), 1u);
  EXPECT_EQ(c.graph().node(c.backward_nodes()[0]).op, "zeropad");
}

TEST(ZeroPad, Errors) {
  EXPECT_HAS(case_error({"zeropad", {}, {f32({1, 1, 2, 2})}}), "'padding': is required");
  EXPECT_HAS(case_error({"crop", {}, {f32({1, 1, 2, 2})}}), "'cropping': is required");
  EXPECT_HAS(case_error({"zeropad", attr_map({{"padding", Ints{1, 2, 3}}}), {f32({1, 1, 2, 2})}}),
             "a list of 2 or 4 integers, got 3 values");
  EXPECT_HAS(case_error({"zeropad", attr_map({{"padding", -1}}), {f32({1, 1, 2, 2})}}),
             "out of range");
  EXPECT_HAS(case_error({"crop", attr_map({{"cropping", std::string("same")}}), {f32({1, 1, 2, 2})}}),
             "expected an integer or a list of 2 or 4 integers");
  EXPECT_HAS(case_error({"zeropad", attr_map({{"padding", std::string("same")}}), {f32({1, 1, 2, 2})}}),
             "'kernel': is required with padding: same");
  EXPECT_HAS(case_error({"zeropad", attr_map({{"padding", std::string("full")}, {"kernel", 3}}),
                         {f32({1, 1, 2, 2})}}),
             "not one of: same, valid");
  EXPECT_HAS(case_error({"zeropad", attr_map({{"padding", 1}, {"kernel", 3}}), {f32({1, 1, 2, 2})}}),
             "'kernel': applies only with padding: same");
  EXPECT_HAS(case_error({"zeropad", attr_map({{"padding", std::string("same")}, {"kernel", 3}, {"stride", 0}}),
                         {f32({1, 1, 2, 2})}}),
             "out of range");
  EXPECT_HAS(case_error({"crop", attr_map({{"cropping", Ints{1, 1, 0, 0}}}), {f32({1, 1, 2, 5})}}),
             "leaves nothing of a 2x5 input");
  EXPECT_HAS(case_error({"zeropad", attr_map({{"padding", 1}}), {f32({2, 3})}}), "[N, C, H, W]");
  EXPECT_HAS(case_error({"zeropad", attr_map({{"padding", 1}, {"pading", 1}}), {f32({1, 1, 2, 2})}}),
             "unknown field");
  const std::string e =
      located_error({"crop", attr_map({{"cropping", Ints{1, 2, 3}}}), {f32({1, 1, 4, 4})}}, "cropping");
  EXPECT_EQ(e.rfind("configs/x.yaml:9:7: layer 'l': field 'cropping'", 0), 0u) << e;
}

// Keras's imagenet_utils.correct_pad(x, k) on one side of length n: (k // 2 - adjust, k // 2)
// with adjust = 1 - n % 2 (the pads of ZeroPadding2D before a stride-2 'valid' window).
std::pair<int64_t, int64_t> keras_correct_pad(int64_t n, int64_t k) {
  const int64_t adjust = 1 - n % 2, correct = k / 2;
  return {correct - adjust, correct};
}

TEST(ZeroPad, SameAtStrideTwoIsKerasCorrectPadOnOddAndEvenSides) {
  PaddingSpec same;
  same.same = true;
  for (int64_t k : {3, 5, 7})
    for (int64_t n = 1; n <= 64; ++n) {
      SCOPED_TRACE("kernel " + std::to_string(k) + ", sides " + std::to_string(n) + "x" +
                   std::to_string(n + 1));
      const Pads p = padding_resolve(same, n, n + 1, k, k, 2, 2);
      EXPECT_EQ(std::make_pair(p.top, p.bottom), keras_correct_pad(n, k));
      EXPECT_EQ(std::make_pair(p.left, p.right), keras_correct_pad(n + 1, k));
    }
  // NASNet's reduction_pad_1 at 224x224 (111, then 56) and at 75x75 (37, 19, 10, 5).
  for (int64_t n : {111, 37, 19, 5})
    EXPECT_EQ(keras_correct_pad(n, 3), std::make_pair(int64_t{1}, int64_t{1})) << n;
  for (int64_t n : {56, 10})
    EXPECT_EQ(keras_correct_pad(n, 3), std::make_pair(int64_t{0}, int64_t{1})) << n;
}

TEST(ZeroPad, SamePadsPerInputSizeAndItsGradientCropsThoseSides) {
  const AttrValue same = std::string("same");
  const AttrMap s2 = attr_map({{"padding", same}, {"kernel", 3}, {"stride", 2}});
  EXPECT_EQ(out_shape({"zeropad", s2, {f32({1, 2, 111, 56})}}), (Shape{1, 2, 113, 57}));
  EXPECT_EQ(out_shape({"zeropad", s2, {f32({1, 2, 19, 10})}}), (Shape{1, 2, 21, 11}));
  // Stride 1 (the default): (k - 1) / 2 on each side; a 1x1 window pads nothing.
  EXPECT_EQ(out_shape({"zeropad", attr_map({{"padding", same}, {"kernel", Ints{3, 5}}}), {f32({1, 1, 4, 4})}}),
            (Shape{1, 1, 6, 8}));
  EXPECT_EQ(out_shape({"zeropad", attr_map({{"padding", same}, {"kernel", 1}, {"stride", 2}}),
                       {f32({1, 1, 4, 5})}}),
            (Shape{1, 1, 4, 5}));
  EXPECT_EQ(out_shape({"zeropad", attr_map({{"padding", std::string("valid")}}), {f32({1, 1, 4, 5})}}),
            (Shape{1, 1, 4, 5}));
  // 3 rows (odd: one above, one below) and 2 columns (even: one at the right).
  OpHarness p(builtin_registry(), {"zeropad", s2, {f32({1, 1, 3, 2})}, {{1, 2, 3, 4, 5, 6}}});
  EXPECT_EQ(p.output_desc().shape, (Shape{1, 1, 5, 3}));
  EXPECT_EQ(p.forward(), (Floats{0, 0, 0,  //
                                 1, 2, 0,  //
                                 3, 4, 0,  //
                                 5, 6, 0,  //
                                 0, 0, 0}));
  EXPECT_EQ(p.gradients(iota(15))[0], (Floats{4, 5, 7, 8, 10, 11}));
  ASSERT_EQ(p.backward_nodes().size(), 1u);
  EXPECT_EQ(p.graph().node(p.backward_nodes()[0]).op, "crop");
}

// ---------------------------------------------------------------- conv2d padding

TEST(ConvPadding, SameFollowsTensorFlow) {
  auto conv = [](AttrMap a, Shape x) { return out_shape({"conv2d", a, {f32(x)}}); };
  const AttrMap same3s2 =
      attr_map({{"filters", 2}, {"kernel", 3}, {"stride", 2}, {"padding", std::string("same")}});
  EXPECT_EQ(conv(same3s2, {1, 1, 224, 224}), (Shape{1, 2, 112, 112}));  // pads (0, 1)
  EXPECT_EQ(conv(same3s2, {1, 1, 225, 7}), (Shape{1, 2, 113, 4}));      // pads (1, 1)
  EXPECT_EQ(conv(attr_map({{"filters", 2}, {"kernel", Ints{1, 7}}, {"padding", std::string("same")}}),
                 {1, 1, 17, 17}),
            (Shape{1, 2, 17, 17}));
  EXPECT_EQ(conv(attr_map({{"filters", 2}, {"kernel", 1}, {"stride", 2}, {"padding", std::string("same")}}),
                 {1, 1, 147, 74}),
            (Shape{1, 2, 74, 37}));
  EXPECT_EQ(conv(attr_map({{"filters", 2}, {"kernel", 3}, {"padding", std::string("valid")}}),
                 {1, 1, 9, 9}),
            (Shape{1, 2, 7, 7}));
  EXPECT_EQ(conv(attr_map({{"filters", 2}, {"kernel", 3}, {"padding", Ints{0, 1, 2, 0}}}), {1, 1, 5, 5}),
            (Shape{1, 2, 4, 5}));
}

// 'same' at stride 2 on an even input is the valid convolution of the input padded by (0, 1):
// the two agree exactly, and differ from PyTorch's symmetric padding 1.
TEST(ConvPadding, SameAtStrideTwoEqualsZeropadThenValid) {
  const Floats x = distinct_values(2 * 6 * 6);
  OpHarness same(builtin_registry(),
                 {"conv2d", attr_map({{"filters", 3}, {"kernel", 3}, {"stride", 2}, {"padding", std::string("same")}}),
                  {f32({1, 2, 6, 6})}, {x}});
  OpHarness pad(builtin_registry(), {"zeropad", attr_map({{"padding", Ints{0, 1, 0, 1}}}), {f32({1, 2, 6, 6})}, {x}});
  OpHarness valid(builtin_registry(),
                  {"conv2d", attr_map({{"filters", 3}, {"kernel", 3}, {"stride", 2}}), {f32({1, 2, 7, 7})}, {pad.forward()}});
  OpHarness sym(builtin_registry(),
                {"conv2d", attr_map({{"filters", 3}, {"kernel", 3}, {"stride", 2}, {"padding", 1}}), {f32({1, 2, 6, 6})}, {x}});
  for (int p = 0; p < 2; ++p) {
    valid.set_param(p, same.input(1 + p));
    sym.set_param(p, same.input(1 + p));
  }
  const Floats y = same.forward();
  EXPECT_EQ(y, valid.forward());
  EXPECT_NE(y, sym.forward());
}

TEST(ConvPadding, Errors) {
  const AttrMap base = attr_map({{"filters", 2}, {"kernel", 3}});
  auto with = [&](const std::string& k, AttrValue v) {
    AttrMap m = base;
    m.set(k, std::move(v));
    return m;
  };
  EXPECT_HAS(case_error({"conv2d", with("padding", std::string("full")), {f32({1, 1, 5, 5})}}),
             "'full' is not one of: same, valid");
  EXPECT_HAS(case_error({"conv2d", with("padding", Ints{1, 1, 1}), {f32({1, 1, 5, 5})}}),
             "a list of 2 or 4 integers, got 3 values");
  EXPECT_HAS(case_error({"conv2d", with("padding", Ints{0, 0, 0, -1}), {f32({1, 1, 5, 5})}}), "out of range");
  EXPECT_HAS(case_error({"conv2d", with("padding", Ints{0, 1, 0, 0}), {f32({1, 1, 2, 2})}}),
             "output would be empty: input [1, 1, 2, 2] with kernel 3x3, dilation 1x1, padding "
             "[0, 1, 0, 0]");
  const std::string e =
      located_error({"conv2d", with("padding", std::string("half")), {f32({1, 1, 5, 5})}}, "padding");
  EXPECT_EQ(e.rfind("configs/x.yaml:9:7: layer 'l': field 'padding'", 0), 0u) << e;
}

// ---------------------------------------------------------------- pooling

const Floats kGrid = {1, 5, 2, 0,  //
                      3, 4, 8, 6,  //
                      9, 7, 1, 2,  //
                      0, 2, 3, 11};

TEST(PoolPadding, MaxSamePadsTheBottomRightAndNeverWins) {
  // 3x3 windows, stride 2, 'same' on 4x4: pads (0, 1), windows at rows / columns {0, 2}.
  AttrMap same = attr_map({{"kernel", 3}, {"stride", 2}, {"padding", std::string("same")}});
  Floats neg = kGrid;
  for (float& v : neg) v = -v;
  OpHarness h(builtin_registry(), {"maxpool", same, {f32({1, 1, 4, 4})}, {neg}});
  EXPECT_EQ(h.output_desc().shape, (Shape{1, 1, 2, 2}));
  EXPECT_EQ(h.forward(), (Floats{-1, 0, 0, -1}));
  OpHarness p(builtin_registry(), {"maxpool", same, {f32({1, 1, 4, 4})}, {kGrid}});
  EXPECT_EQ(p.forward(), (Floats{9, 8, 9, 11}));
  // Explicit [top, bottom, left, right] = [0, 1, 0, 1] is the same window geometry.
  OpHarness e(builtin_registry(),
              {"maxpool", attr_map({{"kernel", 3}, {"stride", 2}, {"padding", Ints{0, 1, 0, 1}}}),
               {f32({1, 1, 4, 4})}, {kGrid}});
  EXPECT_EQ(e.forward(), (Floats{9, 8, 9, 11}));
  // Xception's pools: 147 -> 74 -> 37 -> 19 -> 10.
  for (auto [in, out] : {std::pair<int64_t, int64_t>{147, 74}, {74, 37}, {37, 19}, {19, 10}})
    EXPECT_EQ(out_shape({"maxpool", same, {f32({1, 1, in, in})}}), (Shape{1, 1, out, out}));
}

TEST(PoolPadding, AverageOverRealElementsOrTheWholeWindow) {
  // 3x3 windows, stride 1, 'same' on 1..9 in 3x3 (InceptionV3's branch pools): the corner divides
  // by 4, the edge by 6, the centre by 9.
  OpHarness t(builtin_registry(),
              {"avgpool",
               attr_map({{"kernel", 3}, {"stride", 1}, {"padding", std::string("same")},
                         {"count_include_pad", false}}),
               {f32({1, 1, 3, 3})}, {iota(9)}});
  expect_near_all(t.forward(), {12 / 4.0, 21 / 6.0, 16 / 4.0, 27 / 6.0, 45 / 9.0, 33 / 6.0,
                                24 / 4.0, 39 / 6.0, 28 / 4.0},
                  1e-6);
  // Counting the padding: every window divides by 9.
  OpHarness c(builtin_registry(),
              {"avgpool", attr_map({{"kernel", 3}, {"stride", 1}, {"padding", 1}}), {f32({1, 1, 3, 3})},
               {iota(9)}});
  expect_near_all(c.forward(), {12 / 9.0, 21 / 9.0, 16 / 9.0, 27 / 9.0, 45 / 9.0, 33 / 9.0,
                                24 / 9.0, 39 / 9.0, 28 / 9.0},
                  1e-6);
  // The gradient of the excluding average: each output spreads dy / (its count).
  auto g = t.gradients({4, 0, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_EQ(g[0], (Floats{1, 1, 0, 1, 1, 0, 0, 0, 0}));
  // PSPNet's pyramid pools: kernel = stride = [6, 9] on 12x18 -> 2x2.
  EXPECT_EQ(out_shape({"avgpool", attr_map({{"kernel", Ints{6, 9}}, {"padding", std::string("same")},
                                             {"count_include_pad", false}}),
                       {f32({1, 1, 12, 18})}}),
            (Shape{1, 1, 2, 2}));
}

TEST(PoolPadding, Errors) {
  EXPECT_HAS(case_error({"maxpool", attr_map({{"kernel", 2}, {"count_include_pad", false}}), {f32({1, 1, 4, 4})}}),
             "unknown field");
  EXPECT_HAS(case_error({"avgpool", attr_map({{"kernel", 3}, {"padding", Ints{0, 2, 0, 0}}}), {f32({1, 1, 4, 4})}}),
             "padding 2 must be at most half the kernel 3");
  EXPECT_HAS(case_error({"avgpool", attr_map({{"kernel", Ints{3, 1}}, {"padding", Ints{0, 0, 1, 0}}}),
                         {f32({1, 1, 4, 4})}}),
             "padding 1 must be at most half the kernel 1");
  EXPECT_HAS(case_error({"maxpool", attr_map({{"kernel", 3}, {"padding", std::string("full")}}), {f32({1, 1, 4, 4})}}),
             "not one of: same, valid");
  const std::string e = located_error(
      {"avgpool", attr_map({{"kernel", 2}, {"count_include_pad", 1}}), {f32({1, 1, 4, 4})}},
      "count_include_pad");
  EXPECT_EQ(e.rfind("configs/x.yaml:9:7: layer 'l': field 'count_include_pad': expected true or false", 0), 0u) << e;
}

// ---------------------------------------------------------------- batchnorm without scale

TEST(BatchNormNoScale, ParamsForwardAndNoWeightGradient) {
  OpHarness h(builtin_registry(),
              {"batchnorm", attr_map({{"scale", false}}), {f32({4, 1})}, {{1, 2, 3, 4}}});
  const auto ps = h.param_specs();
  ASSERT_EQ(ps.size(), 3u);
  EXPECT_EQ(ps[0].suffix, "bias");
  EXPECT_EQ(ps[1].suffix, "running_mean");
  EXPECT_EQ(ps[2].suffix, "running_var");
  h.set_param(0, {0.5f});  // beta
  const double s = 1.0 / std::sqrt(1.25 + 1e-5);
  expect_near_all(h.forward(), {-1.5 * s + 0.5, -0.5 * s + 0.5, 0.5 * s + 0.5, 1.5 * s + 0.5}, 1e-6);
  EXPECT_NEAR(h.input(2)[0], 0.25, 1e-7);  // running mean, updated as with a scale
  h.gradients(h.random_dy(3));
  for (NodeId n : h.backward_nodes()) EXPECT_NE(h.graph().node(n).op, "batchnorm_grad_weight");
  EXPECT_EQ(h.backward_nodes().size(), 2u);  // grad_input, grad_bias
  EXPECT_HAS(case_error({"batchnorm", attr_map({{"scale", std::string("no")}}), {f32({2, 3})}}),
             "'scale': expected true or false");
}

// ---------------------------------------------------------------- upsample

TEST(UpsampleBilinear, EqualsPyTorchAlignCornersFalse) {
  // torch.nn.functional.interpolate(x, scale_factor=2, mode='bilinear', align_corners=False).
  OpHarness h(builtin_registry(),
              {"upsample", attr_map({{"factor", 2}, {"mode", std::string("bilinear")}}), {f32({1, 1, 2, 2})},
               {{1, 2, 3, 4}}});
  EXPECT_EQ(h.forward(), (Floats{1.0f, 1.25f, 1.75f, 2.0f, 1.5f, 1.75f, 2.25f, 2.5f,  //
                                 2.5f, 2.75f, 3.25f, 3.5f, 3.0f, 3.25f, 3.75f, 4.0f}));
  // scale_factor=(1, 2) on 0..5 in 2x3: rows unchanged.
  OpHarness w(builtin_registry(),
              {"upsample", attr_map({{"factor", Ints{1, 2}}, {"mode", std::string("bilinear")}}),
               {f32({1, 1, 2, 3})}, {{0, 1, 2, 3, 4, 5}}});
  EXPECT_EQ(w.forward(), (Floats{0, 0.25f, 0.75f, 1.25f, 1.75f, 2, 3, 3.25f, 3.75f, 4.25f, 4.75f, 5}));
  // scale_factor=3: the first row of 6x9 (PyTorch's, up to FP32 rounding of the thirds).
  OpHarness t(builtin_registry(),
              {"upsample", attr_map({{"factor", 3}, {"mode", std::string("bilinear")}}), {f32({1, 1, 2, 3})},
               {{0, 1, 2, 3, 4, 5}}});
  const Floats y = t.forward();
  const Floats row(y.begin(), y.begin() + 9);
  expect_near_all(row, {0, 0, 1 / 3.0, 2 / 3.0, 1, 4 / 3.0, 5 / 3.0, 2, 2}, 1e-6);
  // The gradient of an all-ones dy gives every input its total weight: f * f = 4 in the
  // interior and at the edges alike (bilinear weights sum to 1 per output).
  EXPECT_EQ(h.gradients(Floats(16, 1.0f))[0], (Floats{4, 4, 4, 4}));
}

TEST(UpsampleBilinear, NearestTakesPerAxisFactors) {
  OpHarness h(builtin_registry(), {"upsample", attr_map({{"factor", Ints{1, 2}}}), {f32({1, 1, 2, 2})}, {{1, 2, 3, 4}}});
  EXPECT_EQ(h.forward(), (Floats{1, 1, 2, 2, 3, 3, 4, 4}));
  EXPECT_EQ(h.gradients({1, 2, 3, 4, 5, 6, 7, 8})[0], (Floats{3, 7, 11, 15}));
}

TEST(UpsampleBilinear, Errors) {
  EXPECT_HAS(case_error({"upsample", attr_map({{"factor", 2}, {"mode", std::string("bicubic")}}), {f32({1, 1, 2, 2})}}),
             "'bicubic' is not one of: nearest, bilinear");
  EXPECT_HAS(case_error({"upsample", attr_map({{"factor", Ints{2, 2, 2}}}), {f32({1, 1, 2, 2})}}),
             "expected 2 values, got 3");
  EXPECT_HAS(case_error({"upsample", attr_map({{"factor", Ints{2, 0}}}), {f32({1, 1, 2, 2})}}), "out of range");
  const std::string e = located_error(
      {"upsample", attr_map({{"factor", 2}, {"mode", std::string("linear")}}), {f32({1, 1, 2, 2})}}, "mode");
  EXPECT_EQ(e.rfind("configs/x.yaml:9:7: layer 'l': field 'mode'", 0), 0u) << e;
}

}  // namespace
}  // namespace remat
