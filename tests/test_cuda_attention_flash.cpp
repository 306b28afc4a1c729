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
  bool packed = false;  // one qkv [N, T, 3 H D] with `heads` (Note [attention layouts])
};

OpCase attention_case(const FlashCase& f) {
  AttrMap attrs = attr_map({{"causal", f.causal}, {"dropout", f.rate}});
  if (f.packed) {
    attrs.values["heads"] = f.shape[1];
    return {"attention", attrs, {bf16({f.shape[0], f.shape[2], 3 * f.shape[1] * f.shape[3]})}};
  }
  const TensorDesc x = bf16(f.shape);
  return {"attention", attrs, {x, x, x}};
}

// Part p of a token-layout tensor [N, T, k H D] as a heads-layout [N, H, T, D] (element order
// of Note [attention layouts]); and the reverse for the gradient's [N, T, 3 H D] -> [N, 3H, T, D].
std::vector<float> to_heads(const std::vector<float>& x, const Shape& s, int64_t k, int64_t p) {
  const int64_t n = s[0], h = s[1], t = s[2], d = s[3];
  std::vector<float> out(static_cast<size_t>(n * h * t * d));
  for (int64_t a = 0; a < n; ++a)
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t i = 0; i < t; ++i)
        for (int64_t e = 0; e < d; ++e)
          out[static_cast<size_t>(((a * h + hh) * t + i) * d + e)] =
              x[static_cast<size_t>((a * t + i) * k * h * d + p * h * d + hh * d + e)];
  return out;
}
std::vector<float> grads_to_heads(const std::vector<float>& g, const Shape& s) {
  std::vector<float> out;
  const int64_t n = s[0], block = s[1] * s[2] * s[3];
  out.reserve(g.size());
  for (int64_t a = 0; a < n; ++a)
    for (int64_t p = 0; p < 3; ++p) {
      const std::vector<float> part = to_heads(g, s, 3, p);
      out.insert(out.end(), part.begin() + a * block, part.begin() + (a + 1) * block);
    }
  return out;
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

// q, k, v and dO as both backends get them (bf16 values, widened), in the heads layout.
AttentionInputs inputs_of(const FlashCase& c, CudaOpHarness& h) {
  const Graph& g = h.graph();
  const Node& f = g.nodes.at(0);
  const std::vector<float> dy = h.host().value(g.find_value("dy"));
  if (c.packed) {
    const std::vector<float> qkv = h.host().value(f.inputs[0]);
    return {to_heads(qkv, c.shape, 3, 0), to_heads(qkv, c.shape, 3, 1),
            to_heads(qkv, c.shape, 3, 2), to_heads(dy, c.shape, 1, 0)};
  }
  return {h.host().value(f.inputs[0]), h.host().value(f.inputs[1]), h.host().value(f.inputs[2]),
          dy};
}

// The op's output and its gradient's output after a run of the harness graph on `b`, in the
// heads layout ([N, H, T, D] and [N, 3H, T, D]).
AttentionOutputs run_attention(const FlashCase& c, CudaOpHarness& h, Backend& b) {
  const GraphRun r = h.run_graph(b);
  const Graph& g = h.graph();
  AttentionOutputs o;
  o.out = r.f.at(static_cast<size_t>(g.nodes.at(0).output));
  for (const Node& n : g.nodes)
    if (n.op == "attention_grad") o.grads = r.f.at(static_cast<size_t>(n.output));
  if (c.packed) {
    o.out = to_heads(o.out, c.shape, 1, 0);
    o.grads = grads_to_heads(o.grads, c.shape);
  }
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
      {"packed_causal_dropout", {2, 3, 100, 64}, true, 0.1, true},
      {"packed_gpt2_heads", {1, 12, 256, 64}, true, 0.1, true},
  };
  return cases;
}

TEST(FlashAttentionBound, HoldsForTheKernelsRoundingAndCatchesAMissingMask) {
  const OpRegistry reg = make_builtin_registry();
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  for (const FlashCase& f : {FlashCase{"causal_dropout", {1, 2, 70, 32}, true, 0.2},
                             FlashCase{"full", {2, 1, 40, 64}, false, 0.0},
                             FlashCase{"packed", {2, 2, 30, 32}, true, 0.2, true}}) {
    SCOPED_TRACE(f.name);
    CudaOpHarness h(reg, attention_case(f));
    const AttentionCase c = sizes_of(f, h);
    const AttentionInputs x = inputs_of(f, h);
    const AttentionOutputs want = run_attention(f, h, *cpu);
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
        within_flash_bound(c, inputs_of(f, h), run_attention(f, h, *cpu),
                           run_attention(f, h, *gpu)));
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
