// conv2d_transpose (PyTorch's ConvTranspose2d, Note [transposed convolution] in
// ops/conv2d_transpose.cpp): values against the definition, output sizes, the convolution
// nodes its gradient emits, and the errors of its attributes. Its gradients against central
// differences, CUDA and bf16 run with the spatial cases (tests/op_cases.h); ONNX's own
// ConvTranspose node cases check it against ONNX's reference (test_onnx_node_cases.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/op_harness.h"
#include "tests/op_test_util.h"

namespace remat {
namespace {

using Floats = std::vector<float>;
using Ints = std::vector<int64_t>;

// Stride 2, a 2 x 2 kernel of ones: each input value fills its own 2 x 2 block, plus the bias.
TEST(ConvTranspose, StrideTwoOnesSpreadEachValueOverItsBlock) {
  OpHarness h(builtin_registry(), {"conv2d_transpose", attr_map({{"filters", 1}, {"kernel", 2}, {"stride", 2}}),
                                   {f32({1, 1, 2, 2})}, {{1, 2, 3, 4}}});
  h.set_param(0, {1, 1, 1, 1});
  h.set_param(1, {0.5f});
  EXPECT_EQ(h.output_desc().shape, (Shape{1, 1, 4, 4}));
  EXPECT_EQ(h.forward(), (Floats{1.5f, 1.5f, 2.5f, 2.5f, 1.5f, 1.5f, 2.5f, 2.5f,
                                 3.5f, 3.5f, 4.5f, 4.5f, 3.5f, 3.5f, 4.5f, 4.5f}));
}

// Stride 1, one input value: the output is the kernel itself, placed where the value is (the
// transpose of a convolution's correlation: no flip in the weight's layout).
TEST(ConvTranspose, OneValueWritesTheKernel) {
  OpHarness h(builtin_registry(),
              {"conv2d_transpose", attr_map({{"filters", 2}, {"kernel", Ints{2, 3}}, {"bias", false}}),
               {f32({1, 1, 1, 1})}, {{2}}});
  h.set_param(0, {1, 2, 3, 4, 5, 6, -1, -2, -3, -4, -5, -6});  // [C_in 1, 2, 2, 3]
  EXPECT_EQ(h.output_desc().shape, (Shape{1, 2, 2, 3}));
  EXPECT_EQ(h.forward(), (Floats{2, 4, 6, 8, 10, 12, -2, -4, -6, -8, -10, -12}));
}

TEST(ConvTranspose, OutputSizesFollowPyTorch) {
  // (H - 1) stride - pads + dilation (k - 1) + output_padding + 1
  struct Case {
    AttrMap attrs;
    Shape x, y;
  };
  const std::vector<Case> cases = {
      {attr_map({{"filters", 4}, {"kernel", 3}, {"stride", 2}, {"padding", 1}, {"output_padding", 1}}),
       {2, 3, 5, 7}, {2, 4, 10, 14}},
      {attr_map({{"filters", 2}, {"kernel", 3}, {"dilation", 2}}), {1, 2, 4, 4}, {1, 2, 8, 8}},
      {attr_map({{"filters", 6}, {"kernel", 2}, {"stride", 2}, {"groups", 3}, {"padding", Ints{0, 1, 1, 0}}}),
       {1, 3, 3, 3}, {1, 6, 5, 5}},
  };
  for (const Case& c : cases) {
    OpHarness h(builtin_registry(), {"conv2d_transpose", c.attrs, {f32(c.x)}});
    EXPECT_EQ(h.output_desc().shape, c.y);
    EXPECT_EQ(h.param_specs().at(0).desc.shape.at(0), c.x[1]);  // weight [C_in, filters / g, ..]
  }
}

TEST(ConvTranspose, ItsGradientIsTheConvolutionItTransposes) {
  OpHarness h(builtin_registry(), {"conv2d_transpose", attr_map({{"filters", 3}, {"kernel", 3}, {"stride", 2}}),
                                   {f32({2, 4, 3, 3})}});
  h.gradients(h.random_dy(2));
  std::vector<std::string> ops;
  for (NodeId n : h.backward_nodes()) ops.push_back(h.graph().node(n).op);
  EXPECT_EQ(ops, (std::vector<std::string>{"conv2d", "conv2d_grad_weight", "conv2d_grad_bias"}));
  const Node& dx = h.graph().node(h.backward_nodes()[0]);
  EXPECT_EQ(AttrReader(dx.attrs).require_int("filters", 1, 100), 4);  // back to C_in
  EXPECT_EQ(dx.inputs.at(1), h.node().inputs.at(1));                 // the same weight
}

TEST(ConvTranspose, Errors) {
  auto err = [](AttrMap a, Shape x = {1, 4, 3, 3}) {
    return case_error({"conv2d_transpose", a, {f32(x)}});
  };
  EXPECT_NE(err(attr_map({{"filters", 2}, {"kernel", 3}, {"stride", 2}, {"output_padding", 2}}))
                .find("output_padding"), std::string::npos);
  EXPECT_NE(err(attr_map({{"filters", 2}, {"kernel", 3}, {"dilation", 2}, {"output_padding", 1}}))
                .find("below the stride"), std::string::npos);
  EXPECT_NE(err(attr_map({{"filters", 2}, {"kernel", 3}, {"padding", std::string("same")}})).find("padding"),
            std::string::npos);
  EXPECT_NE(err(attr_map({{"filters", 2}, {"kernel", 3}, {"groups", 3}})).find("groups"), std::string::npos);
  EXPECT_NE(err(attr_map({{"filters", 3}, {"kernel", 3}, {"groups", 3}})).find("divisible"), std::string::npos);
  EXPECT_NE(err(attr_map({{"filters", 2}})).find("kernel"), std::string::npos);
  EXPECT_NE(err(attr_map({{"filters", 2}, {"kernel", 3}}), {4, 3}).find("4-D"), std::string::npos);
}

}  // namespace
}  // namespace remat
