// The flash attention kernels (REMAT_ATTENTION_KERNEL=flash, Note [flash attention kernels] in
// kernels/attention_flash.cu) against the CPU reference within Note [flash attention tolerance]
// (tests/attention_bounds.cpp), and rerun for bit-identical results. On the CPU: that bound
// against a host model of the kernels' rounding points, which must pass, and the same model with
// the dropout mask left out of dv, which must fail. GPU cases skip without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ops/registry.h"
#include "tests/attention_bounds.h"
#include "tests/cuda_op_harness.h"
#include "tests/op_harness.h"

namespace remat {
namespace {

struct FlashCase {
  const char* name;
  Shape shape;  // [N, H, T, D]
  bool causal;
  double rate;
};

OpCase attention_case(const FlashCase& f) {
  const TensorDesc x = bf16(f.shape);
  return {"attention", attr_map({{"causal", f.causal}, {"dropout", f.rate}}), {x, x, x}};
}

AttentionCase sizes_of(const FlashCase& f, const CudaOpHarness& h) {
  const Shape& s = f.shape;
  return {s[0],
          s[1],
          s[2],
          s[3],
          1.0 / std::sqrt(static_cast<double>(s[3])),
          f.causal,
          f.rate,
          h.graph().nodes.at(0).seed,
          static_cast<uint64_t>(h.step),
          0};
}

// q, k, v and dO as both backends get them (bf16 values, widened).
AttentionInputs inputs_of(CudaOpHarness& h) {
  const Graph& g = h.graph();
  const Node& f = g.nodes.at(0);
  return {h.host().value(f.inputs[0]), h.host().value(f.inputs[1]), h.host().value(f.inputs[2]),
          h.host().value(g.find_value("dy"))};
}

// The op's output and its gradient's packed output after a run of the harness graph on `b`.
AttentionOutputs run_attention(CudaOpHarness& h, Backend& b) {
  const GraphRun r = h.run_graph(b);
  const Graph& g = h.graph();
  AttentionOutputs o;
  o.out = r.f.at(static_cast<size_t>(g.nodes.at(0).output));
  for (const Node& n : g.nodes)
    if (n.op == "attention_grad") o.grads = r.f.at(static_cast<size_t>(n.output));
  return o;
}

// Causal with dropout (GPT-2's setting), full attention, every supported head size, sequences
// that end inside a 64-row tile, and GPT-2's length.
const std::vector<FlashCase>& gpu_cases() {
  static const std::vector<FlashCase> cases = {
      {"causal_dropout_d64", {2, 3, 300, 64}, true, 0.1},
      {"full_d32", {1, 2, 40, 32}, false, 0.0},
      {"causal_d128", {1, 1, 130, 128}, true, 0.0},
      {"full_dropout_short", {2, 2, 5, 64}, false, 0.3},
      {"gpt2_length", {1, 2, 1024, 64}, true, 0.1},
  };
  return cases;
}

TEST(FlashAttentionBound, HoldsForTheKernelsRoundingAndCatchesAMissingMask) {
  const OpRegistry reg = make_builtin_registry();
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  for (const FlashCase& f : {FlashCase{"causal_dropout", {1, 2, 70, 32}, true, 0.2},
                             FlashCase{"full", {2, 1, 40, 64}, false, 0.0}}) {
    SCOPED_TRACE(f.name);
    CudaOpHarness h(reg, attention_case(f));
    const AttentionCase c = sizes_of(f, h);
    const AttentionInputs x = inputs_of(h);
    const AttentionOutputs want = run_attention(h, *cpu);
    EXPECT_TRUE(within_flash_bound(c, x, want, attention_flash_model(c, x)));
    // The bound is not vacuous: a result with the dropout mask missing from dv fails it, and so
    // does the reference's output 5 % off (the size of one missed term at T = 20).
    if (f.rate > 0) {
      EXPECT_FALSE(within_flash_bound(c, x, want, attention_flash_model(c, x, true)));
    }
    AttentionOutputs wrong = want;
    for (float& o : wrong.out) o *= 1.05f;
    EXPECT_FALSE(within_flash_bound(c, x, want, wrong));
  }
}

class CudaFlashAttention : public CudaOpTest {
 protected:
  std::unique_ptr<Backend> flash() {
    CudaOptions o;
    o.attention_kernel = AttentionKernel::Flash;
    return cuda_backend_with(o);
  }
};

TEST_F(CudaFlashAttention, WithinItsBoundOfTheCpuAndRerunsIdentically) {
  std::unique_ptr<Backend> gpu = flash();
  ASSERT_TRUE(gpu);
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  for (const FlashCase& f : gpu_cases()) {
    SCOPED_TRACE(f.name);
    CudaOpHarness h(registry(), attention_case(f));
    const AttentionCase c = sizes_of(f, h);
    EXPECT_TRUE(
        within_flash_bound(c, inputs_of(h), run_attention(h, *cpu), run_attention(h, *gpu)));
    EXPECT_TRUE(h.check_rerun_identical(*gpu));
  }
}

// Where the flash kernels do not apply (FP32 data, a head size of 24), the op runs the row
// kernels: within the attention tolerance of the CPU's double sums.
TEST_F(CudaFlashAttention, OtherDataFallsBackToTheRowKernels) {
  std::unique_ptr<Backend> gpu = flash();
  ASSERT_TRUE(gpu);
  const Shape s{1, 2, 40, 64};
  CudaOpHarness fp32(registry(),
                     {"attention", attr_map({{"dropout", 0.1}}), {f32(s), f32(s), f32(s)}});
  EXPECT_TRUE(fp32.compare_with_cpu(*gpu));
  const TensorDesc odd = bf16({1, 2, 40, 24});
  CudaOpHarness d24(registry(), {"attention", {}, {odd, odd, odd}});
  EXPECT_TRUE(d24.compare_with_cpu(*gpu));
}

}  // namespace
}  // namespace remat
