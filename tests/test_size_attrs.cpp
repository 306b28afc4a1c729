// Note [size-relative attributes] (models/size_attrs.cpp): a pooling layer's `bins` and an
// upsample's `size_of` resolve to kernels and factors at each input size, in either layout, as
// the plain attributes would be written at that size; and every misuse is refused naming the
// file, line, layer and field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/build.h"
#include "models/config.h"
#include "ops/registry.h"
#include "tests/model_test_util.h"

namespace remat {
namespace {

using ::testing::HasSubstr;
using test::user_error;
using test::YamlText;

const OpRegistry& registry() {
  static const OpRegistry r = make_builtin_registry();
  return r;
}

// A pyramid as PSPNet's: f pooled into 2 x 2 and 3 x 3 bins, each upsampled back to f's size.
// `pool2` / `up2` / `pool3` / `up3`: the four layers' own attributes.
YamlText pyramid(const std::string& pool2, const std::string& up2, const std::string& pool3,
                 const std::string& up3, const std::string& layout = "channels_first") {
  return YamlText{{
      "name: pyramid",
      "input: [3, 24, 24]",
      "classes: 4",
      "batch: 2",
      "layout: " + layout,
      "layers:",
      "  - {name: f, op: conv2d, filters: 4, kernel: 3, stride: 2, padding: 1}",
      "  - {name: pool2, op: avgpool, " + pool2 + ", inputs: f}",
      "  - {name: up2, op: upsample, " + up2 + "}",
      "  - {name: pool3, op: maxpool, " + pool3 + ", inputs: f}",
      "  - {name: up3, op: upsample, " + up3 + "}",
      "  - {name: cat, op: concat, inputs: [f, up2, up3]}",
      "  - {name: gap, op: global_avgpool}",
      "  - {name: fc, op: dense, units: 4}",
  }};
}

YamlText relative(const std::string& layout = "channels_first") {
  return pyramid("bins: 2", "size_of: f, mode: bilinear", "bins: 3", "size_of: f", layout);
}

Graph build(const YamlText& y, int64_t side) {
  BuildOptions bo;
  bo.input = Shape{3, side, side};
  return build_forward_graph(parse_model_config(y.text(), y.source), registry(), bo);
}

const Node& node(const Graph& g, const std::string& name) {
  for (const Node& n : g.nodes)
    if (n.name == name) return n;
  ADD_FAILURE() << "no node " << name;
  return g.nodes.at(0);
}

std::vector<int64_t> ints(const Node& n, const std::string& key) {
  return std::get<std::vector<int64_t>>(n.attrs.values.at(key));
}

TEST(SizeAttrs, ResolveAtEachInputSizeAsThePlainAttributes) {
  for (int64_t side : {12, 24, 36}) {
    const int64_t f = side / 2;  // f's side
    const Graph g = build(relative(), side);
    EXPECT_EQ(ints(node(g, "pool2"), "kernel"), (std::vector<int64_t>{f / 2, f / 2}));
    EXPECT_EQ(ints(node(g, "pool2"), "stride"), (std::vector<int64_t>{f / 2, f / 2}));
    EXPECT_EQ(ints(node(g, "pool3"), "kernel"), (std::vector<int64_t>{f / 3, f / 3}));
    EXPECT_FALSE(node(g, "pool2").attrs.has("bins"));
    EXPECT_EQ(ints(node(g, "up2"), "factor"), (std::vector<int64_t>{f / 2, f / 2}));
    EXPECT_EQ(ints(node(g, "up3"), "factor"), (std::vector<int64_t>{f / 3, f / 3}));
    EXPECT_EQ(g.value(node(g, "pool3").output).desc.shape, (Shape{2, 4, 3, 3}));
    EXPECT_EQ(g.value(node(g, "up3").output).desc.shape, (Shape{2, 4, f, f}));
    // The same graph as the plain attributes written for this size.
    auto pair = [](int64_t k) { return "[" + std::to_string(k) + ", " + std::to_string(k) + "]"; };
    const std::string k2 = pair(f / 2), k3 = pair(f / 3);
    const Graph plain = build(pyramid("kernel: " + k2 + ", stride: " + k2,
                                      "factor: " + k2 + ", mode: bilinear",
                                      "kernel: " + k3 + ", stride: " + k3, "factor: " + k3),
                              side);
    ASSERT_EQ(plain.values.size(), g.values.size());
    for (size_t k = 0; k < g.values.size(); ++k)
      EXPECT_EQ(plain.values[k].desc.shape, g.values[k].desc.shape) << g.values[k].name;
    for (const char* n : {"pool2", "pool3", "up2", "up3"})
      EXPECT_EQ(node(plain, n).attrs.values, node(g, n).attrs.values) << n;
  }
}

TEST(SizeAttrs, ChannelsLastReadsHeightAndWidthFromTheNhwcShape) {
  const Graph g = build(relative("channels_last"), 24);
  EXPECT_EQ(ints(node(g, "pool3"), "kernel"), (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(ints(node(g, "up3"), "factor"), (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(g.value(node(g, "pool3").output).desc.shape, (Shape{2, 3, 3, 4}));
}

TEST(SizeAttrs, MisuseIsRefusedAtTheField) {
  struct Case {
    YamlText y;
    int64_t side;
    std::string needle, want;
  };
  const std::vector<Case> cases = {
      {relative(), 16, "bins: 3",
       "layer 'pool3': field 'bins': the input's 8 x 8 does not divide into 3 x 3 bins"},
      {pyramid("bins: 2, kernel: 2", "size_of: f", "bins: 3", "size_of: f"), 24, "bins: 2",
       "layer 'pool2': field 'bins': bins sets the kernel and stride from the input's size; give "
       "bins or 'kernel', not both"},
      {pyramid("bins: [2, 0]", "size_of: f", "bins: 3", "size_of: f"), 24, "bins: [2, 0]",
       "layer 'pool2': field 'bins'"},
      {pyramid("bins: 2", "size_of: f, factor: 6", "bins: 3", "size_of: f"), 24, "size_of: f, f",
       "layer 'up2': field 'size_of': size_of sets the factor; give size_of or 'factor', not "
       "both"},
      {pyramid("bins: 2", "size_of: pool3", "bins: 3", "size_of: f"), 24, "size_of: pool3",
       "layer 'up2': field 'size_of': input 'pool3' is defined later"},
      {pyramid("bins: 4", "size_of: f", "bins: 3", "size_of: pool2"), 24, "size_of: pool2",
       "layer 'up3': field 'size_of': no integer factor takes the input's 3 x 3 to 'pool2''s "
       "4 x 4"},
  };
  for (const Case& c : cases) {
    const std::string e = user_error([&] { build(c.y, c.side); });
    EXPECT_THAT(e, HasSubstr(c.y.at(c.needle) + ": ")) << e;
    EXPECT_THAT(e, HasSubstr(c.want)) << e;
  }
  YamlText conv = relative();
  conv.lines[6] = "  - {name: f, op: conv2d, filters: 4, kernel: 3, bins: 2}";
  EXPECT_THAT(user_error([&] { build(conv, 24); }),
              HasSubstr(conv.at("bins: 2}") + ": layer 'f': field 'bins': only avgpool and "
                                              "maxpool take it (op here: 'conv2d')"));
  YamlText relu = relative();
  relu.lines[6] = "  - {name: f, op: relu, size_of: input}";
  EXPECT_THAT(user_error([&] { build(relu, 24); }),
              HasSubstr(relu.at("size_of: input") + ": layer 'f': field 'size_of': only "
                                                    "upsample takes it (op here: 'relu')"));
}

}  // namespace
}  // namespace remat
