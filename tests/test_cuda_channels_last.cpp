// The channels-last CUDA paths (Note [channels-last layout] in models/channels_last.cpp; Note
// [channels-last convolutions] in ops/conv2d_cuda_plan.cpp) against the CPU reference, which
// computes them bit for bit as the channels-first ops (tests/test_ops_channels_last.cpp): the
// convolution's passes on NHWC descriptors over the tensors themselves (3 x 3 with bias and relu,
// stride 2, 1 x 1, groups, TensorFlow's 'same' at stride 2 through a padded copy, in fp32 and bf16
// at a tensor-core size), batch norm (our channels-last kernels and cuDNN's NHWC routines, train
// and inference mode), max and average pooling (cuDNN's and, with per-side padding or an average
// over the real elements, kernels/pool.cu), global average pooling, concat, zeropad, crop, upsample
// (nearest and bilinear) and the layout op (also past the launch grid's limits), forward and every
// backward node within the CUDA tolerance table, and bit-identical on a rerun. Every test skips
// without a usable CUDA device.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/cuda_op_harness.h"
#include "tests/op_cases.h"

namespace remat {
namespace {

using CudaChannelsLast = CudaOpTest;

AttrMap channels_last(AttrMap a) {
  a.set("data_format", std::string("channels_last"));
  return a;
}

void expect_cuda_matches(Backend& cuda, CudaOpHarness& h) {
  EXPECT_TRUE(h.compare_with_cpu(cuda));
  EXPECT_TRUE(h.check_rerun_identical(cuda));
}

TEST_F(CudaChannelsLast, ConvolutionsMatchTheCpu) {
  const std::vector<OpCase> cases = {
      {"conv2d",
       channels_last(attr_map({{"filters", 16}, {"kernel", 3}, {"padding", 1},
                               {"activation", std::string("relu")}})),
       {f32({4, 12, 12, 8})}},
      {"conv2d", channels_last(attr_map({{"filters", 8}, {"kernel", 3}, {"stride", 2}})),
       {f32({4, 23, 23, 16})}},
      {"conv2d", channels_last(attr_map({{"filters", 24}, {"kernel", 1}, {"bias", false}})),
       {f32({3, 7, 9, 16})}},
      {"conv2d",
       channels_last(attr_map({{"filters", 8}, {"kernel", 3}, {"padding", 1}, {"groups", 2}})),
       {f32({2, 9, 9, 8})}},
      {"conv2d",  // pads (0, 1) on both axes: Note [padded convolution]
       channels_last(attr_map({{"filters", 6}, {"kernel", 3}, {"stride", 2},
                               {"padding", std::string("same")}})),
       {f32({2, 10, 10, 4})}},
  };
  for (const OpCase& c : cases) {
    CudaOpHarness h(registry(), c);
    expect_cuda_matches(cuda(), h);
  }
}

// NCHW calls on copies staged in the workspace (REMAT_CONV_LAYOUT=nchw; where cuDNN has no NHWC
// algorithm): whole batch and, under a 160 KB workspace limit, in chunks.
TEST_F(CudaChannelsLast, ConvolutionsStagedNchwMatchTheCpu) {
  for (int64_t limit : {int64_t{1} << 30, int64_t{160} << 10}) {
    SCOPED_TRACE("workspace limit " + std::to_string(limit));
    CudaOptions o;
    o.conv_layout = ConvLayout::Nchw;
    o.workspace_limit = limit;
    std::unique_ptr<Backend> nchw = cuda_backend_with(o);
    ASSERT_TRUE(nchw);
    CudaOpHarness h(registry(), {"conv2d",
                                 channels_last(attr_map({{"filters", 16}, {"kernel", 3},
                                                         {"padding", 1}})),
                                 {f32({4, 12, 12, 8})}});
    expect_cuda_matches(*nchw, h);
  }
}

// bf16 at a size where cuDNN picks tensor-core kernels; without a fused relu, whose mask may
// differ where a pre-activation rounds to either side of 0 (Note [node-wise comparison]).
TEST_F(CudaChannelsLast, Bf16ConvolutionAtTensorCoreSizes) {
  CudaOpHarness h(registry(), as_bf16({"conv2d",
                                       channels_last(attr_map({{"filters", 64}, {"kernel", 3},
                                                               {"padding", 1}})),
                                       {f32({8, 16, 16, 32})}}));
  expect_cuda_matches(cuda(), h);
}

// Our channels-last kernels (kernels/batchnorm_nhwc.cu, the default in train mode) and cuDNN's
// NHWC routines (REMAT_BN_KERNELS=cudnn), fp32 and bf16, at a small size and at a ResNet-50
// size whose rows need many slices (Note [channels-last batch-norm kernels]).
TEST_F(CudaChannelsLast, BatchNormMatchesTheCpu) {
  std::unique_ptr<Backend> cudnn = bn_kernels_backend(BnKernels::Cudnn);
  ASSERT_TRUE(cudnn);
  for (const char* mode : {"train", "inference"}) {
    for (const Shape& x : {Shape{4, 6, 5, 16}, Shape{8, 28, 28, 128}}) {
      SCOPED_TRACE(std::string(mode) + " " + shape_str(x));
      const OpCase c{"batchnorm", channels_last(attr_map({{"mode", std::string(mode)}})), {f32(x)}};
      for (Backend* b : {&cuda(), cudnn.get()}) {
        CudaOpHarness h(registry(), c);
        expect_cuda_matches(*b, h);
        CudaOpHarness h16(registry(), as_bf16(c));
        expect_cuda_matches(*b, h16);
      }
    }
  }
}

// Integers from -128 to 127, exact in bf16, distinct within any 256 consecutive elements (37
// is odd): no max-pooling window of the cases below holds two equal values, so the gradient's
// place does not hang on how cuDNN's NHWC pooling breaks ties (random values rounded to bf16
// tie in about half the cases).
std::vector<float> untied(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) v[static_cast<size_t>(j)] = static_cast<float>((j * 37) % 256 - 128);
  return v;
}

TEST_F(CudaChannelsLast, PoolingConcatPaddingCroppingUpsamplingAndChannelOpsMatchTheCpu) {
  const std::vector<OpCase> cases = {
      {"maxpool", channels_last(attr_map({{"kernel", 2}})), {f32({2, 8, 8, 5})},
       {untied(2 * 8 * 8 * 5)}},
      {"maxpool", channels_last(attr_map({{"kernel", 3}, {"stride", 2}, {"padding", 1}})),
       {f32({2, 9, 9, 4})}, {untied(2 * 9 * 9 * 4)}},
      {"avgpool", channels_last(attr_map({{"kernel", 3}, {"stride", 2}, {"padding", 1}})),
       {f32({2, 9, 9, 4})}},
      {"global_avgpool", channels_last({}), {f32({3, 7, 7, 10})}},
      {"concat", channels_last({}), {f32({2, 5, 6, 3}), f32({2, 5, 6, 7})}},
      {"zeropad", channels_last(attr_map({{"padding", std::vector<int64_t>{1, 2, 0, 3}}})),
       {f32({2, 5, 6, 3})}},
      {"crop", channels_last(attr_map({{"cropping", std::vector<int64_t>{1, 0, 2, 1}}})),
       {f32({2, 5, 6, 3})}},
      // Per-side padding and averages over the real elements: kernels/pool.cu, channels-last.
      {"maxpool",
       channels_last(attr_map({{"kernel", 3}, {"stride", 2}, {"padding", std::string("same")}})),
       {f32({2, 8, 8, 5})}},
      {"avgpool",
       channels_last(attr_map({{"kernel", 3}, {"stride", 1}, {"padding", 1},
                               {"count_include_pad", false}})),
       {f32({2, 7, 6, 4})}},
      {"upsample", channels_last(attr_map({{"factor", std::vector<int64_t>{2, 3}}})),
       {f32({2, 4, 5, 3})}},
      {"upsample", channels_last(attr_map({{"factor", 2}, {"mode", std::string("bilinear")}})),
       {f32({2, 4, 5, 3})}},
      {"channel_shuffle", channels_last(attr_map({{"groups", 2}})), {f32({2, 5, 6, 8})}},
      {"channel_slice", channels_last(attr_map({{"offset", 3}, {"channels", 4}})), {f32({2, 5, 6, 8})}},
      // squeeze-and-excitation's scale: a thread per NHWC plane for its gradient
      {"channel_scale", channels_last({}), {f32({2, 5, 6, 40}), f32({2, 40})}},
  };
  for (const OpCase& c : cases) {
    SCOPED_TRACE(c.op);
    CudaOpHarness h(registry(), c);
    expect_cuda_matches(cuda(), h);
    CudaOpHarness b(registry(), as_bf16(c));
    expect_cuda_matches(cuda(), b);
  }
}

TEST_F(CudaChannelsLast, LayoutMatchesTheCpu) {
  for (const char* to : {"channels_last", "channels_first"}) {
    SCOPED_TRACE(to);
    const OpCase c{"layout", attr_map({{"to", std::string(to)}}), {f32({3, 5, 7, 6})}};
    CudaOpHarness h(registry(), c);
    expect_cuda_matches(cuda(), h);
    CudaOpHarness b(registry(), as_bf16(c));
    expect_cuda_matches(cuda(), b);
  }
}

// Past the launch grid's y and z limits (65,535 blocks): an NHWC -> NCHW transpose of 2,100,225
// pixels (its rows, 32 to a block row, need 65,633 of them) and 65,600 images (one matrix each),
// both ways; the kernel loops over what the grid does not cover.
TEST_F(CudaChannelsLast, LayoutPastTheGridLimits) {
  for (const Shape& s : {Shape{1, 1025, 2049, 2}, Shape{65600, 1, 2, 3}}) {
    for (const char* to : {"channels_last", "channels_first"}) {
      SCOPED_TRACE(std::string(to) + " " + shape_str(s));
      const OpCase c{"layout", attr_map({{"to", std::string(to)}}), {f32(s)}};
      CudaOpHarness h(registry(), c);
      expect_cuda_matches(cuda(), h);
    }
  }
}

}  // namespace
}  // namespace remat
