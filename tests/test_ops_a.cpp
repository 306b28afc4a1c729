// Tests for conv2d, dense, relu/relu6, add, concat, flatten: shape inference and its errors,
// forward values computed by hand (in the comments), gradients against central differences
// (tests/op_harness.h), and bit-identical reruns.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "ops/registry.h"
#include "runtime/core/check.h"
#include "tests/op_cases.h"
#include "tests/op_harness.h"

namespace remat {
namespace {

const OpRegistry& registry() {
  static const OpRegistry r = make_builtin_registry();
  return r;
}

using Ints = std::vector<int64_t>;
using Floats = std::vector<float>;

// The UserError message `f` throws ("<no error>" if none).
std::string user_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no error>";
}

std::string build_error(OpCase c) {
  return user_error([&] { OpHarness h(registry(), c); });
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

// ---- harness self-checks: the checker must be able to fail ----------------------------------

// y = 2x with a gradient rule that forgets the factor 2 (returns dy).
OpRegistry registry_with_broken_ops() {
  OpRegistry r = make_builtin_registry();
  OpDef twice;
  twice.name = "twice";
  twice.parse = [](AttrReader& rd) {
    rd.finish("twice");
    return std::make_shared<OpAttrs>();
  };
  twice.infer = [](const OpAttrs&, const std::vector<TensorDesc>& in) { return in[0]; };
  twice.cost = [](const OpAttrs&, const std::vector<TensorDesc>&, const TensorDesc&) {
    return OpCost{};
  };
  twice.cpu = [](const ExecContext& c) {
    for (int64_t i = 0; i < c.output.numel(); ++i) c.output.f32()[i] = 2 * c.inputs[0].f32()[i];
  };
  twice.gradient = [](GradEmitter&, const Node&, ValueId dy) { return std::vector<ValueId>{dy}; };
  r.add(twice);
  OpDef lazy = twice;  // writes only the first output element
  lazy.name = "lazy";
  lazy.parse = [](AttrReader& rd) {
    rd.finish("lazy");
    return std::make_shared<OpAttrs>();
  };
  lazy.cpu = [](const ExecContext& c) { c.output.f32()[0] = 1; };
  r.add(lazy);
  return r;
}

TEST(OpHarness, WrongGradientFailsTheCheck) {
  OpRegistry r = registry_with_broken_ops();
  OpHarness h(r, {"twice", {}, {f32({2, 3})}});
  EXPECT_EQ(h.forward()[0], 2 * h.input(0)[0]);
  EXPECT_FALSE(h.check_gradients(kTolLinear));
  EXPECT_FALSE(h.check_gradients(kTolPiecewise));  // the kink rule does not excuse it
}

TEST(OpHarness, UnwrittenOutputIsNaN) {
  OpRegistry r = registry_with_broken_ops();
  OpHarness h(r, {"lazy", {}, {f32({4})}});
  Floats y = h.forward();
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_TRUE(std::isnan(y[1]));
}

TEST(OpHarness, ParamsFollowInputsInOrder) {
  OpHarness h(registry(), {"conv2d", attr_map({{"filters", 4}, {"kernel", 3}}), {f32({2, 3, 5, 5})}});
  ASSERT_EQ(h.num_inputs(), 3);
  EXPECT_EQ(h.input_desc(1).shape, (Shape{4, 3, 3, 3}));
  EXPECT_EQ(h.input_desc(2).shape, (Shape{4}));
  EXPECT_EQ(h.graph().value(h.node().inputs[1]).kind, ValueKind::Param);
  EXPECT_EQ(h.graph().value(h.node().inputs[1]).name, "conv2d.weight");
}

// ---- conv2d ---------------------------------------------------------------------------------

// x = 1..9 as a 3x3 image:   1 2 3      w (2x2) = 1 2
//                            4 5 6                3 4
//                            7 8 9
TEST(Conv2d, ForwardHandComputed) {
  OpHarness h(registry(), {"conv2d", attr_map({{"filters", 1}, {"kernel", 2}}), {f32({1, 1, 3, 3})},
                           {{1, 2, 3, 4, 5, 6, 7, 8, 9}}});
  EXPECT_EQ(h.output_desc().shape, (Shape{1, 1, 2, 2}));
  h.set_param(0, {1, 2, 3, 4});
  h.set_param(1, {0.5f});
  // y00 = 1*1 + 2*2 + 3*4 + 4*5 = 37; y01 = 2 + 6 + 15 + 24 = 47;
  // y10 = 4 + 10 + 21 + 32 = 67;     y11 = 5 + 12 + 24 + 36 = 77; plus bias 0.5.
  EXPECT_EQ(h.forward(), (Floats{37.5f, 47.5f, 67.5f, 77.5f}));
}

TEST(Conv2d, ForwardStridePaddingNoBias) {
  OpHarness h(registry(),
              {"conv2d",
               attr_map({{"filters", 1}, {"kernel", 2}, {"stride", 2}, {"padding", 1}, {"bias", false}}),
               {f32({1, 1, 3, 3})},
               {{1, 2, 3, 4, 5, 6, 7, 8, 9}}});
  ASSERT_EQ(h.num_inputs(), 2);  // no bias param
  EXPECT_EQ(h.output_desc().shape, (Shape{1, 1, 2, 2}));  // (3 + 2 - 2) / 2 + 1 = 2
  h.set_param(0, {1, 2, 3, 4});
  // Padded windows: (0,0) sees only x00 under w11: 4; (0,1) x01*w10 + x02*w11 = 6 + 12 = 18;
  // (1,0) x10*w01 + x20*w11 = 8 + 28 = 36; (1,1) 5*1 + 6*2 + 8*3 + 9*4 = 77.
  EXPECT_EQ(h.forward(), (Floats{4, 18, 36, 77}));
}

TEST(Conv2d, ForwardDilation) {
  OpHarness h(registry(), {"conv2d", attr_map({{"filters", 1}, {"kernel", 2}, {"dilation", 2}, {"bias", false}}),
                           {f32({1, 1, 3, 3})}, {{1, 2, 3, 4, 5, 6, 7, 8, 9}}});
  EXPECT_EQ(h.output_desc().shape, (Shape{1, 1, 1, 1}));
  h.set_param(0, {1, 2, 3, 4});
  EXPECT_EQ(h.forward(), (Floats{1 * 1 + 3 * 2 + 7 * 3 + 9 * 4}));  // the four corners
}

// x: channel 0 = 1 2 / 3 4, channel 1 = 5 6 / 7 8.
TEST(Conv2d, ForwardGroupsPointwise) {
  OpHarness h(registry(), {"conv2d", attr_map({{"filters", 2}, {"kernel", 1}, {"groups", 2}}),
                           {f32({1, 2, 2, 2})}, {{1, 2, 3, 4, 5, 6, 7, 8}}});
  EXPECT_EQ(h.input_desc(1).shape, (Shape{2, 1, 1, 1}));
  h.set_param(0, {2, -1});
  h.set_param(1, {1, 0});
  // out channel 0 = 2 * ch0 + 1; out channel 1 = -ch1.
  EXPECT_EQ(h.forward(), (Floats{3, 5, 7, 9, -5, -6, -7, -8}));
}

TEST(Conv2d, ForwardPointwiseMixesChannels) {
  OpHarness h(registry(), {"conv2d", attr_map({{"filters", 1}, {"kernel", 1}, {"bias", false}}),
                           {f32({1, 2, 2, 2})}, {{1, 2, 3, 4, 5, 6, 7, 8}}});
  h.set_param(0, {1, 10});
  EXPECT_EQ(h.forward(), (Floats{51, 62, 73, 84}));  // ch0 + 10 * ch1
}

TEST(Conv2d, ForwardDepthwise) {
  OpHarness h(registry(), {"conv2d", attr_map({{"filters", 2}, {"kernel", 2}, {"groups", 2}, {"bias", false}}),
                           {f32({1, 2, 2, 2})}, {{1, 2, 3, 4, 5, 6, 7, 8}}});
  EXPECT_EQ(h.input_desc(1).shape, (Shape{2, 1, 2, 2}));
  h.set_param(0, {1, 2, 3, 4, 1, 0, 0, 1});
  // channel 0: 1*1 + 2*2 + 3*3 + 4*4 = 30; channel 1: 5*1 + 8*1 = 13.
  EXPECT_EQ(h.forward(), (Floats{30, 13}));
}

TEST(Conv2d, ForwardFusedRelu) {
  for (const char* act : {"relu", "relu6"}) {
    OpHarness h(registry(), {"conv2d", attr_map({{"filters", 1}, {"kernel", 2}, {"activation", std::string(act)}}),
                             {f32({1, 1, 3, 3})}, {{1, 2, 3, 4, 5, 6, 7, 8, 9}}});
    h.set_param(0, {1, 2, 3, 4});
    h.set_param(1, {-50});
    // pre-activations 37 - 50 = -13, -3, 17, 27.
    Floats want = std::string(act) == "relu" ? Floats{0, 0, 17, 27} : Floats{0, 0, 6, 6};
    EXPECT_EQ(h.forward(), want) << act;
  }
}

TEST(Conv2d, MultiImageBatchAndChannels) {
  // 2 images, 2 channels, 2x2 kernel over 2x2 input: y[n] = sum of w * x[n].
  OpHarness h(registry(), {"conv2d", attr_map({{"filters", 2}, {"kernel", 2}}), {f32({2, 2, 2, 2})},
                           {{1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0, 1, 0, 0, 0}}});
  h.set_param(0, {1, 1, 1, 1, 1, 1, 1, 1,    // filter 0: sum of all
                  0, 0, 0, 0, 1, 0, 0, 0});  // filter 1: ch1 top-left
  h.set_param(1, {0, 100});
  // image 0: 4 + 8 = 12, 2 + 100; image 1: 1, 1 + 100.
  EXPECT_EQ(h.forward(), (Floats{12, 102, 1, 101}));
}

TEST(Conv2d, ShapesParamsAndCost) {
  OpHarness h(registry(), {"conv2d", attr_map({{"filters", 6}, {"kernel", Ints{3, 1}}, {"stride", Ints{2, 1}},
                                            {"padding", Ints{1, 0}}, {"groups", 3}, {"activation", std::string("relu")}}),
                           {f32({2, 9, 7, 5})}});
  // Ho = (7 + 2 - 3) / 2 + 1 = 4; Wo = (5 - 1) / 1 + 1 = 5.
  EXPECT_EQ(h.output_desc().shape, (Shape{2, 6, 4, 5}));
  std::vector<ParamSpec> p = h.param_specs();
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].suffix, "weight");
  EXPECT_EQ(p[0].desc.shape, (Shape{6, 3, 3, 1}));
  EXPECT_EQ(p[0].init, InitKind::HeNormal);
  EXPECT_EQ(p[0].fan_in, 3 * 3 * 1);
  EXPECT_EQ(p[1].suffix, "bias");
  EXPECT_EQ(p[1].desc.shape, (Shape{6}));
  EXPECT_EQ(p[1].init, InitKind::Zeros);
  std::vector<TensorDesc> in{h.input_desc(0), h.input_desc(1), h.input_desc(2)};
  OpCost c = h.op().cost(*h.node().typed, in, h.output_desc());
  // MACs = N*K*Ho*Wo * (C/g)*R*S = 2*6*4*5 * 9 = 2160; + bias and relu per output (240 each).
  EXPECT_DOUBLE_EQ(c.flops, 2 * 2160 + 240 + 240);
  EXPECT_EQ(c.workspace_bytes, 9 * 20 * 4);  // one group's im2col: (C/g*R*S) x (Ho*Wo) floats
  EXPECT_EQ(c.bytes_moved, (2 * 9 * 7 * 5 + 6 * 9 + 6 + 2 * 6 * 4 * 5) * 4);

  OpHarness g(registry(), {"conv2d", attr_map({{"filters", 4}, {"kernel", 1}}), {f32({1, 3, 4, 4})}});
  EXPECT_EQ(g.param_specs()[0].init, InitKind::GlorotUniform);
  std::vector<TensorDesc> gin{g.input_desc(0), g.input_desc(1), g.input_desc(2)};
  EXPECT_EQ(g.op().cost(*g.node().typed, gin, g.output_desc()).workspace_bytes, 0);  // pointwise
}

TEST(Conv2d, ShapeAndAttrErrors) {
  EXPECT_HAS(build_error({"conv2d", attr_map({{"filters", 4}, {"kernel", 3}}), {f32({32, 10})}}),
             "conv2d expects a 4-D input [N, C, H, W], got [32, 10]");
  EXPECT_HAS(build_error({"conv2d", attr_map({{"filters", 8}, {"kernel", 3}, {"groups", 4}}),
                          {f32({1, 6, 8, 8})}}),
             "input channels 6 not divisible by groups 4");
  EXPECT_HAS(build_error({"conv2d", attr_map({{"filters", 4}, {"kernel", 5}}), {f32({1, 1, 3, 3})}}),
             "output would be empty");
  EXPECT_HAS(build_error({"conv2d", attr_map({{"filters", 4}, {"kernel", 3}}), {i32({1, 1, 3, 3})}}),
             "f32");
  AttrMap m = attr_map({{"filters", 6}, {"kernel", 3}, {"groups", 4}});
  m.where["groups"] = "m.yaml:7:13";
  m.origin = "m.yaml:5:3: layer 'c1'";
  std::string e = build_error({"conv2d", m, {f32({1, 8, 8, 8})}});
  EXPECT_EQ(e.rfind("m.yaml:7:13: layer 'c1': field 'groups'", 0), 0u) << e;
  EXPECT_HAS(e, "filters 6 not divisible by groups 4");
  EXPECT_HAS(build_error({"conv2d", attr_map({{"kernel", 3}}), {f32({1, 1, 3, 3})}}),
             "field 'filters': is required");
  EXPECT_HAS(build_error({"conv2d", attr_map({{"filters", 1}}), {f32({1, 1, 3, 3})}}),
             "field 'kernel': is required");
  EXPECT_HAS(build_error({"conv2d", attr_map({{"filters", 1}, {"kernel", 3}, {"kernal", 3}}),
                          {f32({1, 1, 3, 3})}}),
             "field 'kernal': unknown field for op 'conv2d'");
  EXPECT_HAS(build_error({"conv2d", attr_map({{"filters", 1}, {"kernel", 3}, {"activation", std::string("gelu")}}),
                          {f32({1, 1, 3, 3})}}),
             "'gelu' is not one of: none, relu, relu6");
  EXPECT_HAS(build_error({"conv2d", attr_map({{"filters", 1}, {"kernel", Ints{3, 3, 3}}}),
                          {f32({1, 1, 3, 3})}}),
             "field 'kernel': expected 2 values");
  EXPECT_HAS(build_error({"conv2d", attr_map({{"filters", 1}, {"kernel", 3}, {"stride", 0}}),
                          {f32({1, 1, 3, 3})}}),
             "field 'stride'");
}

TEST(Conv2d, GradientsMatchFiniteDifferences) {
  const std::vector<ConvCase> cases = conv2d_cases();
  for (const auto& gc : cases) {
    SCOPED_TRACE(gc.name);
    OpHarness h(registry(), {"conv2d", gc.attrs, {f32(gc.x)}, {}, 11});
    for (float& v : h.input(0)) v *= gc.x_scale;
    const GradTolerance& tol = gc.attrs.has("activation") ? kTolPiecewise : kTolLinear;
    EXPECT_TRUE(h.check_gradients(tol));
  }
}

TEST(Conv2d, FusedActivationEmitsItsGradFirst) {
  OpHarness h(registry(), {"conv2d", attr_map({{"filters", 3}, {"kernel", 3}, {"padding", 1}, {"activation", std::string("relu6")}}),
                           {f32({2, 2, 4, 4})}, {}, 5});
  for (float& v : h.input(0)) v *= 4;
  Floats y = h.forward();
  int zeros = 0, sixes = 0;
  for (float v : y) zeros += v == 0.0f, sixes += v == 6.0f;
  EXPECT_GT(zeros, 0);  // both clips are exercised by the gradient test above
  EXPECT_GT(sixes, 0);
  h.gradients(h.random_dy(3));
  std::vector<std::string> ops;
  for (NodeId n : h.backward_nodes()) ops.push_back(h.graph().node(n).op);
  EXPECT_EQ(ops, (std::vector<std::string>{"relu6_grad", "conv2d_grad_input", "conv2d_grad_weight",
                                           "conv2d_grad_bias"}));
  const Node& act = h.graph().node(h.backward_nodes()[0]);
  EXPECT_EQ(act.inputs[1], h.node().output);  // relu6_grad reads the forward output y
  EXPECT_TRUE(act.attrs.values.empty());
  EXPECT_EQ(h.graph().node(h.backward_nodes()[1]).inputs[0], act.output);  // dz feeds the rest
}

// ---- dense ----------------------------------------------------------------------------------

// x = [[1, 2, 3], [4, 5, 6]], W = [[1, 0, -1], [0.5, 0.5, 0.5]], b = [1, -1].
TEST(Dense, ForwardHandComputed) {
  struct Want {
    AttrMap attrs;
    Floats y;
  };
  std::vector<Want> wants = {
      // x W^T = [[-2, 3], [-2, 7.5]]
      {attr_map({{"units", 2}}), {-1, 2, -1, 6.5f}},
      {attr_map({{"units", 2}, {"bias", false}}), {-2, 3, -2, 7.5f}},
      {attr_map({{"units", 2}, {"activation", std::string("relu")}}), {0, 2, 0, 6.5f}},
      {attr_map({{"units", 2}, {"activation", std::string("relu6")}}), {0, 2, 0, 6}},
  };
  for (const auto& w : wants) {
    OpHarness h(registry(), {"dense", w.attrs, {f32({2, 3})}, {{1, 2, 3, 4, 5, 6}}});
    EXPECT_EQ(h.output_desc().shape, (Shape{2, 2}));
    h.set_param(0, {1, 0, -1, 0.5f, 0.5f, 0.5f});
    if (h.num_inputs() == 3) h.set_param(1, {1, -1});
    EXPECT_EQ(h.forward(), w.y);
  }
}

TEST(Dense, ShapesParamsAndErrors) {
  OpHarness h(registry(), {"dense", attr_map({{"units", 10}}), {f32({4, 7})}});
  std::vector<ParamSpec> p = h.param_specs();
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].desc.shape, (Shape{10, 7}));  // [out, in]
  EXPECT_EQ(p[0].init, InitKind::GlorotUniform);
  EXPECT_EQ(p[0].fan_in, 7);
  EXPECT_EQ(p[1].desc.shape, (Shape{10}));
  std::vector<TensorDesc> in{h.input_desc(0), h.input_desc(1), h.input_desc(2)};
  EXPECT_DOUBLE_EQ(h.op().cost(*h.node().typed, in, h.output_desc()).flops, 2.0 * 4 * 7 * 10 + 40);
  // Any rank >= 2: the last dimension is the features, the others are rows.
  OpHarness h3(registry(), {"dense", attr_map({{"units", 5}}), {f32({2, 3, 7})}});
  EXPECT_EQ(h3.output_desc().shape, (Shape{2, 3, 5}));
  EXPECT_EQ(h3.input_desc(1).shape, (Shape{5, 7}));
  std::vector<TensorDesc> in3{h3.input_desc(0), h3.input_desc(1), h3.input_desc(2)};
  EXPECT_DOUBLE_EQ(h3.op().cost(*h3.node().typed, in3, h3.output_desc()).flops, 2.0 * 6 * 7 * 5 + 30);
  EXPECT_HAS(build_error({"dense", attr_map({{"units", 10}}), {f32({32})}}),
             "dense expects an input of rank >= 2");
  EXPECT_HAS(build_error({"dense", {}, {f32({2, 3})}}), "field 'units': is required");
  EXPECT_HAS(build_error({"dense", attr_map({{"units", 0}}), {f32({2, 3})}}), "out of range");
}

TEST(Dense, GradientsMatchFiniteDifferences) {
  std::vector<std::pair<const char*, AttrMap>> cases = {
      {"bias", attr_map({{"units", 5}})},
      {"no_bias", attr_map({{"units", 4}, {"bias", false}})},
      {"relu", attr_map({{"units", 5}, {"activation", std::string("relu")}})},
      {"relu6", attr_map({{"units", 5}, {"activation", std::string("relu6")}, {"bias", false}})},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.first);
    OpHarness h(registry(), {"dense", c.second, {f32({3, 6})}, {}, 21});
    if (std::string(c.first) == "relu6")
      for (float& v : h.input(0)) v *= 8;  // some pre-activations above 6
    EXPECT_TRUE(h.check_gradients(c.second.has("activation") ? kTolPiecewise : kTolLinear));
  }
}

// ---- relu, relu6 ----------------------------------------------------------------------------

TEST(Relu, ForwardHandComputed) {
  OpHarness h(registry(), {"relu", {}, {f32({1, 5})}, {{-1.5f, 0.25f, 7.0f, -0.1f, 0.0f}}});
  EXPECT_EQ(h.forward(), (Floats{0, 0.25f, 7, 0, 0}));
  OpHarness h6(registry(), {"relu6", {}, {f32({1, 5})}, {{-1.5f, 0.25f, 7.0f, 6.0f, 5.5f}}});
  EXPECT_EQ(h6.forward(), (Floats{0, 0.25f, 6, 6, 5.5f}));
}

TEST(Relu, GradUsesOutput) {
  // relu6_grad [dy, y]: passes dy where 0 < y < 6.
  OpHarness h(registry(), {"relu6", {}, {f32({1, 4})}, {{-1, 3, 9, 0.5f}}});
  std::vector<Floats> g = h.gradients({10, 20, 30, 40});
  EXPECT_EQ(g[0], (Floats{0, 20, 0, 40}));
  EXPECT_EQ(h.graph().node(1).op, "relu6_grad");
  EXPECT_EQ(h.graph().node(1).inputs[1], h.node().output);
}

TEST(Relu, GradientsAwayFromKinks) {
  for (const char* op : {"relu", "relu6"}) {
    OpHarness h(registry(), {op, {}, {f32({2, 3, 3, 3})}, {}, 4});
    // Values in +-[0.05, 8): none within eps of the kinks at 0 and 6 with eps = 0.01.
    for (float& v : h.input(0)) {
      v = (v < 0 ? -0.05f : 0.05f) + 8 * v;
      if (std::fabs(v - 6.0f) < 0.05f) v = 6.5f;
    }
    GradTolerance strict = kTolPiecewise;
    strict.max_skipped = 0;  // no kinks here: nothing may be excused
    EXPECT_TRUE(h.check_gradients(strict)) << op;
  }
  EXPECT_HAS(build_error({"relu", {}, {i32({2, 3})}}), "relu expects f32 inputs");
  EXPECT_HAS(build_error({"relu", attr_map({{"alpha", 0.1}}), {f32({2, 3})}}), "unknown field");
}

// ---- add ------------------------------------------------------------------------------------

TEST(Add, ThreeInputsForwardAndGradient) {
  OpHarness h(registry(), {"add", {}, {f32({1, 2}), f32({1, 2}), f32({1, 2})},
                           {{1, 2}, {10, 20}, {100, 200}}});
  EXPECT_EQ(h.forward(), (Floats{111, 222}));
  std::vector<Floats> g = h.gradients({3, -4});
  ASSERT_EQ(g.size(), 3u);
  for (const Floats& gi : g) EXPECT_EQ(gi, (Floats{3, -4}));
  EXPECT_TRUE(h.backward_nodes().empty());  // no node: every input gets dy
  OpHarness r(registry(), {"add", {}, {f32({2, 3, 2, 2}), f32({2, 3, 2, 2}), f32({2, 3, 2, 2})}});
  EXPECT_TRUE(r.check_gradients(kTolLinear));
}

TEST(Add, ShapeErrors) {
  std::string e = build_error({"add", {}, {f32({2, 3, 4, 4}), f32({2, 3, 4, 4}), f32({2, 4, 4, 4})}});
  EXPECT_HAS(e, "[2, 3, 4, 4] (input 0)");
  EXPECT_HAS(e, "[2, 4, 4, 4] (input 2)");
  EXPECT_HAS(build_error({"add", {}, {f32({2, 3})}}), "at least 2 inputs");
}

// ---- concat ---------------------------------------------------------------------------------

TEST(Concat, ThreeInputsForwardAndGradient) {
  // a [2, 1, 1, 2], b [2, 2, 1, 2], c [2, 1, 1, 2] -> [2, 4, 1, 2].
  OpHarness h(registry(), {"concat", {}, {f32({2, 1, 1, 2}), f32({2, 2, 1, 2}), f32({2, 1, 1, 2})},
                           {{1, 2, 11, 12}, {3, 4, 5, 6, 13, 14, 15, 16}, {7, 8, 17, 18}}});
  EXPECT_EQ(h.output_desc().shape, (Shape{2, 4, 1, 2}));
  EXPECT_EQ(h.forward(), (Floats{1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 14, 15, 16, 17, 18}));
  Floats dy(16);
  for (int i = 0; i < 16; ++i) dy[i] = static_cast<float>(i);
  std::vector<Floats> g = h.gradients(dy);
  EXPECT_EQ(g[0], (Floats{0, 1, 8, 9}));
  EXPECT_EQ(g[1], (Floats{2, 3, 4, 5, 10, 11, 12, 13}));
  EXPECT_EQ(g[2], (Floats{6, 7, 14, 15}));
  std::vector<NodeId> b = h.backward_nodes();
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(h.graph().node(b[2]).op, "concat_slice");
  EXPECT_EQ(std::get<int64_t>(h.graph().node(b[2]).attrs.values.at("offset")), 3);
  EXPECT_EQ(std::get<int64_t>(h.graph().node(b[2]).attrs.values.at("channels")), 1);
  EXPECT_TRUE(h.check_gradients(kTolLinear));
}

TEST(Concat, TwoDimensionalAndErrors) {
  OpHarness h(registry(), {"concat", {}, {f32({2, 2}), f32({2, 1})}, {{1, 2, 3, 4}, {5, 6}}});
  EXPECT_EQ(h.forward(), (Floats{1, 2, 5, 3, 4, 6}));
  EXPECT_TRUE(h.check_gradients(kTolLinear));
  std::string e = build_error({"concat", {}, {f32({2, 3, 4, 4}), f32({2, 5, 4, 2})}});
  EXPECT_HAS(e, "[2, 3, 4, 4] (input 0)");
  EXPECT_HAS(e, "[2, 5, 4, 2] (input 1)");
  EXPECT_HAS(build_error({"concat", {}, {f32({2, 3, 4, 4})}}), "at least 2 inputs");
  EXPECT_HAS(build_error({"concat", {}, {f32({2, 3, 4}), f32({2, 3, 4})}}), "4-D");
}

// ---- flatten --------------------------------------------------------------------------------

TEST(Flatten, ForwardGradientAndErrors) {
  OpHarness h(registry(), {"flatten", {}, {f32({2, 2, 1, 2})}, {{0, 1, 2, 3, 4, 5, 6, 7}}});
  EXPECT_EQ(h.output_desc().shape, (Shape{2, 4}));
  EXPECT_EQ(h.forward(), (Floats{0, 1, 2, 3, 4, 5, 6, 7}));
  std::vector<Floats> g = h.gradients({7, 6, 5, 4, 3, 2, 1, 0});
  EXPECT_EQ(g[0], (Floats{7, 6, 5, 4, 3, 2, 1, 0}));
  const Node& fg = h.graph().node(h.backward_nodes().at(0));
  EXPECT_EQ(fg.op, "flatten_grad");
  EXPECT_EQ(h.graph().value(fg.output).desc.shape, (Shape{2, 2, 1, 2}));
  // flatten_grad's own attrs infer x's shape back (as a reloaded graph would).
  const OpDef& def = registry().get("flatten_grad");
  AttrReader rd(fg.attrs);
  EXPECT_EQ(def.infer(*def.parse(rd), {f32({2, 4})}).shape, (Shape{2, 2, 1, 2}));
  OpHarness r(registry(), {"flatten", {}, {f32({3, 2, 3, 2})}});
  EXPECT_TRUE(r.check_gradients(kTolLinear));
  EXPECT_HAS(build_error({"flatten", {}, {f32({5})}}), "flatten expects an input of 2 or more");
}

// ---- backward ops on their own --------------------------------------------------------------

// Each emitted backward node, re-parsed from its attrs (as a reloaded graph file would be),
// infers its output desc from its inputs, and its cost is computable.
TEST(BackwardOps, InferFromReparsedAttrs) {
  std::vector<OpCase> cases = {
      {"conv2d", attr_map({{"filters", 4}, {"kernel", 3}, {"padding", 1}, {"stride", 2}, {"activation", std::string("relu")}}),
       {f32({2, 2, 7, 5})}},
      {"conv2d", attr_map({{"filters", 6}, {"kernel", Ints{1, 3}}, {"groups", 3}, {"dilation", 2}}), {f32({1, 3, 4, 8})}},
      {"dense", attr_map({{"units", 5}, {"activation", std::string("relu6")}}), {f32({3, 4})}},
      {"concat", {}, {f32({2, 1, 2, 2}), f32({2, 3, 2, 2})}},
      {"flatten", {}, {f32({2, 3, 2, 2})}},
      {"relu", {}, {f32({2, 3})}},
  };
  for (const OpCase& c : cases) {
    SCOPED_TRACE(c.op);
    OpHarness h(registry(), c);
    h.gradients(h.random_dy(1));
    ASSERT_FALSE(h.backward_nodes().empty());
    for (NodeId id : h.backward_nodes()) {
      const Node& n = h.graph().node(id);
      SCOPED_TRACE(n.name);
      const OpDef& def = registry().get(n.op);
      EXPECT_FALSE(def.user_visible);
      AttrReader rd(n.attrs);
      OpAttrsPtr typed = def.parse(rd);
      std::vector<TensorDesc> in;
      for (ValueId v : n.inputs) in.push_back(h.graph().value(v).desc);
      const TensorDesc& out = h.graph().value(n.output).desc;
      EXPECT_EQ(def.infer(*typed, in), out);
      EXPECT_GE(def.cost(*typed, in, out).bytes_moved, out.bytes());
    }
  }
}

TEST(BackwardOps, ConvGradCostsMatchForward) {
  OpHarness h(registry(), {"conv2d", attr_map({{"filters", 4}, {"kernel", 3}, {"padding", 1}}), {f32({2, 3, 5, 5})}});
  h.gradients(h.random_dy(1));
  std::vector<TensorDesc> fin{h.input_desc(0), h.input_desc(1), h.input_desc(2)};
  OpCost f = h.op().cost(*h.node().typed, fin, h.output_desc());
  for (NodeId id : h.backward_nodes()) {
    const Node& n = h.graph().node(id);
    if (n.op == "conv2d_grad_bias") continue;
    std::vector<TensorDesc> in;
    for (ValueId v : n.inputs) in.push_back(h.graph().value(v).desc);
    OpCost c = registry().get(n.op).cost(*n.typed, in, h.graph().value(n.output).desc);
    EXPECT_DOUBLE_EQ(c.flops, 2.0 * 2 * 4 * 25 * 27) << n.op;  // 2 * MACs, no bias term
    EXPECT_EQ(c.workspace_bytes, f.workspace_bytes) << n.op;
  }
}

// ---- determinism ----------------------------------------------------------------------------

bool bit_equal(const Floats& a, const Floats& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Determinism, RerunIsBitIdentical) {
  std::vector<OpCase> cases = {
      {"conv2d", attr_map({{"filters", 8}, {"kernel", 3}, {"padding", 1}, {"stride", 2}, {"activation", std::string("relu")}}),
       {f32({4, 6, 17, 17})}},
      {"conv2d", attr_map({{"filters", 6}, {"kernel", 3}, {"groups", 6}}), {f32({2, 6, 9, 9})}},
      {"dense", attr_map({{"units", 33}}), {f32({16, 70})}},
      {"concat", {}, {f32({2, 3, 4, 4}), f32({2, 5, 4, 4})}},
      {"add", {}, {f32({2, 3, 4, 4}), f32({2, 3, 4, 4}), f32({2, 3, 4, 4})}},
  };
  for (const OpCase& c : cases) {
    SCOPED_TRACE(c.op);
    OpHarness a(registry(), c), b(registry(), c);
    Floats y1 = a.forward(), y2 = a.forward(), y3 = b.forward();
    EXPECT_TRUE(bit_equal(y1, y2));
    EXPECT_TRUE(bit_equal(y1, y3));
    Floats dy = a.random_dy(9);
    std::vector<Floats> g1 = a.gradients(dy), g2 = a.gradients(dy), g3 = b.gradients(dy);
    for (size_t i = 0; i < g1.size(); ++i) {
      EXPECT_TRUE(bit_equal(g1[i], g2[i])) << "input " << i;
      EXPECT_TRUE(bit_equal(g1[i], g3[i])) << "input " << i;
    }
  }
}

}  // namespace
}  // namespace remat
