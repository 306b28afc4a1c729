// Tests for dropout (replayable masks), softmax cross-entropy (image and per-pixel), sgd and adam
// (closed forms and PyTorch's loops) and the counter-based RNG behind the masks.
#include <gtest/gtest.h>

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

// ---------------------------------------------------------------- dropout

TEST(Dropout, MaskFollowsCounterRng) {
  const double rate = 0.3;
  OpHarness h(builtin_registry(), {"dropout", attr_map({{"rate", rate}}), {f32({3, 50})}, {}, 42});
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
  OpHarness h(builtin_registry(), {"dropout", attr_map({{"rate", 0.5}}), {f32({4, 64})}, {}, 9});
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
  OpHarness o(builtin_registry(), {"dropout", attr_map({{"rate", 0.5}}), {f32({4, 64})}, {}, 10});
  o.set_input(0, h.input(0));
  o.step = 3;
  std::vector<float> z = o.forward();
  differ = 0;
  for (size_t e = 0; e < y1.size(); ++e) differ += (y1[e] == 0) != (z[e] == 0);
  EXPECT_GT(differ, 64);
}

TEST(Dropout, KeepFractionOnLargeTensor) {
  OpHarness h(builtin_registry(), {"dropout", attr_map({{"rate", 0.3}}), {f32({100000})}, {}, 77});
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
  OpHarness h(builtin_registry(), {"dropout", attr_map({{"rate", 0.4}}), {f32({2, 3, 4})}, {}, 5});
  h.step = 2;
  std::vector<float> y = h.forward();
  std::vector<float> dy(y.size(), 1.0f);
  auto g = h.gradients(dy);
  for (size_t e = 0; e < y.size(); ++e)
    EXPECT_FLOAT_EQ(g[0][e], y[e] == 0 ? 0.0f : 1.0f / 0.6f) << e;
  EXPECT_TRUE(h.check_gradients(kTolPiecewise));
}

TEST(Dropout, RateZeroIsIdentityAndBadRates) {
  OpHarness h(builtin_registry(), {"dropout", attr_map({{"rate", 0.0}}), {f32({2, 5})}});
  EXPECT_EQ(h.forward(), h.input(0));
  EXPECT_HAS(case_error({"dropout", attr_map({{"rate", 1.0}}), {f32({2})}}), "'rate'");
  EXPECT_HAS(case_error({"dropout", attr_map({{"rate", -0.1}}), {f32({2})}}), "'rate'");
}

// ---------------------------------------------------------------- softmax cross-entropy

TEST(SoftmaxXent, TwoClassByHand) {
  // logits [[1, 2], [0.5, -1.5]], labels [1, 0]:
  // loss0 = log(e^1 + e^2) - 2 = log(1 + e^-1), loss1 = log(e^.5 + e^-1.5) - .5 = log(1 + e^-2).
  OpHarness h(builtin_registry(),
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
  OpHarness h(builtin_registry(),
              {"softmax_xent", {}, {f32({2, 2}), i32({2})}, {{1000, 0, 0, 1000}, {0, 0}}});
  expect_near_all(h.forward(), {500.0}, 1e-6);
}

TEST(SoftmaxXent, Gradient) {
  OpCase c{"softmax_xent", {}, {f32({4, 5}), i32({4})}};
  c.int_max = 5;
  OpHarness h(builtin_registry(), c);
  EXPECT_TRUE(h.check_gradients(kTolLoss));
}

TEST(SoftmaxXent, ErrorsAndLabelOutOfRange) {
  EXPECT_HAS(case_error({"softmax_xent", {}, {f32({2, 3}), i32({3})}}), "i32 labels [2]");
  EXPECT_HAS(case_error({"softmax_xent", {}, {f32({2, 3}), f32({2})}}), "i32 labels");
  EXPECT_HAS(case_error({"softmax_xent", {}, {f32({2, 3, 1, 1}), i32({2})}}), "[N, K]");
  OpHarness h(builtin_registry(), {"softmax_xent", {}, {f32({3, 2}), i32({3})}, {{}, {0, 1, 2}}});
  std::string e = user_error([&] { h.forward(); });
  EXPECT_HAS(e, "label 2 of sample 2 is outside [0, 2)");
  h.set_input(1, {0, -1, 1});
  EXPECT_HAS(user_error([&] { h.forward(); }), "label -1 of sample 1");
  EXPECT_HAS(user_error([&] { h.gradients({}); }), "label -1 of sample 1");
}

TEST(SoftmaxXentPixel, ByHandAndGradient) {
  // N=1, K=2, H=1, W=3: pixel logits (0, 0), (2, 0), (0, 3); labels 1, 0, 0.
  OpHarness h(builtin_registry(), {"softmax_xent_pixel",
                           {},
                           {f32({1, 2, 1, 3}), i32({1, 1, 3})},
                           {{0, 2, 0, 0, 0, 3}, {1, 0, 0}}});
  const double l = std::log(2.0) + std::log(1 + std::exp(-2.0)) + std::log(1 + std::exp(3.0));
  expect_near_all(h.forward(), {l / 3}, 1e-6);
  OpCase c{"softmax_xent_pixel", {}, {f32({2, 3, 2, 2}), i32({2, 2, 2})}};
  c.int_max = 3;
  OpHarness g(builtin_registry(), c);
  EXPECT_TRUE(g.check_gradients(kTolLoss));
  EXPECT_HAS(case_error({"softmax_xent_pixel", {}, {f32({1, 2, 1, 3}), i32({1, 3})}}), "[1, 1, 3]");
  OpHarness bad(
      builtin_registry(),
      {"softmax_xent_pixel", {}, {f32({1, 2, 2, 2}), i32({1, 2, 2})}, {{}, {0, 1, 0, 7}}});
  EXPECT_HAS(user_error([&] { bad.forward(); }), "label 7 of sample 0 at pixel (1, 1)");
}

// VOC's masks mark unlabelled pixels 255: with ignore_index 255 they count neither in the mean
// nor get a gradient; without it, 255 is an out-of-range label.
TEST(SoftmaxXentPixel, IgnoreIndexSkipsPixels) {
  // The pixels of ByHandAndGradient plus a fourth, ignored, with huge logits.
  OpHarness h(builtin_registry(), {"softmax_xent_pixel", attr_map({{"ignore_index", 255}}),
                                   {f32({1, 2, 1, 4}), i32({1, 1, 4})},
                                   {{0, 2, 0, 50, 0, 0, 3, -50}, {1, 0, 0, 255}}});
  const double l = std::log(2.0) + std::log(1 + std::exp(-2.0)) + std::log(1 + std::exp(3.0));
  expect_near_all(h.forward(), {l / 3}, 1e-6);
  const auto g = h.gradients({});
  EXPECT_EQ(g[0][3], 0.0f);  // class 0 of the ignored pixel
  EXPECT_EQ(g[0][7], 0.0f);  // class 1
  EXPECT_NEAR(g[0][0], 0.5 / 3, 1e-6);  // (softmax - onehot) / 3, the counted pixels' count
  OpCase c{"softmax_xent_pixel", attr_map({{"ignore_index", 2}}), {f32({2, 3, 2, 2}), i32({2, 2, 2})}};
  c.int_max = 3;  // labels 0..2: the pixels labelled 2 are skipped
  OpHarness fd(builtin_registry(), c);
  EXPECT_TRUE(fd.check_gradients(kTolLoss));
  OpHarness plain(builtin_registry(), {"softmax_xent_pixel", {}, {f32({1, 2, 1, 2}), i32({1, 1, 2})},
                                       {{0, 0, 0, 0}, {0, 255}}});
  EXPECT_HAS(user_error([&] { plain.forward(); }), "label 255 of sample 0 at pixel (0, 1)");
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
  OpHarness h(builtin_registry(), c);
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
  const OpDef& sgd = builtin_registry().get("sgd");
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
  const OpDef& adam = builtin_registry().get("adam");
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
