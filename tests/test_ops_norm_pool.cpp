// Tests for the registry's listing and costs, batchnorm, pooling and upsample: shape inference and
// its errors, hand-computed forward values, running statistics, gradients against central
// differences (tests/op_harness.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/rng.h"
#include "tests/op_harness.h"
#include "tests/op_test_util.h"

namespace remat {
namespace {

using Ints = std::vector<int64_t>;
using Floats = std::vector<float>;

// ---------------------------------------------------------------- registry

TEST(OpsB, RegisteredWithBackwardOpsHidden) {
  for (const char* name : {"batchnorm", "maxpool", "avgpool", "global_avgpool", "upsample",
                           "dropout", "softmax_xent", "softmax_xent_pixel", "sgd", "adam"})
    EXPECT_TRUE(builtin_registry().get(name).user_visible) << name;
  for (const char* name : {"batchnorm_grad_input", "batchnorm_grad_weight", "batchnorm_grad_bias",
                           "maxpool_grad", "avgpool_grad", "global_avgpool_grad", "upsample_grad",
                           "dropout_grad", "softmax_xent_grad", "softmax_xent_pixel_grad"})
    EXPECT_FALSE(builtin_registry().get(name).user_visible) << name;
  EXPECT_EQ(builtin_registry().get("softmax_xent").kind, NodeKind::Loss);
  EXPECT_EQ(builtin_registry().get("softmax_xent_pixel").kind, NodeKind::Loss);
  EXPECT_EQ(builtin_registry().get("sgd").kind, NodeKind::Update);
  EXPECT_EQ(builtin_registry().get("adam").kind, NodeKind::Update);
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
    OpHarness h(builtin_registry(), c);
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
  OpHarness h(builtin_registry(), {"batchnorm", {}, {f32({2, 3, 4, 5})}});
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
  EXPECT_EQ(OpHarness(builtin_registry(), {"batchnorm", {}, {f32({6, 7})}}).output_desc(), f32({6, 7}));
  EXPECT_HAS(case_error({"batchnorm", {}, {f32({2, 3, 4})}}), "[N, C, H, W] or [N, F]");
  EXPECT_HAS(case_error({"batchnorm", {}, {f32({1, 3, 1, 1})}}), "more than 1 value per channel");
  EXPECT_EQ(case_error(
                {"batchnorm", attr_map({{"mode", std::string("inference")}}), {f32({1, 3, 1, 1})}}),
            "<no error>");
  EXPECT_HAS(case_error({"batchnorm", attr_map({{"mode", std::string("eval")}}), {f32({2, 3})}}),
             "train, inference");
  EXPECT_HAS(case_error({"batchnorm", attr_map({{"eps", 0.0}}), {f32({2, 3})}}), "'eps'");
  EXPECT_HAS(case_error({"batchnorm", attr_map({{"momentum", 1.5}}), {f32({2, 3})}}), "'momentum'");
  EXPECT_HAS(case_error({"batchnorm", attr_map({{"momentun", 0.1}}), {f32({2, 3})}}),
             "unknown field");
}

TEST(BatchNorm, ForwardFourNumbersAndRunningStats) {
  // x = 1, 2, 3, 4 in one feature: mean 2.5, biased var 1.25, unbiased var 5/3.
  OpHarness h(builtin_registry(), {"batchnorm", {}, {f32({4, 1})}, {{1, 2, 3, 4}}});
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
  OpHarness h(builtin_registry(), {"batchnorm",
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
      builtin_registry(),
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
  OpHarness h(builtin_registry(), {"batchnorm", {}, {f32({2, 3, 2, 2})}});
  EXPECT_TRUE(h.check_gradients(kTolNormalize));
  auto g = h.gradients(h.random_dy(5));
  EXPECT_TRUE(g[3].empty());  // running stats: no gradient
  EXPECT_TRUE(g[4].empty());
}

TEST(BatchNorm, GradientsTrainFeatures) {
  OpHarness h(builtin_registry(), {"batchnorm", {}, {f32({5, 3})}, {}, 3});
  EXPECT_TRUE(h.check_gradients(kTolNormalize));
}

TEST(BatchNorm, GradientsInference) {
  OpHarness h(builtin_registry(),
              {"batchnorm", attr_map({{"mode", std::string("inference")}}), {f32({2, 2, 2, 2})}});
  h.set_param(2, {0.3f, -0.2f});
  h.set_param(3, {0.5f, 2.0f});
  EXPECT_TRUE(h.check_gradients(kTolNormalize));
}

// A fused relu / relu6 (Note [batchnorm activation]): the output is the standalone pair's bit
// for bit (batchnorm, then relu on its output), in fp32 and bf16, channels-first and -last, and
// so are its gradients (the batch norm's at dy times the activation's slope); the gradient rule
// adds the activation's node before the batch-norm gradients.
TEST(BatchNorm, FusedActivationIsThePairBitForBit) {
  for (const char* act : {"relu", "relu6"}) {
    for (const char* layout : {"channels_first", "channels_last"}) {
      for (bool half : {false, true}) {
        SCOPED_TRACE(std::string(act) + " " + layout + (half ? " bf16" : " fp32"));
        AttrMap plain;
        if (std::string(layout) == "channels_last")
          plain.set("data_format", std::string("channels_last"));
        AttrMap fused = plain;
        fused.set("activation", std::string(act));
        const TensorDesc x = half ? bf16({3, 4, 5, 4}) : f32({3, 4, 5, 4});
        OpHarness pair(builtin_registry(), {"batchnorm", plain, {x}});
        OpHarness one(builtin_registry(), {"batchnorm", fused, {x}});
        pair.set_param(0, {4.0f, -3.0f, 0.5f, 7.0f});  // scales that reach past 6 and below 0
        one.set_param(0, {4.0f, -3.0f, 0.5f, 7.0f});
        std::vector<float> want = pair.forward();
        for (float& v : want)
          v = std::string(act) == "relu" ? std::max(v, 0.0f) : std::min(std::max(v, 0.0f), 6.0f);
        const std::vector<float> got = one.forward();
        ASSERT_EQ(got.size(), want.size());
        int clipped_low = 0, clipped_high = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0) << i;
          clipped_low += got[i] == 0.0f;
          clipped_high += got[i] == 6.0f;
        }
        EXPECT_GT(clipped_low, 0);
        if (std::string(act) == "relu6") {
          EXPECT_GT(clipped_high, 0);
        }
        // Gradients: the pair's with dy masked by the activation's slope at the output (relu:
        // y > 0; relu6: 0 < y < 6), whose own gradients the checks above and the relu tests cover.
        const std::vector<float> dy = one.random_dy(5);
        std::vector<float> masked = dy;
        for (size_t i = 0; i < masked.size(); ++i)
          if (!(got[i] > 0.0f && got[i] < (std::string(act) == "relu" ? INFINITY : 6.0f)))
            masked[i] = 0.0f;
        const std::vector<std::vector<float>> g1 = one.gradients(dy), g2 = pair.gradients(masked);
        ASSERT_EQ(g1.size(), g2.size());
        for (size_t k = 0; k < g1.size(); ++k) {
          ASSERT_EQ(g1[k].size(), g2[k].size()) << "input " << k;
          if (!g1[k].empty()) {
            EXPECT_EQ(std::memcmp(g1[k].data(), g2[k].data(), g1[k].size() * sizeof(float)), 0)
                << "input " << k;
          }
        }
      }
    }
  }
  OpHarness h(builtin_registry(),
              {"batchnorm", attr_map({{"activation", std::string("relu")}}), {f32({2, 3, 2, 2})}});
  h.gradients(h.random_dy(5));
  int act_grads = 0;
  for (const Node& n : h.graph().nodes) act_grads += n.op == "relu_grad";
  EXPECT_EQ(act_grads, 1);
  EXPECT_HAS(
      case_error({"batchnorm", attr_map({{"activation", std::string("gelu")}}), {f32({2, 3})}}),
      "activation");
}

// ---------------------------------------------------------------- pooling

const std::vector<float> kGrid = {1, 5, 2, 0,  //
                                  3, 4, 8, 6,  //
                                  9, 7, 1, 2,  //
                                  0, 2, 3, 11};

TEST(MaxPool, InferAndErrors) {
  auto out = [](AttrMap a, Shape s) {
    return OpHarness(builtin_registry(), {"maxpool", a, {f32(s)}}).output_desc();
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
  OpHarness h(builtin_registry(),
              {"maxpool", attr_map({{"kernel", int64_t(2)}}), {f32({1, 1, 4, 4})}, {kGrid}});
  EXPECT_EQ(h.forward(), (std::vector<float>{5, 8, 9, 11}));
  // Padded 3x3 windows with stride 2: padding never wins (all inputs could be negative).
  std::vector<float> neg(kGrid);
  for (auto& v : neg) v = -v - 1;
  OpHarness p(builtin_registry(),
              {"maxpool",
               attr_map({{"kernel", int64_t(3)}, {"stride", int64_t(2)}, {"padding", int64_t(1)}}),
               {f32({1, 1, 4, 4})},
               {neg}});
  EXPECT_EQ(p.forward(), (std::vector<float>{-2, -1, -1, -2}));
  // Ties: the first maximum in scan order receives the gradient.
  OpHarness t(builtin_registry(), {"maxpool",
                           attr_map({{"kernel", int64_t(2)}}),
                           {f32({1, 1, 2, 4})},
                           {{2, 3, 7, 7, 2, 3, 7, 7}}});
  auto g = t.gradients({10, 20});
  EXPECT_EQ(g[0], (std::vector<float>{0, 10, 20, 0, 0, 0, 0, 0}));
}

TEST(MaxPool, GradientOverlappingWindows) {
  OpHarness h(builtin_registry(),
              {"maxpool",
               attr_map({{"kernel", int64_t(3)}, {"stride", int64_t(1)}, {"padding", int64_t(1)}}),
               {f32({2, 2, 4, 5})},
               {distinct_values(80)}});
  EXPECT_TRUE(h.check_gradients(kTolPiecewise));
  OpHarness s(
      builtin_registry(),
      {"maxpool", attr_map({{"kernel", int64_t(2)}}), {f32({1, 3, 4, 4})}, {distinct_values(48)}});
  EXPECT_TRUE(s.check_gradients(kTolPiecewise));
}

TEST(AvgPool, ForwardGridAndPaddingInDivisor) {
  OpHarness h(builtin_registry(),
              {"avgpool", attr_map({{"kernel", int64_t(2)}}), {f32({1, 1, 4, 4})}, {kGrid}});
  expect_near_all(h.forward(), {13 / 4.0, 16 / 4.0, 18 / 4.0, 17 / 4.0}, 1e-6);
  // 3x3 windows, stride 2, padding 1: the divisor stays 9 where the window hangs over the edge.
  OpHarness p(builtin_registry(),
              {"avgpool",
               attr_map({{"kernel", int64_t(3)}, {"stride", int64_t(2)}, {"padding", int64_t(1)}}),
               {f32({1, 1, 4, 4})},
               {kGrid}});
  expect_near_all(p.forward(), {13 / 9.0, 25 / 9.0, 25 / 9.0, 44 / 9.0}, 1e-6);
}

TEST(AvgPool, GradientAndUncoveredEdge) {
  // 5x5 input, kernel 2: the last row and column are in no window and get zero gradient.
  OpHarness h(builtin_registry(), {"avgpool", attr_map({{"kernel", int64_t(2)}}), {f32({1, 1, 5, 5})}});
  EXPECT_EQ(h.output_desc(), f32({1, 1, 2, 2}));
  auto g = h.gradients({4, 8, 12, 16});
  std::vector<float> want = {1, 1, 2, 2, 0,  //
                             1, 1, 2, 2, 0,  //
                             3, 3, 4, 4, 0,  //
                             3, 3, 4, 4, 0,  //
                             0, 0, 0, 0, 0};
  EXPECT_EQ(g[0], want);
  OpHarness o(builtin_registry(),
              {"avgpool",
               attr_map({{"kernel", int64_t(3)}, {"stride", int64_t(2)}, {"padding", int64_t(1)}}),
               {f32({2, 2, 5, 4})}});
  EXPECT_TRUE(o.check_gradients(kTolLinear));
  EXPECT_HAS(case_error({"avgpool", attr_map({{"kernel", int64_t(5)}}), {f32({1, 1, 4, 8})}}),
             "avgpool kernel 5 larger than padded input 4x8");
}

TEST(GlobalAvgPool, ForwardAndGradient) {
  OpHarness h(builtin_registry(), {"global_avgpool", {}, {f32({1, 2, 2, 2})}, {{1, 2, 3, 4, -1, 5, 0, 0}}});
  EXPECT_EQ(h.output_desc(), f32({1, 2}));
  expect_near_all(h.forward(), {2.5, 1.0}, 1e-7);
  auto g = h.gradients({4, -8});
  EXPECT_EQ(g[0], (std::vector<float>{1, 1, 1, 1, -2, -2, -2, -2}));
  OpHarness r(builtin_registry(), {"global_avgpool", {}, {f32({2, 3, 3, 2})}});
  EXPECT_TRUE(r.check_gradients(kTolLinear));
  EXPECT_HAS(case_error({"global_avgpool", {}, {f32({2, 3})}}), "[N, C, H, W]");
}

// ---------------------------------------------------------------- upsample

TEST(Upsample, ForwardAndBlockSums) {
  OpHarness h(
      builtin_registry(),
      {"upsample", attr_map({{"factor", int64_t(2)}}), {f32({1, 1, 2, 2})}, {{1, 2, 3, 4}}});
  EXPECT_EQ(h.output_desc(), f32({1, 1, 4, 4}));
  EXPECT_EQ(h.forward(), (std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));
  std::vector<float> dy(16);
  for (int i = 0; i < 16; ++i) dy[static_cast<size_t>(i)] = static_cast<float>(i);
  EXPECT_EQ(h.gradients(dy)[0], (std::vector<float>{10, 18, 42, 50}));
  OpHarness r(builtin_registry(), {"upsample", attr_map({{"factor", int64_t(3)}}), {f32({2, 2, 2, 3})}});
  EXPECT_TRUE(r.check_gradients(kTolLinear));
  OpHarness one(builtin_registry(),
                {"upsample", attr_map({{"factor", int64_t(1)}}), {f32({1, 1, 1, 2})}, {{7, 8}}});
  EXPECT_EQ(one.forward(), (std::vector<float>{7, 8}));
}

TEST(Upsample, Errors) {
  EXPECT_HAS(case_error({"upsample",
                         attr_map({{"factor", int64_t(2)}, {"mode", std::string("cubic")}}),
                         {f32({1, 1, 2, 2})}}),
             "not one of: nearest, bilinear");
  EXPECT_HAS(case_error({"upsample", {}, {f32({1, 1, 2, 2})}}), "'factor': is required");
  EXPECT_HAS(case_error({"upsample", attr_map({{"factor", int64_t(0)}}), {f32({1, 1, 2, 2})}}),
             "out of range");
  EXPECT_HAS(case_error({"upsample", attr_map({{"factor", int64_t(2)}}), {f32({1, 4})}}),
             "[N, C, H, W]");
}


}  // namespace
}  // namespace remat
