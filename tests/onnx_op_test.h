// Shared by the ONNX import's unit tests of single ops (test_onnx_shape_ops.cpp,
// test_onnx_window_ops.cpp): a small convolutional model around the nodes under test, and a
// fixture that writes a model, imports it and looks at its layers.
#pragma once

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "models/build.h"
#include "models/config.h"
#include "ops/registry.h"
#include "tests/model_test_util.h"
#include "tests/onnx_builder.h"
#include "tests/op_test_util.h"

namespace remat {
namespace test {

// x [batch, 3, 8, 8] -> Conv 8x3x3x3 (pads 1) -> c [batch, 8, 8, 8] -> `middle` (nodes from c to
// m [batch, channels, ...]) -> GlobalAveragePool -> Flatten -> Gemm -> y [batch, 10].
inline onnx::ModelProto cnn_with(const std::function<void(onnx::GraphProto*)>& middle,
                                 int64_t channels) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("cnn_with");
  onnx_value(g->add_input(), "x", {"batch", "3", "8", "8"});
  onnx_value(g->add_output(), "y", {"batch", "10"});
  *g->add_initializer() = onnx_floats("conv.weight", {8, 3, 3, 3}, -0.2f);
  *g->add_initializer() = onnx_floats("fc.weight", {10, channels}, -0.1f);
  onnx_attr(onnx_node(g, "Conv", {"x", "conv.weight"}, {"c"}, "/conv/Conv"), "pads",
            std::vector<int64_t>{1, 1, 1, 1});
  middle(g);
  onnx_node(g, "GlobalAveragePool", {"m"}, {"gap"}, "/gap/GlobalAveragePool");
  onnx_attr(onnx_node(g, "Flatten", {"gap"}, {"flat"}, "/Flatten"), "axis", int64_t{1});
  onnx_attr(onnx_node(g, "Gemm", {"flat", "fc.weight"}, {"y"}, "/fc/Gemm"), "transB", int64_t{1});
  return m;
}

class OnnxOpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/remat-onnx-op-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  ModelConfig load(const onnx::ModelProto& m) {
    onnx_write(m, dir_ + "/m.onnx");
    return load_model_config(dir_ + "/m.onnx", {"batch=2"});
  }
  std::string error_of(const onnx::ModelProto& m) {
    return user_error([&] { load(m); });
  }
  // The layers of op `op` in the import, and the graph's shape of a layer's value.
  static std::vector<const LayerConfig*> layers_of(const ModelConfig& cfg, const std::string& op) {
    std::vector<const LayerConfig*> out;
    for (const LayerConfig& l : cfg.layers)
      if (l.op == op) out.push_back(&l);
    return out;
  }
  static Shape shape_of(const ModelConfig& cfg, const std::string& layer) {
    const OpRegistry ops = make_builtin_registry();
    const Graph g = build_forward_graph(cfg, ops);
    return g.value(g.find_value(layer)).desc.shape;
  }
  static int64_t attr(const LayerConfig& l, const std::string& k) {
    return AttrReader(l.attrs).require_int(k, INT64_MIN, INT64_MAX);
  }
  std::string dir_;
};

}  // namespace test
}  // namespace remat
