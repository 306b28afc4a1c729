// CUDA paths of the transformer ops (embedding, position_embedding, layernorm, gelu, dense over
// rank 3, matmul, split_heads / merge_heads, softmax with and without the causal mask,
// token_xent, fused attention) and of what GPT training adds to the optimizer (adamw with a
// schedule, clip_grad_norm), against the CPU reference through the CUDA op harness, each also
// rerun for bit-identical results. The small cases are the CPU gradient tests'
// (tests/op_cases.h); the larger ones reach the kernels' loops (rows longer than a warp, many
// repeated token ids, a 1024-wide causal softmax, column sums over many row slices, attention
// rows longer than a block). GPU cases skip without a device.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "ops/registry.h"
#include "tests/cuda_op_harness.h"
#include "tests/op_cases.h"
#include "tests/op_harness.h"

namespace remat {
namespace {

using Floats = std::vector<float>;

class CudaOpsC : public CudaOpTest {};

void expect_matches_cpu(Backend& cuda, const OpRegistry& reg, OpCase c, int steps = 1) {
  const std::string what = c.op;
  CudaOpHarness h(reg, std::move(c));
  EXPECT_TRUE(h.compare_with_cpu(cuda, steps)) << what;
  EXPECT_TRUE(h.check_rerun_identical(cuda, steps)) << what;
}

TEST_F(CudaOpsC, TransformerCasesMatchCpu) {
  for (const TransformerCase& tc : transformer_cases()) {
    SCOPED_TRACE(tc.name);
    expect_matches_cpu(cuda(), registry(), tc.c);
  }
}

TEST_F(CudaOpsC, EmbeddingWithManyRepeatedIds) {
  // 2048 positions over 50 ids: long runs in the sorted order; the gradient equals the CPU's
  // bit for bit (same summation order).
  expect_matches_cpu(cuda(), registry(),
                     {"embedding", attr_map({{"vocab", 50}, {"dim", 96}}), {i32({8, 256})}, {}, 5, 50});
  expect_matches_cpu(cuda(), registry(),
                     {"position_embedding", attr_map({{"max_len", 300}}), {f32({4, 256, 96})}});
}

// Bias gradients over more than 64 rows take the sliced column sums (kernels/channel_reduce.cu),
// at most 64 the in-order columns: GPT-2's dense layers (8,192 rows) and a position table
// gradient over 70 sequences, in fp32 and bf16.
TEST_F(CudaOpsC, BiasGradientsOverManyRows) {
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    auto as = [&](OpCase c) { return bf16 ? as_bf16(std::move(c)) : c; };
    expect_matches_cpu(cuda(), registry(), as({"dense", attr_map({{"units", 96}}), {f32({4, 300, 40})}}));
    expect_matches_cpu(cuda(), registry(), as({"dense", attr_map({{"units", 33}}), {f32({64, 7})}}));
    expect_matches_cpu(cuda(), registry(),
                       as({"position_embedding", attr_map({{"max_len", 20}}), {f32({70, 16, 24})}}));
  }
}

// The fused attention kernels' loops (kernels/attention.cu): rows longer than a block, head
// sizes over one staged chunk (256), causal with dropout and full, the token layout, fp32 and
// bf16, and a sequence whose backward needs the shared-memory opt-in just under 48 KB.
TEST_F(CudaOpsC, FusedAttentionAtModelSizes) {
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    auto as = [&](OpCase c) { return bf16 ? as_bf16(std::move(c)) : c; };
    expect_matches_cpu(cuda(), registry(),
                       as({"attention", attr_map({{"dropout", 0.1}}),
                           {f32({2, 3, 300, 64}), f32({2, 3, 300, 64}), f32({2, 3, 300, 64})}}));
    expect_matches_cpu(cuda(), registry(),
                       as({"attention", attr_map({{"causal", false}}),
                           {f32({1, 2, 40, 272}), f32({1, 2, 40, 272}), f32({1, 2, 40, 272})}}));
    // the token layout through the workspace copies (Note [token layout on the row kernels])
    expect_matches_cpu(cuda(), registry(),
                       as({"attention", attr_map({{"heads", int64_t{3}}, {"dropout", 0.1}}),
                           {f32({2, 300, 3 * 3 * 64})}}));
  }
  // 2,944 rows: the row backward kernels' 47 KB of dynamic shared memory plus their static
  // arrays pass the default 48 KB, which allow_shared must opt in to (kernels/attention_launch.cuh).
  const Shape one_head{1, 1, 2944, 16};
  expect_matches_cpu(cuda(), registry(),
                     {"attention", {}, {f32(one_head), f32(one_head), f32(one_head)}});
}

// The tiled attention kernels (REMAT_ATTENTION_KERNEL=tiled, Note [tiled attention kernels]):
// sequences that end inside a tile (300, 40, 33, 5 rows), causal with dropout and full, head
// sizes from 8 to the largest tile (128), fp32 and bf16; a head of 272 falls back to the rows.
TEST_F(CudaOpsC, TiledAttentionMatchesTheCpu) {
  CudaOptions o;
  o.attention_kernel = AttentionKernel::Tiled;
  std::unique_ptr<Backend> tiled = cuda_backend_with(o);
  ASSERT_TRUE(tiled);
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    auto as = [&](OpCase c) { return bf16 ? as_bf16(std::move(c)) : c; };
    auto qkv = [](const Shape& s) { return std::vector<TensorDesc>{f32(s), f32(s), f32(s)}; };
    expect_matches_cpu(*tiled, registry(), as({"attention", attr_map({{"dropout", 0.1}}), qkv({2, 3, 300, 64})}));
    expect_matches_cpu(*tiled, registry(), as({"attention", attr_map({{"causal", false}}), qkv({1, 2, 40, 24})}));
    expect_matches_cpu(*tiled, registry(), as({"attention", {}, qkv({1, 1, 33, 128})}));
    expect_matches_cpu(*tiled, registry(),
                       as({"attention", attr_map({{"causal", false}, {"dropout", 0.3}}), qkv({2, 2, 5, 8})}));
    expect_matches_cpu(*tiled, registry(), as({"attention", attr_map({{"causal", false}}), qkv({1, 2, 40, 272})}));
    expect_matches_cpu(*tiled, registry(),
                       as({"attention", attr_map({{"heads", int64_t{2}}}), {f32({2, 70, 3 * 2 * 32})}}));
  }
}

TEST_F(CudaOpsC, LayerNormAndGeluAtModelWidths) {
  expect_matches_cpu(cuda(), registry(), {"layernorm", {}, {f32({3, 300, 768})}});
  expect_matches_cpu(cuda(), registry(), {"layernorm", attr_map({{"affine", false}}), {f32({5000, 40})}});
  // Instance normalization (an ONNX import's InstanceNormalization; GroupNorm's rows of 4,096).
  expect_matches_cpu(cuda(), registry(),
                     {"layernorm", attr_map({{"axes", 2}, {"affine", false}}), {f32({4, 32, 64, 64})}});
  // nn.GroupNorm's: 32 groups of 2 channels of 32 x 32, rows of 2,048.
  expect_matches_cpu(cuda(), registry(),
                     {"layernorm", attr_map({{"axes", 3}, {"groups", 32}, {"affine", false}}),
                      {f32({2, 64, 32, 32})}});
  expect_matches_cpu(cuda(), registry(), {"gelu", {}, {f32({4, 100, 3072})}});
}

TEST_F(CudaOpsC, AttentionShapes) {
  expect_matches_cpu(cuda(), registry(), {"softmax", attr_map({{"causal", true}}), {f32({2, 3, 1024, 1024})}});
  expect_matches_cpu(cuda(), registry(), {"softmax", {}, {f32({7, 1000})}});
  expect_matches_cpu(cuda(), registry(),
                     {"matmul", attr_map({{"transpose_b", true}, {"scale", 0.125}}),
                      {f32({2, 12, 128, 64}), f32({2, 12, 128, 64})}});
  expect_matches_cpu(cuda(), registry(), {"matmul", {}, {f32({2, 12, 128, 128}), f32({2, 12, 128, 64})}});
  expect_matches_cpu(cuda(), registry(), {"split_heads", attr_map({{"heads", 12}}), {f32({2, 128, 768})}});
  expect_matches_cpu(cuda(), registry(), {"merge_heads", {}, {f32({2, 12, 128, 64})}});
  expect_matches_cpu(cuda(), registry(), {"linear", attr_map({{"units", 3072}}), {f32({2, 128, 768})}});
}

TEST_F(CudaOpsC, TokenLossWithIgnoredTargets) {
  // A vocabulary of 50257 over 256 tokens, every third target ignored.
  OpCase c{"token_xent", attr_map({{"ignore_index", -1}}), {f32({2, 128, 50257}), i32({2, 128})}, {}, 3, 50257};
  CudaOpHarness h(registry(), c);
  for (size_t i = 0; i < h.host().input_i32(1).size(); i += 3) h.host().input_i32(1)[i] = -1;
  EXPECT_TRUE(h.compare_with_cpu(cuda()));
  EXPECT_TRUE(h.check_rerun_identical(cuda()));
}

TEST_F(CudaOpsC, AdamWWithScheduleAndClipping) {
  const int64_t n = 1003;
  OpCase c{"adamw",
           attr_map({{"lr", 0.01}, {"weight_decay", 0.1}, {"beta2", 0.95}, {"warmup_steps", 2},
                     {"schedule", std::string("cosine")}, {"decay_steps", 6}}),
           {f32({n}), f32({n}), f32({n}), f32({n})}};
  c.input_values.assign(4, {});
  c.input_values[2] = c.input_values[3] = Floats(static_cast<size_t>(n), 0.0f);
  expect_matches_cpu(cuda(), registry(), c, 7);
  // Three gradients of very different sizes; one step of clipping (it is idempotent only up to
  // the scale, so a single run is compared).
  expect_matches_cpu(cuda(), registry(),
                     {"clip_grad_norm", attr_map({{"max_norm", 0.5}}), {f32({1}), f32({5000}), f32({300000})}});
}

}  // namespace
}  // namespace remat
