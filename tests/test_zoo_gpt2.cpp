// The GPT-2 configs (configs/gpt2_tiny.yaml, gpt2.yaml, gpt2_medium.yaml): reference parameter
// counts, full-size graphs (T = 1024, vocabulary 50257) with attention's T x T values, a plan at
// full size, one CPU training step at a small sequence length, and gpt2_tiny's loss falling
// within 50 CPU steps.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>

#include "models/build.h"
#include "models/config.h"
#include "models/data.h"
#include "ops/registry.h"
#include "runtime/graph/autodiff.h"
#include "runtime/backends/backend.h"
#include "runtime/executor.h"
#include "runtime/memory/plan.h"
#include "solver/from_graph.h"
#include "solver/strategies.h"
#include "tests/source_dir.h"

namespace remat {
namespace {

const OpRegistry& registry() {
  static const OpRegistry r = make_builtin_registry();
  return r;
}

ModelConfig load(const std::string& name) {
  return load_model_config(test_source_dir() + "/configs/" + name + ".yaml");
}

// GPT-2 with tied embeddings, from its definition: token table V x C, position table 1024 x C,
// per layer two layer norms (4C), q, k, v and the attention projection (4 (C^2 + C)), the MLP
// (C x 4C + 4C and 4C x C + C), the final layer norm (2C).
int64_t gpt2_params(int64_t layers, int64_t c, int64_t vocab, int64_t positions) {
  const int64_t per_layer = 4 * c + 4 * (c * c + c) + (c * 4 * c + 4 * c) + (4 * c * c + c);
  return vocab * c + positions * c + layers * per_layer + 2 * c;
}

int64_t param_count(const Graph& g) {
  int64_t n = 0;
  for (const Value& v : g.values)
    if (v.kind == ValueKind::Param) n += v.desc.numel();
  return n;
}

int count_ops(const Graph& g, NodeKind kind, const std::string& op) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.kind == kind && node.op == op;
  return n;
}

struct Gpt2Case {
  std::string name;
  int64_t layers, heads, c, params;
};

class Gpt2Zoo : public ::testing::TestWithParam<Gpt2Case> {};

TEST_P(Gpt2Zoo, FullSizeGraphHasReferenceParamsAndAttentionValues) {
  const Gpt2Case& z = GetParam();
  const ModelConfig cfg = load(z.name);
  const int64_t t = cfg.sequence, v = cfg.vocab, n = cfg.batch;
  EXPECT_EQ(gpt2_params(z.layers, z.c, v, t), z.params);
  const Graph fwd = build_forward_graph(cfg, registry());
  EXPECT_EQ(param_count(fwd), z.params);
  EXPECT_EQ(fwd.value(fwd.input).desc, (TensorDesc{{n, t}, DType::I32}));
  EXPECT_EQ(fwd.value(fwd.node(fwd.find_node("lm_head")).output).desc.shape, (Shape{n, t, v}));
  EXPECT_EQ(fwd.value(fwd.find_value("h.0.probs")).desc.shape, (Shape{n, z.heads, t, t}));
  EXPECT_EQ(count_ops(fwd, NodeKind::Forward, "softmax"), z.layers);
  EXPECT_EQ(count_ops(fwd, NodeKind::Forward, "matmul"), 2 * z.layers);
  EXPECT_EQ(count_ops(fwd, NodeKind::Forward, "linear"), 6 * z.layers + 1);
  const Graph g = make_training_graph(fwd, registry(), cfg.optimizer.op, cfg.optimizer.attrs);
  int params = 0;
  for (const Value& val : g.values) params += val.kind == ValueKind::Param;
  EXPECT_EQ(count_ops(g, NodeKind::Update, cfg.optimizer.op), params);
  EXPECT_EQ(count_ops(g, NodeKind::Update, "clip_grad_norm"), 1);
  // Attention's backward: each forward matmul emits two matmuls.
  EXPECT_EQ(count_ops(g, NodeKind::Backward, "matmul"), 4 * z.layers);
}

// Full size through the solver: the problem builds, keep-everything fits at its own peak, and
// Chen's sqrt(n) fits halfway between the minimum budget and that peak by recomputing.
TEST_P(Gpt2Zoo, PlansAtFullSize) {
  const Gpt2Case& z = GetParam();
  const ModelConfig cfg = load(z.name);
  const Graph g = make_training_graph(build_forward_graph(cfg, registry()), registry(),
                                      cfg.optimizer.op, cfg.optimizer.attrs);
  const Problem p = problem_from_graph(g, flops_costs(g, registry())).problem;
  const SolveResult keep = solve(p, "all-keep", int64_t{1} << 50, {});
  ASSERT_TRUE(keep.feasible);
  const int64_t mid = (problem_min_budget(p) + keep.sim.peak_bytes) / 2;
  const SolveResult chen = solve(p, "chen-sqrtn", mid, {});
  ASSERT_TRUE(chen.feasible) << chen.message;
  EXPECT_LE(chen.sim.peak_bytes, mid);
  EXPECT_GT(chen.sim.total_cost, keep.sim.total_cost);
}

// One step at T = 8, batch 1: the loss is about ln(V) (a random initialisation predicts
// nearly uniformly).
TEST_P(Gpt2Zoo, OneCpuStepAtASmallSequence) {
  const Gpt2Case& z = GetParam();
  const ModelConfig cfg = load(z.name);
  BuildOptions bo;
  bo.batch = 1;
  bo.sequence = 8;
  const Graph g = make_training_graph(build_forward_graph(cfg, registry(), bo), registry(),
                                      cfg.optimizer.op, cfg.optimizer.attrs);
  EXPECT_EQ(param_count(g), z.params);  // the position table keeps max_len rows
  auto be = make_cpu_backend();
  Executor ex(g, registry(), *be);
  ex.init_parameters(cfg.seed);
  const ExecutionPlan plan = plan_keep_all(g, [&](NodeId n) { return ex.workspace_bytes(n); });
  auto data = make_data_source(cfg, g.value(g.input).desc, g.value(g.label).desc, cfg.dir);
  std::vector<int32_t> ids(8), targets(8);
  data->next_batch(0, ids.data(), targets.data());
  const StepResult r = ex.run_step(plan, ids.data(), targets.data(), 0);
  ASSERT_TRUE(std::isfinite(r.loss));
  EXPECT_NEAR(r.loss, std::log(static_cast<double>(cfg.vocab)), 1.0);
  EXPECT_EQ(r.peak_bytes, plan.predicted_peak);
}

INSTANTIATE_TEST_SUITE_P(Configs, Gpt2Zoo,
                         ::testing::Values(Gpt2Case{"gpt2_tiny", 2, 4, 64, 120576},
                                           Gpt2Case{"gpt2", 12, 12, 768, 124439808},
                                           Gpt2Case{"gpt2_medium", 24, 16, 1024, 354823168}),
                         [](const ::testing::TestParamInfo<Gpt2Case>& i) { return i.param.name; });

// gpt2_tiny learns the synthetic token patterns on the CPU: the loss of the last 5 of 50 steps is
// well below the first (ln 256 = 5.5 at initialisation).
TEST(Gpt2Tiny, LossFallsWithin50CpuSteps) {
  const ModelConfig cfg = load("gpt2_tiny");
  const Graph g = make_training_graph(build_forward_graph(cfg, registry()), registry(),
                                      cfg.optimizer.op, cfg.optimizer.attrs);
  auto be = make_cpu_backend();
  Executor ex(g, registry(), *be);
  ex.init_parameters(cfg.seed);
  const ExecutionPlan plan = plan_keep_all(g, [&](NodeId n) { return ex.workspace_bytes(n); });
  auto data = make_data_source(cfg, g.value(g.input).desc, g.value(g.label).desc, cfg.dir);
  std::vector<int32_t> ids(static_cast<size_t>(g.value(g.input).desc.numel()));
  std::vector<int32_t> targets(ids.size());
  std::vector<float> losses;
  for (int s = 0; s < 50; ++s) {
    data->next_batch(s, ids.data(), targets.data());
    losses.push_back(ex.run_step(plan, ids.data(), targets.data(), s).loss);
  }
  EXPECT_NEAR(losses[0], std::log(256.0), 0.3);
  const double last5 = std::accumulate(losses.end() - 5, losses.end(), 0.0) / 5;
  EXPECT_LT(last5, 0.5 * losses[0]) << "loss " << losses[0] << " -> " << last5;
}

}  // namespace
}  // namespace remat
