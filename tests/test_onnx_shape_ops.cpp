// The ONNX ops that slice, split, shuffle, reshape and resize data, on small models built here
// with ONNX's own messages (tests/onnx_builder.h): Slice of channels (channel_slice) or of H and
// W (crop) with ONNX's clamping, Split of channels, the channel shuffle pattern
// (channel_shuffle), a convolution of a pooled [C, 1, 1] and other Reshapes (reshape), Transposes
// of data (transpose), and one clear error for each form remat does not take (Resize:
// test_onnx_resize.cpp). Their numbers against PyTorch's are OnnxModels.ShuffleNetV2's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "models/build.h"
#include "models/config.h"
#include "ops/registry.h"
#include "tests/model_test_util.h"
#include "tests/onnx_builder.h"
#include "tests/onnx_op_test.h"
#include "tests/op_test_util.h"

namespace remat {
namespace {

using test::onnx_attr;
using test::onnx_ints;
using test::onnx_node;

using test::cnn_with;

// Slice(c, starts, ends, axes[, steps]) -> m.
std::function<void(onnx::GraphProto*)> slice(std::vector<int64_t> starts, std::vector<int64_t> ends,
                                             std::vector<int64_t> axes, std::vector<int64_t> steps = {}) {
  return [=](onnx::GraphProto* g) {
    *g->add_initializer() = onnx_ints("starts", starts);
    *g->add_initializer() = onnx_ints("ends", ends);
    *g->add_initializer() = onnx_ints("axes", axes);
    std::vector<std::string> in = {"c", "starts", "ends", "axes"};
    if (!steps.empty()) {
      *g->add_initializer() = onnx_ints("steps", steps);
      in.push_back("steps");
    }
    onnx_node(g, "Slice", in, {"m"}, "/Slice");
  };
}

using OnnxShapeOps = test::OnnxOpTest;

TEST_F(OnnxShapeOps, ASliceOfChannelsIsAChannelSlice) {
  const ModelConfig cfg = load(cnn_with(slice({2}, {6}, {1}), 4));
  const auto s = layers_of(cfg, "channel_slice");
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(attr(*s[0], "offset"), 2);
  EXPECT_EQ(attr(*s[0], "channels"), 4);
  EXPECT_EQ(shape_of(cfg, s[0]->name), (Shape{2, 4, 8, 8}));
}

TEST_F(OnnxShapeOps, StartsAndEndsClampAsOnnxSays) {
  // x[:, -3:] is starts -3, ends INT64_MAX: the last three channels.
  const ModelConfig cfg = load(cnn_with(slice({-3}, {std::numeric_limits<int64_t>::max()}, {-3}), 3));
  const auto s = layers_of(cfg, "channel_slice");
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(attr(*s[0], "offset"), 5);
  EXPECT_EQ(attr(*s[0], "channels"), 3);
  // The whole of every axis is the value itself.
  EXPECT_TRUE(layers_of(load(cnn_with(slice({0, -100}, {8, 100}, {1, 2}), 8)), "channel_slice").empty());
}

TEST_F(OnnxShapeOps, ASliceOfHAndWIsACrop) {
  const ModelConfig cfg = load(cnn_with(slice({1, 0}, {7, -2}, {2, 3}), 8));
  const auto s = layers_of(cfg, "crop");
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(AttrReader(s[0]->attrs).get_int_list("cropping", {4}, {}, 0, 100),
            (std::vector<int64_t>{1, 1, 0, 2}));
  EXPECT_EQ(shape_of(cfg, s[0]->name), (Shape{2, 8, 6, 6}));
}

TEST_F(OnnxShapeOps, SlicesRematDoesNotTakeAreClearErrors) {
  EXPECT_HAS(error_of(cnn_with(slice({0}, {1}, {0}), 8)), "node '/Slice' (Slice, opset 13): the batch axis is not sliced");
  EXPECT_HAS(error_of(cnn_with(slice({0}, {8}, {1}, {2}), 4)), "only steps of 1 are supported");
  EXPECT_HAS(error_of(cnn_with(slice({0, 0}, {4, 4}, {1, 2}), 4)), "along several of them");
  EXPECT_HAS(error_of(cnn_with(slice({5}, {3}, {1}), 4)), "the result would be empty");
}

// Split(c, [3, 5]) -> a, b; Concat(b, a) -> m.
TEST_F(OnnxShapeOps, ASplitOfChannelsIsOneChannelSlicePerOutput) {
  const ModelConfig cfg = load(cnn_with(
      [](onnx::GraphProto* g) {
        *g->add_initializer() = onnx_ints("parts", {3, 5});
        onnx_attr(onnx_node(g, "Split", {"c", "parts"}, {"a", "b"}, "/Split"), "axis", int64_t{1});
        onnx_attr(onnx_node(g, "Concat", {"b", "a"}, {"m"}, "/Concat"), "axis", int64_t{1});
      },
      8));
  const auto s = layers_of(cfg, "channel_slice");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(attr(*s[0], "offset"), 0);
  EXPECT_EQ(attr(*s[0], "channels"), 3);
  EXPECT_EQ(attr(*s[1], "offset"), 3);
  EXPECT_EQ(attr(*s[1], "channels"), 5);
  EXPECT_EQ(layers_of(cfg, "concat").size(), 1u);

  // Equal parts without the split input; an unread output makes no layer.
  const ModelConfig one = load(cnn_with(
      [](onnx::GraphProto* g) {
        onnx_attr(onnx_node(g, "Split", {"c"}, {"a", "m"}, "/Split"), "axis", int64_t{1});
      },
      4));
  const auto t = layers_of(one, "channel_slice");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(attr(*t[0], "offset"), 4);

  EXPECT_HAS(error_of(cnn_with(
                 [](onnx::GraphProto* g) {
                   onnx_attr(onnx_node(g, "Split", {"c"}, {"m", "b", "d"}, "/Split"), "axis", int64_t{1});
                 },
                 8)),
             "8 channels do not split into 3 equal parts");
  EXPECT_HAS(error_of(cnn_with(
                 [](onnx::GraphProto* g) {
                   onnx_attr(onnx_node(g, "Split", {"c"}, {"m", "b"}, "/Split"), "axis", int64_t{2});
                 },
                 8)),
             "only a Split of channels (axis 1) is supported");
}

// Reshape(c, [0, g, 8 / g, 8, 8]), Transpose [0, 2, 1, 3, 4], Reshape(., back) -> m.
std::function<void(onnx::GraphProto*)> shuffle(std::vector<int64_t> grouped, std::vector<int64_t> back) {
  return [=](onnx::GraphProto* g) {
    *g->add_initializer() = onnx_ints("grouped", grouped);
    *g->add_initializer() = onnx_ints("back", back);
    onnx_node(g, "Reshape", {"c", "grouped"}, {"r"}, "/Reshape");
    onnx_attr(onnx_node(g, "Transpose", {"r"}, {"t"}, "/Transpose"), "perm",
              std::vector<int64_t>{0, 2, 1, 3, 4});
    onnx_node(g, "Reshape", {"t", "back"}, {"m"}, "/Reshape_1");
  };
}

TEST_F(OnnxShapeOps, TheChannelShufflePatternIsAChannelShuffle) {
  for (int64_t groups : {2, 4}) {
    const ModelConfig cfg = load(cnn_with(shuffle({0, groups, 8 / groups, 8, 8}, {0, 8, 8, 8}), 8));
    const auto s = layers_of(cfg, "channel_shuffle");
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(attr(*s[0], "groups"), groups);
    EXPECT_EQ(layers_of(cfg, "flatten").size(), 0u);
  }
  EXPECT_HAS(error_of(cnn_with(shuffle({0, 2, 8, 4, 8}, {0, 8, 8, 8}), 8)),
             "node '/Reshape' (Reshape + Transpose + Reshape read as a channel shuffle, opset 13): "
             "a Reshape of [8, 8, 8] to [2, 8, 4, 8] per sample is not a split of the channels");
  EXPECT_HAS(error_of(cnn_with(shuffle({0, 2, 4, 8, 8}, {0, 8, 64, 1}), 8)),
             "the transposed groups are not reshaped back to [8, 8, 8]");
}

// A Reshape of an image that is neither flat nor a shuffle (ONNX's 0 copies the batch).
TEST_F(OnnxShapeOps, AnyOtherReshapeIsAReshapeLayer) {
  const ModelConfig cfg = load(cnn_with(
      [](onnx::GraphProto* g) {
        *g->add_initializer() = onnx_ints("to", {0, 4, -1, 8});
        onnx_node(g, "Reshape", {"c", "to"}, {"m"}, "/Reshape");
      },
      4));
  const auto r = layers_of(cfg, "reshape");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(shape_of(cfg, r[0]->name), (Shape{2, 4, 16, 8}));
  EXPECT_HAS(error_of(cnn_with(
                 [](onnx::GraphProto* g) {
                   *g->add_initializer() = onnx_ints("to", {4, -1, 8, 8});
                   onnx_node(g, "Reshape", {"c", "to"}, {"m"}, "/Reshape");
                 },
                 4)),
             "does not keep the batch first");
}

// Slice(c, channels 0..4) -> Transpose `to` -> Transpose `back` -> m.
std::function<void(onnx::GraphProto*)> transposes(std::vector<int64_t> to, std::vector<int64_t> back) {
  return [=](onnx::GraphProto* g) {
    slice({0}, {4}, {1})(g);
    g->mutable_node(g->node_size() - 1)->set_output(0, "s");
    onnx_attr(onnx_node(g, "Transpose", {"s"}, {"t"}, "/Transpose"), "perm", to);
    onnx_attr(onnx_node(g, "Transpose", {"t"}, {"m"}, "/Transpose_1"), "perm", back);
  };
}

// x.transpose(0, 1) and back: two aliases (Note [sequence-first values]), no layer.
TEST_F(OnnxShapeOps, ASwapOfTheBatchAndBackIsNoLayer) {
  const ModelConfig cfg = load(cnn_with(transposes({1, 0, 2, 3}, {1, 0, 2, 3}), 4));
  EXPECT_TRUE(layers_of(cfg, "transpose").empty());
  EXPECT_TRUE(layers_of(cfg, "reshape").empty());
}

// x.permute(0, 2, 3, 1) and back (ConvNeXt's blocks): two transpose layers.
TEST_F(OnnxShapeOps, ATransposeOfDataIsATransposeLayer) {
  const ModelConfig cfg = load(cnn_with(transposes({0, 2, 3, 1}, {0, 3, 1, 2}), 4));
  const auto t = layers_of(cfg, "transpose");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(shape_of(cfg, t[0]->name), (Shape{2, 8, 8, 4}));
  EXPECT_EQ(shape_of(cfg, t[1]->name), (Shape{2, 4, 8, 8}));
  EXPECT_EQ(std::get<std::vector<int64_t>>(t[1]->attrs.values.at("perm")), (std::vector<int64_t>{0, 3, 1, 2}));
}

// x.transpose(1, 2) of an image and back: the channels and the rows trade places (a block
// swap with the columns behind it).
TEST_F(OnnxShapeOps, ATransposeOfTheMiddleAxesIsATransposeLayer) {
  const ModelConfig cfg = load(cnn_with(transposes({0, 2, 1, 3}, {0, 2, 1, 3}), 4));
  const auto t = layers_of(cfg, "transpose");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(shape_of(cfg, t[0]->name), (Shape{2, 8, 4, 8}));
  EXPECT_EQ(shape_of(cfg, t[1]->name), (Shape{2, 4, 8, 8}));
}

// x.permute(0, 3, 2, 1) reverses the axes after the batch: no one block swap does it, a chain of
// two does ([0, 3, 1, 2], then [0, 1, 3, 2]); the second Transpose, the same again, is two more.
TEST_F(OnnxShapeOps, AnyOtherTransposeIsAChainOfBlockSwaps) {
  const ModelConfig cfg = load(cnn_with(transposes({0, 3, 2, 1}, {0, 3, 2, 1}), 4));
  const auto t = layers_of(cfg, "transpose");
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(std::get<std::vector<int64_t>>(t[0]->attrs.values.at("perm")), (std::vector<int64_t>{0, 3, 1, 2}));
  EXPECT_EQ(std::get<std::vector<int64_t>>(t[1]->attrs.values.at("perm")), (std::vector<int64_t>{0, 1, 3, 2}));
  EXPECT_EQ(shape_of(cfg, t[0]->name), (Shape{2, 8, 4, 8}));
  EXPECT_EQ(shape_of(cfg, t[1]->name), (Shape{2, 8, 8, 4}));
  EXPECT_EQ(shape_of(cfg, t[3]->name), (Shape{2, 4, 8, 8}));
}

// torch.roll(c, -k, dims=axis) as exported: Concat(Slice(c, [k, INT64_MAX)), Slice(c, [0, k)))
// along `axis`; `end` the first Slice's end.
std::function<void(onnx::GraphProto*)> roll(int64_t k, int64_t axis, int64_t end = std::numeric_limits<int64_t>::max()) {
  return [=](onnx::GraphProto* g) {
    *g->add_initializer() = onnx_ints("k", {k});
    *g->add_initializer() = onnx_ints("zero", {0});
    *g->add_initializer() = onnx_ints("end", {end});
    *g->add_initializer() = onnx_ints("axis", {axis});
    onnx_node(g, "Slice", {"c", "k", "end", "axis"}, {"tail"}, "/Slice");
    onnx_node(g, "Slice", {"c", "zero", "k", "axis"}, {"head"}, "/Slice_1");
    onnx_attr(onnx_node(g, "Concat", {"tail", "head"}, {"m"}, "/Concat"), "axis", axis);
  };
}

// Swin's cyclic shift along H, and back along W (negative bounds): one roll layer each.
TEST_F(OnnxShapeOps, TwoSlicesConcatenatedTheOtherWayRoundAreARoll) {
  for (const auto& [k, axis, shift] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{3, 2, -3}, {-2, 3, 2}}) {
    const ModelConfig cfg = load(cnn_with(roll(k, axis), 8));
    const auto r = layers_of(cfg, "roll");
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(std::get<std::vector<int64_t>>(r[0]->attrs.values.at("shifts")), (std::vector<int64_t>{shift}));
    EXPECT_EQ(std::get<std::vector<int64_t>>(r[0]->attrs.values.at("dims")), (std::vector<int64_t>{axis}));
    EXPECT_EQ(shape_of(cfg, r[0]->name), (Shape{2, 8, 8, 8}));
  }
  // A split outside the axis is named; Slices whose first one stops short of the end are not a
  // roll and stay Slices (joined by a concat along H, below).
  EXPECT_HAS(error_of(cnn_with(roll(9, 2), 8)),
             "node '/Concat' (Slice + Slice + Concat read as a roll, opset 13): the Slices split "
             "axis 2 of 8 at 9, outside it: not a roll");
  EXPECT_TRUE(layers_of(load(cnn_with(roll(3, 2, 7), 8)), "roll").empty());
}

// Concat along another axis than the channels (torch.cat(dim=2), dim=3): a concat layer with
// that axis; inputs that differ beyond it are named.
TEST_F(OnnxShapeOps, AConcatAlongAnotherAxisIsAConcatWithThatAxis) {
  for (const auto& [axis, shape] :
       std::vector<std::pair<int64_t, Shape>>{{2, {2, 8, 7, 8}}, {3, {2, 8, 8, 7}}}) {
    const ModelConfig cfg = load(cnn_with(roll(3, axis, 7), 8));
    const auto c = layers_of(cfg, "concat");
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(attr(*c[0], "axis"), axis);
    EXPECT_EQ(shape_of(cfg, c[0]->name), shape);
  }
  EXPECT_HAS(error_of(cnn_with(
                 [](onnx::GraphProto* g) {
                   *g->add_initializer() = onnx_ints("k", {3});
                   *g->add_initializer() = onnx_ints("zero", {0});
                   *g->add_initializer() = onnx_ints("axis", {3});
                   onnx_node(g, "Slice", {"c", "zero", "k", "axis"}, {"head"}, "/Slice");
                   onnx_attr(onnx_node(g, "Concat", {"c", "head"}, {"m"}, "/Concat"), "axis",
                             int64_t{2});
                 },
                 8)),
             "node '/Concat' (Concat, opset 13): inputs [8, 8, 8] and [8, 8, 3] per sample differ "
             "beyond axis 2");
}

// Swin's patch merging of c as [N, H, W, C] (here C, H, W stand for H, W, C): x[:, a::2, b::2]
// for the offsets (a, b) in `order`, each a Slice of axis 1 (shared by two) then of axis 2,
// concatenated along the last axis.
std::function<void(onnx::GraphProto*)> patch_merge(std::vector<std::pair<int64_t, int64_t>> order) {
  return [=](onnx::GraphProto* g) {
    *g->add_initializer() = onnx_ints("zero", {0});
    *g->add_initializer() = onnx_ints("one", {1});
    *g->add_initializer() = onnx_ints("end", {std::numeric_limits<int64_t>::max()});
    *g->add_initializer() = onnx_ints("axis1", {1});
    *g->add_initializer() = onnx_ints("axis2", {2});
    *g->add_initializer() = onnx_ints("two", {2});
    for (int64_t a : {0, 1})
      onnx_node(g, "Slice", {"c", a ? "one" : "zero", "end", "axis1", "two"}, {"rows" + std::to_string(a)},
                "/Slice_rows" + std::to_string(a));
    std::vector<std::string> parts;
    for (const auto& [a, b] : order) {
      parts.push_back("x" + std::to_string(a) + std::to_string(b));
      onnx_node(g, "Slice", {"rows" + std::to_string(a), b ? "one" : "zero", "end", "axis2", "two"}, {parts.back()},
                "/Slice_" + parts.back());
    }
    onnx_attr(onnx_node(g, "Concat", parts, {"m"}, "/Concat"), "axis", int64_t{-1});
  };
}

// torchvision's order (the row offset fastest) and the other one: a reshape, a block swap and a
// reshape; an order that is neither stays Slices (strided Slices of data are not supported).
TEST_F(OnnxShapeOps, StridedSlicesConcatenatedAreAPatchMerging) {
  for (const auto& [order, perm] : std::vector<std::pair<std::vector<std::pair<int64_t, int64_t>>, std::vector<int64_t>>>{
           {{{0, 0}, {1, 0}, {0, 1}, {1, 1}}, {0, 1, 3, 4, 2, 5}}, {{{0, 0}, {0, 1}, {1, 0}, {1, 1}}, {0, 1, 3, 2, 4, 5}}}) {
    const ModelConfig cfg = load(cnn_with(patch_merge(order), 4));
    const auto t = layers_of(cfg, "transpose");
    ASSERT_EQ(t.size(), 1u);
    EXPECT_EQ(std::get<std::vector<int64_t>>(t[0]->attrs.values.at("perm")), perm);
    const auto r = layers_of(cfg, "reshape");
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(shape_of(cfg, r[0]->name), (Shape{2, 4, 2, 4, 2, 8}));
    EXPECT_EQ(shape_of(cfg, r[1]->name), (Shape{2, 4, 4, 32}));
  }
  EXPECT_EQ(error_of(cnn_with(patch_merge({{0, 0}, {1, 0}, {1, 1}, {0, 1}}), 4)).find("patch merging"),
            std::string::npos);
}

TEST_F(OnnxShapeOps, TransposesRematDoesNotTakeAreClearErrors) {
  EXPECT_HAS(error_of(cnn_with(transposes({2, 0, 1, 3}, {1, 2, 0, 3}), 4)),
             "perm [2, 0, 1, 3] moves the batch");
  // [1, 0, 2, 3] makes the value sequence-first (Note [sequence-first values]): only the same
  // swap takes it back, and the convolution after it refuses it.
  EXPECT_HAS(error_of(cnn_with(transposes({1, 0, 2, 3}, {0, 2, 1, 3}), 4)),
             "perm [0, 2, 1, 3] of sequence-first data: only [1, 0, 2, 3] (back to the batch "
             "first) is supported");
  EXPECT_HAS(error_of(cnn_with(transposes({0, 1, 2, 3}, {1, 0, 2, 3}), 4)),
             "is sequence-first ([T, N, ...]: a Transpose moved the batch to axis 1), which this "
             "op does not take");
  EXPECT_HAS(error_of(cnn_with(transposes({0, 2, 3}, {0, 2, 3}), 4)), "is not a permutation of 4 axes");
}

// GlobalAveragePool, then a 1 x 1 Conv of its [8, 1, 1] (a squeeze-and-excitation or ASPP
// pooling branch): remat's pooled [8] is reshaped to the image the convolution reads.
TEST_F(OnnxShapeOps, AConvolutionOfAPooledValueReadsItAsAnImage) {
  const ModelConfig cfg = load(cnn_with(
      [](onnx::GraphProto* g) {
        *g->add_initializer() = test::onnx_floats("se.weight", {8, 8, 1, 1}, -0.1f);
        onnx_node(g, "GlobalAveragePool", {"c"}, {"p"}, "/se/GlobalAveragePool");
        onnx_node(g, "Conv", {"p", "se.weight"}, {"m"}, "/se/Conv");
      },
      8));
  const auto r = layers_of(cfg, "reshape");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(shape_of(cfg, r[0]->name), (Shape{2, 8, 1, 1}));
  EXPECT_EQ(layers_of(cfg, "conv2d").size(), 2u);
}

}  // namespace
}  // namespace remat
