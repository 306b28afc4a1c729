// The channels-last forms of the image ops (Note [channels-last layout] in
// models/channels_last.cpp) against their channels-first forms on the same values: each case
// runs once on NCHW tensors and once with data_format: channels_last on the same values stored
// NHWC, with the same parameters and the same output gradient, and compares the output and
// every gradient. On the CPU both forms add the same terms in the same order (the convolution
// transposes each image and runs the channels-first pieces; pooling, batch norm and the bias
// gradient walk the same sums with other strides), so they must agree bit for bit. The
// channels-last convolution's gradients are also checked against central differences, and the
// layout op's.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/op_harness.h"
#include "tests/op_test_util.h"

namespace remat {
namespace {

using Floats = std::vector<float>;

Shape nhwc_shape(const Shape& s) { return {s[0], s[2], s[3], s[1]}; }

// Values of an NCHW tensor of shape `s` stored NHWC (to_last), or back.
Floats permute(const Floats& v, const Shape& s, bool to_last) {
  Floats out(v.size());
  const int64_t c = s[1], hw = s[2] * s[3];
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < hw; ++i) {
        const int64_t first = (n * c + ch) * hw + i, last = (n * hw + i) * c + ch;
        out[to_last ? last : first] = v[to_last ? first : last];
      }
  return out;
}
Floats to_nhwc(const Floats& v, const Shape& s) { return permute(v, s, true); }
Floats to_nchw(const Floats& v, const Shape& s) { return permute(v, s, false); }

// What both runs of one case produced, gradients NCHW again.
struct Runs {
  Floats y_first, y_last;
  std::vector<Floats> g_first, g_last;
};

// Runs op `op` with `attrs` on x (NCHW shape `x`) both ways, inputs random from `seed`.
Runs run_both(const std::string& op, AttrMap attrs, const Shape& x, uint64_t seed) {
  OpCase first{op, attrs, {f32(x)}};
  first.seed = seed;
  OpHarness a(builtin_registry(), first);
  AttrMap last_attrs = attrs;
  last_attrs.set("data_format", std::string("channels_last"));
  OpCase last{op, last_attrs, {f32(nhwc_shape(x))}};
  OpHarness b(builtin_registry(), last);
  for (int i = 0; i < a.num_inputs(); ++i) {
    if (a.input_desc(i).dtype != DType::F32) continue;
    b.set_input(i, i < a.num_data_inputs() ? to_nhwc(a.input(i), x) : a.input(i));
  }
  Runs r;
  const Shape y = a.output_desc().shape;
  const bool image_out = y.size() == 4;
  r.y_first = a.forward();
  r.y_last = b.forward();
  if (image_out) r.y_last = to_nchw(r.y_last, y);
  const Floats dy = a.random_dy(seed + 1);
  r.g_first = a.gradients(dy);
  r.g_last = b.gradients(image_out ? to_nhwc(dy, y) : dy);
  for (int i = 0; i < a.num_data_inputs(); ++i)
    if (!r.g_last[i].empty()) r.g_last[i] = to_nchw(r.g_last[i], x);
  return r;
}

void expect_identical(const Runs& r, const std::string& what) {
  EXPECT_EQ(r.y_first, r.y_last) << what << ": output";
  ASSERT_EQ(r.g_first.size(), r.g_last.size()) << what;
  for (size_t i = 0; i < r.g_first.size(); ++i)
    EXPECT_EQ(r.g_first[i], r.g_last[i]) << what << ": gradient of input " << i;
}

struct ConvCase {
  std::string name;
  AttrMap attrs;
  Shape x;  // NCHW
};

TEST(ChannelsLastOps, Conv2dIsBitIdenticalInBothLayouts) {
  const std::vector<ConvCase> cases = {
      {"3x3 same", attr_map({{"filters", 5}, {"kernel", 3}, {"padding", 1}}), {2, 3, 6, 7}},
      {"3x3 stride 2, relu",
       attr_map({{"filters", 4}, {"kernel", 3}, {"stride", 2}, {"padding", 1},
                 {"activation", std::string("relu")}}),
       {2, 4, 7, 6}},
      {"1x1 pointwise", attr_map({{"filters", 6}, {"kernel", 1}}), {3, 5, 4, 4}},
      {"1x1 stride 2, no bias",
       attr_map({{"filters", 3}, {"kernel", 1}, {"stride", 2}, {"bias", false}}),
       {2, 4, 5, 5}},
      {"groups", attr_map({{"filters", 6}, {"kernel", 3}, {"padding", 1}, {"groups", 2}}),
       {2, 4, 5, 5}},
      {"depthwise pointwise groups", attr_map({{"filters", 4}, {"kernel", 1}, {"groups", 4}}),
       {2, 4, 3, 3}},
      {"same at stride 2 (pads 0, 1)",
       attr_map({{"filters", 3}, {"kernel", 3}, {"stride", 2}, {"padding", std::string("same")}}),
       {2, 4, 6, 6}},
      {"dilation 2, 2x3 kernel",
       attr_map({{"filters", 2}, {"kernel", std::vector<int64_t>{2, 3}}, {"dilation", 2},
                 {"padding", 2}}),
       {1, 3, 8, 7}},
  };
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(c.name);
    expect_identical(run_both("conv2d", c.attrs, c.x, 11), c.name);
  }
}

TEST(ChannelsLastOps, Conv2dChannelsLastGradientsMatchCentralDifferences) {
  AttrMap attrs = attr_map({{"filters", 3}, {"kernel", 3}, {"stride", 2}, {"padding", 1},
                            {"data_format", std::string("channels_last")}});
  OpHarness h(builtin_registry(), OpCase{"conv2d", attrs, {f32({2, 5, 5, 4})}});
  EXPECT_EQ(h.output_desc().shape, (Shape{2, 3, 3, 3}));
  EXPECT_EQ(h.input_desc(1).shape, (Shape{3, 4, 3, 3}));  // the weight stays KCRS
  EXPECT_TRUE(h.check_gradients(kTolLinear));
}

TEST(ChannelsLastOps, PoolingPaddingCroppingAndUpsamplingAreBitIdenticalInBothLayouts) {
  const std::vector<std::pair<std::string, AttrMap>> cases = {
      {"maxpool", attr_map({{"kernel", 2}})},
      {"maxpool", attr_map({{"kernel", 3}, {"stride", 2}, {"padding", 1}})},
      {"avgpool", attr_map({{"kernel", 3}, {"stride", 2}, {"padding", 1}})},
      {"avgpool",
       attr_map({{"kernel", 3}, {"stride", 1}, {"padding", 1}, {"count_include_pad", false}})},
      {"global_avgpool", AttrMap{}},
      {"zeropad", attr_map({{"padding", std::vector<int64_t>{1, 2, 0, 3}}})},
      {"zeropad", attr_map({{"padding", std::string("same")}, {"kernel", 3}, {"stride", 2}})},
      {"crop", attr_map({{"cropping", std::vector<int64_t>{1, 0, 2, 1}}})},
      {"maxpool", attr_map({{"kernel", 3}, {"stride", 2}, {"padding", std::string("same")}})},
      {"upsample", attr_map({{"factor", std::vector<int64_t>{2, 3}}})},
      {"upsample", attr_map({{"factor", 2}, {"mode", std::string("bilinear")}})},
  };
  for (const auto& [op, attrs] : cases) {
    SCOPED_TRACE(op);
    expect_identical(run_both(op, attrs, {2, 3, 6, 5}, 21), op);
  }
}

TEST(ChannelsLastOps, ChannelShuffleAndSliceAreBitIdenticalInBothLayouts) {
  const std::vector<std::pair<std::string, AttrMap>> cases = {
      {"channel_shuffle", attr_map({{"groups", 2}})},
      {"channel_shuffle", attr_map({{"groups", 3}})},
      {"channel_slice", attr_map({{"offset", 1}, {"channels", 4}})},
  };
  for (const auto& [op, attrs] : cases) {
    SCOPED_TRACE(op);
    expect_identical(run_both(op, attrs, {2, 6, 4, 3}, 23), op);
  }
}

TEST(ChannelsLastOps, BatchNormIsBitIdenticalInBothLayouts) {
  for (const char* mode : {"train", "inference"}) {
    for (bool scale : {true, false}) {
      SCOPED_TRACE(std::string(mode) + (scale ? " with scale" : " without scale"));
      const AttrMap attrs = attr_map({{"mode", std::string(mode)}, {"scale", scale}});
      expect_identical(run_both("batchnorm", attrs, {3, 4, 5, 3}, 31), "batchnorm");
    }
  }
}

// Two inputs of 3 and 5 channels (their gradients are concat_slice nodes).
TEST(ChannelsLastOps, ConcatIsBitIdenticalInBothLayouts) {
  OpCase first{"concat", {}, {f32({2, 3, 4, 5}), f32({2, 5, 4, 5})}};
  first.seed = 41;
  OpHarness a(builtin_registry(), first);
  OpHarness b(builtin_registry(),
              {"concat", attr_map({{"data_format", std::string("channels_last")}}),
               {f32({2, 4, 5, 3}), f32({2, 4, 5, 5})}});
  EXPECT_EQ(b.output_desc().shape, (Shape{2, 4, 5, 8}));
  b.set_input(0, to_nhwc(a.input(0), {2, 3, 4, 5}));
  b.set_input(1, to_nhwc(a.input(1), {2, 5, 4, 5}));
  EXPECT_EQ(to_nchw(b.forward(), {2, 8, 4, 5}), a.forward());
  const Floats dy = a.random_dy(42);
  const auto ga = a.gradients(dy);
  const auto gb = b.gradients(to_nhwc(dy, {2, 8, 4, 5}));
  EXPECT_EQ(to_nchw(gb.at(0), {2, 3, 4, 5}), ga.at(0));
  EXPECT_EQ(to_nchw(gb.at(1), {2, 5, 4, 5}), ga.at(1));
  EXPECT_HAS(case_error({"concat", attr_map({{"data_format", std::string("channels_last")}}),
                         {f32({2, 4, 5, 3}), f32({2, 4, 6, 5})}}),
             "every dimension but 3");
}

TEST(ChannelsLastOps, LayoutPermutesAndItsGradientPermutesBack) {
  OpHarness h(builtin_registry(), OpCase{"layout", attr_map({{"to", std::string("channels_last")}}),
                                         {f32({2, 3, 2, 4})}});
  EXPECT_EQ(h.output_desc().shape, (Shape{2, 2, 4, 3}));
  EXPECT_EQ(h.forward(), to_nhwc(h.input(0), {2, 3, 2, 4}));
  EXPECT_TRUE(h.check_gradients(kTolLinear));
  OpHarness back(builtin_registry(),
                 OpCase{"layout", attr_map({{"to", std::string("channels_first")}}),
                        {f32({2, 2, 4, 3})}});
  EXPECT_EQ(back.output_desc().shape, (Shape{2, 3, 2, 4}));
  EXPECT_EQ(back.forward(), to_nchw(back.input(0), {2, 3, 2, 4}));
  EXPECT_HAS(
      case_error({"layout", attr_map({{"to", std::string("channels_last")}}), {f32({2, 3})}}),
      "layout expects a 4-D image tensor");
  EXPECT_HAS(case_error({"layout", AttrMap{}, {f32({1, 1, 1, 1})}}), "to");
}

}  // namespace
}  // namespace remat
