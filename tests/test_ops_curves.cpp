// sigmoid, tanh, hardsigmoid, hardswish, leaky_relu, gelu_erf, silu, erf, sqrt, pow, affine,
// channel_scale, channel_shift and row_mean (the activations, powers of data, scalar arithmetic,
// the squeeze-excitation gate of MobileNetV3, RegNetY, LR-ASPP and the broadcasts that keep the
// last axes): values against their definitions (and PyTorch's values where it spells them
// differently), which value each gradient reads, channel_scale's channels-last form bit for bit,
// and the errors. Their gradients against central differences, CUDA and bf16 run with the other
// spatial cases (tests/op_cases.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "tests/op_cases.h"
#include "tests/op_harness.h"
#include "tests/op_test_util.h"

namespace remat {
namespace {

using Floats = std::vector<float>;

Floats run(const std::string& op, AttrMap attrs, const Floats& x) {
  OpHarness h(builtin_registry(), {op, attrs, {f32({1, static_cast<int64_t>(x.size())})}, {x}});
  return h.forward();
}

TEST(Curves, ValuesAreTheirDefinitions) {
  const Floats x = {-5.0f, -3.0f, -1.0f, 0.0f, 0.5f, 3.0f, 4.0f};
  Floats sig, th, gelu, silu, erf;
  for (float v : x) {
    const double d = v;
    erf.push_back(static_cast<float>(std::erf(d)));
    sig.push_back(static_cast<float>(1.0 / (1.0 + std::exp(-d))));
    th.push_back(static_cast<float>(std::tanh(d)));
    gelu.push_back(static_cast<float>(0.5 * d * (1.0 + std::erf(d / std::sqrt(2.0)))));
    silu.push_back(static_cast<float>(d * (1.0 / (1.0 + std::exp(-d)))));
  }
  EXPECT_EQ(run("sigmoid", {}, x), sig);
  EXPECT_EQ(run("tanh", {}, x), th);
  EXPECT_EQ(run("silu", {}, x), silu);
  EXPECT_EQ(run("erf", {}, x), erf);
  const Floats g = run("gelu_erf", {}, x);  // 1 / sqrt 2 as a product, not a quotient: 1 ulp
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(g[i], gelu[i], 1e-7 * (1 + std::fabs(gelu[i])));
  // PyTorch: F.hardsigmoid = relu6(x + 3) / 6, F.hardswish = x relu6(x + 3) / 6.
  EXPECT_EQ(run("hardsigmoid", {}, x),
            (Floats{0, 0, 1.0f / 3, 0.5f, 7.0f / 12, 1, 1}));
  EXPECT_EQ(run("hardswish", {}, x), (Floats{0, 0, -1.0f / 3, 0, 0.5f * 3.5f / 6, 3, 4}));
  // ONNX's HardSigmoid default: alpha 0.2, beta 0.5.
  EXPECT_EQ(run("hardsigmoid", attr_map({{"alpha", 0.2}, {"beta", 0.5}}), x),
            (Floats{0, 0, 0.3f, 0.5f, 0.6f, 1, 1}));
  EXPECT_EQ(run("leaky_relu", {}, x), (Floats{-0.05f, -0.03f, -0.01f, 0, 0.5f, 3, 4}));
  EXPECT_EQ(run("leaky_relu", attr_map({{"alpha", 0.2}}), x),
            (Floats{-1.0f, -0.6f, -0.2f, 0, 0.5f, 3, 4}));
}

// sqrt is FP32's correctly rounded sqrt (NaN below 0); pow by 2 and 3 the products, by -1 the
// reciprocal, by other exponents the library's pow in double, rounded once; the gradients
// dy / (2 y) and dy e x^(e - 1) (0 for e = 0), as PyTorch's.
TEST(Curves, SqrtAndPowersAreTheirDefinitions) {
  const Floats x = {0.0f, 0.25f, 2.0f, 3.0f, 1e-3f, 7.5f};
  Floats root, cube, pow15;
  for (float v : x) {
    root.push_back(std::sqrt(v));
    cube.push_back(static_cast<float>(double{v} * v * v));
    pow15.push_back(static_cast<float>(std::pow(double{v}, 1.5)));
  }
  EXPECT_EQ(run("sqrt", {}, x), root);
  EXPECT_EQ(run("pow", attr_map({{"exponent", 3.0}}), x), cube);
  EXPECT_EQ(run("pow", attr_map({{"exponent", 1.5}}), x), pow15);
  EXPECT_TRUE(std::isnan(run("sqrt", {}, {-1.0f})[0]));
  EXPECT_EQ(run("pow", attr_map({{"exponent", 2.0}}), {-3.0f}), (Floats{9.0f}));
  // -1: FP32's reciprocal 1.0f / v (a division in double rounded to FP32 is correctly rounded).
  const Floats y = {3.0f, -7.0f, 0.1f, 1e-3f, 6.0f};
  Floats reciprocal;
  for (float v : y) reciprocal.push_back(1.0f / v);
  EXPECT_EQ(run("pow", attr_map({{"exponent", -1.0}}), y), reciprocal);
  EXPECT_EQ(run("pow", attr_map({{"exponent", -1.0}}), {0.0f})[0],
            std::numeric_limits<float>::infinity());
  OpHarness r(builtin_registry(), {"sqrt", {}, {f32({1, 2})}, {{4.0f, 0.25f}}});
  EXPECT_EQ(r.gradients({1.0f, 3.0f})[0], (Floats{0.25f, 3.0f}));  // dy / (2 y)
  OpHarness p(builtin_registry(),
              {"pow", attr_map({{"exponent", 3.0}}), {f32({1, 2})}, {{2.0f, -1.0f}}});
  EXPECT_EQ(p.gradients({1.0f, 2.0f})[0], (Floats{12.0f, 6.0f}));  // 3 dy x^2
  OpHarness z(builtin_registry(),
              {"pow", attr_map({{"exponent", 0.0}}), {f32({1, 2})}, {{0.0f, 5.0f}}});
  EXPECT_EQ(z.forward(), (Floats{1.0f, 1.0f}));
  EXPECT_EQ(z.gradients({1.0f, 1.0f})[0], (Floats{0.0f, 0.0f}));
  EXPECT_HAS(case_error({"pow", {}, {f32({1, 2})}}), "'exponent': is required");
}

TEST(Curves, GradientsReadTheOutputOrTheInputAsDocumented) {
  for (const char* op : {"sigmoid", "tanh", "leaky_relu", "hardsigmoid", "hardswish", "gelu_erf",
                         "silu", "sqrt", "pow", "erf"}) {
    SCOPED_TRACE(op);
    const AttrMap a = std::string(op) == "pow" ? attr_map({{"exponent", 1.5}}) : AttrMap{};
    OpHarness h(builtin_registry(), {op, a, {f32({2, 3})}, {positive_values(6)}});
    h.gradients(h.random_dy(3));
    ASSERT_EQ(h.backward_nodes().size(), 1u);
    const Node& b = h.graph().node(h.backward_nodes()[0]);
    EXPECT_EQ(b.op, std::string(op) + "_grad");
    const bool reads_y = std::string(op) == "sigmoid" || std::string(op) == "tanh" ||
                         std::string(op) == "leaky_relu" || std::string(op) == "sqrt";
    EXPECT_EQ(b.inputs.at(1), reads_y ? h.node().output : h.node().inputs.at(0));
  }
}

// y = scale x + shift in double, rounded once; its gradient is an affine of dy that reads
// neither x nor y.
TEST(Curves, AffineIsScaleXPlusShiftAndItsGradientScalesDy) {
  OpHarness h(builtin_registry(), {"affine", attr_map({{"scale", -0.5}, {"shift", 2.0}}), {f32({1, 3})},
                                   {{1.0f, -3.0f, 0.1f}}});
  EXPECT_EQ(h.forward(), (Floats{1.5f, 3.5f, static_cast<float>(-0.5 * double{0.1f} + 2.0)}));
  EXPECT_EQ(h.gradients({2, 4, 6})[0], (Floats{-1, -2, -3}));
  ASSERT_EQ(h.backward_nodes().size(), 1u);
  const Node& b = h.graph().node(h.backward_nodes()[0]);
  EXPECT_EQ(b.op, "affine");
  EXPECT_EQ(b.inputs.size(), 1u);
  EXPECT_EQ(std::get<double>(b.attrs.values.at("scale")), -0.5);
  EXPECT_FALSE(b.attrs.has("shift"));
}

TEST(Curves, HardSwishGradientIsPyTorchs) {
  // torch.ops.aten.hardswish_backward: 0 below -3, dy (x / 3 + 0.5) on [-3, 3] (-dy / 2 at -3
  // itself, where the forward has its kink), dy above.
  OpHarness h(builtin_registry(), {"hardswish", {}, {f32({1, 5})}, {{-3.5f, -3.0f, 0.75f, 3.0f, 3.5f}}});
  const Floats g = h.gradients({2, 2, 2, 2, 2})[0];
  EXPECT_EQ(g, (Floats{0, 2 * -0.5f, 2 * (0.25f + 0.5f), 2 * 1.5f, 2}));
}

TEST(Curves, Errors) {
  EXPECT_NE(case_error({"leaky_relu", attr_map({{"alpha", -0.1}}), {f32({2, 3})}}).find("alpha"),
            std::string::npos);
  EXPECT_NE(case_error({"sigmoid", {}, {i32({2, 3})}}).find("float"), std::string::npos);
  EXPECT_NE(case_error({"hardswish", attr_map({{"alpha", 0.2}}), {f32({2, 3})}}).find("alpha"),
            std::string::npos);
  EXPECT_NE(case_error({"affine", attr_map({{"alpha", 0.2}}), {f32({2, 3})}}).find("alpha"),
            std::string::npos);
}

TEST(ChannelScale, ScalesEachPlaneAndSumsEachPlaneForTheScaleGradient) {
  // x [1, 2, 1, 3] = 1..6, s = [2, -1].
  OpHarness h(builtin_registry(),
              {"channel_scale", {}, {f32({1, 2, 1, 3}), f32({1, 2})}, {{1, 2, 3, 4, 5, 6}, {2, -1}}});
  EXPECT_EQ(h.forward(), (Floats{2, 4, 6, -4, -5, -6}));
  const auto g = h.gradients({1, 1, 1, 1, 0, 2});
  EXPECT_EQ(g[0], (Floats{2, 2, 2, -1, 0, -2}));  // dy * s
  EXPECT_EQ(g[1], (Floats{6, 4 + 12}));           // sum of dy * x per plane
  ASSERT_EQ(h.backward_nodes().size(), 2u);
  EXPECT_EQ(h.graph().node(h.backward_nodes()[0]).op, "channel_scale");
  EXPECT_EQ(h.graph().node(h.backward_nodes()[1]).op, "channel_scale_grad");
}

TEST(ChannelScale, ChannelsLastIsBitIdentical) {
  const int64_t n = 2, c = 3, hh = 4, w = 5;
  OpCase first{"channel_scale", {}, {f32({n, c, hh, w}), f32({n, c})}};
  first.seed = 5;
  OpHarness a(builtin_registry(), first);
  OpHarness b(builtin_registry(), {"channel_scale", attr_map({{"data_format", std::string("channels_last")}}),
                                   {f32({n, hh, w, c}), f32({n, c})}});
  auto nhwc = [&](const Floats& v) {  // NCHW values stored NHWC
    Floats out(v.size());
    for (int64_t s = 0; s < n; ++s)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t i = 0; i < hh * w; ++i)
          out[static_cast<size_t>((s * hh * w + i) * c + ch)] = v[static_cast<size_t>((s * c + ch) * hh * w + i)];
    return out;
  };
  b.set_input(0, nhwc(a.input(0)));
  b.set_input(1, a.input(1));
  EXPECT_EQ(nhwc(a.forward()), b.forward());
  const Floats dy = a.random_dy(7);
  const auto ga = a.gradients(dy);
  const auto gb = b.gradients(nhwc(dy));
  EXPECT_EQ(nhwc(ga[0]), gb[0]);
  EXPECT_EQ(ga[1], gb[1]);
}

TEST(ChannelScale, Errors) {
  EXPECT_NE(case_error({"channel_scale", {}, {f32({2, 3, 4, 4}), f32({2, 4})}}).find("[2, 3]"),
            std::string::npos);
  EXPECT_NE(case_error({"channel_scale", {}, {f32({3}), f32({3})}}).find("rank at least axes 2"),
            std::string::npos);
  EXPECT_NE(case_error({"channel_scale", attr_map({{"axes", int64_t{2}}}), {f32({2, 3, 4}), f32({2, 4})}})
                .find("[2, 3]"),
            std::string::npos);
  EXPECT_NE(case_error({"channel_scale",
                        attr_map({{"axes", int64_t{1}}, {"data_format", std::string("channels_last")}}),
                        {f32({2, 3, 4, 4}), f32({2})}})
                .find("axes"),
            std::string::npos);
}

// x [2, 1, 3] + s [2, 1] over each row; ds sums each row of dy; dx = dy with no node.
TEST(ChannelShift, ShiftsEachRowAndSumsEachRowForTheShiftGradient) {
  OpHarness h(builtin_registry(), {"channel_shift", {}, {f32({2, 1, 3}), f32({2, 1})},
                                   {{1, 2, 3, 4, 5, 6}, {10, -0.5f}}});
  EXPECT_EQ(h.forward(), (Floats{11, 12, 13, 3.5f, 4.5f, 5.5f}));
  const auto g = h.gradients({1, 2, 3, 0.5f, 0, -2});
  EXPECT_EQ(g[0], (Floats{1, 2, 3, 0.5f, 0, -2}));
  EXPECT_EQ(g[1], (Floats{6, -1.5f}));
  ASSERT_EQ(h.backward_nodes().size(), 1u);
  EXPECT_EQ(h.graph().node(h.backward_nodes()[0]).op, "channel_shift_grad");
  EXPECT_HAS(case_error({"channel_shift", {}, {f32({2, 3, 4}), f32({2, 4})}}), "[2, 3]");
  EXPECT_HAS(case_error({"channel_shift", {}, {f32({2, 3}), f32({2, 3})}}),
             "rank above axes + keep_last = 2");
}

// With axes 2 on [N, T, D]: each row of D values times its own s[n, t] (RMSNorm's x * r).
TEST(ChannelScale, ScalesTheRowsAfterItsAxes) {
  // x [2, 1, 3] = 1..6, s [2, 1] = [2, -1].
  OpHarness h(builtin_registry(), {"channel_scale", attr_map({{"axes", int64_t{2}}}),
                                   {f32({2, 1, 3}), f32({2, 1})}, {{1, 2, 3, 4, 5, 6}, {2, -1}}});
  EXPECT_EQ(h.forward(), (Floats{2, 4, 6, -4, -5, -6}));
  const auto g = h.gradients({1, 1, 1, 1, 0, 2});
  EXPECT_EQ(g[0], (Floats{2, 2, 2, -1, 0, -2}));
  EXPECT_EQ(g[1], (Floats{6, 4 + 12}));
}

// Note [kept axes]: with axes 1 and keep_last 1, s [N, D] spans the first and last axes of
// x [N, T, D] and broadcasts over T (adaLN's x * s[:, None, :], x + s[:, None, :]); a mean over
// T keeps [N, D]. x [2, 2, 3] = 1..12 throughout, dy = x.
const Floats kTokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
AttrMap kept_last_one() { return attr_map({{"axes", int64_t{1}}, {"keep_last", int64_t{1}}}); }

TEST(ChannelShift, AddsAShiftOfTheLastAxesToEveryMiddleRow) {
  OpHarness h(builtin_registry(), {"channel_shift", kept_last_one(), {f32({2, 2, 3}), f32({2, 3})},
                                   {kTokens, {10, 20, 30, -1, -2, -3}}});
  EXPECT_EQ(h.forward(), (Floats{11, 22, 33, 14, 25, 36, 6, 6, 6, 9, 9, 9}));
  const auto g = h.gradients(kTokens);
  EXPECT_EQ(g[0], kTokens);
  EXPECT_EQ(g[1], (Floats{1 + 4, 2 + 5, 3 + 6, 7 + 10, 8 + 11, 9 + 12}));
  EXPECT_HAS(case_error({"channel_shift", kept_last_one(), {f32({2, 3}), f32({2, 3})}}),
             "rank above axes + keep_last = 2");
  EXPECT_HAS(case_error({"channel_shift", kept_last_one(), {f32({2, 2, 3}), f32({2, 2})}}),
             "[2, 3]");
}

TEST(ChannelScale, ScalesEveryMiddleRowByAScaleOfTheLastAxes) {
  OpHarness h(builtin_registry(), {"channel_scale", kept_last_one(), {f32({2, 2, 3}), f32({2, 3})},
                                   {kTokens, {2, -1, 0.5f, 1, 0, -2}}});
  const Floats y = {2, -2, 1.5f, 8, -5, 3, 7, 0, -18, 10, 0, -24};
  EXPECT_EQ(h.forward(), y);
  const auto g = h.gradients(kTokens);
  EXPECT_EQ(g[0], y);  // dy s, dy = x
  // ds = the sums over T of dy x = x^2.
  EXPECT_EQ(g[1], (Floats{1 + 16, 4 + 25, 9 + 36, 49 + 100, 64 + 121, 81 + 144}));
  EXPECT_HAS(case_error({"channel_scale", attr_map({{"keep_last", int64_t{1}},
                                                    {"data_format", std::string("channels_last")}}),
                         {f32({2, 2, 2, 3}), f32({2, 3})}}),
             "keep_last");
}

TEST(RowMean, AveragesTheMiddleAxesAndSpreadsTheGradientBack) {
  OpHarness h(builtin_registry(), {"row_mean", kept_last_one(), {f32({2, 2, 3})}, {kTokens}});
  EXPECT_EQ(h.forward(), (Floats{2.5f, 3.5f, 4.5f, 8.5f, 9.5f, 10.5f}));
  const auto g = h.gradients({2, 4, 6, 8, 10, 12});
  EXPECT_EQ(g[0], (Floats{1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6}));  // dy / 2 to both rows
  EXPECT_HAS(case_error({"row_mean", kept_last_one(), {f32({2, 3})}}),
             "rank above axes + keep_last = 2");
}

}  // namespace
}  // namespace remat
