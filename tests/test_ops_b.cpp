// Tests for batchnorm, pooling, upsample, dropout, softmax cross-entropy, sgd and adam: shape
// inference and its errors, hand-computed forward values, gradients against central differences
// (tests/op_harness.h), running statistics, replayable dropout masks and optimizer updates.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/rng.h"
#include "ops/registry.h"
#include "runtime/core/check.h"
#include "tests/op_harness.h"

namespace remat {
namespace {

const OpRegistry& registry() {
  static const OpRegistry r = make_builtin_registry();
  return r;
}

// The message of the UserError `f` throws ("" when it throws nothing, "<other>" otherwise).
std::string user_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  } catch (...) {
    return "<not a UserError>";
  }
  return "";
}

// The message of constructing a harness for `c` (parse + infer errors).
std::string case_error(OpCase c) {
  return user_error([&] { OpHarness h(registry(), c); });
}

::testing::AssertionResult contains(const std::string& s, const std::string& needle) {
  if (s.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << s << "' lacks '" << needle << "'";
}
#define EXPECT_HAS(haystack, needle) EXPECT_TRUE(contains((haystack), (needle)))

void expect_near_all(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(want[i]))) << "element " << i;
}

// Distinct, well-separated values (no pooling ties within eps): a permutation of 0..n-1, x0.1.
std::vector<float> distinct_values(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j)
    v[static_cast<size_t>(j)] = 0.1f * static_cast<float>((j * 37) % n) - 0.05f * n;
  return v;
}

// ---------------------------------------------------------------- registry

TEST(OpsB, RegisteredWithBackwardOpsHidden) {
  for (const char* name : {"batchnorm", "maxpool", "avgpool", "global_avgpool", "upsample",
                           "dropout", "softmax_xent", "softmax_xent_pixel", "sgd", "adam"})
    EXPECT_TRUE(registry().get(name).user_visible) << name;
  for (const char* name : {"batchnorm_grad_input", "batchnorm_grad_weight", "batchnorm_grad_bias",
                           "maxpool_grad", "avgpool_grad", "global_avgpool_grad", "upsample_grad",
                           "dropout_grad", "softmax_xent_grad", "softmax_xent_pixel_grad"})
    EXPECT_FALSE(registry().get(name).user_visible) << name;
  EXPECT_EQ(registry().get("softmax_xent").kind, NodeKind::Loss);
  EXPECT_EQ(registry().get("softmax_xent_pixel").kind, NodeKind::Loss);
  EXPECT_EQ(registry().get("sgd").kind, NodeKind::Update);
  EXPECT_EQ(registry().get("adam").kind, NodeKind::Update);
}

TEST(OpsB, CostsCountFlopsAndBytesWithoutWorkspace) {
  const std::vector<OpCase> cases = {
      {"batchnorm", {}, {f32({2, 3, 4, 4})}},
      {"maxpool", attr_map({{"kernel", int64_t(2)}}), {f32({2, 3, 4, 4})}},
      {"avgpool", attr_map({{"kernel", int64_t(2)}}), {f32({2, 3, 4, 4})}},
      {"global_avgpool", {}, {f32({2, 3, 4, 4})}},
      {"upsample", attr_map({{"factor", int64_t(2)}}), {f32({2, 3, 4, 4})}},
      {"dropout", {}, {f32({2, 3, 4, 4})}},
      {"softmax_xent", {}, {f32({2, 3}), i32({2})}},
      {"sgd", {}, {f32({5}), f32({5})}},
      {"adam", {}, {f32({5}), f32({5}), f32({5}), f32({5})}}};
  for (const OpCase& c : cases) {
    OpHarness h(registry(), c);
    std::vector<TensorDesc> in;
    for (int i = 0; i < h.num_inputs(); ++i) in.push_back(h.input_desc(i));
    OpCost cost = h.op().cost(*h.node().typed, in, h.output_desc());
    int64_t io = h.output_desc().bytes();
    for (const auto& d : in) io += d.bytes();
    EXPECT_GT(cost.flops, 0) << c.op;
    EXPECT_GE(cost.bytes_moved, io) << c.op;
    EXPECT_EQ(cost.workspace_bytes, 0) << c.op;
  }
}

// ---------------------------------------------------------------- batchnorm

TEST(BatchNorm, InferParamsAndErrors) {
  OpHarness h(registry(), {"batchnorm", {}, {f32({2, 3, 4, 5})}});
  EXPECT_EQ(h.output_desc(), f32({2, 3, 4, 5}));
  auto ps = h.param_specs();
  ASSERT_EQ(ps.size(), 4u);
  const char* names[] = {"weight", "bias", "running_mean", "running_var"};
  const ValueKind kinds[] = {ValueKind::Param, ValueKind::Param, ValueKind::Buffer,
                             ValueKind::Buffer};
  const InitKind inits[] = {InitKind::Ones, InitKind::Zeros, InitKind::Zeros, InitKind::Ones};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(ps[i].suffix, names[i]);
    EXPECT_EQ(ps[i].desc, f32({3}));
    EXPECT_EQ(ps[i].kind, kinds[i]);
    EXPECT_EQ(ps[i].init, inits[i]);
  }
  EXPECT_EQ(OpHarness(registry(), {"batchnorm", {}, {f32({6, 7})}}).output_desc(), f32({6, 7}));
  EXPECT_HAS(case_error({"batchnorm", {}, {f32({2, 3, 4})}}), "[N, C, H, W] or [N, F]");
  EXPECT_HAS(case_error({"batchnorm", {}, {f32({1, 3, 1, 1})}}), "more than 1 value per channel");
  EXPECT_EQ(case_error(
                {"batchnorm", attr_map({{"mode", std::string("inference")}}), {f32({1, 3, 1, 1})}}),
            "");
  EXPECT_HAS(case_error({"batchnorm", attr_map({{"mode", std::string("eval")}}), {f32({2, 3})}}),
             "train, inference");
  EXPECT_HAS(case_error({"batchnorm", attr_map({{"eps", 0.0}}), {f32({2, 3})}}), "'eps'");
  EXPECT_HAS(case_error({"batchnorm", attr_map({{"momentum", 1.5}}), {f32({2, 3})}}), "'momentum'");
  EXPECT_HAS(case_error({"batchnorm", attr_map({{"momentun", 0.1}}), {f32({2, 3})}}),
             "unknown field");
}

TEST(BatchNorm, ForwardFourNumbersAndRunningStats) {
  // x = 1, 2, 3, 4 in one feature: mean 2.5, biased var 1.25, unbiased var 5/3.
  OpHarness h(registry(), {"batchnorm", {}, {f32({4, 1})}, {{1, 2, 3, 4}}});
  h.set_param(0, {2.0f});  // gamma
  h.set_param(1, {0.5f});  // beta
  const double s = 2.0 / std::sqrt(1.25 + 1e-5);
  std::vector<float> y = h.forward();
  expect_near_all(y, {-1.5 * s + 0.5, -0.5 * s + 0.5, 0.5 * s + 0.5, 1.5 * s + 0.5}, 1e-6);
  // running = 0.9 * running + 0.1 * batch, from (0, 1).
  EXPECT_NEAR(h.input(3)[0], 0.25, 1e-7);
  EXPECT_NEAR(h.input(4)[0], 0.9 + 0.1 * 5.0 / 3.0, 1e-6);

  // A recomputation: no update, bit-identical output.
  h.first_compute = false;
  std::vector<float> y2 = h.forward();
  EXPECT_EQ(0, std::memcmp(y.data(), y2.data(), y.size() * sizeof(float)));
  EXPECT_NEAR(h.input(3)[0], 0.25, 1e-7);
  EXPECT_NEAR(h.input(4)[0], 0.9 + 0.1 * 5.0 / 3.0, 1e-6);

  // Next step's first computation updates once more.
  h.first_compute = true;
  h.step = 1;
  h.forward();
  EXPECT_NEAR(h.input(3)[0], 0.9 * 0.25 + 0.25, 1e-6);
  EXPECT_NEAR(h.input(4)[0], 0.9 * (0.9 + 0.5 / 3.0) + 0.5 / 3.0, 1e-6);
}

TEST(BatchNorm, ForwardChannelsOfNchw) {
  // [2, 2, 1, 2]: channel 0 holds 1, 3 (n=0) and 5, 7 (n=1): mean 4, var 5;
  // channel 1 holds 10, 20, 30, 40: mean 25, var 125.
  OpHarness h(registry(), {"batchnorm",
                           attr_map({{"momentum", 0.5}}),
                           {f32({2, 2, 1, 2})},
                           {{1, 3, 10, 20, 5, 7, 30, 40}}});
  h.set_param(0, {1, 1});  // gamma (params start random)
  h.set_param(1, {0, 0});  // beta
  const double a = 1 / std::sqrt(5 + 1e-5), b = 1 / std::sqrt(125 + 1e-5);
  expect_near_all(h.forward(), {-3 * a, -1 * a, -15 * b, -5 * b, 1 * a, 3 * a, 5 * b, 15 * b},
                  1e-6);
  expect_near_all(h.input(3), {0.5 * 4, 0.5 * 25}, 1e-6);
  expect_near_all(h.input(4), {0.5 + 0.5 * 20.0 / 3.0, 0.5 + 0.5 * 500.0 / 3.0}, 1e-5);
}

TEST(BatchNorm, InferenceUsesRunningStatsAndLeavesThem) {
  OpHarness h(
      registry(),
      {"batchnorm", attr_map({{"mode", std::string("inference")}}), {f32({3, 1})}, {{1, 2, 7}}});
  h.set_param(0, {3.0f});
  h.set_param(1, {-1.0f});
  h.set_param(2, {1.0f});  // running_mean
  h.set_param(3, {4.0f});  // running_var
  const double s = 3.0 / std::sqrt(4 + 1e-5);
  expect_near_all(h.forward(), {0 * s - 1, 1 * s - 1, 6 * s - 1}, 1e-6);
  EXPECT_EQ(h.input(3)[0], 1.0f);
  EXPECT_EQ(h.input(4)[0], 4.0f);
}

TEST(BatchNorm, GradientsTrainNchw) {
  OpHarness h(registry(), {"batchnorm", {}, {f32({2, 3, 2, 2})}});
  EXPECT_TRUE(h.check_gradients(kTolNormalize));
  auto g = h.gradients(h.random_dy(5));
  EXPECT_TRUE(g[3].empty());  // running stats: no gradient
  EXPECT_TRUE(g[4].empty());
}

TEST(BatchNorm, GradientsTrainFeatures) {
  OpHarness h(registry(), {"batchnorm", {}, {f32({5, 3})}, {}, 3});
  EXPECT_TRUE(h.check_gradients(kTolNormalize));
}

TEST(BatchNorm, GradientsInference) {
  OpHarness h(registry(),
              {"batchnorm", attr_map({{"mode", std::string("inference")}}), {f32({2, 2, 2, 2})}});
  h.set_param(2, {0.3f, -0.2f});
  h.set_param(3, {0.5f, 2.0f});
  EXPECT_TRUE(h.check_gradients(kTolNormalize));
}

// ---------------------------------------------------------------- pooling

const std::vector<float> kGrid = {1, 5, 2, 0,  //
                                  3, 4, 8, 6,  //
                                  9, 7, 1, 2,  //
                                  0, 2, 3, 11};

TEST(MaxPool, InferAndErrors) {
  auto out = [](AttrMap a, Shape s) {
    return OpHarness(registry(), {"maxpool", a, {f32(s)}}).output_desc();
  };
  EXPECT_EQ(out(attr_map({{"kernel", int64_t(2)}}), {1, 2, 5, 5}), f32({1, 2, 2, 2}));
  EXPECT_EQ(out(attr_map({{"kernel", int64_t(3)}, {"stride", int64_t(2)}, {"padding", int64_t(1)}}),
                {2, 1, 7, 7}),
            f32({2, 1, 4, 4}));
  EXPECT_EQ(out(attr_map({{"kernel", std::vector<int64_t>{2, 1}}}), {1, 1, 4, 3}),
            f32({1, 1, 2, 3}));
  EXPECT_HAS(case_error({"maxpool", attr_map({{"kernel", int64_t(3)}}), {f32({1, 1, 2, 2})}}),
             "maxpool kernel 3 larger than padded input 2x2");
  EXPECT_HAS(case_error({"maxpool", {}, {f32({1, 1, 4, 4})}}), "'kernel': is required");
  EXPECT_HAS(case_error({"maxpool",
                         attr_map({{"kernel", int64_t(2)}, {"padding", int64_t(2)}}),
                         {f32({1, 1, 4, 4})}}),
             "at most half the kernel");
  EXPECT_HAS(case_error({"maxpool", attr_map({{"kernel", int64_t(2)}}), {f32({4, 4})}}),
             "[N, C, H, W]");
  AttrMap located = attr_map({{"kernel", int64_t(0)}});
  located.where["kernel"] = "configs/x.yaml:7:13";
  located.origin = "configs/x.yaml:6:5: layer 'pool1'";
  std::string e = case_error({"maxpool", located, {f32({1, 1, 4, 4})}});
  EXPECT_EQ(e.rfind("configs/x.yaml:7:13: layer 'pool1': field 'kernel'", 0), 0u) << e;
}

TEST(MaxPool, ForwardGridAndTies) {
  OpHarness h(registry(),
              {"maxpool", attr_map({{"kernel", int64_t(2)}}), {f32({1, 1, 4, 4})}, {kGrid}});
  EXPECT_EQ(h.forward(), (std::vector<float>{5, 8, 9, 11}));
  // Padded 3x3 windows with stride 2: padding never wins (all inputs could be negative).
  std::vector<float> neg(kGrid);
  for (auto& v : neg) v = -v - 1;
  OpHarness p(registry(),
              {"maxpool",
               attr_map({{"kernel", int64_t(3)}, {"stride", int64_t(2)}, {"padding", int64_t(1)}}),
               {f32({1, 1, 4, 4})},
               {neg}});
  EXPECT_EQ(p.forward(), (std::vector<float>{-2, -1, -1, -2}));
  // Ties: the first maximum in scan order receives the gradient.
  OpHarness t(registry(), {"maxpool",
                           attr_map({{"kernel", int64_t(2)}}),
                           {f32({1, 1, 2, 4})},
                           {{2, 3, 7, 7, 2, 3, 7, 7}}});
  auto g = t.gradients({10, 20});
  EXPECT_EQ(g[0], (std::vector<float>{0, 10, 20, 0, 0, 0, 0, 0}));
}

TEST(MaxPool, GradientOverlappingWindows) {
  OpHarness h(registry(),
              {"maxpool",
               attr_map({{"kernel", int64_t(3)}, {"stride", int64_t(1)}, {"padding", int64_t(1)}}),
               {f32({2, 2, 4, 5})},
               {distinct_values(80)}});
  EXPECT_TRUE(h.check_gradients(kTolPiecewise));
  OpHarness s(
      registry(),
      {"maxpool", attr_map({{"kernel", int64_t(2)}}), {f32({1, 3, 4, 4})}, {distinct_values(48)}});
  EXPECT_TRUE(s.check_gradients(kTolPiecewise));
}

TEST(AvgPool, ForwardGridAndPaddingInDivisor) {
  OpHarness h(registry(),
              {"avgpool", attr_map({{"kernel", int64_t(2)}}), {f32({1, 1, 4, 4})}, {kGrid}});
  expect_near_all(h.forward(), {13 / 4.0, 16 / 4.0, 18 / 4.0, 17 / 4.0}, 1e-6);
  // 3x3 windows, stride 2, padding 1: the divisor stays 9 where the window hangs over the edge.
  OpHarness p(registry(),
              {"avgpool",
               attr_map({{"kernel", int64_t(3)}, {"stride", int64_t(2)}, {"padding", int64_t(1)}}),
               {f32({1, 1, 4, 4})},
               {kGrid}});
  expect_near_all(p.forward(), {13 / 9.0, 25 / 9.0, 25 / 9.0, 44 / 9.0}, 1e-6);
}

TEST(AvgPool, GradientAndUncoveredEdge) {
  // 5x5 input, kernel 2: the last row and column are in no window and get zero gradient.
  OpHarness h(registry(), {"avgpool", attr_map({{"kernel", int64_t(2)}}), {f32({1, 1, 5, 5})}});
  EXPECT_EQ(h.output_desc(), f32({1, 1, 2, 2}));
  auto g = h.gradients({4, 8, 12, 16});
  std::vector<float> want = {1, 1, 2, 2, 0,  //
                             1, 1, 2, 2, 0,  //
                             3, 3, 4, 4, 0,  //
                             3, 3, 4, 4, 0,  //
                             0, 0, 0, 0, 0};
  EXPECT_EQ(g[0], want);
  OpHarness o(registry(),
              {"avgpool",
               attr_map({{"kernel", int64_t(3)}, {"stride", int64_t(2)}, {"padding", int64_t(1)}}),
               {f32({2, 2, 5, 4})}});
  EXPECT_TRUE(o.check_gradients(kTolLinear));
  EXPECT_HAS(case_error({"avgpool", attr_map({{"kernel", int64_t(5)}}), {f32({1, 1, 4, 8})}}),
             "avgpool kernel 5 larger than padded input 4x8");
}

TEST(GlobalAvgPool, ForwardAndGradient) {
  OpHarness h(registry(), {"global_avgpool", {}, {f32({1, 2, 2, 2})}, {{1, 2, 3, 4, -1, 5, 0, 0}}});
  EXPECT_EQ(h.output_desc(), f32({1, 2}));
  expect_near_all(h.forward(), {2.5, 1.0}, 1e-7);
  auto g = h.gradients({4, -8});
  EXPECT_EQ(g[0], (std::vector<float>{1, 1, 1, 1, -2, -2, -2, -2}));
  OpHarness r(registry(), {"global_avgpool", {}, {f32({2, 3, 3, 2})}});
  EXPECT_TRUE(r.check_gradients(kTolLinear));
  EXPECT_HAS(case_error({"global_avgpool", {}, {f32({2, 3})}}), "[N, C, H, W]");
}

// ---------------------------------------------------------------- upsample

TEST(Upsample, ForwardAndBlockSums) {
  OpHarness h(
      registry(),
      {"upsample", attr_map({{"factor", int64_t(2)}}), {f32({1, 1, 2, 2})}, {{1, 2, 3, 4}}});
  EXPECT_EQ(h.output_desc(), f32({1, 1, 4, 4}));
  EXPECT_EQ(h.forward(), (std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));
  std::vector<float> dy(16);
  for (int i = 0; i < 16; ++i) dy[static_cast<size_t>(i)] = static_cast<float>(i);
  EXPECT_EQ(h.gradients(dy)[0], (std::vector<float>{10, 18, 42, 50}));
  OpHarness r(registry(), {"upsample", attr_map({{"factor", int64_t(3)}}), {f32({2, 2, 2, 3})}});
  EXPECT_TRUE(r.check_gradients(kTolLinear));
  OpHarness one(registry(),
                {"upsample", attr_map({{"factor", int64_t(1)}}), {f32({1, 1, 1, 2})}, {{7, 8}}});
  EXPECT_EQ(one.forward(), (std::vector<float>{7, 8}));
}

TEST(Upsample, Errors) {
  EXPECT_HAS(case_error({"upsample",
                         attr_map({{"factor", int64_t(2)}, {"mode", std::string("bilinear")}}),
                         {f32({1, 1, 2, 2})}}),
             "not one of: nearest");
  EXPECT_HAS(case_error({"upsample", {}, {f32({1, 1, 2, 2})}}), "'factor': is required");
  EXPECT_HAS(case_error({"upsample", attr_map({{"factor", int64_t(0)}}), {f32({1, 1, 2, 2})}}),
             "out of range");
  EXPECT_HAS(case_error({"upsample", attr_map({{"factor", int64_t(2)}}), {f32({1, 4})}}),
             "[N, C, H, W]");
}

// ---------------------------------------------------------------- dropout

TEST(Dropout, MaskFollowsCounterRng) {
  const double rate = 0.3;
  OpHarness h(registry(), {"dropout", attr_map({{"rate", rate}}), {f32({3, 50})}, {}, 42});
  h.step = 5;
  std::vector<float> y = h.forward();
  const std::vector<float>& x = h.input(0);
  for (size_t e = 0; e < y.size(); ++e) {
    bool keep = rng_uniform(42, 5, e) >= static_cast<float>(rate);
    if (keep)
      EXPECT_FLOAT_EQ(y[e], static_cast<float>(x[e] / (1 - rate))) << e;
    else
      EXPECT_EQ(y[e], 0.0f) << e;
  }
}

TEST(Dropout, ReplaysAcrossRerunsAndRecomputeButNotSteps) {
  OpHarness h(registry(), {"dropout", attr_map({{"rate", 0.5}}), {f32({4, 64})}, {}, 9});
  h.step = 3;
  std::vector<float> y1 = h.forward(), y2 = h.forward();
  h.first_compute = false;
  std::vector<float> y3 = h.forward();
  EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * 4));
  EXPECT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * 4));
  h.step = 4;
  std::vector<float> y4 = h.forward();
  int differ = 0;
  for (size_t e = 0; e < y1.size(); ++e) differ += (y1[e] == 0) != (y4[e] == 0);
  EXPECT_GT(differ, 64);  // about half of 256 masks flip between steps
  // Another node (seed) at the same step draws another mask.
  OpHarness o(registry(), {"dropout", attr_map({{"rate", 0.5}}), {f32({4, 64})}, {}, 10});
  o.set_input(0, h.input(0));
  o.step = 3;
  std::vector<float> z = o.forward();
  differ = 0;
  for (size_t e = 0; e < y1.size(); ++e) differ += (y1[e] == 0) != (z[e] == 0);
  EXPECT_GT(differ, 64);
}

TEST(Dropout, KeepFractionOnLargeTensor) {
  OpHarness h(registry(), {"dropout", attr_map({{"rate", 0.3}}), {f32({100000})}, {}, 77});
  std::vector<float> ones(100000, 1.0f);
  h.set_input(0, ones);
  std::vector<float> y = h.forward();
  int64_t kept = 0;
  for (float v : y) {
    if (v != 0) {
      ++kept;
      EXPECT_FLOAT_EQ(v, 1 / 0.7f);
    }
  }
  EXPECT_NEAR(static_cast<double>(kept) / 100000.0, 0.7, 0.01);  // ~7 standard deviations
}

TEST(Dropout, GradientReplaysMask) {
  OpHarness h(registry(), {"dropout", attr_map({{"rate", 0.4}}), {f32({2, 3, 4})}, {}, 5});
  h.step = 2;
  std::vector<float> y = h.forward();
  std::vector<float> dy(y.size(), 1.0f);
  auto g = h.gradients(dy);
  for (size_t e = 0; e < y.size(); ++e)
    EXPECT_FLOAT_EQ(g[0][e], y[e] == 0 ? 0.0f : 1.0f / 0.6f) << e;
  EXPECT_TRUE(h.check_gradients(kTolPiecewise));
}

TEST(Dropout, RateZeroIsIdentityAndBadRates) {
  OpHarness h(registry(), {"dropout", attr_map({{"rate", 0.0}}), {f32({2, 5})}});
  EXPECT_EQ(h.forward(), h.input(0));
  EXPECT_HAS(case_error({"dropout", attr_map({{"rate", 1.0}}), {f32({2})}}), "'rate'");
  EXPECT_HAS(case_error({"dropout", attr_map({{"rate", -0.1}}), {f32({2})}}), "'rate'");
}

// ---------------------------------------------------------------- softmax cross-entropy

TEST(SoftmaxXent, TwoClassByHand) {
  // logits [[1, 2], [0.5, -1.5]], labels [1, 0]:
  // loss0 = log(e^1 + e^2) - 2 = log(1 + e^-1), loss1 = log(e^.5 + e^-1.5) - .5 = log(1 + e^-2).
  OpHarness h(registry(),
              {"softmax_xent", {}, {f32({2, 2}), i32({2})}, {{1, 2, 0.5f, -1.5f}, {1, 0}}});
  EXPECT_EQ(h.output_desc(), f32({1}));
  const double l0 = std::log(1 + std::exp(-1.0)), l1 = std::log(1 + std::exp(-2.0));
  expect_near_all(h.forward(), {(l0 + l1) / 2}, 1e-6);
  EXPECT_NEAR(l0, 0.3132617, 1e-6);  // the hand-computed numbers themselves
  EXPECT_NEAR(l1, 0.1269280, 1e-6);
  auto g = h.gradients({});
  const double p0 = 1 / (1 + std::exp(1.0)), p1 = 1 / (1 + std::exp(-2.0));  // softmax[.][0]
  expect_near_all(g[0], {p0 / 2, (1 - p0 - 1) / 2, (p1 - 1) / 2, (1 - p1) / 2}, 1e-6);
  EXPECT_TRUE(g[1].empty());  // labels: no gradient
}

TEST(SoftmaxXent, StableForLargeLogits) {
  OpHarness h(registry(),
              {"softmax_xent", {}, {f32({2, 2}), i32({2})}, {{1000, 0, 0, 1000}, {0, 0}}});
  expect_near_all(h.forward(), {500.0}, 1e-6);
}

TEST(SoftmaxXent, Gradient) {
  OpCase c{"softmax_xent", {}, {f32({4, 5}), i32({4})}};
  c.int_max = 5;
  OpHarness h(registry(), c);
  EXPECT_TRUE(h.check_gradients(kTolLoss));
}

TEST(SoftmaxXent, ErrorsAndLabelOutOfRange) {
  EXPECT_HAS(case_error({"softmax_xent", {}, {f32({2, 3}), i32({3})}}), "i32 labels [2]");
  EXPECT_HAS(case_error({"softmax_xent", {}, {f32({2, 3}), f32({2})}}), "i32 labels");
  EXPECT_HAS(case_error({"softmax_xent", {}, {f32({2, 3, 1, 1}), i32({2})}}), "[N, K]");
  OpHarness h(registry(), {"softmax_xent", {}, {f32({3, 2}), i32({3})}, {{}, {0, 1, 2}}});
  std::string e = user_error([&] { h.forward(); });
  EXPECT_HAS(e, "label 2 of sample 2 is outside [0, 2)");
  h.set_input(1, {0, -1, 1});
  EXPECT_HAS(user_error([&] { h.forward(); }), "label -1 of sample 1");
  EXPECT_HAS(user_error([&] { h.gradients({}); }), "label -1 of sample 1");
}

TEST(SoftmaxXentPixel, ByHandAndGradient) {
  // N=1, K=2, H=1, W=3: pixel logits (0, 0), (2, 0), (0, 3); labels 1, 0, 0.
  OpHarness h(registry(), {"softmax_xent_pixel",
                           {},
                           {f32({1, 2, 1, 3}), i32({1, 1, 3})},
                           {{0, 2, 0, 0, 0, 3}, {1, 0, 0}}});
  const double l = std::log(2.0) + std::log(1 + std::exp(-2.0)) + std::log(1 + std::exp(3.0));
  expect_near_all(h.forward(), {l / 3}, 1e-6);
  OpCase c{"softmax_xent_pixel", {}, {f32({2, 3, 2, 2}), i32({2, 2, 2})}};
  c.int_max = 3;
  OpHarness g(registry(), c);
  EXPECT_TRUE(g.check_gradients(kTolLoss));
  EXPECT_HAS(case_error({"softmax_xent_pixel", {}, {f32({1, 2, 1, 3}), i32({1, 3})}}), "[1, 1, 3]");
  OpHarness bad(
      registry(),
      {"softmax_xent_pixel", {}, {f32({1, 2, 2, 2}), i32({1, 2, 2})}, {{}, {0, 1, 0, 7}}});
  EXPECT_HAS(user_error([&] { bad.forward(); }), "label 7 of sample 0 at pixel (1, 1)");
}

// ---------------------------------------------------------------- optimizers

// Runs `steps` updates of `op` on [param, grad, state...] (state starts at zero) with the same
// gradient every step; returns the parameter after each step.
std::vector<std::vector<float>> run_updates(const std::string& op, AttrMap attrs,
                                            std::vector<float> p, std::vector<float> g, int n_state,
                                            int steps) {
  const Shape s = {static_cast<int64_t>(p.size())};
  OpCase c{op, attrs, {f32(s), f32(s)}};
  for (int i = 0; i < n_state; ++i) c.inputs.push_back(f32(s));
  OpHarness h(registry(), c);
  h.set_input(0, p);
  h.set_input(1, g);
  for (int i = 0; i < n_state; ++i) h.set_input(2 + i, std::vector<float>(p.size(), 0.0f));
  std::vector<std::vector<float>> out;
  for (int t = 0; t < steps; ++t) {
    h.step = t;
    out.push_back(h.forward());
    EXPECT_EQ(out.back(), h.input(0));  // written in place
  }
  return out;
}

TEST(Sgd, PlainAndMomentumClosedForm) {
  // No momentum: p_T = p0 - T lr g.
  auto plain = run_updates("sgd", attr_map({{"lr", 0.1}}), {1, -2, 3}, {0.5f, 1, -2}, 0, 3);
  expect_near_all(plain[2], {1 - 0.15, -2 - 0.3, 3 + 0.6}, 1e-6);
  // Momentum mu, constant g: buf_t = g (1 - mu^t) / (1 - mu); p_T = p0 - lr sum_t buf_t.
  const double mu = 0.9, lr = 0.05;
  auto mom =
      run_updates("sgd", attr_map({{"lr", lr}, {"momentum", mu}}), {1, -2, 3}, {0.5f, 1, -2}, 1, 4);
  double sum = 0;
  for (int t = 1; t <= 4; ++t) sum += (1 - std::pow(mu, t)) / (1 - mu);
  expect_near_all(mom[3], {1 - lr * 0.5 * sum, -2 - lr * 1 * sum, 3 + lr * 2 * sum}, 1e-5);
}

TEST(Sgd, NesterovWithWeightDecayMatchesPyTorchLoop) {
  const double lr = 0.1, mu = 0.8, wd = 0.01;
  std::vector<double> p = {0.5, -1.5}, buf = {0, 0};
  const std::vector<double> g = {0.3, -0.7};
  auto got = run_updates(
      "sgd", attr_map({{"lr", lr}, {"momentum", mu}, {"weight_decay", wd}, {"nesterov", true}}),
      {0.5f, -1.5f}, {0.3f, -0.7f}, 1, 3);
  for (int t = 0; t < 3; ++t) {  // torch.optim.SGD (dampening 0), buf starting at zero
    for (size_t i = 0; i < 2; ++i) {
      const double d = g[i] + wd * p[i];
      buf[i] = mu * buf[i] + d;
      p[i] -= lr * (d + mu * buf[i]);
    }
    expect_near_all(got[static_cast<size_t>(t)], p, 1e-6);
  }
}

TEST(Sgd, StateAndErrors) {
  const OpDef& sgd = registry().get("sgd");
  auto parse = [&](AttrMap m) {
    AttrReader r(m);
    return sgd.parse(r);
  };
  EXPECT_EQ(sgd.optimizer_state(*parse(attr_map({{"momentum", 0.9}}))),
            std::vector<std::string>{"momentum"});
  EXPECT_TRUE(sgd.optimizer_state(*parse({})).empty());
  EXPECT_HAS(user_error([&] { parse(attr_map({{"nesterov", true}})); }), "'nesterov'");
  EXPECT_HAS(user_error([&] { parse(attr_map({{"lr", -1.0}})); }), "'lr'");
  EXPECT_HAS(case_error({"sgd", {}, {f32({3}), f32({4})}}), "does not match the parameter [3]");
}

TEST(Adam, FirstStepClosedFormAndPyTorchLoop) {
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  // Step 1: m_hat = g, v_hat = g^2, so p1 = p0 - lr g / (|g| + eps).
  auto got = run_updates("adam", attr_map({{"lr", lr}}), {0.5f, -1, 2}, {0.1f, -0.2f, 0.3f}, 2, 5);
  expect_near_all(
      got[0],
      {0.5 - lr * 0.1 / (0.1 + eps), -1 + lr * 0.2 / (0.2 + eps), 2 - lr * 0.3 / (0.3 + eps)},
      1e-6);
  // With weight decay, against torch.optim.Adam's loop in double.
  const double wd = 0.1;
  std::vector<double> p = {0.5, -1, 2}, m(3, 0), v(3, 0);
  const std::vector<double> g = {0.1, -0.2, 0.3};
  auto got_wd = run_updates("adam", attr_map({{"lr", lr}, {"weight_decay", wd}, {"beta2", b2}}),
                            {0.5f, -1, 2}, {0.1f, -0.2f, 0.3f}, 2, 5);
  for (int t = 1; t <= 5; ++t) {
    for (size_t i = 0; i < 3; ++i) {
      const double d = g[i] + wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * d;
      v[i] = b2 * v[i] + (1 - b2) * d * d;
      const double denom = std::sqrt(v[i]) / std::sqrt(1 - std::pow(b2, t)) + eps;
      p[i] -= lr / (1 - std::pow(b1, t)) * m[i] / denom;
    }
    expect_near_all(got_wd[static_cast<size_t>(t - 1)], p, 1e-6);
  }
}

TEST(Adam, StateAndErrors) {
  const OpDef& adam = registry().get("adam");
  AttrMap none;
  AttrReader r(none);
  EXPECT_EQ(adam.optimizer_state(*adam.parse(r)), (std::vector<std::string>{"adam_m", "adam_v"}));
  AttrMap bad = attr_map({{"beta1", 1.0}});
  AttrReader rb(bad);
  EXPECT_HAS(user_error([&] { adam.parse(rb); }), "'beta1'");
  EXPECT_HAS(case_error({"adam", {}, {f32({3}), f32({3}), f32({3}), f32({2})}}), "input 3 [2]");
}

// ---------------------------------------------------------------- rng

TEST(Rng, DeterministicUniformInRange) {
  double sum = 0;
  for (uint64_t e = 0; e < 10000; ++e) {
    float u = rng_uniform(1, 2, e);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    EXPECT_EQ(u, rng_uniform(1, 2, e));
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.01);
  EXPECT_NE(rng_hash(1, 2, 3), rng_hash(2, 1, 3));
  EXPECT_NE(rng_hash(1, 2, 3), rng_hash(1, 3, 2));
}

}  // namespace
}  // namespace remat
