// CUDA vs CPU for the spatial ops and attributes (tests/op_cases.h spatial_op_cases()): zeropad
// and crop (kernels/pad.cu), conv2d with per-side padding (an explicitly padded copy, Note
// [padded convolution] in ops/conv2d_pad_cuda.cpp), pools with per-side padding or averages over
// the real elements (kernels/pool.cu), batch norm without a scale (cuDNN with a vector of ones),
// bilinear upsampling (kernels/upsample.cu), forward and every backward node, each rerun for
// bit-identity, at the CPU suite's shapes and at the Keras networks' sizes; and the calls that
// split a batch past cuDNN's element limit. Every test skips without a usable CUDA device.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/cuda_op_harness.h"
#include "tests/op_cases.h"

namespace remat {
namespace {

using CudaSpatial = CudaOpTest;
using Ints = std::vector<int64_t>;

void expect_matches_cpu(Backend& cuda, const OpRegistry& reg, OpCase c) {
  CudaOpHarness h(reg, std::move(c));
  EXPECT_TRUE(h.compare_with_cpu(cuda));
  EXPECT_TRUE(h.check_rerun_identical(cuda));
}

TEST_F(CudaSpatial, EveryCaseMatchesTheCpu) {
  for (const SpatialCase& sc : spatial_op_cases()) {
    SCOPED_TRACE(sc.name);
    expect_matches_cpu(cuda(), registry(), sc.c);
  }
}

TEST_F(CudaSpatial, KerasNetworkSizes) {
  const AttrValue same = std::string("same");
  // MobileNetV2's first convolution and a stride-2 depthwise block (pads (0, 1)).
  expect_matches_cpu(cuda(), registry(),
                     {"conv2d", attr_map({{"filters", 32}, {"kernel", 3}, {"stride", 2}, {"padding", same}, {"bias", false}}),
                      {f32({2, 3, 64, 64})}});
  expect_matches_cpu(cuda(), registry(),
                     {"conv2d", attr_map({{"filters", 96}, {"groups", 96}, {"kernel", 3}, {"stride", 2},
                                          {"padding", same}, {"bias", false}}),
                      {f32({2, 96, 28, 28})}});
  // Xception's stride-2 max pool on 74x74 and InceptionV3's branch average pool.
  expect_matches_cpu(cuda(), registry(),
                     {"maxpool", attr_map({{"kernel", 3}, {"stride", 2}, {"padding", same}}),
                      {f32({2, 16, 74, 74})}, {spread_values(2 * 16 * 74 * 74)}});
  expect_matches_cpu(cuda(), registry(),
                     {"avgpool", attr_map({{"kernel", 3}, {"stride", 1}, {"padding", same}, {"count_include_pad", false}}),
                      {f32({2, 32, 17, 17})}});
  // PSPNet's pyramid: pool 6x9 on 12x18, then bilinear back by (6, 9); the final x8.
  expect_matches_cpu(cuda(), registry(),
                     {"avgpool", attr_map({{"kernel", Ints{6, 9}}, {"padding", same}, {"count_include_pad", false}}),
                      {f32({2, 64, 12, 18})}});
  expect_matches_cpu(cuda(), registry(),
                     {"upsample", attr_map({{"factor", Ints{6, 9}}, {"mode", std::string("bilinear")}}),
                      {f32({2, 64, 2, 2})}});
  expect_matches_cpu(cuda(), registry(),
                     {"upsample", attr_map({{"factor", 8}, {"mode", std::string("bilinear")}}),
                      {f32({2, 19, 12, 18})}});
  // ResNet V2's pool padding and keras_segmentation's one-sided pad.
  expect_matches_cpu(cuda(), registry(), {"zeropad", attr_map({{"padding", 1}}), {f32({2, 64, 112, 112})}});
  expect_matches_cpu(cuda(), registry(), {"zeropad", attr_map({{"padding", Ints{1, 0, 1, 0}}}), {f32({2, 8, 55, 55})}});
  expect_matches_cpu(cuda(), registry(), {"batchnorm", attr_map({{"scale", false}}), {f32({4, 64, 17, 17})}});
}

// Note [cuDNN's element limit] in ops/cudnn_util.h, with the limit lowered to 600 elements:
// pooling and inference-mode batch norm run as calls over 2, 2 and 1 samples of a batch of 5
// (the weight gradient's sums accumulated over them), a convolution one sample at a time, and
// train-mode batch norm on our kernels although REMAT_BN_KERNELS=cudnn asks for cuDNN's; NCHW
// and NHWC, every value as on the CPU, reruns bit-identical. A sample past the limit is an
// error that says so.
// ShuffleNetV2 x1.0's stage 2: the shuffle of 116 channels in 2 groups at 28 x 28, and the
// chunk of a 232-channel stage-3 input into halves.
TEST_F(CudaSpatial, ShuffleNetSizes) {
  expect_matches_cpu(cuda(), registry(), {"channel_shuffle", attr_map({{"groups", 2}}), {f32({2, 116, 28, 28})}});
  expect_matches_cpu(cuda(), registry(),
                     {"channel_slice", attr_map({{"offset", 116}, {"channels", 116}}), {f32({2, 232, 14, 14})}});
}

TEST_F(CudaSpatial, CallsPastCudnnsElementLimitSplitTheBatch) {
  CudaOptions o;
  o.cudnn_max_elements = 600;
  o.bn_kernels = BnKernels::Cudnn;
  std::unique_ptr<Backend> small = cuda_backend_with(o);
  ASSERT_TRUE(small);
  const AttrValue last = std::string("channels_last");
  const AttrValue inference = std::string("inference");
  const std::vector<OpCase> cases = {
      {"maxpool",
       attr_map({{"kernel", 2}, {"stride", 2}}),
       {f32({5, 4, 8, 8})},
       {spread_values(5 * 4 * 8 * 8)}},
      {"maxpool",
       attr_map({{"kernel", 2}, {"stride", 2}, {"data_format", last}}),
       {f32({5, 8, 8, 4})},
       {spread_values(5 * 8 * 8 * 4)}},
      {"avgpool", attr_map({{"kernel", 3}, {"stride", 1}, {"padding", 1}}), {f32({5, 4, 8, 8})}},
      {"batchnorm", attr_map({{"mode", inference}}), {f32({5, 4, 8, 8})}},
      {"batchnorm", attr_map({{"mode", inference}, {"data_format", last}}), {f32({5, 8, 8, 4})}},
      {"batchnorm", {}, {f32({5, 4, 8, 8})}},
      {"batchnorm", attr_map({{"data_format", last}}), {f32({5, 8, 8, 4})}},
      {"conv2d", attr_map({{"filters", 8}, {"kernel", 3}, {"padding", 1}}), {f32({5, 4, 8, 8})}},
  };
  for (const OpCase& c : cases) {
    SCOPED_TRACE(c.op + " " + shape_str(c.inputs[0].shape));
    expect_matches_cpu(*small, registry(), c);
  }
  o.cudnn_max_elements = 100;
  std::unique_ptr<Backend> tiny = cuda_backend_with(o);
  ASSERT_TRUE(tiny);
  CudaOpHarness h(registry(),
                  {"maxpool", attr_map({{"kernel", 2}, {"stride", 2}}), {f32({5, 4, 8, 8})}});
  try {
    h.run_graph(*tiny);
    ADD_FAILURE() << "a sample of 256 elements ran under a limit of 100";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one sample holds 256 elements"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace remat
