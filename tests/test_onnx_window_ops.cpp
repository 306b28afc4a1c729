// The ONNX import of Swin's window attention, on small models built here with ONNX's own messages
// (tests/onnx_builder.h): values whose windows are folded into the batch (Note [folded batch] in
// models/onnx/onnx_translator.h) through the ops that take them and the clear error of one that
// does not; qkv[i] after a permute that moves an axis first (Unbind: channel_slice along it);
// q @ k.transpose(-2, -1) as a matmul reading k transposed;
// ScatterND's folding against ONNX's node case. Their numbers against PyTorch's are
// OnnxModels.SwinWindowsFoldedIntoTheBatch's and OnnxModels.SwinShiftedWindows'.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "models/onnx/onnx_const.h"
#include "tests/onnx_op_test.h"

namespace remat {
namespace {

using test::cnn_with;
using test::onnx_attr;
using test::onnx_ints;
using test::onnx_node;
using OnnxWindowOps = test::OnnxOpTest;

// A 0-D int64 initializer (a Gather's scalar index).
onnx::TensorProto scalar_int(const std::string& name, int64_t v) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::INT64);
  t.add_int64_data(v);
  return t;
}

// c [N, 8, 8, 8] -> Reshape [-1, 4, 64] (two rows of each sample folded into the batch) ->
// `op` -> Reshape [-1, 8, 8, 8] -> m.
std::function<void(onnx::GraphProto*)> folded(const std::string& op) {
  return [=](onnx::GraphProto* g) {
    *g->add_initializer() = onnx_ints("fold", {-1, 4, 64});
    *g->add_initializer() = onnx_ints("unfold", {-1, 8, 8, 8});
    onnx_node(g, "Reshape", {"c", "fold"}, {"f"}, "/Reshape");
    onnx_node(g, op, {"f"}, {"o"}, "/" + op);
    onnx_node(g, "Reshape", {"o", "unfold"}, {"m"}, "/Reshape_1");
  };
}

TEST_F(OnnxWindowOps, ValuesFoldedIntoTheBatchAreRematsSamplesWithTheFoldFirst) {
  const ModelConfig cfg = load(cnn_with(folded("Softmax"), 8));
  const auto s = layers_of(cfg, "softmax");
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(shape_of(cfg, s[0]->name), (Shape{2, 2, 4, 64}));  // ONNX's [2N, 4, 64], N = 2
  const auto r = layers_of(cfg, "reshape");
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(shape_of(cfg, r[1]->name), (Shape{2, 8, 8, 8}));
}

// Folded rows reshaped to [N, F] are plain samples again: a Relu takes them.
TEST_F(OnnxWindowOps, AReshapeToTheBatchUnfolds) {
  const ModelConfig cfg = load(cnn_with([](onnx::GraphProto* g) {
    *g->add_initializer() = onnx_ints("fold", {-1, 4, 64});
    *g->add_initializer() = onnx_ints("to_flat", {-1, 512});
    *g->add_initializer() = onnx_ints("image", {-1, 8, 8, 8});
    onnx_node(g, "Reshape", {"c", "fold"}, {"f"}, "/Reshape");
    onnx_node(g, "Softmax", {"f"}, {"s"}, "/Softmax");
    onnx_node(g, "Reshape", {"s", "to_flat"}, {"v"}, "/Reshape_1");
    onnx_node(g, "Relu", {"v"}, {"r"}, "/Relu");
    onnx_node(g, "Reshape", {"r", "image"}, {"m"}, "/Reshape_2");
  }, 8));
  const auto r = layers_of(cfg, "relu");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(shape_of(cfg, r[0]->name), (Shape{2, 512}));
}

TEST_F(OnnxWindowOps, AFoldReachingAnOpThatDoesNotTakeItIsAClearError) {
  const std::string e = error_of(cnn_with(folded("Relu"), 8));
  EXPECT_NE(e.find("node '/Relu' (Relu, opset 13)"), std::string::npos) << e;
  EXPECT_NE(e.find("holds 2 windows per sample folded into the batch ([2N, ...]), which this op "
                   "does not take"), std::string::npos) << e;
  // A Reshape of the folded rows that no batch multiple fits.
  const std::string r = error_of(cnn_with([](onnx::GraphProto* g) {
    *g->add_initializer() = onnx_ints("fold", {-1, 4, 64});
    *g->add_initializer() = onnx_ints("odd", {-1, 3, 64});
    onnx_node(g, "Reshape", {"c", "fold"}, {"f"}, "/Reshape");
    onnx_node(g, "Reshape", {"f", "odd"}, {"m"}, "/Reshape_1");
  }, 3));
  const std::string want =
      "a Reshape to [-1, ...] of [2N, 4, 64] per 2 rows does not keep the batch";
  EXPECT_NE(r.find(want), std::string::npos) << r;
}

// c [N, 8, 8, 8] -> Reshape [0, 8, 2, 32] -> Transpose perm -> Gather 0, Gather 1 -> Add ->
// Reshape [0, 8, 4, 8] -> m.
std::function<void(onnx::GraphProto*)> unbound(std::vector<int64_t> perm) {
  return [=](onnx::GraphProto* g) {
    *g->add_initializer() = onnx_ints("split", {0, 8, 2, 32});
    *g->add_initializer() = onnx_ints("back", {0, 8, 4, 8});
    *g->add_initializer() = scalar_int("i0", 0);
    *g->add_initializer() = scalar_int("i1", 1);
    onnx_node(g, "Reshape", {"c", "split"}, {"s"}, "/Reshape");
    onnx_attr(onnx_node(g, "Transpose", {"s"}, {"t"}, "/Transpose"), "perm", perm);
    onnx_attr(onnx_node(g, "Gather", {"t", "i0"}, {"a"}, "/Gather"), "axis", int64_t{0});
    onnx_attr(onnx_node(g, "Gather", {"t", "i1"}, {"b"}, "/Gather_1"), "axis", int64_t{0});
    onnx_node(g, "Add", {"a", "b"}, {"ab"}, "/Add");
    onnx_node(g, "Reshape", {"ab", "back"}, {"m"}, "/Reshape_1");
  };
}

TEST_F(OnnxWindowOps, GathersAfterAPermuteThatMovesAnAxisFirstAreSlicesAlongIt) {
  const ModelConfig cfg = load(cnn_with(unbound({2, 0, 1, 3}), 8));
  const auto s = layers_of(cfg, "channel_slice");
  ASSERT_EQ(s.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(attr(*s[static_cast<size_t>(k)], "axis"), 2);
    EXPECT_EQ(attr(*s[static_cast<size_t>(k)], "offset"), k);
    EXPECT_EQ(attr(*s[static_cast<size_t>(k)], "channels"), 1);
    EXPECT_EQ(shape_of(cfg, s[static_cast<size_t>(k)]->name), (Shape{2, 8, 1, 32}));
  }
  EXPECT_TRUE(layers_of(cfg, "transpose").empty());  // [2, N, 8, 32][i] keeps the order
  // perm [2, 0, 3, 1]: each slice then transposed to [N, 32, 8].
  const ModelConfig moved = load(cnn_with(unbound({2, 0, 3, 1}), 8));
  ASSERT_EQ(layers_of(moved, "transpose").size(), 2u);
  EXPECT_EQ(shape_of(moved, layers_of(moved, "transpose")[0]->name), (Shape{2, 32, 8}));
  const std::string e = error_of(cnn_with(unbound({2, 1, 0, 3}), 8));
  EXPECT_NE(e.find("Transpose + Gather read as one of qkv[0], qkv[1], ..."), std::string::npos)
      << e;
  EXPECT_NE(e.find("perm [2, 1, 0, 3] leaves the batch behind another axis once axis 2 is taken"),
            std::string::npos) << e;
}

// q @ k.transpose(-2, -1): c [N, 8, 8, 8] times its Transpose [0, 1, 3, 2] (then divided by a
// constant, or not) is one matmul reading c with transpose_b, no transpose layer.
TEST_F(OnnxWindowOps, AProductOfATransposeOfTheLastTwoAxesReadsItTransposed) {
  for (bool scaled : {false, true}) {
    SCOPED_TRACE(scaled ? "scaled" : "plain");
    const ModelConfig cfg = load(cnn_with([scaled](onnx::GraphProto* g) {
      onnx_attr(onnx_node(g, "Transpose", {"c"}, {"kt"}, "/Transpose"), "perm",
                std::vector<int64_t>{0, 1, 3, 2});
      onnx_node(g, "MatMul", {"c", "kt"}, {scaled ? "s" : "m"}, "/MatMul");
      if (!scaled) return;
      *g->add_initializer() = test::onnx_floats("onnx::Div_1", {}, 4.0f);
      onnx_node(g, "Div", {"s", "onnx::Div_1"}, {"m"}, "/Div");
    }, 8));
    EXPECT_TRUE(layers_of(cfg, "transpose").empty());
    const auto mm = layers_of(cfg, "matmul");
    ASSERT_EQ(mm.size(), 1u);
    EXPECT_TRUE(std::get<bool>(mm[0]->attrs.values.at("transpose_b")));
    EXPECT_EQ(mm[0]->attrs.values.count("transpose_a"), 0u);
    EXPECT_EQ(mm[0]->attrs.values.count("scale"), scaled ? 1u : 0u);
    EXPECT_EQ(mm[0]->inputs, (std::vector<std::string>{mm[0]->inputs[0], mm[0]->inputs[0]}));
  }
}

// ONNX's own ScatterND case (libonnx-testdata's test_scatternd: data [4, 4, 4], two slices
// replaced) folds to its expected output.
TEST(OnnxFold, ScatterNDAsOnnxsNodeCase) {
  const std::filesystem::path dir =
      std::filesystem::path(REMAT_ONNX_NODE_CASES) / "test_scatternd" / "test_data_set_0";
  if (!std::filesystem::exists(dir))
    GTEST_SKIP() << dir << " is missing (Debian's libonnx-testdata)";
  auto read = [&](const std::string& f) {
    onnx::TensorProto t;
    std::ifstream in(dir / f, std::ios::binary);
    EXPECT_TRUE(in && t.ParseFromIstream(&in)) << f;
    return const_from_proto(t, f);
  };
  const OnnxConst data = read("input_0.pb"), idx = read("input_1.pb");
  const OnnxConst upd = read("input_2.pb"), want = read("output_0.pb");
  const OnnxConst got = fold_scatter_nd(data, idx, upd, "case");
  EXPECT_EQ(got.shape, want.shape);
  EXPECT_EQ(got.f, want.f);
  EXPECT_NE(got.f, data.f);
  const OnnxConst short_upd = const_floats({1.0, 2.0}, {2});
  EXPECT_HAS(test::user_error([&] { fold_scatter_nd(data, idx, short_upd, "case"); }),
             "case: updates [2] where indices [2, 1] into data [4, 4, 4] need floats [2, 4, 4]");
}

}  // namespace
}  // namespace remat
