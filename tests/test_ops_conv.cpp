// Tests for conv2d and the backward ops autodiff emits: shape inference and its errors, forward
// values computed by hand (in the comments), gradients against central differences
// (tests/op_harness.h), backward nodes re-parsed from their attrs, and bit-identical reruns.
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

// ---- conv2d ---------------------------------------------------------------------------------

// x = 1..9 as a 3x3 image:   1 2 3      w (2x2) = 1 2
//                            4 5 6                3 4
//                            7 8 9
TEST(Conv2d, ForwardHandComputed) {
  OpHarness h(builtin_registry(), {"conv2d", attr_map({{"filters", 1}, {"kernel", 2}}), {f32({1, 1, 3, 3})},
                           {{1, 2, 3, 4, 5, 6, 7, 8, 9}}});
  EXPECT_EQ(h.output_desc().shape, (Shape{1, 1, 2, 2}));
  h.set_param(0, {1, 2, 3, 4});
  h.set_param(1, {0.5f});
  // y00 = 1*1 + 2*2 + 3*4 + 4*5 = 37; y01 = 2 + 6 + 15 + 24 = 47;
  // y10 = 4 + 10 + 21 + 32 = 67;     y11 = 5 + 12 + 24 + 36 = 77; plus bias 0.5.
  EXPECT_EQ(h.forward(), (Floats{37.5f, 47.5f, 67.5f, 77.5f}));
}

TEST(Conv2d, ForwardStridePaddingNoBias) {
  OpHarness h(builtin_registry(),
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
  OpHarness h(builtin_registry(), {"conv2d", attr_map({{"filters", 1}, {"kernel", 2}, {"dilation", 2}, {"bias", false}}),
                           {f32({1, 1, 3, 3})}, {{1, 2, 3, 4, 5, 6, 7, 8, 9}}});
  EXPECT_EQ(h.output_desc().shape, (Shape{1, 1, 1, 1}));
  h.set_param(0, {1, 2, 3, 4});
  EXPECT_EQ(h.forward(), (Floats{1 * 1 + 3 * 2 + 7 * 3 + 9 * 4}));  // the four corners
}

// x: channel 0 = 1 2 / 3 4, channel 1 = 5 6 / 7 8.
TEST(Conv2d, ForwardGroupsPointwise) {
  OpHarness h(builtin_registry(), {"conv2d", attr_map({{"filters", 2}, {"kernel", 1}, {"groups", 2}}),
                           {f32({1, 2, 2, 2})}, {{1, 2, 3, 4, 5, 6, 7, 8}}});
  EXPECT_EQ(h.input_desc(1).shape, (Shape{2, 1, 1, 1}));
  h.set_param(0, {2, -1});
  h.set_param(1, {1, 0});
  // out channel 0 = 2 * ch0 + 1; out channel 1 = -ch1.
  EXPECT_EQ(h.forward(), (Floats{3, 5, 7, 9, -5, -6, -7, -8}));
}

TEST(Conv2d, ForwardPointwiseMixesChannels) {
  OpHarness h(builtin_registry(), {"conv2d", attr_map({{"filters", 1}, {"kernel", 1}, {"bias", false}}),
                           {f32({1, 2, 2, 2})}, {{1, 2, 3, 4, 5, 6, 7, 8}}});
  h.set_param(0, {1, 10});
  EXPECT_EQ(h.forward(), (Floats{51, 62, 73, 84}));  // ch0 + 10 * ch1
}

TEST(Conv2d, ForwardDepthwise) {
  OpHarness h(builtin_registry(), {"conv2d", attr_map({{"filters", 2}, {"kernel", 2}, {"groups", 2}, {"bias", false}}),
                           {f32({1, 2, 2, 2})}, {{1, 2, 3, 4, 5, 6, 7, 8}}});
  EXPECT_EQ(h.input_desc(1).shape, (Shape{2, 1, 2, 2}));
  h.set_param(0, {1, 2, 3, 4, 1, 0, 0, 1});
  // channel 0: 1*1 + 2*2 + 3*3 + 4*4 = 30; channel 1: 5*1 + 8*1 = 13.
  EXPECT_EQ(h.forward(), (Floats{30, 13}));
}

TEST(Conv2d, ForwardFusedRelu) {
  for (const char* act : {"relu", "relu6"}) {
    OpHarness h(builtin_registry(), {"conv2d", attr_map({{"filters", 1}, {"kernel", 2}, {"activation", std::string(act)}}),
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
  OpHarness h(builtin_registry(), {"conv2d", attr_map({{"filters", 2}, {"kernel", 2}}), {f32({2, 2, 2, 2})},
                           {{1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0, 1, 0, 0, 0}}});
  h.set_param(0, {1, 1, 1, 1, 1, 1, 1, 1,    // filter 0: sum of all
                  0, 0, 0, 0, 1, 0, 0, 0});  // filter 1: ch1 top-left
  h.set_param(1, {0, 100});
  // image 0: 4 + 8 = 12, 2 + 100; image 1: 1, 1 + 100.
  EXPECT_EQ(h.forward(), (Floats{12, 102, 1, 101}));
}

TEST(Conv2d, ShapesParamsAndCost) {
  OpHarness h(builtin_registry(), {"conv2d", attr_map({{"filters", 6}, {"kernel", Ints{3, 1}}, {"stride", Ints{2, 1}},
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

  OpHarness g(builtin_registry(), {"conv2d", attr_map({{"filters", 4}, {"kernel", 1}}), {f32({1, 3, 4, 4})}});
  EXPECT_EQ(g.param_specs()[0].init, InitKind::GlorotUniform);
  std::vector<TensorDesc> gin{g.input_desc(0), g.input_desc(1), g.input_desc(2)};
  EXPECT_EQ(g.op().cost(*g.node().typed, gin, g.output_desc()).workspace_bytes, 0);  // pointwise
}

TEST(Conv2d, ShapeAndAttrErrors) {
  EXPECT_HAS(case_error({"conv2d", attr_map({{"filters", 4}, {"kernel", 3}}), {f32({32, 10})}}),
             "conv2d expects a 4-D input [N, C, H, W], got [32, 10]");
  EXPECT_HAS(case_error({"conv2d", attr_map({{"filters", 8}, {"kernel", 3}, {"groups", 4}}),
                          {f32({1, 6, 8, 8})}}),
             "input channels 6 not divisible by groups 4");
  EXPECT_HAS(case_error({"conv2d", attr_map({{"filters", 4}, {"kernel", 5}}), {f32({1, 1, 3, 3})}}),
             "output would be empty");
  EXPECT_HAS(case_error({"conv2d", attr_map({{"filters", 4}, {"kernel", 3}}), {i32({1, 1, 3, 3})}}),
             "f32");
  AttrMap m = attr_map({{"filters", 6}, {"kernel", 3}, {"groups", 4}});
  m.where["groups"] = "m.yaml:7:13";
  m.origin = "m.yaml:5:3: layer 'c1'";
  std::string e = case_error({"conv2d", m, {f32({1, 8, 8, 8})}});
  EXPECT_EQ(e.rfind("m.yaml:7:13: layer 'c1': field 'groups'", 0), 0u) << e;
  EXPECT_HAS(e, "filters 6 not divisible by groups 4");
  EXPECT_HAS(case_error({"conv2d", attr_map({{"kernel", 3}}), {f32({1, 1, 3, 3})}}),
             "field 'filters': is required");
  EXPECT_HAS(case_error({"conv2d", attr_map({{"filters", 1}}), {f32({1, 1, 3, 3})}}),
             "field 'kernel': is required");
  EXPECT_HAS(case_error({"conv2d", attr_map({{"filters", 1}, {"kernel", 3}, {"kernal", 3}}),
                          {f32({1, 1, 3, 3})}}),
             "field 'kernal': unknown field for op 'conv2d'");
  EXPECT_HAS(case_error({"conv2d", attr_map({{"filters", 1}, {"kernel", 3}, {"activation", std::string("gelu")}}),
                          {f32({1, 1, 3, 3})}}),
             "'gelu' is not one of: none, relu, relu6");
  EXPECT_HAS(case_error({"conv2d", attr_map({{"filters", 1}, {"kernel", Ints{3, 3, 3}}}),
                          {f32({1, 1, 3, 3})}}),
             "field 'kernel': expected 2 values");
  EXPECT_HAS(case_error({"conv2d", attr_map({{"filters", 1}, {"kernel", 3}, {"stride", 0}}),
                          {f32({1, 1, 3, 3})}}),
             "field 'stride'");
}

TEST(Conv2d, GradientsMatchFiniteDifferences) {
  const std::vector<ConvCase> cases = conv2d_cases();
  for (const auto& gc : cases) {
    SCOPED_TRACE(gc.name);
    OpHarness h(builtin_registry(), {"conv2d", gc.attrs, {f32(gc.x)}, {}, 11});
    for (float& v : h.input(0)) v *= gc.x_scale;
    const GradTolerance& tol = gc.attrs.has("activation") ? kTolPiecewise : kTolLinear;
    EXPECT_TRUE(h.check_gradients(tol));
  }
}

TEST(Conv2d, FusedActivationEmitsItsGradFirst) {
  OpHarness h(builtin_registry(), {"conv2d", attr_map({{"filters", 3}, {"kernel", 3}, {"padding", 1}, {"activation", std::string("relu6")}}),
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
    OpHarness h(builtin_registry(), c);
    h.gradients(h.random_dy(1));
    ASSERT_FALSE(h.backward_nodes().empty());
    for (NodeId id : h.backward_nodes()) {
      const Node& n = h.graph().node(id);
      SCOPED_TRACE(n.name);
      const OpDef& def = builtin_registry().get(n.op);
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
  OpHarness h(builtin_registry(), {"conv2d", attr_map({{"filters", 4}, {"kernel", 3}, {"padding", 1}}), {f32({2, 3, 5, 5})}});
  h.gradients(h.random_dy(1));
  std::vector<TensorDesc> fin{h.input_desc(0), h.input_desc(1), h.input_desc(2)};
  OpCost f = h.op().cost(*h.node().typed, fin, h.output_desc());
  for (NodeId id : h.backward_nodes()) {
    const Node& n = h.graph().node(id);
    if (n.op == "conv2d_grad_bias") continue;
    std::vector<TensorDesc> in;
    for (ValueId v : n.inputs) in.push_back(h.graph().value(v).desc);
    OpCost c = builtin_registry().get(n.op).cost(*n.typed, in, h.graph().value(n.output).desc);
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
    OpHarness a(builtin_registry(), c), b(builtin_registry(), c);
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
