// Every zoo network in bf16 on the CPU at a small input (Note [bf16 autocast] in
// models/build.cpp): one keep-everything step and one step under a budget between the minimum
// and keeping everything, each with a finite loss and a measured peak equal to the plan's to the
// byte; activations hold half the bytes they hold in fp32 where the autocast rules store them in
// bf16, and the persistent values (FP32 master weights, gradients, optimizer state) are the same.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "models/build.h"
#include "models/config.h"
#include "models/data.h"
#include "ops/registry.h"
#include "runtime/executor.h"
#include "runtime/graph/autodiff.h"
#include "solver/from_graph.h"
#include "solver/strategies.h"
#include "tests/source_dir.h"

namespace remat {
namespace {

struct Bf16ZooCase {
  std::string name;
  int64_t batch;
  Shape input;       // image models
  int64_t sequence;  // token models (0: an image model)
};

std::vector<Bf16ZooCase> zoo() {
  const Shape s32 = {3, 32, 32};
  return {{"small_cnn", 4, s32, 0},          {"small_dag", 4, s32, 0},
          {"vgg16", 2, s32, 0},              {"vgg19", 2, s32, 0},
          {"mobilenet", 2, s32, 0},          {"resnet50", 2, s32, 0},
          {"unet", 2, s32, 0},               {"segnet", 2, s32, 0},
          {"fcn8", 1, s32, 0},               {"linear16", 2, {3, 36, 36}, 0},
          {"gpt2_tiny", 2, {}, 16},          {"gpt2", 1, {}, 8},
          {"gpt2_medium", 1, {}, 8},         {"vit_tiny", 2, s32, 0},
          // The Checkmate artifact's networks at test_zoo's small inputs.
          {"densenet121", 2, s32, 0},        {"densenet169", 2, s32, 0},
          {"densenet201", 2, s32, 0},        {"resnet101", 2, s32, 0},
          {"resnet152", 2, s32, 0},          {"resnet50_v2", 2, s32, 0},
          {"resnet101_v2", 2, s32, 0},       {"resnet152_v2", 2, s32, 0},
          {"mobilenet_v2", 2, s32, 0},       {"inception_v3", 2, {3, 75, 75}, 0},
          {"xception", 2, {3, 71, 71}, 0},   {"nasnet_mobile", 2, s32, 0},
          {"nasnet_large", 2, {3, 43, 43}, 0}, {"fcn32", 1, s32, 0},
          {"resnet50_unet", 2, s32, 0},      {"resnet50_segnet", 2, s32, 0},
          {"mobilenet_unet", 2, s32, 0},     {"mobilenet_segnet", 2, s32, 0},
          // PSPNet's head at a 192x192 input; the VGG-encoder PSPNet (whose ops all run here and
          // in vgg16) is left out: no strategy found a schedule below keep-everything in 5 s
          // at this small input, which the budgeted half of the test needs.
          {"resnet50_pspnet", 2, {3, 192, 192}, 0}};
}

class Bf16Zoo : public ::testing::TestWithParam<Bf16ZooCase> {};

struct Built {
  ModelConfig cfg;
  Graph g;
};

Built build(const Bf16ZooCase& z, const OpRegistry& ops, DType precision) {
  Built b;
  b.cfg = load_model_config(test_source_dir() + "/configs/" + z.name + ".yaml");
  BuildOptions bo;
  bo.batch = z.batch;
  if (z.sequence > 0) bo.sequence = z.sequence;
  else bo.input = z.input;
  bo.precision = precision;
  b.g = make_training_graph(build_forward_graph(b.cfg, ops, bo), ops, b.cfg.optimizer.op,
                            b.cfg.optimizer.attrs);
  return b;
}

int64_t activation_bytes(const Graph& g) {
  int64_t n = 0;
  for (const Value& v : g.values)
    if (v.kind == ValueKind::Activation) n += v.desc.bytes();
  return n;
}

// One step of `plan`; returns the loss after checking the peak against the plan.
float one_step(Built& b, const OpRegistry& ops, Backend& be, const ExecutionPlan& plan,
               ExecutorOptions eo) {
  Executor ex(b.g, ops, be, eo);
  ex.init_parameters(b.cfg.seed);
  const TensorDesc& in = b.g.value(b.g.input).desc;
  const TensorDesc& lab = b.g.value(b.g.label).desc;
  auto data = make_data_source(b.cfg, in, lab, b.cfg.dir);
  std::vector<uint32_t> x(static_cast<size_t>(in.numel()));  // floats or token ids
  std::vector<int32_t> y(static_cast<size_t>(lab.numel()));
  data->next_batch(0, x.data(), y.data());
  const StepResult r = ex.run_step(plan, x.data(), y.data(), 0);
  EXPECT_EQ(r.peak_bytes, plan.predicted_peak) << plan.strategy;
  if (eo.memory != MemoryMode::Direct) {
    EXPECT_LE(r.reserved_peak_bytes, eo.budget);
  }
  return r.loss;
}

TEST_P(Bf16Zoo, TrainsAStepWithThePlannedPeak) {
  const Bf16ZooCase& z = GetParam();
  const OpRegistry ops = make_builtin_registry();
  Built b16 = build(z, ops, DType::BF16);
  const Built b32 = build(z, ops, DType::F32);
  // The same constant but for the image batch: every zoo network reads it first in a
  // convolution, so a bf16 model takes it in bf16, without a cast node (Note [bf16 input batch]).
  const TensorDesc& in16 = b16.g.value(b16.g.input).desc;
  const TensorDesc& in32 = b32.g.value(b32.g.input).desc;
  EXPECT_EQ(in16.dtype, z.sequence == 0 ? DType::BF16 : DType::I32);
  EXPECT_EQ(b16.g.find_value("input.to_bf16"), kNoValue);
  EXPECT_EQ(b16.g.persistent_bytes() + in32.alloc_bytes() - in16.alloc_bytes(),
            b32.g.persistent_bytes());
  int bf16_values = 0;
  for (const Value& v : b16.g.values) bf16_values += v.desc.dtype == DType::BF16;
  EXPECT_GT(bf16_values, 0);
  // Casts add values; the bf16 ones are half: image models store nearly everything in bf16,
  // token models keep the residual stream, the embeddings and the weight-sized gradient
  // contributions of the tied embedding in FP32 (at T = 8 those dominate).
  if (z.sequence == 0) EXPECT_LT(activation_bytes(b16.g), 0.6 * activation_bytes(b32.g));
  else EXPECT_LT(activation_bytes(b16.g), activation_bytes(b32.g));

  auto be = make_cpu_backend();
  auto ws = [&](NodeId n) { return node_workspace_bytes(b16.g, ops, *be, n); };
  const ExecutionPlan keep = plan_keep_all(b16.g, ws);
  const float loss = one_step(b16, ops, *be, keep, {});
  ASSERT_TRUE(std::isfinite(loss)) << z.name;
  EXPECT_GT(loss, 0.0f);

  // Under the tightest of 30, 50, 70 and 90 % of the way from the minimum to keeping everything
  // that chen-greedy (or lp, or checkmate) fits; the full-size GPT-2s are left to gpt2_tiny
  // (same ops).
  if (z.name == "gpt2" || z.name == "gpt2_medium") return;
  GraphProblem gp = problem_from_graph(b16.g, flops_costs(b16.g, ops, ws));
  const int64_t lo = problem_min_budget(gp.problem), hi = keep.predicted_peak;
  SolveOptions so;
  so.time_limit_seconds = 5;
  SolveResult r;
  int64_t budget = 0;
  for (int pct : {30, 50, 70, 90}) {
    budget = lo + (hi - lo) * pct / 100;
    for (const char* strategy : {"chen-greedy", "lp", "checkmate"}) {
      r = solve(gp.problem, strategy, budget, so);
      if (r.feasible) break;
    }
    if (r.feasible) break;
  }
  ASSERT_TRUE(r.feasible) << z.name << " up to " << budget;
  const ExecutionPlan plan = lower_schedule(b16.g, gp, r.schedule, budget);
  EXPECT_LE(plan.predicted_peak, budget);
  const float budget_loss = one_step(b16, ops, *be, plan, {MemoryMode::Arena, budget + budget / 4});
  EXPECT_EQ(budget_loss, loss) << "recomputation changed the bf16 loss";
}

INSTANTIATE_TEST_SUITE_P(Configs, Bf16Zoo, ::testing::ValuesIn(zoo()),
                         [](const ::testing::TestParamInfo<Bf16ZooCase>& i) {
                           return i.param.name;
                         });

}  // namespace
}  // namespace remat
