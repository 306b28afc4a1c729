// The ONNX importer's tensor constants (Note [tensor constants] in
// models/onnx/onnx_constant_ops.cpp): Add, Sub, Mul, Div and Where of data and a constant the
// export computed become add_constant and mul_table layers whose tables are buffers that
// `export` leaves out; a module's tensor, or a value folded from one, stays an error, as do
// constants that do not broadcast to the data and divisions by zero.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tests/onnx_op_test.h"

namespace remat {
namespace {

using test::cnn_with;
using test::onnx_floats;
using test::onnx_node;
using OnnxConstants = test::OnnxOpTest;

const float kInf = std::numeric_limits<float>::infinity();

// A Constant node writing `out` (dims, values; bool when `is_bool`).
void constant(onnx::GraphProto* g, const std::string& out, const std::vector<int64_t>& dims,
              const std::vector<float>& values, bool is_bool = false) {
  onnx::AttributeProto* a = onnx_node(g, "Constant", {}, {out})->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  onnx::TensorProto* t = a->mutable_t();
  t->set_data_type(is_bool ? onnx::TensorProto::BOOL : onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  for (float v : values) {
    if (is_bool) t->add_int32_data(v != 0);
    else t->add_float_data(v);
  }
}

std::vector<float> ramp(int64_t n, float first) {
  std::vector<float> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(first + static_cast<float>(i));
  return v;
}

// The table of the import's one `op` layer (add_constant, mul_table), with its shape.
std::vector<float> table_of(const ModelConfig& cfg, Shape* shape,
                            const std::string& op = "add_constant") {
  std::vector<const LayerConfig*> layers;
  for (const LayerConfig& l : cfg.layers)
    if (l.op == op) layers.push_back(&l);
  EXPECT_EQ(layers.size(), 1u);
  if (layers.size() != 1) return {};
  *shape = AttrReader(layers[0]->attrs).get_int_list("shape", {1, 2, 3}, {}, 1, 100);
  const std::string name = layers[0]->name + ".table";
  EXPECT_TRUE(cfg.export_skip.count(name)) << name << ": `export` would write it";
  const auto it = cfg.initial_values->find(name);
  EXPECT_NE(it, cfg.initial_values->end()) << name;
  return it == cfg.initial_values->end() ? std::vector<float>{} : it->second;
}

// cnn_with's c [8, 8, 8] `op` a Constant k [8, 1, 1] = 1 .. 8 (k first: k `op` c).
onnx::ModelProto with_k(const std::string& op, bool k_first) {
  return cnn_with([&](onnx::GraphProto* g) {
    constant(g, "k", {8, 1, 1}, ramp(8, 1));
    const std::vector<std::string> in = k_first ? std::vector<std::string>{"k", "c"}
                                                : std::vector<std::string>{"c", "k"};
    onnx_node(g, op, in, {"m"});
  }, 8);
}

std::vector<std::string> ops_of(const ModelConfig& cfg) {
  std::vector<std::string> ops;
  for (const LayerConfig& l : cfg.layers) ops.push_back(l.op);
  return ops;
}

// c [8, 8, 8] + k [8, 1, 1] (either order), c - k and k - c: the table is k over every pixel of
// its channel (negated for c - k); k - c negates c first.
TEST_F(OnnxConstants, AddAndSubOfAConstantAddItsExpandedTable) {
  struct Case {
    const char* op;
    bool constant_first;
    float sign;
    std::vector<std::string> ops;
  };
  for (const Case& c : std::vector<Case>{
           {"Add", false, 1, {"conv2d", "add_constant", "global_avgpool", "dense"}},
           {"Add", true, 1, {"conv2d", "add_constant", "global_avgpool", "dense"}},
           {"Sub", false, -1, {"conv2d", "add_constant", "global_avgpool", "dense"}},
           {"Sub", true, 1, {"conv2d", "affine", "add_constant", "global_avgpool", "dense"}}}) {
    SCOPED_TRACE(std::string(c.op) + (c.constant_first ? " (constant first)" : ""));
    const ModelConfig cfg = load(with_k(c.op, c.constant_first));
    EXPECT_EQ(ops_of(cfg), c.ops);
    Shape shape;
    const std::vector<float> table = table_of(cfg, &shape);
    ASSERT_EQ(shape, (Shape{8, 8, 8}));
    ASSERT_EQ(table.size(), 512u);
    for (int64_t ch = 0; ch < 8; ++ch)
      for (int64_t p : {0, 37, 63})
        EXPECT_EQ(table[static_cast<size_t>(ch * 64 + p)], c.sign * static_cast<float>(ch + 1));
    const OpRegistry reg = make_builtin_registry();
    const Graph g = build_forward_graph(cfg, reg);
    EXPECT_EQ(g.value(g.find_value(layers_of(cfg, "add_constant")[0]->name + ".table")).kind,
              ValueKind::Buffer);
  }
}

// c * k, k * c, c / k and k / c for k [8, 1, 1]: a mul_table of k (1 / k for c / k) over
// every pixel of its channel; k / c takes c's reciprocal first (pow -1). A 0 in k is a division
// by zero for c / k.
TEST_F(OnnxConstants, MulAndDivOfAConstantMultiplyByItsExpandedTable) {
  struct Case {
    const char* op;
    bool constant_first;
    bool reciprocal;
    std::vector<std::string> ops;
  };
  for (const Case& c : std::vector<Case>{
           {"Mul", false, false, {"conv2d", "mul_table", "global_avgpool", "dense"}},
           {"Mul", true, false, {"conv2d", "mul_table", "global_avgpool", "dense"}},
           {"Div", false, true, {"conv2d", "mul_table", "global_avgpool", "dense"}},
           {"Div", true, false, {"conv2d", "pow", "mul_table", "global_avgpool", "dense"}}}) {
    SCOPED_TRACE(std::string(c.op) + (c.constant_first ? " (constant first)" : ""));
    const ModelConfig cfg = load(with_k(c.op, c.constant_first));
    EXPECT_EQ(ops_of(cfg), c.ops);
    Shape shape;
    const std::vector<float> table = table_of(cfg, &shape, "mul_table");
    ASSERT_EQ(shape, (Shape{8, 8, 8}));
    ASSERT_EQ(table.size(), 512u);
    for (int64_t ch = 0; ch < 8; ++ch) {
      const double k = static_cast<double>(ch + 1);
      for (int64_t p : {0, 37, 63})
        EXPECT_EQ(table[static_cast<size_t>(ch * 64 + p)],
                  static_cast<float>(c.reciprocal ? 1.0 / k : k));
    }
    const OpRegistry reg = make_builtin_registry();
    const Graph g = build_forward_graph(cfg, reg);
    const LayerConfig& l = *layers_of(cfg, "mul_table")[0];
    EXPECT_EQ(g.value(g.find_value(l.name + ".table")).kind, ValueKind::Buffer);
  }
  const std::string zero = error_of(cnn_with([](onnx::GraphProto* g) {
    constant(g, "k", {8, 1, 1}, ramp(8, 0));
    onnx_node(g, "Div", {"c", "k"}, {"m"}, "/Div");
  }, 8));
  EXPECT_NE(zero.find("node '/Div' (Div, opset 13): a division by zero"), std::string::npos)
      << zero;
}

// Where(mask, c, 5) and Where(mask, 5, c): c times the 0/1 mask (1 where c is kept), plus 5
// where it is hidden; with a fill of 0 the product alone.
TEST_F(OnnxConstants, WhereWithAFiniteFillIsAProductAndASum) {
  std::vector<float> mask(64);
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = static_cast<float>(i % 3 == 0);
  for (float fill : {5.0f, 0.0f})
    for (bool data_first : {true, false}) {
      SCOPED_TRACE(std::to_string(fill) +
                   (data_first ? " Where(mask, c, fill)" : " Where(mask, fill, c)"));
      const ModelConfig cfg = load(cnn_with([&](onnx::GraphProto* g) {
        constant(g, "mask", {8, 8}, mask, true);
        constant(g, "fill", {}, {fill});
        onnx_node(g, "Where", {"mask", data_first ? "c" : "fill", data_first ? "fill" : "c"},
                  {"m"});
      }, 8));
      Shape shape;
      const std::vector<float> keep = table_of(cfg, &shape, "mul_table");
      ASSERT_EQ(shape, (Shape{8, 8}));
      ASSERT_EQ(keep.size(), 64u);
      EXPECT_EQ(layers_of(cfg, "add_constant").size(), fill != 0 ? 1u : 0u);
      const std::vector<float> add = fill != 0 ? table_of(cfg, &shape) : std::vector<float>(64, 0);
      ASSERT_EQ(add.size(), 64u);
      for (size_t i = 0; i < 64; ++i) {
        const bool kept = (mask[i] != 0) == data_first;
        EXPECT_EQ(keep[i], kept ? 1.0f : 0.0f) << i;
        EXPECT_EQ(add[i], kept ? 0.0f : fill) << i;
      }
    }
}

// A constant spanning the last axis only is a table of that axis alone: [1, 1, 8] of [8, 8, 8].
TEST_F(OnnxConstants, ATableSpansTheAxesFromTheConstantsFirstNonOne) {
  const ModelConfig cfg = load(cnn_with([](onnx::GraphProto* g) {
    *g->add_initializer() = onnx_floats("onnx::Add_7", {1, 1, 8}, 0.5f, 1.0f);
    onnx_node(g, "Add", {"c", "onnx::Add_7"}, {"m"});
  }, 8));
  Shape shape;
  EXPECT_EQ(table_of(cfg, &shape),
            (std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f, 7.5f}));
  EXPECT_EQ(shape, (Shape{8}));
}

// Where(mask, c, -inf) keeps c where the mask is true and adds -inf where it is false;
// Where(mask, -inf, c) the other way round. A mask [8, 8] spans the last two axes.
TEST_F(OnnxConstants, WhereOfDataAndMinusInfinityIsAnAdditiveMask) {
  std::vector<float> mask(64);
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = static_cast<float>(i % 3 == 0);
  for (bool data_first : {true, false}) {
    SCOPED_TRACE(data_first ? "Where(mask, c, -inf)" : "Where(mask, -inf, c)");
    const ModelConfig cfg = load(cnn_with([&](onnx::GraphProto* g) {
      constant(g, "mask", {8, 8}, mask, true);
      constant(g, "fill", {}, {-kInf});
      onnx_node(g, "Where", {"mask", data_first ? "c" : "fill", data_first ? "fill" : "c"}, {"m"});
    }, 8));
    Shape shape;
    const std::vector<float> table = table_of(cfg, &shape);
    ASSERT_EQ(shape, (Shape{8, 8}));
    for (size_t i = 0; i < 64; ++i)
      EXPECT_EQ(table[i], (mask[i] != 0) == data_first ? 0.0f : -kInf) << i;
  }
}

TEST_F(OnnxConstants, WhatDoesNotBroadcastOrWouldFreezeAParameterIsAnErrorAtTheNode) {
  auto with_add = [&](const std::function<void(onnx::GraphProto*)>& make_k) {
    return error_of(cnn_with([&](onnx::GraphProto* g) {
      make_k(g);
      onnx_node(g, "Add", {"c", "k"}, {"m"}, "/block/Add");
    }, 8));
  };
  const std::string batch =
      with_add([](onnx::GraphProto* g) { constant(g, "k", {2, 8, 1, 1}, ramp(16, 0)); });
  EXPECT_NE(batch.find("/block/Add"), std::string::npos) << batch;
  EXPECT_NE(batch.find("varies along the batch axis"), std::string::npos) << batch;
  EXPECT_NE(with_add([](onnx::GraphProto* g) { constant(g, "k", {3, 1, 1}, ramp(3, 0)); })
                .find("does not broadcast to the data"), std::string::npos);
  EXPECT_NE(with_add([](onnx::GraphProto* g) { constant(g, "k", {1, 1, 8, 8, 8}, ramp(512, 0)); })
                .find("broadcasts to a higher rank"), std::string::npos);
  // A [C, 1, 1] constant beside data upsampled to [8, 65536, 65536]: no 2^35-value table.
  const std::string huge = error_of(cnn_with([](onnx::GraphProto* g) {
    *g->add_initializer() = test::onnx_float_list("onnx::Resize_1", {1, 1, 8192, 8192});
    onnx_node(g, "Resize", {"c", "", "onnx::Resize_1"}, {"big"});
    constant(g, "k", {8, 1, 1}, ramp(8, 0));
    onnx_node(g, "Add", {"big", "k"}, {"m"});
  }, 8));
  EXPECT_NE(huge.find("expands to a table of more than 268435456 values ([8, 65536, 65536])"),
            std::string::npos)
      << huge;
  // A module's tensor that no learned table takes ([3, 1, 1] beside 8 channels), and a value
  // computed from one (not a view of it, Note [parameter views]): a parameter would be frozen.
  const std::string named = with_add([](onnx::GraphProto* g) {
    *g->add_initializer() = onnx_floats("k", {3, 1, 1}, 0.5f);
  });
  EXPECT_NE(named.find("a sum with a parameter [3, 1, 1]"), std::string::npos) << named;
  const std::string folded = with_add([](onnx::GraphProto* g) {
    *g->add_initializer() = onnx_floats("block.shift", {8}, 0.5f);
    *g->add_initializer() = test::onnx_float_list("onnx::Mul_2", {2.f});
    onnx_node(g, "Mul", {"block.shift", "onnx::Mul_2"}, {"twice"});
    *g->add_initializer() = test::onnx_ints("onnx::Reshape_3", {8, 1, 1});
    onnx_node(g, "Reshape", {"twice", "onnx::Reshape_3"}, {"k"});
  });
  EXPECT_NE(folded.find("a tensor of the module ('k'"), std::string::npos) << folded;
  // Where of data and data; Where with a computed mask (no constant mask).
  const std::string two = error_of(cnn_with([](onnx::GraphProto* g) {
    constant(g, "mask", {8, 8}, std::vector<float>(64, 1), true);
    onnx_node(g, "Relu", {"c"}, {"d"});
    onnx_node(g, "Where", {"mask", "c", "d"}, {"m"});
  }, 8));
  EXPECT_NE(two.find("only Where of data and a constant is supported"), std::string::npos) << two;
  const std::string computed = error_of(cnn_with([](onnx::GraphProto* g) {
    constant(g, "fill", {}, {-kInf});
    onnx_node(g, "Relu", {"c"}, {"mask"});
    onnx_node(g, "Where", {"mask", "c", "fill"}, {"m"});
  }, 8));
  EXPECT_NE(computed.find("only a constant mask is supported"), std::string::npos) << computed;
}

// A scalar folded from a module's tensor (a learned temperature's exp) is no constant either.
TEST_F(OnnxConstants, AScalarFoldedFromAModulesTensorIsNotAConstant) {
  const std::string e = error_of(cnn_with([](onnx::GraphProto* g) {
    *g->add_initializer() = onnx_floats("logit_scale", {1}, 0.5f);
    onnx_node(g, "Exp", {"logit_scale"}, {"scale"});
    onnx_node(g, "Mul", {"c", "scale"}, {"m"}, "/attn/Mul");
  }, 8));
  EXPECT_NE(e.find("/attn/Mul"), std::string::npos) << e;
}

}  // namespace
}  // namespace remat
