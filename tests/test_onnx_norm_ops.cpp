// The ONNX normalizations and pixel shuffles on small models built here with ONNX's own messages
// (tests/onnx_builder.h): InstanceNormalization (layernorm over the planes, Note [instance
// normalization]) with its scale and bias as constants or as parameters, nn.GroupNorm's
// pattern (layernorm with groups), LayerNormalization
// from an axis before the last, views of a parameter (Note [parameter views]), DepthToSpace and
// SpaceToDepth (reshape + transpose + reshape), and one clear error for each form remat does not
// take. Their numbers against PyTorch's are OnnxModels.GroupInstanceAndImageLayerNormsAndPixelShuffles',
// against ONNX's own references the node cases' (test_instancenorm_*, test_depthtospace_*,
// test_spacetodepth_*).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/config.h"
#include "tests/onnx_builder.h"
#include "tests/onnx_op_test.h"
#include "tests/op_test_util.h"

namespace remat {
namespace {

using test::cnn_with;
using test::onnx_attr;
using test::onnx_floats;
using test::onnx_ints;
using test::onnx_node;

using OnnxNormOps = test::OnnxOpTest;

// InstanceNormalization(c, scale, bias) -> m, scale and bias initializers under those names.
std::function<void(onnx::GraphProto*)> instance_norm(const std::string& scale, const std::string& bias,
                                                     float scale_value = 1.f, int64_t channels = 8) {
  return [=](onnx::GraphProto* g) {
    *g->add_initializer() = onnx_floats(scale, {channels}, scale_value, 0.f);
    *g->add_initializer() = onnx_floats(bias, {channels}, 0.f, 0.f);
    onnx_node(g, "InstanceNormalization", {"c", scale, bias}, {"m"}, "/norm/InstanceNormalization");
  };
}

TEST_F(OnnxNormOps, InstanceNormalizationIsALayerNormOverThePlanes) {
  // The exporter's constants 1 and 0 (nn.InstanceNorm2d without affine, GroupNorm's): one layer.
  const ModelConfig plain = load(cnn_with(instance_norm("onnx::Const_1", "onnx::Const_2"), 8));
  const auto norms = layers_of(plain, "layernorm");
  ASSERT_EQ(norms.size(), 1u);
  EXPECT_EQ(attr(*norms[0], "axes"), 2);
  EXPECT_FALSE(AttrReader(norms[0]->attrs).get_bool("affine", true));
  EXPECT_TRUE(layers_of(plain, "conv2d").size() == 1u);  // the model's own convolution only
  // The module's parameters: a depthwise 1 x 1 conv2d with bias after it, their names kept.
  const ModelConfig learned = load(cnn_with(instance_norm("norm.weight", "norm.bias", 1.5f), 8));
  const auto convs = layers_of(learned, "conv2d");
  ASSERT_EQ(convs.size(), 2u);
  EXPECT_EQ(attr(*convs[1], "groups"), 8);
  EXPECT_EQ(attr(*convs[1], "kernel"), 1);
  EXPECT_EQ(convs[1]->param_names.at("weight"), "norm.weight");
  EXPECT_EQ(convs[1]->param_names.at("bias"), "norm.bias");
  EXPECT_EQ(learned.export_dims.at("norm.weight"), (Shape{8}));
}

// nn.GroupNorm's Reshape(c, [0, G, -1]) + InstanceNormalization(1, 0) + Reshape back -> m.
std::function<void(onnx::GraphProto*)> group_norm(int64_t groups, float scale = 1.f) {
  return [=](onnx::GraphProto* g) {
    *g->add_initializer() = onnx_ints("onnx::Reshape_1", {0, groups, -1});
    onnx_node(g, "Reshape", {"c", "onnx::Reshape_1"}, {"grouped"}, "/gn/Reshape");
    *g->add_initializer() = onnx_floats("onnx::Scale", {groups}, scale, 0.f);
    *g->add_initializer() = onnx_floats("onnx::Bias", {groups}, 0.f, 0.f);
    onnx_node(g, "InstanceNormalization", {"grouped", "onnx::Scale", "onnx::Bias"}, {"n"},
              "/gn/InstanceNormalization");
    onnx_node(g, "Shape", {"c"}, {"shape"}, "/gn/Shape");
    onnx_node(g, "Reshape", {"n", "shape"}, {"m"}, "/gn/Reshape_1");
  };
}

TEST_F(OnnxNormOps, GroupNormIsOneLayerNormOverGroupsOfChannels) {
  const ModelConfig cfg = load(cnn_with(group_norm(4), 8));
  const auto norms = layers_of(cfg, "layernorm");
  ASSERT_EQ(norms.size(), 1u);
  EXPECT_EQ(attr(*norms[0], "axes"), 3);
  EXPECT_EQ(attr(*norms[0], "groups"), 4);
  EXPECT_TRUE(layers_of(cfg, "reshape").empty());  // the groups are runs of the channels
  EXPECT_HAS(error_of(cnn_with(group_norm(4, 2.f), 8)),
             "node '/gn/InstanceNormalization' (Reshape + InstanceNormalization + Reshape read "
             "as a group norm, opset 13): an InstanceNormalization of grouped channels with a "
             "scale and bias other than 1 and 0");
  EXPECT_HAS(error_of(cnn_with(group_norm(16), 8)),
             "a Reshape of [8, 8, 8] to [16, 32] per sample before an InstanceNormalization is "
             "not a grouping of the channels");
}

TEST_F(OnnxNormOps, InstanceNormalizationsRematDoesNotTakeAreClearErrors) {
  EXPECT_HAS(error_of(cnn_with(instance_norm("onnx::Const_1", "onnx::Const_2", 2.f), 8)),
             "node '/norm/InstanceNormalization' (InstanceNormalization, opset 13): a scale and "
             "bias other than the constants 1 and 0 must both be the module's parameters [C]");
  EXPECT_HAS(error_of(cnn_with(instance_norm("norm.weight", "onnx::Const_2", 2.f), 8)),
             "must both be the module's parameters [C]");
  const auto flat = [](onnx::GraphProto* g) {  // [N, 8, 64] with a learned affine, pooled
    *g->add_initializer() = onnx_ints("to", {0, 8, -1});
    onnx_node(g, "Reshape", {"c", "to"}, {"r"}, "/Reshape");
    *g->add_initializer() = onnx_floats("norm.weight", {8}, 1.5f, 0.f);
    *g->add_initializer() = onnx_floats("norm.bias", {8}, 0.f, 0.f);
    onnx_node(g, "InstanceNormalization", {"r", "norm.weight", "norm.bias"}, {"m"}, "/norm");
  };
  EXPECT_HAS(error_of(cnn_with(flat, 8)),
             "a learned scale and bias are supported for an image [N, C, H, W] only, got [8, 64]");
}

// LayerNormalization(c, w, b) with `axis` -> m, w and b of the normalized dims.
std::function<void(onnx::GraphProto*)> layer_norm(int64_t axis, const std::vector<int64_t>& dims) {
  return [=](onnx::GraphProto* g) {
    *g->add_initializer() = onnx_floats("ln.weight", dims, 0.5f);
    *g->add_initializer() = onnx_floats("ln.bias", dims, -0.1f);
    onnx_attr(onnx_node(g, "LayerNormalization", {"c", "ln.weight", "ln.bias"}, {"m"}, "/ln"),
              "axis", axis);
  };
}

// cnn_with at opset 17, where LayerNormalization is.
onnx::ModelProto at_opset17(onnx::ModelProto m) {
  m.mutable_opset_import(0)->set_version(17);
  return m;
}

TEST_F(OnnxNormOps, ALayerNormalizationFromAnEarlierAxisSpansTheAxesAfterIt) {
  const ModelConfig cfg = load(at_opset17(cnn_with(layer_norm(1, {8, 8, 8}), 8)));  // [C, H, W]
  const auto norms = layers_of(cfg, "layernorm");
  ASSERT_EQ(norms.size(), 1u);
  EXPECT_EQ(attr(*norms[0], "axes"), 3);
  EXPECT_EQ(norms[0]->param_names.at("weight"), "ln.weight");
  EXPECT_EQ(attr(*layers_of(load(at_opset17(cnn_with(layer_norm(-2, {8, 8}), 8))), "layernorm")[0], "axes"), 2);
  EXPECT_HAS(error_of(at_opset17(cnn_with(layer_norm(0, {2, 8, 8, 8}), 8))),
             "node '/ln' (LayerNormalization, opset 17): a normalization over axes from 0 would mix "
             "the batch's samples");
  EXPECT_HAS(error_of(at_opset17(cnn_with(layer_norm(2, {8, 8, 8}), 8))),
             "the scale must be [8, 8] (the normalized dimensions), got [8, 8, 8]");
}

TEST_F(OnnxNormOps, AnUnsqueezedParameterIsTheParameterItself) {
  // nn.GroupNorm's weight [C] times the image as Unsqueeze(weight, [1, 2]): a layer scale
  // (conv2d) that trains the initializer under its name, and `export` writes it [8].
  const auto scaled = [](onnx::GraphProto* g) {
    *g->add_initializer() = onnx_floats("gn.weight", {8}, 0.5f);
    *g->add_initializer() = onnx_ints("onnx::Unsqueeze_axes", {1, 2});  // the exporter's name
    onnx_node(g, "Unsqueeze", {"gn.weight", "onnx::Unsqueeze_axes"}, {"w"}, "/Unsqueeze");
    onnx_node(g, "Mul", {"c", "w"}, {"s"}, "/Mul");
    *g->add_initializer() = onnx_floats("gn.bias", {8}, -0.5f);
    onnx_node(g, "Unsqueeze", {"gn.bias", "onnx::Unsqueeze_axes"}, {"b"}, "/Unsqueeze_1");
    onnx_node(g, "Add", {"s", "b"}, {"m"}, "/Add");
  };
  const ModelConfig cfg = load(cnn_with(scaled, 8));
  const auto convs = layers_of(cfg, "conv2d");
  ASSERT_EQ(convs.size(), 2u);
  EXPECT_EQ(convs[1]->param_names.at("weight"), "gn.weight");
  EXPECT_EQ(cfg.export_dims.at("gn.weight"), (Shape{8}));
  const auto shifts = layers_of(cfg, "add_constant");
  ASSERT_EQ(shifts.size(), 1u);
  EXPECT_EQ(shifts[0]->param_names.at("bias"), "gn.bias");
  EXPECT_EQ(cfg.export_dims.at("gn.bias"), (Shape{8}));
  // Named as a buffer, the same view is a constant: mul_table, no parameter.
  const onnx::ModelProto m = cnn_with(scaled, 8);
  test::onnx_write(m, dir_ + "/b.onnx");
  const ModelConfig buffered =
      load_model_config(dir_ + "/b.onnx", {"batch=2", "model.buffers=[gn.weight]"});
  EXPECT_EQ(layers_of(buffered, "conv2d").size(), 1u);
  EXPECT_EQ(layers_of(buffered, "mul_table").size(), 1u);
}

// DepthToSpace / SpaceToDepth(c, blocksize) -> m.
std::function<void(onnx::GraphProto*)> depth(const std::string& op, int64_t block,
                                             const std::string& mode = "") {
  return [=](onnx::GraphProto* g) {
    onnx::NodeProto* n = onnx_node(g, op, {"c"}, {"m"}, "/" + op);
    onnx_attr(n, "blocksize", block);
    if (!mode.empty()) {
      onnx::AttributeProto* a = n->add_attribute();
      a->set_name("mode");
      a->set_type(onnx::AttributeProto::STRING);
      a->set_s(mode);
    }
  };
}

TEST_F(OnnxNormOps, PixelShufflesAreAReshapeATransposeAndAReshape) {
  for (const char* mode : {"CRD", "DCR"}) {
    SCOPED_TRACE(mode);
    const ModelConfig cfg = load(cnn_with(depth("DepthToSpace", 2, mode), 2));
    EXPECT_EQ(layers_of(cfg, "reshape").size(), 2u);
    EXPECT_FALSE(layers_of(cfg, "transpose").empty());
    EXPECT_EQ(shape_of(cfg, layers_of(cfg, "reshape")[1]->name), (Shape{2, 2, 16, 16}));
  }
  const ModelConfig down = load(cnn_with(depth("SpaceToDepth", 2), 32));
  EXPECT_EQ(shape_of(down, layers_of(down, "reshape")[1]->name), (Shape{2, 32, 4, 4}));
  EXPECT_TRUE(layers_of(load(cnn_with(depth("DepthToSpace", 1), 8)), "reshape").empty());
}

TEST_F(OnnxNormOps, PixelShufflesRematDoesNotTakeAreClearErrors) {
  EXPECT_HAS(error_of(cnn_with(depth("DepthToSpace", 3), 8)),
             "node '/DepthToSpace' (DepthToSpace, opset 13): C = 8 is not a multiple of "
             "blocksize^2 = 9");
  EXPECT_HAS(error_of(cnn_with(depth("DepthToSpace", 2, "RCD"), 2)),
             "mode must be DCR or CRD, got 'RCD'");
  EXPECT_HAS(error_of(cnn_with(depth("SpaceToDepth", 3), 72)),
             "H and W (8, 8) must be multiples of blocksize 3");
  EXPECT_HAS(error_of(cnn_with(depth("SpaceToDepth", 0), 8)), "blocksize must be at least 1");
}

}  // namespace
}  // namespace remat
