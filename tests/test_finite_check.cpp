// Note [finite check] and validated checkpoints: a NaN in the batch or a gradient that is not
// finite stops the step before the optimizer update, naming the step and the first node whose
// output is not finite (forward or backward, under a recomputing plan too); checkpoints with a
// NaN, an infinity or a negative step are refused and leave the executor unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "models/build.h"
#include "models/config.h"
#include "ops/op_common.h"
#include "ops/registry.h"
#include "runtime/graph/autodiff.h"
#include "runtime/checkpoint.h"
#include "runtime/backends/cuda_backend.h"
#include "runtime/core/bf16.h"
#include "runtime/executor.h"
#include "runtime/io/safetensors.h"
#include "solver/from_graph.h"
#include "solver/strategies.h"
#include "tests/model_test_util.h"

namespace remat {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// "poison": the identity forward whose gradient rule emits "poison_grad", which writes NaN: the
// loss stays finite and only gradients go bad.
void add_poison_ops(OpRegistry& ops) {
  OpDef f;
  f.name = "poison";
  f.parse = [](AttrReader& r) { return parse_no_attrs(r, "poison"); };
  f.infer = [](const OpAttrs&, const std::vector<TensorDesc>& in) { return in.at(0); };
  f.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, 1);
  };
  f.cpu = [](const ExecContext& c) {
    for (int64_t i = 0; i < c.output.numel(); ++i) c.output.f32()[i] = c.inputs[0].f32()[i];
  };
  f.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) {
    const TensorDesc x = g.graph().value(fwd.inputs[0]).desc;
    return std::vector<ValueId>{g.emit("grad", "poison_grad", {dy}, x)};
  };
  OpDef b = f;
  b.name = "poison_grad";
  b.user_visible = false;
  b.parse = [](AttrReader& r) { return parse_no_attrs(r, "poison_grad"); };
  b.cpu = [](const ExecContext& c) {
    for (int64_t i = 0; i < c.output.numel(); ++i) c.output.f32()[i] = kNaN;
  };
  b.gradient = nullptr;
  ops.add(f);
  ops.add(b);
}

struct Net {
  OpRegistry ops = make_builtin_registry();
  Graph g;
  std::unique_ptr<Backend> be = make_cpu_backend();
  explicit Net(bool poison) {
    add_poison_ops(ops);
    const std::string yaml = std::string(
        "name: net\ninput: [2, 6, 6]\nclasses: 3\nbatch: 2\nlayers:\n"
        "  - {name: conv1, op: conv2d, filters: 3, kernel: 3, padding: 1, activation: relu}\n") +
        (poison ? "  - {name: mid, op: poison}\n" : "  - {name: mid, op: relu}\n") +
        "  - {name: conv2, op: conv2d, filters: 3, kernel: 3, padding: 1}\n"
        "  - {name: gap, op: global_avgpool}\n  - {name: fc, op: dense, units: 3}\n";
    const ModelConfig cfg = parse_model_config(yaml, "net.yaml");
    g = make_training_graph(build_forward_graph(cfg, ops, {}), ops, cfg.optimizer.op,
                            cfg.optimizer.attrs);
  }
  std::vector<float> images(float fill = 0.5f) const {
    return std::vector<float>(static_cast<size_t>(g.value(g.input).desc.numel()), fill);
  }
  std::vector<int32_t> labels() const {
    return std::vector<int32_t>(static_cast<size_t>(g.value(g.label).desc.numel()), 1);
  }
  std::vector<std::vector<float>> params(const Executor& ex) const {
    std::vector<std::vector<float>> out;
    for (size_t v = 0; v < g.values.size(); ++v)
      if (g.values[v].kind == ValueKind::Param) out.push_back(ex.read(static_cast<ValueId>(v)));
    return out;
  }
};

std::string non_finite(const std::function<void()>& f) {
  return test::thrown_message<NonFiniteError>(f);
}

// conv1 fuses a ReLU, and ReLU maps NaN to 0: the loss stays finite, but conv1's weight
// gradient reads the NaN input. Checking the loss alone would train on with a NaN weight.
TEST(FiniteCheck, NanInputThatReluHidesIsCaughtInTheGradient) {
  Net n(false);
  Executor ex(n.g, n.ops, *n.be);
  ex.init_parameters(1);
  const ExecutionPlan plan = plan_keep_all(n.g, [](NodeId) { return int64_t{0}; });
  std::vector<float> x = n.images();
  const auto y = n.labels();
  ex.run_step(plan, x.data(), y.data(), 0);
  const auto before = n.params(ex);
  x[5] = kNaN;
  const std::string m = non_finite([&] { ex.run_step(plan, x.data(), y.data(), 1); });
  EXPECT_NE(m.find("step 2: the gradient 'conv1.weight.grad' is not finite"), std::string::npos)
      << m;
  EXPECT_NE(m.find("first non-finite output is node 'conv1.grad_weight' (backward op "
                   "conv2d_grad_weight"),
            std::string::npos)
      << m;
  EXPECT_EQ(n.params(ex), before) << "no update ran";
  // The executor is usable again: a finite batch trains.
  x[5] = 0.5f;
  EXPECT_TRUE(std::isfinite(ex.run_step(plan, x.data(), y.data(), 2).loss));
}

TEST(FiniteCheck, NonFiniteGradientWithFiniteLossNamesTheBackwardNode) {
  Net n(true);
  const ExecutionPlan keep = plan_keep_all(n.g, [](NodeId) { return int64_t{0}; });
  // The same under a plan that recomputes: the re-run replays the recomputations.
  GraphProblem gp = problem_from_graph(n.g, flops_costs(n.g, n.ops));
  SolveResult r = solve(gp.problem, "lp", problem_min_budget(gp.problem));
  ASSERT_TRUE(r.feasible) << r.message;
  const ExecutionPlan remat = lower_schedule(n.g, gp, r.schedule, 0);
  int recomputes = 0;
  for (const PlanStep& s : remat.steps) recomputes += s.kind == PlanStepKind::Compute && s.recompute;
  ASSERT_GT(recomputes, 0);
  const std::vector<ExecutionPlan> plans = {keep, remat};
  for (const ExecutionPlan& plan : plans) {
    Executor ex(n.g, n.ops, *n.be);
    ex.init_parameters(1);
    const auto before = n.params(ex);
    const auto x = n.images();
    const auto y = n.labels();
    const std::string m = non_finite([&] { ex.run_step(plan, x.data(), y.data(), 0); });
    EXPECT_NE(m.find("step 1: the gradient 'conv1."), std::string::npos) << plan.strategy << ": " << m;
    EXPECT_NE(m.find("first non-finite output is node 'mid.grad' (backward op poison_grad"),
              std::string::npos)
        << plan.strategy << ": " << m;
    EXPECT_EQ(n.params(ex), before);
  }
}

TEST(FiniteCheck, OptOutTrainsOnAsBefore) {
  Net n(true);
  ExecutorOptions eo;
  eo.check_finite = false;
  Executor ex(n.g, n.ops, *n.be, eo);
  ex.init_parameters(1);
  const ExecutionPlan plan = plan_keep_all(n.g, [](NodeId) { return int64_t{0}; });
  const auto x = n.images();
  const auto y = n.labels();
  EXPECT_NO_THROW(ex.run_step(plan, x.data(), y.data(), 0));
  const float w = ex.read(n.g.find_value("conv1.weight"))[0];
  EXPECT_TRUE(std::isnan(w)) << "the NaN gradient was applied";
}

TEST(FiniteCheck, CpuBackendScansEveryElement) {
  auto be = make_cpu_backend();
  std::vector<float> v(37, 1.0f);
  EXPECT_TRUE(be->all_finite(v.data(), 37, DType::F32));
  EXPECT_TRUE(be->all_finite(v.data(), 0, DType::F32));
  for (float bad : {kNaN, std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    v[36] = bad;
    EXPECT_FALSE(be->all_finite(v.data(), 37, DType::F32));
    EXPECT_TRUE(be->all_finite(v.data(), 36, DType::F32));
    v[36] = std::numeric_limits<float>::max();
    EXPECT_TRUE(be->all_finite(v.data(), 37, DType::F32));
  }
}

// Several spans at once (the finite check's one call for every gradient): any bad element in
// any span fails the whole; empty spans and an empty list pass.
void expect_spans_checked(Backend& be, float* a, uint16_t* b, float* dev_a = nullptr,
                          uint16_t* dev_b = nullptr) {
  float* pa = dev_a ? dev_a : a;
  uint16_t* pb = dev_b ? dev_b : b;
  auto upload = [&] {
    if (dev_a) be.copy_from_host(dev_a, a, 37 * 4);
    if (dev_b) be.copy_from_host(dev_b, b, 5 * 2);
  };
  const std::vector<Backend::FloatSpan> spans{
      {pa, 37, DType::F32}, {pb, 5, DType::BF16}, {pa, 0, DType::F32}};
  upload();
  EXPECT_TRUE(be.all_finite(spans));
  EXPECT_TRUE(be.all_finite(std::vector<Backend::FloatSpan>{}));
  a[20] = kNaN;
  upload();
  EXPECT_FALSE(be.all_finite(spans));
  a[20] = 1.0f;
  b[4] = bf16_from_float(-std::numeric_limits<float>::infinity());
  upload();
  EXPECT_FALSE(be.all_finite(spans));
  b[4] = bf16_from_float(2.0f);
  upload();
  EXPECT_TRUE(be.all_finite(spans));  // a clean scan after a dirty one
}

TEST(FiniteCheck, CpuBackendScansSpans) {
  auto be = make_cpu_backend();
  std::vector<float> a(37, 1.0f);
  std::vector<uint16_t> b(5, bf16_from_float(1.0f));
  expect_spans_checked(*be, a.data(), b.data());
}

TEST(FiniteCheck, CudaBackendScansSpans) {
  std::string why;
  if (!cuda_device_available(&why)) GTEST_SKIP() << why;
  auto be = make_cuda_backend(0, &why);
  ASSERT_TRUE(be) << why;
  std::vector<float> a(37, 1.0f);
  std::vector<uint16_t> b(5, bf16_from_float(1.0f));
  auto* da = static_cast<float*>(be->raw_alloc(37 * 4));
  auto* db = static_cast<uint16_t*>(be->raw_alloc(5 * 2));
  expect_spans_checked(*be, a.data(), b.data(), da, db);
  be->raw_free(da);
  be->raw_free(db);
}

// bf16 values: NaN and +-inf have all eight exponent bits set, as in FP32; the largest finite
// bf16 (0x7F7F) and a subnormal are finite.
TEST(FiniteCheck, CpuBackendScansBf16) {
  auto be = make_cpu_backend();
  std::vector<uint16_t> v(37, bf16_from_float(1.0f));
  EXPECT_TRUE(be->all_finite(v.data(), 37, DType::BF16));
  for (float bad : {kNaN, std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    v[36] = bf16_from_float(bad);
    EXPECT_FALSE(be->all_finite(v.data(), 37, DType::BF16));
    EXPECT_TRUE(be->all_finite(v.data(), 36, DType::BF16));
  }
  v[36] = 0x7F7F;  // 3.39e38, the largest finite bf16
  v[0] = 0x0001;   // the smallest subnormal
  EXPECT_TRUE(be->all_finite(v.data(), 37, DType::BF16));
  // FP32's largest finite value rounds to +inf in bf16.
  EXPECT_FALSE(std::isfinite(bf16_to_float(bf16_from_float(std::numeric_limits<float>::max()))));
}

// The CUDA backend's flag kernel (kernels/finite.cu): every position, a large array (many blocks),
// and a clean scan after a dirty one. Skips without a device.
TEST(FiniteCheck, CudaBackendScansEveryElement) {
  std::string why;
  if (!cuda_device_available(&why)) GTEST_SKIP() << why;
  auto be = make_cuda_backend(0, &why);
  ASSERT_TRUE(be) << why;
  const int64_t n = (int64_t{1} << 22) + 7;
  std::vector<float> host(static_cast<size_t>(n), 0.25f);
  void* dev = be->raw_alloc(n * 4);
  be->copy_from_host(dev, host.data(), n * 4);
  EXPECT_TRUE(be->all_finite(dev, n, DType::F32));
  for (int64_t at : {int64_t{0}, int64_t{255}, int64_t{256}, n / 2, n - 1})
    for (float bad : {kNaN, -std::numeric_limits<float>::infinity()}) {
      be->copy_from_host(static_cast<float*>(dev) + at, &bad, 4);
      EXPECT_FALSE(be->all_finite(dev, n, DType::F32)) << at;
      EXPECT_EQ(be->all_finite(dev, at, DType::F32), true) << at;
      const float fine = 0.25f;
      be->copy_from_host(static_cast<float*>(dev) + at, &fine, 4);
      EXPECT_TRUE(be->all_finite(dev, n, DType::F32)) << at;
    }
  be->raw_free(dev);
}

// The bf16 flag kernel (kernels/bf16.cu) at every position class. Skips without a device.
TEST(FiniteCheck, CudaBackendScansBf16) {
  std::string why;
  if (!cuda_device_available(&why)) GTEST_SKIP() << why;
  auto be = make_cuda_backend(0, &why);
  ASSERT_TRUE(be) << why;
  const int64_t n = (int64_t{1} << 21) + 5;
  std::vector<uint16_t> host(static_cast<size_t>(n), bf16_from_float(0.25f));
  void* dev = be->raw_alloc(n * 2);
  be->copy_from_host(dev, host.data(), n * 2);
  EXPECT_TRUE(be->all_finite(dev, n, DType::BF16));
  for (int64_t at : {int64_t{0}, int64_t{256}, n - 1}) {
    const uint16_t bad = bf16_from_float(kNaN), fine = bf16_from_float(0.25f);
    be->copy_from_host(static_cast<uint16_t*>(dev) + at, &bad, 2);
    EXPECT_FALSE(be->all_finite(dev, n, DType::BF16)) << at;
    EXPECT_TRUE(be->all_finite(dev, at, DType::BF16)) << at;
    be->copy_from_host(static_cast<uint16_t*>(dev) + at, &fine, 2);
  }
  be->raw_free(dev);
}

// ---- checkpoints ----------------------------------------------------------------------------
TEST(CheckpointValues, NanInfAndNegativeStepAreRefusedAndLeaveTheExecutorAlone) {
  Net n(false);
  Executor ex(n.g, n.ops, *n.be);
  ex.init_parameters(1);
  const std::string p = ::testing::TempDir() + "finite_ck.safetensors";
  checkpoint_save(ex, p, 5);
  EXPECT_EQ(checkpoint_load(ex, p).step, 5);
  EXPECT_EQ(checkpoint_load(ex, p).unverified, 0);
  const auto before = n.params(ex);
  const SafeTensorFile good = safetensors_load(p);
  for (float bad : {kNaN, std::numeric_limits<float>::infinity()}) {
    SafeTensorFile f = good;
    for (auto& t : f.tensors)
      if (t.name == "fc.bias") std::memcpy(t.data.data() + 4, &bad, 4);
    safetensors_save(p, f.tensors, f.metadata);
    const std::string m = test::user_error([&] { checkpoint_load(ex, p); });
    EXPECT_NE(m.find(p + ": tensor 'fc.bias': element 1 is"), std::string::npos) << m;
    EXPECT_EQ(n.params(ex), before);
  }
  for (const char* step : {"-3", "", "7x", "1e3"}) {
    SafeTensorFile f = good;
    f.metadata["step"] = step;
    safetensors_save(p, f.tensors, f.metadata);
    const std::string m = test::user_error([&] { checkpoint_load(ex, p); });
    EXPECT_NE(m.find(p + ": metadata 'step': expected a non-negative integer"), std::string::npos)
        << step << ": " << m;
  }
}

// Note [constant infinities]: a constant table of the model (an imported attention mask) keeps
// its -inf through a save, a load and the reset after a failed step; a NaN in it, or an
// infinity in a parameter, is still refused.
TEST(CheckpointValues, AConstantsInfinitiesAreKeptAndItsNanRefused) {
  const OpRegistry ops = make_builtin_registry();
  const ModelConfig cfg = parse_model_config(
      "name: masked\ninput: [4]\nclasses: 3\nbatch: 2\nlayers:\n"
      "  - {name: fc, op: dense, units: 3}\n  - {name: mask, op: add_constant, shape: [3]}\n",
      "masked.yaml");
  const Graph g = make_training_graph(build_forward_graph(cfg, ops, {}), ops,
                                      cfg.optimizer.op, cfg.optimizer.attrs);
  std::unique_ptr<Backend> be = make_cpu_backend();
  Executor ex(g, ops, *be);
  ex.init_parameters(1);
  const ValueId table = g.find_value("mask.table");
  ASSERT_NE(table, kNoValue);
  EXPECT_TRUE(g.value(table).constant);
  EXPECT_FALSE(g.value(g.find_value("fc.bias")).constant);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> mask = {0, -inf, 0};
  ex.write(table, mask);
  EXPECT_TRUE(reset_non_finite_buffers(ex).empty());
  EXPECT_EQ(checkpoint_non_finite(ex), "");
  const std::string p = ::testing::TempDir() + "constant_ck.safetensors";
  checkpoint_save(ex, p, 3);
  ex.write(table, {1, 1, 1});
  EXPECT_EQ(checkpoint_load(ex, p).step, 3);
  EXPECT_EQ(ex.read(table), mask);
  const SafeTensorFile good = safetensors_load(p);
  for (const char* name : {"mask.table", "fc.bias"}) {
    SafeTensorFile f = good;
    const float bad = std::string(name) == "fc.bias" ? -inf : kNaN;
    for (auto& t : f.tensors)
      if (t.name == name) std::memcpy(t.data.data(), &bad, 4);
    safetensors_save(p, f.tensors, f.metadata);
    const std::string m = test::user_error([&] { checkpoint_load(ex, p); });
    EXPECT_NE(m.find(p + ": tensor '" + name + "': element 0 is"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace remat
