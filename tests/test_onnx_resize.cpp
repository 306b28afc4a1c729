// ONNX's Resize on small models built here with ONNX's own messages (tests/onnx_builder.h): an
// integer factor by upsample's rule is an upsample; any other Resize is a constant map per
// resized axis (Note [resize as linear maps]), here its layers and hand-computed weights; and
// one clear error for each form remat does not take. Its numbers against ONNX's are the node
// cases' (OnnxNodeCases), against PyTorch's OnnxModels.InterpolationsAsLinearMaps.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "models/config.h"
#include "tests/onnx_builder.h"
#include "tests/onnx_op_test.h"

namespace remat {
namespace {

using test::cnn_with;
using test::onnx_attr;
using test::onnx_ints;
using test::onnx_node;
using Attrs = std::vector<std::pair<std::string, std::string>>;

class OnnxResize : public test::OnnxOpTest {
 protected:
  // The constant maps: dense layers with learned: false (the model's head is a learned dense).
  static std::vector<const LayerConfig*> maps_of(const ModelConfig& cfg) {
    std::vector<const LayerConfig*> out;
    for (const LayerConfig* l : layers_of(cfg, "dense"))
      if (!AttrReader(l->attrs).get_bool("learned", true)) out.push_back(l);
    return out;
  }
};

// Resize(c, "", scales or sizes [H', W']) with `attrs` (name, string value) -> m.
std::function<void(onnx::GraphProto*)> resize(std::vector<float> scales, std::vector<int64_t> sizes,
                                              Attrs attrs) {
  return [=](onnx::GraphProto* g) {
    std::vector<std::string> in = {"c", ""};
    if (!scales.empty()) {
      *g->add_initializer() = test::onnx_float_list("scales", scales);
      in.push_back("scales");
    } else {  // Concat(Shape(c)[0:2], [H', W']), as F.interpolate(size=...) exports it
      *g->add_initializer() = onnx_ints("zero", {0});
      *g->add_initializer() = onnx_ints("two", {2});
      *g->add_initializer() = onnx_ints("hw", sizes);
      onnx_node(g, "Shape", {"c"}, {"shape"}, "/Shape");
      onnx_node(g, "Slice", {"shape", "zero", "two", "zero"}, {"nc"}, "/Slice");
      onnx_attr(onnx_node(g, "Concat", {"nc", "hw"}, {"sizes"}, "/Concat"), "axis", int64_t{0});
      in.push_back("");
      in.push_back("sizes");
    }
    onnx::NodeProto* n = onnx_node(g, "Resize", in, {"m"}, "/Resize");
    for (const auto& [k, v] : attrs) {
      onnx::AttributeProto* a = n->add_attribute();
      a->set_name(k);
      a->set_type(onnx::AttributeProto::STRING);
      a->set_s(v);
    }
  };
}

const Attrs kBilinear = {{"mode", "linear"}, {"coordinate_transformation_mode", "pytorch_half_pixel"}};

TEST_F(OnnxResize, AResizeByIntegerFactorsIsAnUpsample) {
  const Attrs nearest = {{"mode", "nearest"}, {"coordinate_transformation_mode", "asymmetric"},
                         {"nearest_mode", "floor"}};
  struct Case {
    ModelConfig cfg;
    const char* mode;
    std::vector<int64_t> factor;
  };
  const std::vector<Case> cases = {
      {load(cnn_with(resize({1, 1, 2, 3}, {}, kBilinear), 8)), "bilinear", {2, 3}},
      {load(cnn_with(resize({}, {32, 16}, nearest), 8)), "nearest", {4, 2}},
      {load(cnn_with(resize({1, 1, 2, 2}, {}, {}), 8)), "nearest", {2, 2}},  // ONNX's defaults
  };
  for (const Case& c : cases) {
    const auto u = layers_of(c.cfg, "upsample");
    ASSERT_EQ(u.size(), 1u);
    EXPECT_EQ(AttrReader(u[0]->attrs).get_choice("mode", "nearest", {"nearest", "bilinear"}), c.mode);
    EXPECT_EQ(AttrReader(u[0]->attrs).get_ints("factor", 2, {}, 1, 100), c.factor);
    EXPECT_TRUE(maps_of(c.cfg).empty());
  }
  const ModelConfig same = load(cnn_with(resize({1, 1, 1, 1}, {}, kBilinear), 8));
  EXPECT_TRUE(layers_of(same, "upsample").empty());
  EXPECT_TRUE(maps_of(same).empty());
}

// Bilinear by 1.5 at half-pixel centres, 8 -> 12 along H and W: output o reads x = (o + 0.5) /
// 1.5 - 0.5 between inputs floor(x) and floor(x) + 1 (clamped to the edge): row 0 (x = -1/6)
// is input 0, row 1 (x = 1/2) half of 0 and 1, row 2 (x = 7/6) 5/6 of 1 and 1/6 of 2.
TEST_F(OnnxResize, AFractionalFactorIsAConstantMapPerAxis) {
  const ModelConfig cfg = load(cnn_with(resize({1, 1, 1.5f, 1.5f}, {}, kBilinear), 8));
  EXPECT_TRUE(layers_of(cfg, "upsample").empty());
  const auto maps = maps_of(cfg);
  // H between two transposes, then W: the transposes move 8 x 8 + 8 x 12 values, where W first
  // would move 8 x 12 + 12 x 12.
  ASSERT_EQ(maps.size(), 2u);
  EXPECT_EQ(layers_of(cfg, "transpose").size(), 2u);
  for (const LayerConfig* l : maps) {
    AttrReader r(l->attrs);
    EXPECT_EQ(r.require_int("units", 1, 100), 12);
    EXPECT_FALSE(r.get_bool("learned", true));
    EXPECT_TRUE(cfg.export_skip.count(l->name + ".weight")) << "a constant, not a weight";
  }
  const std::vector<float>& m = cfg.initial_values->at(maps[0]->name + ".weight");
  ASSERT_EQ(m.size(), 12u * 8u);  // [12, 8]
  const std::vector<float> first_rows = {1, 0, 0, 0.5f, 0.5f, 0, 0, 5.0f / 6, 1.0f / 6};
  for (int o = 0; o < 3; ++o)
    for (int i = 0; i < 3; ++i)
      EXPECT_NEAR(m[static_cast<size_t>(o * 8 + i)], first_rows[static_cast<size_t>(o * 3 + i)],
                  1e-7) << "row " << o << ", input " << i;
  EXPECT_EQ(shape_of(cfg, layers_of(cfg, "transpose")[1]->name), (Shape{2, 8, 12, 8}));
  EXPECT_EQ(shape_of(cfg, maps[1]->name), (Shape{2, 8, 12, 12}));
  // Corners aligned, H kept: only W's map, 8 -> 12, x = o 7 / 11; nothing transposed.
  const ModelConfig w_only = load(cnn_with(
      resize({}, {8, 12}, {{"mode", "linear"}, {"coordinate_transformation_mode", "align_corners"}}),
      8));
  ASSERT_EQ(maps_of(w_only).size(), 1u);
  EXPECT_TRUE(layers_of(w_only, "transpose").empty());
  const std::vector<float>& a = w_only.initial_values->at(maps_of(w_only)[0]->name + ".weight");
  EXPECT_NEAR(a[1 * 8 + 0], 1 - 7.0 / 11, 1e-7);
  EXPECT_NEAR(a[1 * 8 + 1], 7.0 / 11, 1e-7);
  EXPECT_EQ(a[11 * 8 + 7], 1.0f);
  // Cubic by 2 is not upsample's rule: a map too, four taps per row.
  const ModelConfig cubic = load(cnn_with(resize({1, 1, 2, 2}, {}, {{"mode", "cubic"}}), 8));
  EXPECT_TRUE(layers_of(cubic, "upsample").empty());
  EXPECT_EQ(maps_of(cubic).size(), 2u);
}

TEST_F(OnnxResize, ResizesRematDoesNotTakeAreClearErrors) {
  EXPECT_HAS(error_of(cnn_with(resize({1, 1, 2, 2}, {}, {{"mode", "linear"}, {"coordinate_transformation_mode", "tf_crop_and_resize"}}), 8)),
             "node '/Resize' (Resize, opset 13): coordinate_transformation_mode "
             "'tf_crop_and_resize' is not supported (half_pixel, pytorch_half_pixel, "
             "align_corners, asymmetric, tf_half_pixel_for_nn)");
  EXPECT_HAS(error_of(cnn_with(resize({1, 1, 2, 2}, {}, {{"mode", "area"}}), 8)),
             "mode 'area' is not supported (nearest, linear, cubic)");
  EXPECT_HAS(error_of(cnn_with(resize({1, 1, 2, 2}, {}, {{"nearest_mode", "round"}}), 8)),
             "nearest_mode 'round' is not supported");
  EXPECT_HAS(error_of(cnn_with(resize({1, 2, 2, 2}, {}, Attrs{}), 8)), "scales must be [1, 1, fh, fw]");
  EXPECT_HAS(error_of(cnn_with(resize({1, 1, 0.1f, 1}, {}, Attrs{}), 8)),
             "of an axis of 8 gives no output length from 1 to 2^24");
  EXPECT_HAS(error_of(cnn_with(resize({1, 1, 1, 1048576.5f}, {}, kBilinear), 8)),
             "a resize from 8 to 8388612 positions is a map of more than 2^24 weights");
  EXPECT_HAS(error_of(cnn_with(resize({1, 1, 1, 4194304.5f}, {}, kBilinear), 8)),
             "of an axis of 8 gives no output length from 1 to 2^24");
  EXPECT_HAS(error_of(cnn_with(resize({}, {8, int64_t{1} << 40}, kBilinear), 8)),
             "sizes must be 1 to 2^24, got 1099511627776");
}

}  // namespace
}  // namespace remat
