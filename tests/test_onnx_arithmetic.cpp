// The ONNX importer's arithmetic and activations on the small CNN of tests/onnx_builder.h with
// nodes after its Relu: squeeze-and-excitation and layer scales, scalar arithmetic, powers of
// data, the hard swish of opset 13, leaky relu's slope, the exact GELU's nodes; one clear error
// for each form remat does not take.
#include <gtest/gtest.h>

#include <string>
#include <variant>
#include <vector>

#include "tests/onnx_op_test.h"

namespace remat {
namespace {

using test::onnx_node;
using test::onnx_small_cnn;
using OnnxArithmetic = test::OnnxOpTest;

// The small CNN with `extra` nodes after its Relu (value "r"), the MaxPool reading `into`.
onnx::ModelProto with_nodes_after_relu(const onnx::GraphProto& extra, const std::string& into) {
  onnx::ModelProto m = onnx_small_cnn();
  onnx::GraphProto* g = m.mutable_graph();
  g->mutable_node(2)->set_input(0, into);
  auto* all = g->mutable_node();
  for (int k = 0; k < extra.node_size(); ++k) {
    *all->Add() = extra.node(k);
    for (int j = all->size() - 1; j > 2 + k; --j) all->SwapElements(j, j - 1);
  }
  return m;
}

void set_float(onnx::NodeProto* n, const std::string& name, float v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

std::vector<std::string> layer_ops(const ModelConfig& cfg) {
  std::vector<std::string> ops;
  for (const LayerConfig& l : cfg.layers) ops.push_back(l.op);
  return ops;
}

// x * gate(GlobalAveragePool(x)), the gate either side of the Mul: one channel_scale layer.
TEST_F(OnnxArithmetic, SqueezeExcitationBecomesAChannelScale) {
  for (const char* gate : {"Sigmoid", "HardSigmoid"}) {
    for (bool gate_first : {false, true}) {
      SCOPED_TRACE(std::string(gate) + (gate_first ? ", gate first" : ""));
      onnx::GraphProto extra;
      onnx_node(&extra, "GlobalAveragePool", {"r"}, {"se_pool"}, "/se/pool");
      onnx_node(&extra, gate, {"se_pool"}, {"se_gate"}, "/se/gate");
      onnx_node(&extra, "Mul", {gate_first ? "se_gate" : "r", gate_first ? "r" : "se_gate"},
                {"gated"}, "/se/Mul");
      const ModelConfig cfg = load(with_nodes_after_relu(extra, "gated"));
      const std::string act = std::string(gate) == "Sigmoid" ? "sigmoid" : "hardsigmoid";
      EXPECT_EQ(layer_ops(cfg), (std::vector<std::string>{"conv2d", "relu", "global_avgpool", act,
                                                          "channel_scale", "maxpool",
                                                          "global_avgpool", "dense"}));
    }
  }
}

// x * w for a parameter w [C, 1, 1] (ConvNeXt's layer scale), either order: a depthwise 1 x 1
// conv2d without a bias whose weight is w under its name, `export` told w's own dims; a w of
// another shape is refused at the Mul.
TEST_F(OnnxArithmetic, ALayerScaleIsADepthwiseConvolution) {
  for (bool w_first : {false, true}) {
    SCOPED_TRACE(w_first ? "parameter first" : "parameter second");
    onnx::GraphProto extra;
    onnx_node(&extra, "Mul", {w_first ? "gamma" : "r", w_first ? "r" : "gamma"}, {"scaled"}, "/block/Mul");
    onnx::ModelProto m = with_nodes_after_relu(extra, "scaled");
    *m.mutable_graph()->add_initializer() = test::onnx_floats("gamma", {4, 1, 1}, 0.5f);
    const ModelConfig cfg = load(m);
    ASSERT_EQ(layer_ops(cfg), (std::vector<std::string>{"conv2d", "relu", "conv2d", "maxpool",
                                                        "global_avgpool", "dense"}));
    const LayerConfig& l = cfg.layers[2];
    EXPECT_EQ(AttrReader(l.attrs).require_int("groups", 1, 100), 4);
    EXPECT_EQ(std::get<bool>(l.attrs.values.at("bias")), false);
    EXPECT_EQ(l.param_names.at("weight"), "gamma");
    EXPECT_EQ(cfg.export_dims.at("gamma"), (Shape{4, 1, 1}));
    EXPECT_EQ(cfg.initial_values->at("gamma")[1], 0.51f);
  }
  onnx::GraphProto extra;
  onnx_node(&extra, "Mul", {"r", "gamma"}, {"scaled"}, "/block/Mul");
  onnx::ModelProto m = with_nodes_after_relu(extra, "scaled");
  *m.mutable_graph()->add_initializer() = test::onnx_floats("gamma", {4}, 0.5f);
  const std::string e = error_of(m);
  EXPECT_NE(e.find("node '/block/Mul' (Mul, opset 13): a product with a parameter [4]"), std::string::npos) << e;
}

// Arithmetic with scalar constants, either side: one affine layer each (x * c, c + x, c - x,
// x / c, -x); a scalar parameter of the module (not "onnx::...") and a constant over data are
// refused at their node.
TEST_F(OnnxArithmetic, ScalarArithmeticIsAnAffineLayer) {
  onnx::GraphProto extra;
  onnx_node(&extra, "Mul", {"r", "onnx::Mul_1"}, {"s_a"}, "/Mul");
  onnx_node(&extra, "Add", {"onnx::Add_2", "s_a"}, {"s_b"}, "/Add");
  onnx_node(&extra, "Sub", {"onnx::Sub_3", "s_b"}, {"s_c"}, "/Sub");
  onnx_node(&extra, "Div", {"s_c", "onnx::Div_4"}, {"s_d"}, "/Div");
  onnx_node(&extra, "Neg", {"s_d"}, {"s_e"}, "/Neg");
  onnx::ModelProto m = with_nodes_after_relu(extra, "s_e");
  const std::vector<std::pair<std::string, float>> consts = {
      {"onnx::Mul_1", 0.5f}, {"onnx::Add_2", 1.0f}, {"onnx::Sub_3", 3.0f}, {"onnx::Div_4", 4.0f}};
  for (const auto& [name, v] : consts) *m.mutable_graph()->add_initializer() = test::onnx_floats(name, {}, v);
  const ModelConfig cfg = load(m);
  ASSERT_EQ(layer_ops(cfg), (std::vector<std::string>{"conv2d", "relu", "affine", "affine", "affine",
                                                      "affine", "affine", "maxpool", "global_avgpool",
                                                      "dense"}));
  const std::vector<std::pair<double, double>> want = {{0.5, 0}, {1, 1}, {-1, 3}, {0.25, 0}, {-1, 0}};
  for (size_t k = 0; k < want.size(); ++k) {
    const AttrMap& a = cfg.layers[k + 2].attrs;
    EXPECT_EQ(std::get<double>(a.values.at("scale")), want[k].first) << k;
    EXPECT_EQ(std::get<double>(a.values.at("shift")), want[k].second) << k;
  }
  onnx::GraphProto learned;
  onnx_node(&learned, "Mul", {"r", "temperature"}, {"s_t"}, "/Mul");
  onnx::ModelProto p = with_nodes_after_relu(learned, "s_t");
  *p.mutable_graph()->add_initializer() = test::onnx_floats("temperature", {}, 2.0f);
  EXPECT_NE(error_of(p).find("node '/Mul' (Mul, opset 13): a product with a parameter []"), std::string::npos)
      << error_of(p);
  onnx::GraphProto recip;
  onnx_node(&recip, "Div", {"onnx::Div_4", "r"}, {"s_q"}, "/Div");
  onnx::ModelProto q = with_nodes_after_relu(recip, "s_q");
  *q.mutable_graph()->add_initializer() = test::onnx_floats("onnx::Div_4", {}, 4.0f);
  const ModelConfig rq = load(q);  // 4 / r: r's reciprocal, then times 4
  ASSERT_EQ(layer_ops(rq), (std::vector<std::string>{"conv2d", "relu", "pow", "affine", "maxpool",
                                                     "global_avgpool", "dense"}));
  EXPECT_EQ(std::get<double>(rq.layers[2].attrs.values.at("exponent")), -1.0);
  EXPECT_EQ(std::get<double>(rq.layers[3].attrs.values.at("scale")), 4.0);
}

// Opsets before 14 write F.hardswish as x * HardSigmoid(x) (alpha 1/6, beta 1/2): one hardswish
// layer; with other constants the Mul is a product of two images of one shape, an elementwise
// channel_scale (its axes all four).
TEST_F(OnnxArithmetic, HardSwishAsOpset13WritesIt) {
  for (float alpha : {1.0f / 6.0f, 0.2f}) {
    onnx::GraphProto extra;
    set_float(onnx_node(&extra, "HardSigmoid", {"r"}, {"hs"}, "/act/HardSigmoid"), "alpha", alpha);
    onnx_node(&extra, "Mul", {"r", "hs"}, {"act"}, "/act/Mul");
    const ModelConfig cfg = load(with_nodes_after_relu(extra, "act"));
    if (alpha == 0.2f) {
      ASSERT_EQ(layer_ops(cfg), (std::vector<std::string>{"conv2d", "relu", "hardsigmoid",
                                                          "channel_scale", "maxpool",
                                                          "global_avgpool", "dense"}));
      EXPECT_EQ(AttrReader(cfg.layers[3].attrs).require_int("axes", 1, 7), 4);
      continue;
    }
    EXPECT_EQ(layer_ops(cfg), (std::vector<std::string>{"conv2d", "relu", "hardswish", "maxpool",
                                                        "global_avgpool", "dense"}));
  }
}

// Sums and differences of data by data: r + pooled (channel_shift of the planes), pooled - r
// (r negated, then channel_shift), r - mean of the last axis (the mean negated, channel_shift
// axes 3), r - r (one shape: the second negated, then add). Data of another shape is refused.
TEST_F(OnnxArithmetic, SumsWithShiftsOfLeadingAxes) {
  onnx::GraphProto extra;
  onnx_node(&extra, "GlobalAveragePool", {"r"}, {"pooled"}, "/pool");
  onnx_node(&extra, "Add", {"r", "pooled"}, {"a"}, "/Add");
  onnx_node(&extra, "Sub", {"pooled", "a"}, {"b"}, "/Sub");
  onnx::NodeProto* mean = onnx_node(&extra, "ReduceMean", {"b"}, {"rows"}, "/ReduceMean");
  test::onnx_attr(mean, "axes", std::vector<int64_t>{3});
  onnx_node(&extra, "Sub", {"b", "rows"}, {"centred"}, "/Sub_1");
  onnx_node(&extra, "Sub", {"centred", "r"}, {"d"}, "/Sub_2");
  const ModelConfig cfg = load(with_nodes_after_relu(extra, "d"));
  ASSERT_EQ(layer_ops(cfg), (std::vector<std::string>{"conv2d", "relu", "global_avgpool",
                                                      "channel_shift", "affine", "channel_shift",
                                                      "row_mean", "affine", "channel_shift",
                                                      "affine", "add", "maxpool",
                                                      "global_avgpool", "dense"}));
  EXPECT_EQ(cfg.layers[3].attrs.values.count("axes"), 0u);
  EXPECT_EQ(cfg.layers[4].inputs, (std::vector<std::string>{cfg.layers[3].name}));  // -(r + p)
  EXPECT_EQ(AttrReader(cfg.layers[8].attrs).require_int("axes", 1, 7), 3);
  EXPECT_EQ(cfg.layers[7].inputs, (std::vector<std::string>{cfg.layers[6].name}));  // -mean
  onnx::GraphProto other;
  onnx::NodeProto* mp = onnx_node(&other, "MaxPool", {"r"}, {"half"}, "/MaxPool");
  test::onnx_attr(mp, "kernel_shape", std::vector<int64_t>{2, 2});
  test::onnx_attr(mp, "strides", std::vector<int64_t>{2, 2});
  onnx_node(&other, "Sub", {"r", "half"}, {"c3"}, "/Sub");
  const std::string e = error_of(with_nodes_after_relu(other, "c3"));
  EXPECT_NE(e.find("node '/Sub' (Sub, opset 13): inputs [4, 8, 8] and [4, 4, 4] per sample"),
            std::string::npos)
      << e;
}

// Products of data by data of other shapes, and means over trailing axes: r [4, 8, 8] per
// sample divided by its pooled [4, 1, 1] (pow -1, then a channel_scale of the planes), times its
// mean over the last axis [4, 8, 1] (row_mean axes 3, then channel_scale axes 3), times a
// parameter [8] of its last axis (a learned mul_table under the parameter's name). A mean over
// axes that are not a run, and a product with data of another shape, are refused at their nodes.
TEST_F(OnnxArithmetic, ProductsWithScalesOfLeadingAxesAndMeansOfTrailingOnes) {
  onnx::GraphProto extra;
  onnx_node(&extra, "GlobalAveragePool", {"r"}, {"pooled"}, "/pool");
  onnx_node(&extra, "Div", {"r", "pooled"}, {"a"}, "/Div");
  onnx::NodeProto* mean = onnx_node(&extra, "ReduceMean", {"a"}, {"rows"}, "/ReduceMean");
  test::onnx_attr(mean, "axes", std::vector<int64_t>{-1});
  onnx_node(&extra, "Mul", {"rows", "a"}, {"b"}, "/Mul");
  onnx_node(&extra, "Mul", {"b", "w"}, {"scaled"}, "/Mul_1");
  onnx::ModelProto m = with_nodes_after_relu(extra, "scaled");
  *m.mutable_graph()->add_initializer() = test::onnx_floats("w", {8}, 0.5f);
  const ModelConfig cfg = load(m);
  ASSERT_EQ(layer_ops(cfg), (std::vector<std::string>{"conv2d", "relu", "global_avgpool", "pow",
                                                      "channel_scale", "row_mean", "channel_scale",
                                                      "mul_table", "maxpool", "global_avgpool",
                                                      "dense"}));
  EXPECT_EQ(cfg.layers[4].attrs.values.count("axes"), 0u);  // [N, C]: the default 2
  EXPECT_EQ(AttrReader(cfg.layers[5].attrs).require_int("axes", 1, 7), 3);
  EXPECT_EQ(AttrReader(cfg.layers[6].attrs).require_int("axes", 1, 7), 3);
  const LayerConfig& table = cfg.layers[7];
  EXPECT_EQ(std::get<bool>(table.attrs.values.at("learned")), true);
  EXPECT_EQ(table.param_names.at("weight"), "w");
  EXPECT_EQ(cfg.export_skip.count(table.name + ".weight"), 0u);  // a parameter PyTorch holds
  const OpRegistry reg = make_builtin_registry();
  const Graph g = build_forward_graph(cfg, reg);
  EXPECT_EQ(g.value(g.find_value("w")).kind, ValueKind::Param);

  onnx::GraphProto apart;  // a mean over axes 1 and 3: not a run of axes
  onnx::NodeProto* hw = onnx_node(&apart, "ReduceMean", {"r"}, {"cols"}, "/ReduceMean");
  test::onnx_attr(hw, "axes", std::vector<int64_t>{1, 3});
  onnx_node(&apart, "Mul", {"r", "cols"}, {"c2"}, "/Mul");
  const std::string e = error_of(with_nodes_after_relu(apart, "c2"));
  EXPECT_NE(e.find("node '/ReduceMean' (ReduceMean, opset 13)"), std::string::npos) << e;
  onnx::GraphProto other;  // r [4, 8, 8] times its 2 x 2 max-pool [4, 4, 4]
  onnx::NodeProto* mp = onnx_node(&other, "MaxPool", {"r"}, {"half"}, "/MaxPool");
  test::onnx_attr(mp, "kernel_shape", std::vector<int64_t>{2, 2});
  test::onnx_attr(mp, "strides", std::vector<int64_t>{2, 2});
  onnx_node(&other, "Mul", {"r", "half"}, {"c3"}, "/Mul");
  const std::string e2 = error_of(with_nodes_after_relu(other, "c3"));
  EXPECT_NE(e2.find("node '/Mul' (Mul, opset 13): inputs [4, 8, 8] and [4, 4, 4] per sample"),
            std::string::npos)
      << e2;
}

// Broadcasts that keep the last axes (Note [kept axes]) on r [4, 8, 8] per sample: its mean
// over the channels [1, 8, 8] (row_mean axes 1, keep_last 2: CBAM's), r times it (channel_scale,
// the same axes), less it (negated, then channel_shift), plus a parameter [4, 1, 1] (a learned
// add_constant of the channels), less a parameter [8] of the last axis (-(-x + w): affine, a
// learned add_constant, affine). A product with middle axes of another size, and a parameter
// [4, 1, 8] (a 1 between its entries), are refused at their nodes.
TEST_F(OnnxArithmetic, BroadcastsThatKeepTheLastAxes) {
  onnx::GraphProto extra;
  onnx::NodeProto* mean = onnx_node(&extra, "ReduceMean", {"r"}, {"cm"}, "/ReduceMean");
  test::onnx_attr(mean, "axes", std::vector<int64_t>{1});
  onnx_node(&extra, "Mul", {"r", "cm"}, {"k_a"}, "/Mul");
  onnx_node(&extra, "Sub", {"k_a", "cm"}, {"k_b"}, "/Sub");
  onnx_node(&extra, "Add", {"k_b", "bias"}, {"k_c"}, "/Add");
  onnx_node(&extra, "Sub", {"k_c", "offset"}, {"k_d"}, "/Sub_1");
  onnx::ModelProto m = with_nodes_after_relu(extra, "k_d");
  *m.mutable_graph()->add_initializer() = test::onnx_floats("bias", {4, 1, 1}, 0.5f);
  *m.mutable_graph()->add_initializer() = test::onnx_floats("offset", {8}, 0.25f);
  const ModelConfig cfg = load(m);
  ASSERT_EQ(layer_ops(cfg), (std::vector<std::string>{"conv2d", "relu", "row_mean",
                                                      "channel_scale", "affine", "channel_shift",
                                                      "add_constant", "affine", "add_constant",
                                                      "affine", "maxpool", "global_avgpool",
                                                      "dense"}));
  for (int k : {2, 3, 5}) {
    SCOPED_TRACE(cfg.layers[k].op);
    EXPECT_EQ(AttrReader(cfg.layers[k].attrs).require_int("axes", 1, 7), 1);
    EXPECT_EQ(AttrReader(cfg.layers[k].attrs).require_int("keep_last", 0, 6), 2);
  }
  EXPECT_EQ(cfg.layers[6].param_names.at("bias"), "bias");
  EXPECT_EQ(std::get<std::vector<int64_t>>(cfg.layers[6].attrs.values.at("shape")),
            (std::vector<int64_t>{4, 1, 1}));
  EXPECT_EQ(cfg.layers[8].param_names.at("bias"), "offset");
  EXPECT_EQ(cfg.layers[8].inputs, (std::vector<std::string>{cfg.layers[7].name}));  // -x + w
  const OpRegistry reg = make_builtin_registry();
  const Graph g = build_forward_graph(cfg, reg);
  EXPECT_EQ(g.value(g.find_value("bias")).kind, ValueKind::Param);
  EXPECT_EQ(g.value(g.find_value("bias")).desc.shape, (Shape{4, 1, 1}));

  onnx::GraphProto half;  // r [4, 8, 8] times the mean over the channels of its max-pool
  onnx::NodeProto* mp = onnx_node(&half, "MaxPool", {"r"}, {"k_h"}, "/MaxPool");
  test::onnx_attr(mp, "kernel_shape", std::vector<int64_t>{2, 2});
  test::onnx_attr(mp, "strides", std::vector<int64_t>{2, 2});
  onnx::NodeProto* hm = onnx_node(&half, "ReduceMean", {"k_h"}, {"hm"}, "/ReduceMean");
  test::onnx_attr(hm, "axes", std::vector<int64_t>{1});
  onnx_node(&half, "Mul", {"r", "hm"}, {"k_e"}, "/Mul");
  const std::string e = error_of(with_nodes_after_relu(half, "k_e"));
  EXPECT_NE(e.find("node '/Mul' (Mul, opset 13): inputs [4, 8, 8] and [1, 4, 4] per sample"),
            std::string::npos)
      << e;
  onnx::GraphProto inner;
  onnx_node(&inner, "Add", {"r", "w"}, {"k_f"}, "/Add");
  onnx::ModelProto mi = with_nodes_after_relu(inner, "k_f");
  *mi.mutable_graph()->add_initializer() = test::onnx_floats("w", {4, 1, 8}, 0.5f);
  const std::string e2 = error_of(mi);
  EXPECT_NE(e2.find("node '/Add' (Add, opset 13): a sum with a parameter [4, 1, 8]"),
            std::string::npos)
      << e2;
}

TEST_F(OnnxArithmetic, LeakyReluWithANegativeSlopeIsRefused) {
  onnx::GraphProto extra;
  set_float(onnx_node(&extra, "LeakyRelu", {"r"}, {"lr"}, "/act/LeakyRelu"), "alpha", -0.5f);
  const std::string e = error_of(with_nodes_after_relu(extra, "lr"));
  EXPECT_NE(e.find("node '/act/LeakyRelu' (LeakyRelu, opset 13): a negative alpha"), std::string::npos) << e;
}

// nn.GELU() as torch.onnx.export writes it: one gelu_erf layer; a constant that is not the exact
// GELU's is an error naming the group.
TEST_F(OnnxArithmetic, ExactGeluIsOneLayerOnceItsConstantsAre) {
  for (float root2 : {1.4142135f, 1.5f}) {
    onnx::ModelProto m;
    {
      onnx::GraphProto extra;
      onnx_node(&extra, "Div", {"r", "g.root2"}, {"g.div"}, "/gelu/Div");
      onnx_node(&extra, "Erf", {"g.div"}, {"g.erf"}, "/gelu/Erf");
      onnx_node(&extra, "Add", {"g.erf", "g.one"}, {"g.add"}, "/gelu/Add");
      onnx_node(&extra, "Mul", {"r", "g.add"}, {"g.mul"}, "/gelu/Mul");
      onnx_node(&extra, "Mul", {"g.mul", "g.half"}, {"g.out"}, "/gelu/Mul_1");
      m = with_nodes_after_relu(extra, "g.out");
    }
    *m.mutable_graph()->add_initializer() = test::onnx_floats("g.root2", {}, root2);
    *m.mutable_graph()->add_initializer() = test::onnx_floats("g.one", {}, 1.0f);
    *m.mutable_graph()->add_initializer() = test::onnx_floats("g.half", {}, 0.5f);
    if (root2 != 1.4142135f) {
      const std::string e = error_of(m);
      EXPECT_NE(e.find("(the nodes of the exact (erf) GELU, opset 13)"), std::string::npos) << e;
      continue;
    }
    const ModelConfig cfg = load(m);
    EXPECT_EQ(layer_ops(cfg), (std::vector<std::string>{"conv2d", "relu", "gelu_erf", "maxpool",
                                                        "global_avgpool", "dense"}));
  }
}


// Pow of data by a constant the exporter wrote: pow with that exponent (sqrt for 1/2, x itself for
// 1); Sqrt of data: sqrt. A module's parameter or data as the exponent is refused at the Pow.
TEST_F(OnnxArithmetic, PowersOfDataAreCurves) {
  for (float e : {3.0f, 0.5f, 1.0f}) {
    SCOPED_TRACE(e);
    onnx::GraphProto extra;
    onnx_node(&extra, "Pow", {"r", "onnx::Pow_1"}, {"pw"}, "/Pow");
    onnx_node(&extra, "Sqrt", {"pw"}, {"sq"}, "/Sqrt");
    onnx::ModelProto m = with_nodes_after_relu(extra, "sq");
    *m.mutable_graph()->add_initializer() = test::onnx_floats("onnx::Pow_1", {}, e);
    const ModelConfig cfg = load(m);
    std::vector<std::string> want = {"conv2d", "relu", "pow", "sqrt", "maxpool", "global_avgpool",
                                     "dense"};
    if (e == 0.5f) want[2] = "sqrt";
    if (e == 1.0f) want.erase(want.begin() + 2);
    ASSERT_EQ(layer_ops(cfg), want);
    if (e == 3.0f) {
      EXPECT_EQ(std::get<double>(cfg.layers[2].attrs.values.at("exponent")), 3.0);
    }
  }
  onnx::GraphProto learned;
  onnx_node(&learned, "Pow", {"r", "power"}, {"pw"}, "/Pow");
  onnx::ModelProto m = with_nodes_after_relu(learned, "pw");
  *m.mutable_graph()->add_initializer() = test::onnx_floats("power", {}, 2.0f);
  const std::string e = error_of(m);
  EXPECT_NE(e.find("node '/Pow' (Pow, opset 13): the exponent must be a constant (not data, not a "
                   "module's parameter)"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace remat
