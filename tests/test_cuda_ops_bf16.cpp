// The CUDA paths in bf16 against the CPU reference in bf16 (Note [bf16 execution]): every op of
// tests/op_cases.h's bf16 list, forward and backward, within the CUDA tolerance table plus Note
// [bf16 CUDA tolerance], and bit-identical on a rerun (recomputation). GPU cases skip without a
// device. Without a GPU, the registry check still runs: every op with a bf16 path and a CUDA
// path runs bf16 natively there, so no step stages FP32 copies on the GPU.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "ops/registry.h"
#include "tests/cuda_op_harness.h"
#include "tests/op_cases.h"

namespace remat {
namespace {

TEST(CudaBf16, EveryBf16OpIsNativeOnCuda) {
  const OpRegistry ops = make_builtin_registry();
  for (const std::string& name : ops.names(false)) {
    const OpDef& op = ops.get(name);
    if (!op.bf16 || !op.cuda) continue;
    EXPECT_TRUE(op.bf16_cuda_native) << name << " would run in bf16 on staged FP32 copies";
  }
}

using CudaBf16Ops = CudaOpTest;

TEST_F(CudaBf16Ops, EveryOpMatchesTheCpuAndRerunsBitIdentically) {
  for (const Bf16OpCase& bc : bf16_op_cases()) {
    SCOPED_TRACE(bc.name);
    CudaOpHarness h(registry(), as_bf16(bc.c));
    EXPECT_TRUE(h.compare_with_cpu(cuda()));
    EXPECT_TRUE(h.check_rerun_identical(cuda()));
  }
}

// The bf16 convolution at a size where cuDNN picks tensor-core algorithms, with the bias and
// relu epilogue, and a weight gradient over many samples. Node by node (Note [node-wise
// comparison]): at this size some pre-activations lie within a rounding of 0, where the GPU's
// and the CPU's relu masks may differ; the whole-graph comparison runs without the relu.
TEST_F(CudaBf16Ops, ConvolutionAtTensorCoreSizes) {
  CudaOpHarness h(registry(),
                  as_bf16({"conv2d",
                           attr_map({{"filters", 64}, {"kernel", 3}, {"padding", 1},
                                     {"activation", std::string("relu")}}),
                           {f32({8, 32, 16, 16})}}));
  EXPECT_TRUE(h.compare_nodewise_with_cpu(cuda()));
  EXPECT_TRUE(h.check_rerun_identical(cuda()));
  CudaOpHarness plain(registry(), as_bf16({"conv2d",
                                           attr_map({{"filters", 64}, {"kernel", 3}, {"padding", 1}}),
                                           {f32({8, 32, 16, 16})}}));
  EXPECT_TRUE(plain.compare_with_cpu(cuda()));
  EXPECT_TRUE(plain.check_rerun_identical(cuda()));
}

// Staged NHWC convolutions (Note [staged NHWC convolutions]) forced, in whole-batch calls and,
// with a 400 KB workspace limit, in chunks of 2 or 4 samples (forward and data gradient; the
// bf16 weight gradient then runs NCHW on the whole batch): 3 x 3 with bias, stride 2, 1 x 1
// without bias; each pass against the CPU.
TEST_F(CudaBf16Ops, StagedNhwcConvolutionsMatchTheCpu) {
  for (int64_t limit : {int64_t{1} << 30, int64_t{400} << 10}) {
    SCOPED_TRACE("workspace limit " + std::to_string(limit));
    std::unique_ptr<Backend> nhwc = staged_nhwc_backend(limit);
    ASSERT_TRUE(nhwc);
    const std::vector<OpCase> cases = {
        {"conv2d", attr_map({{"filters", 64}, {"kernel", 3}, {"padding", 1}}), {f32({8, 32, 16, 16})}},
        {"conv2d", attr_map({{"filters", 32}, {"kernel", 3}, {"stride", 2}}), {f32({8, 16, 15, 15})}},
        {"conv2d", attr_map({{"filters", 48}, {"kernel", 1}, {"bias", false}}), {f32({8, 64, 8, 8})}}};
    for (const OpCase& c : cases) {
      CudaOpHarness h(registry(), as_bf16(c));
      EXPECT_TRUE(h.compare_with_cpu(*nhwc));
      EXPECT_TRUE(h.check_rerun_identical(*nhwc));
    }
  }
}

// 1 x 1 convolutions as GEMMs in bf16 forced (Note [1x1 convolutions as GEMMs]) at ResNet-50's
// bottleneck widths (64 -> 256 with bias and relu, 256 -> 64 without bias, a 7 x 7 plane, on
// NCHW and on channels-last tensors), and a stride-2 one that stays on cuDNN; each pass against
// the CPU, reruns bit-identical. The relu
// case node by node (Note [node-wise comparison]): on the first GPU run (2026-11-27) 19 of its
// 200,704 pre-activations rounded to the other side of 0 than the CPU's, so the whole-graph
// comparison carried the other relu mask into every gradient (as ConvolutionAtTensorCoreSizes
// explains).
TEST_F(CudaBf16Ops, OneByOneGemmConvolutionsMatchTheCpu) {
  std::unique_ptr<Backend> gemm = gemm_conv_backend();
  ASSERT_TRUE(gemm);
  CudaOpHarness relu(registry(), as_bf16({"conv2d",
                                          attr_map({{"filters", 256}, {"kernel", 1},
                                                    {"activation", std::string("relu")}}),
                                          {f32({4, 64, 14, 14})}}));
  EXPECT_TRUE(relu.compare_nodewise_with_cpu(*gemm));
  EXPECT_TRUE(relu.check_rerun_identical(*gemm));
  const std::vector<OpCase> cases = {
      {"conv2d", attr_map({{"filters", 256}, {"kernel", 1}}), {f32({4, 64, 14, 14})}},
      {"conv2d",
       attr_map({{"filters", 64}, {"kernel", 1}, {"bias", false}}),
       {f32({4, 256, 7, 7})}},
      {"conv2d",
       attr_map({{"filters", 256}, {"kernel", 1}, {"data_format", std::string("channels_last")}}),
       {f32({4, 14, 14, 64})}},
      {"conv2d",
       attr_map({{"filters", 64},
                 {"kernel", 1},
                 {"bias", false},
                 {"data_format", std::string("channels_last")}}),
       {f32({4, 7, 7, 256})}},
      {"conv2d",
       attr_map({{"filters", 32}, {"kernel", 1}, {"stride", 2}}),
       {f32({4, 16, 14, 14})}}};
  for (const OpCase& c : cases) {
    CudaOpHarness h(registry(), as_bf16(c));
    EXPECT_TRUE(h.compare_with_cpu(*gemm));
    EXPECT_TRUE(h.check_rerun_identical(*gemm));
  }
}

// Batch normalisation in bf16 at ResNet-50 sizes: 28 x 28 planes (cuDNN forward, our dx) and
// 56 x 56 ones (our
// kernels, Note [batchnorm on the GPU]), several slices per channel, reruns bit-identical.
TEST_F(CudaBf16Ops, BatchNormAtResNetSizes) {
  for (const Shape& s : {Shape{8, 64, 28, 28}, Shape{4, 32, 56, 56}}) {
    CudaOpHarness h(registry(), as_bf16({"batchnorm", {}, {f32(s)}}));
    EXPECT_TRUE(h.compare_with_cpu(cuda()));
    EXPECT_TRUE(h.check_rerun_identical(cuda()));
  }
}

// Our batch-norm kernels forced on every plane (REMAT_BN_KERNELS=own) in packs of 8 values (a
// 16 x 16 plane), 4 (14 x 14) and 1 (7 x 7; [N, F] as 1 x 1) (Note [packed channel walks]), and
// cuDNN forced on a 56 x 56 plane; each against the CPU, reruns bit-identical.
TEST_F(CudaBf16Ops, BatchNormKernelsOnEveryPackWidth) {
  std::unique_ptr<Backend> own = bn_kernels_backend(BnKernels::Own);
  std::unique_ptr<Backend> cudnn = bn_kernels_backend(BnKernels::Cudnn);
  ASSERT_TRUE(own && cudnn);
  for (const Shape& s : {Shape{4, 16, 16, 16}, Shape{4, 32, 14, 14}, Shape{8, 16, 7, 7}, Shape{64, 48}}) {
    CudaOpHarness h(registry(), as_bf16({"batchnorm", {}, {f32(s)}}));
    EXPECT_TRUE(h.compare_with_cpu(*own));
    EXPECT_TRUE(h.check_rerun_identical(*own));
  }
  CudaOpHarness h(registry(), as_bf16({"batchnorm", {}, {f32({2, 8, 56, 56})}}));
  EXPECT_TRUE(h.compare_with_cpu(*cudnn));
  EXPECT_TRUE(h.check_rerun_identical(*cudnn));
}

TEST_F(CudaBf16Ops, DenseAndMatmulAtTensorCoreSizes) {
  CudaOpHarness d(registry(), as_bf16({"dense", attr_map({{"units", 128}}), {f32({4, 16, 96})}}));
  EXPECT_TRUE(d.compare_with_cpu(cuda()));
  EXPECT_TRUE(d.check_rerun_identical(cuda()));
  CudaOpHarness m(registry(),
                  as_bf16({"matmul", attr_map({{"transpose_b", true}, {"scale", 0.125}}),
                           {f32({2, 4, 64, 32}), f32({2, 4, 64, 32})}}));
  EXPECT_TRUE(m.compare_with_cpu(cuda()));
  EXPECT_TRUE(m.check_rerun_identical(cuda()));
}

}  // namespace
}  // namespace remat
