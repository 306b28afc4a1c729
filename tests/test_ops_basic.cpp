// Tests for the op harness itself (a wrong gradient must fail its check), dense, relu/relu6, add,
// concat and flatten: shape inference and its errors, forward values computed by hand, gradients
// against central differences (tests/op_harness.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/op_cases.h"
#include "tests/op_harness.h"
#include "tests/op_test_util.h"

namespace remat {
namespace {

using Ints = std::vector<int64_t>;
using Floats = std::vector<float>;

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
  OpHarness h(builtin_registry(), {"conv2d", attr_map({{"filters", 4}, {"kernel", 3}}), {f32({2, 3, 5, 5})}});
  ASSERT_EQ(h.num_inputs(), 3);
  EXPECT_EQ(h.input_desc(1).shape, (Shape{4, 3, 3, 3}));
  EXPECT_EQ(h.input_desc(2).shape, (Shape{4}));
  EXPECT_EQ(h.graph().value(h.node().inputs[1]).kind, ValueKind::Param);
  EXPECT_EQ(h.graph().value(h.node().inputs[1]).name, "conv2d.weight");
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
    OpHarness h(builtin_registry(), {"dense", w.attrs, {f32({2, 3})}, {{1, 2, 3, 4, 5, 6}}});
    EXPECT_EQ(h.output_desc().shape, (Shape{2, 2}));
    h.set_param(0, {1, 0, -1, 0.5f, 0.5f, 0.5f});
    if (h.num_inputs() == 3) h.set_param(1, {1, -1});
    EXPECT_EQ(h.forward(), w.y);
  }
}

TEST(Dense, ShapesParamsAndErrors) {
  OpHarness h(builtin_registry(), {"dense", attr_map({{"units", 10}}), {f32({4, 7})}});
  std::vector<ParamSpec> p = h.param_specs();
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].desc.shape, (Shape{10, 7}));  // [out, in]
  EXPECT_EQ(p[0].init, InitKind::GlorotUniform);
  EXPECT_EQ(p[0].fan_in, 7);
  EXPECT_EQ(p[1].desc.shape, (Shape{10}));
  std::vector<TensorDesc> in{h.input_desc(0), h.input_desc(1), h.input_desc(2)};
  EXPECT_DOUBLE_EQ(h.op().cost(*h.node().typed, in, h.output_desc()).flops, 2.0 * 4 * 7 * 10 + 40);
  // Any rank >= 2: the last dimension is the features, the others are rows.
  OpHarness h3(builtin_registry(), {"dense", attr_map({{"units", 5}}), {f32({2, 3, 7})}});
  EXPECT_EQ(h3.output_desc().shape, (Shape{2, 3, 5}));
  EXPECT_EQ(h3.input_desc(1).shape, (Shape{5, 7}));
  std::vector<TensorDesc> in3{h3.input_desc(0), h3.input_desc(1), h3.input_desc(2)};
  EXPECT_DOUBLE_EQ(h3.op().cost(*h3.node().typed, in3, h3.output_desc()).flops, 2.0 * 6 * 7 * 5 + 30);
  EXPECT_HAS(case_error({"dense", attr_map({{"units", 10}}), {f32({32})}}),
             "dense expects an input of rank >= 2");
  EXPECT_HAS(case_error({"dense", {}, {f32({2, 3})}}), "field 'units': is required");
  EXPECT_HAS(case_error({"dense", attr_map({{"units", 0}}), {f32({2, 3})}}), "out of range");
}

// learned: false: the weight is a constant buffer (a resize's map): no weight gradient, no bias.
TEST(Dense, AConstantMapIsABufferWithoutAWeightGradient) {
  const AttrMap a = attr_map({{"units", 2}, {"learned", false}});
  OpHarness h(builtin_registry(), {"dense", a, {f32({2, 3})}, {{1, 2, 3, 4, 5, 6}}});
  ASSERT_EQ(h.param_specs().size(), 1u);  // bias defaults to false
  EXPECT_EQ(h.param_specs()[0].kind, ValueKind::Buffer);
  EXPECT_EQ(h.param_specs()[0].desc.shape, (Shape{2, 3}));
  h.set_param(0, {1, 0, -1, 0.5f, 0.5f, 0.5f});
  EXPECT_EQ(h.forward(), (Floats{-2, 3, -2, 7.5f}));
  const auto g = h.gradients({1, -1, 2, 0.5f});
  EXPECT_EQ(g[0], (Floats{0.5f, -0.5f, -1.5f, 2.25f, 0.25f, -1.75f}));  // dy W
  EXPECT_TRUE(g.at(1).empty());  // a constant: no gradient
  OpHarness fd(builtin_registry(), {"dense", a, {f32({3, 2, 6})}, {}, 21});
  EXPECT_TRUE(fd.check_gradients(kTolLinear));
  EXPECT_HAS(case_error({"dense", attr_map({{"units", 2}, {"learned", false}, {"bias", true}}),
                         {f32({2, 3})}}),
             "field 'bias': must be false when learned is false");
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
    OpHarness h(builtin_registry(), {"dense", c.second, {f32({3, 6})}, {}, 21});
    if (std::string(c.first) == "relu6")
      for (float& v : h.input(0)) v *= 8;  // some pre-activations above 6
    EXPECT_TRUE(h.check_gradients(c.second.has("activation") ? kTolPiecewise : kTolLinear));
  }
}

// ---- relu, relu6 ----------------------------------------------------------------------------

TEST(Relu, ForwardHandComputed) {
  OpHarness h(builtin_registry(), {"relu", {}, {f32({1, 5})}, {{-1.5f, 0.25f, 7.0f, -0.1f, 0.0f}}});
  EXPECT_EQ(h.forward(), (Floats{0, 0.25f, 7, 0, 0}));
  OpHarness h6(builtin_registry(), {"relu6", {}, {f32({1, 5})}, {{-1.5f, 0.25f, 7.0f, 6.0f, 5.5f}}});
  EXPECT_EQ(h6.forward(), (Floats{0, 0.25f, 6, 6, 5.5f}));
}

TEST(Relu, GradUsesOutput) {
  // relu6_grad [dy, y]: passes dy where 0 < y < 6.
  OpHarness h(builtin_registry(), {"relu6", {}, {f32({1, 4})}, {{-1, 3, 9, 0.5f}}});
  std::vector<Floats> g = h.gradients({10, 20, 30, 40});
  EXPECT_EQ(g[0], (Floats{0, 20, 0, 40}));
  EXPECT_EQ(h.graph().node(1).op, "relu6_grad");
  EXPECT_EQ(h.graph().node(1).inputs[1], h.node().output);
}

TEST(Relu, GradientsAwayFromKinks) {
  for (const char* op : {"relu", "relu6"}) {
    OpHarness h(builtin_registry(), {op, {}, {f32({2, 3, 3, 3})}, {}, 4});
    // Values in +-[0.05, 8): none within eps of the kinks at 0 and 6 with eps = 0.01.
    for (float& v : h.input(0)) {
      v = (v < 0 ? -0.05f : 0.05f) + 8 * v;
      if (std::fabs(v - 6.0f) < 0.05f) v = 6.5f;
    }
    GradTolerance strict = kTolPiecewise;
    strict.max_skipped = 0;  // no kinks here: nothing may be excused
    EXPECT_TRUE(h.check_gradients(strict)) << op;
  }
  EXPECT_HAS(case_error({"relu", {}, {i32({2, 3})}}), "relu expects float inputs (f32 or bf16)");
  EXPECT_HAS(case_error({"relu", attr_map({{"alpha", 0.1}}), {f32({2, 3})}}), "unknown field");
}

// ---- add ------------------------------------------------------------------------------------

TEST(Add, ThreeInputsForwardAndGradient) {
  OpHarness h(builtin_registry(), {"add", {}, {f32({1, 2}), f32({1, 2}), f32({1, 2})},
                           {{1, 2}, {10, 20}, {100, 200}}});
  EXPECT_EQ(h.forward(), (Floats{111, 222}));
  std::vector<Floats> g = h.gradients({3, -4});
  ASSERT_EQ(g.size(), 3u);
  for (const Floats& gi : g) EXPECT_EQ(gi, (Floats{3, -4}));
  EXPECT_TRUE(h.backward_nodes().empty());  // no node: every input gets dy
  OpHarness r(builtin_registry(), {"add", {}, {f32({2, 3, 2, 2}), f32({2, 3, 2, 2}), f32({2, 3, 2, 2})}});
  EXPECT_TRUE(r.check_gradients(kTolLinear));
}

TEST(Add, ShapeErrors) {
  std::string e = case_error({"add", {}, {f32({2, 3, 4, 4}), f32({2, 3, 4, 4}), f32({2, 4, 4, 4})}});
  EXPECT_HAS(e, "[2, 3, 4, 4] (input 0)");
  EXPECT_HAS(e, "[2, 4, 4, 4] (input 2)");
  EXPECT_HAS(case_error({"add", {}, {f32({2, 3})}}), "at least 2 inputs");
}

// ---- concat ---------------------------------------------------------------------------------

TEST(Concat, ThreeInputsForwardAndGradient) {
  // a [2, 1, 1, 2], b [2, 2, 1, 2], c [2, 1, 1, 2] -> [2, 4, 1, 2].
  OpHarness h(builtin_registry(), {"concat", {}, {f32({2, 1, 1, 2}), f32({2, 2, 1, 2}), f32({2, 1, 1, 2})},
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
  OpHarness h(builtin_registry(), {"concat", {}, {f32({2, 2}), f32({2, 1})}, {{1, 2, 3, 4}, {5, 6}}});
  EXPECT_EQ(h.forward(), (Floats{1, 2, 5, 3, 4, 6}));
  EXPECT_TRUE(h.check_gradients(kTolLinear));
  std::string e = case_error({"concat", {}, {f32({2, 3, 4, 4}), f32({2, 5, 4, 2})}});
  EXPECT_HAS(e, "[2, 3, 4, 4] (input 0)");
  EXPECT_HAS(e, "[2, 5, 4, 2] (input 1)");
  EXPECT_HAS(case_error({"concat", {}, {f32({2, 3, 4, 4})}}), "at least 2 inputs");
  EXPECT_HAS(case_error({"concat", {}, {f32({2, 3, 4, 5, 6}), f32({2, 3, 4, 5, 6})}}),
             "[N, T, C] (rows along T)");
  // Rows along T of [N, T, C] (as channel_slice takes them): sample 0's rows, then sample 1's.
  OpHarness rows(builtin_registry(), {"concat", {}, {f32({2, 1, 2}), f32({2, 1, 2})},
                                      {{1, 2, 3, 4}, {5, 6, 7, 8}}});
  EXPECT_EQ(rows.forward(), (Floats{1, 2, 5, 6, 3, 4, 7, 8}));
}

// ---- flatten --------------------------------------------------------------------------------

TEST(Flatten, ForwardGradientAndErrors) {
  OpHarness h(builtin_registry(), {"flatten", {}, {f32({2, 2, 1, 2})}, {{0, 1, 2, 3, 4, 5, 6, 7}}});
  EXPECT_EQ(h.output_desc().shape, (Shape{2, 4}));
  EXPECT_EQ(h.forward(), (Floats{0, 1, 2, 3, 4, 5, 6, 7}));
  std::vector<Floats> g = h.gradients({7, 6, 5, 4, 3, 2, 1, 0});
  EXPECT_EQ(g[0], (Floats{7, 6, 5, 4, 3, 2, 1, 0}));
  const Node& fg = h.graph().node(h.backward_nodes().at(0));
  EXPECT_EQ(fg.op, "flatten_grad");
  EXPECT_EQ(h.graph().value(fg.output).desc.shape, (Shape{2, 2, 1, 2}));
  // flatten_grad's own attrs infer x's shape back (as a reloaded graph would).
  const OpDef& def = builtin_registry().get("flatten_grad");
  AttrReader rd(fg.attrs);
  EXPECT_EQ(def.infer(*def.parse(rd), {f32({2, 4})}).shape, (Shape{2, 2, 1, 2}));
  OpHarness r(builtin_registry(), {"flatten", {}, {f32({3, 2, 3, 2})}});
  EXPECT_TRUE(r.check_gradients(kTolLinear));
  EXPECT_HAS(case_error({"flatten", {}, {f32({5})}}), "flatten expects an input of 2 or more");
}


}  // namespace
}  // namespace remat
