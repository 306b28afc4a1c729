// Rematerializing execution: for each config, several budgets between the minimum and
// keep-everything, and every strategy, the weights and gradients after a few steps are
// bit-identical to the keep-everything run, and the measured peak equals the simulator's
// prediction and stays within the budget. Batch norm and dropout do not drift under recompute;
// an out-of-pool request names the node.
#include <gtest/gtest.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "tests/source_dir.h"
#include "models/build.h"
#include "models/config.h"
#include "models/data.h"
#include "ops/registry.h"
#include "runtime/memory/allocator.h"
#include "runtime/graph/autodiff.h"
#include "runtime/executor.h"
#include "runtime/io/trace.h"
#include "runtime/memory/pool_replay.h"
#include "solver/from_graph.h"
#include "solver/strategies.h"

namespace remat {
namespace {

struct Model {
  OpRegistry ops = make_builtin_registry();
  ModelConfig cfg;
  Graph g;
  std::unique_ptr<Backend> be = make_cpu_backend();
  Model(const ModelConfig& c, BuildOptions bo) : cfg(c) {
    g = make_training_graph(build_forward_graph(cfg, ops, bo), ops, cfg.optimizer.op,
                            cfg.optimizer.attrs);
  }
};

// Runs `steps` steps of `plan` and returns every persistent value (params, grads, state).
std::vector<std::vector<float>> train_state(Model& m, const ExecutionPlan& plan, ExecutorOptions eo,
                                            int steps, std::vector<StepResult>* results = nullptr) {
  Executor ex(m.g, m.ops, *m.be, eo);
  ex.init_parameters(m.cfg.seed);
  auto data = make_data_source(m.cfg, m.g.value(m.g.input).desc, m.g.value(m.g.label).desc, "");
  // 4-byte elements: image floats or token ids.
  std::vector<uint32_t> x(static_cast<size_t>(m.g.value(m.g.input).desc.numel()));
  std::vector<int32_t> y(static_cast<size_t>(m.g.value(m.g.label).desc.numel()));
  for (int s = 0; s < steps; ++s) {
    data->next_batch(s, x.data(), y.data());
    StepResult r = ex.run_step(plan, x.data(), y.data(), s);
    if (results) results->push_back(r);
  }
  std::vector<std::vector<float>> state;
  for (size_t v = 0; v < m.g.values.size(); ++v) {
    ValueKind k = m.g.values[v].kind;
    if (k == ValueKind::Param || k == ValueKind::ParamGrad || k == ValueKind::Buffer ||
        k == ValueKind::OptState)
      state.push_back(ex.read(static_cast<ValueId>(v)));
  }
  return state;
}

bool bit_identical(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) {
      ADD_FAILURE() << "persistent value #" << i << " differs";
      return false;
    }
  return true;
}

// `copy_cost_per_byte` > 0: the problem has a host link (Note [offload semantics]), and some
// plan must copy. Each strategy's plan at each budget is solved once and trained under every
// memory mode of `modes`.
void check_every_strategy(Model& m, int points,
                          const std::vector<std::string>& strategies = strategy_names(),
                          const std::vector<MemoryMode>& modes = {MemoryMode::Arena},
                          double copy_cost_per_byte = 0, CopyOverlap overlap = CopyOverlap::Stage) {
  auto ws = [&](NodeId n) { return node_workspace_bytes(m.g, m.ops, *m.be, n); };
  GraphProblem gp = problem_from_graph(m.g, flops_costs(m.g, m.ops, ws));
  gp.problem.copy_cost_per_byte = copy_cost_per_byte;
  gp.problem.copy_overlap = overlap;
  ExecutionPlan keep = plan_keep_all(m.g, ws);
  auto reference = train_state(m, keep, {}, 2);
  const int64_t lo = problem_min_budget(gp.problem);
  const int64_t hi = keep.predicted_peak;
  ASSERT_LT(lo, hi);
  int ran = 0, recomputing = 0, copying = 0;
  // The feasible range of a DAG starts well above problem_min_budget (long-lived gradients),
  // so the budgets step down from keep-everything in 4% steps of the range.
  for (int k = 0; k < points; ++k) {
    const int64_t budget = hi - (hi - lo) * 4 * (k + 1) / 100;
    for (const std::string& strategy : strategies) {
      SolveOptions so;
      so.time_limit_seconds = 10;
      SolveResult r = solve(gp.problem, strategy, budget, so);
      if (!r.feasible) continue;
      ExecutionPlan plan = lower_schedule(m.g, gp, r.schedule, budget);
      EXPECT_LE(plan.predicted_peak, budget) << strategy;
      copying += plan.has_copies();
      for (MemoryMode mode : modes) {
        // Room for the arena's alignment and packing (or the pool's fragmentation): the region
        // is checked against its size.
        ExecutorOptions eo{mode, budget + budget / 4};
        std::vector<StepResult> results;
        auto state = train_state(m, plan, eo, 2, &results);
        const std::string what = m.cfg.name + " " + strategy + " at " + std::to_string(budget) +
                                 " bytes, " + memory_mode_name(mode);
        EXPECT_TRUE(bit_identical(state, reference)) << what;
        for (const auto& sr : results) {
          EXPECT_EQ(sr.peak_bytes, plan.predicted_peak) << what;
          EXPECT_LE(sr.reserved_peak_bytes, eo.budget) << what;
          recomputing += sr.recomputes > 0;
        }
      }
      ++ran;
    }
  }
  EXPECT_GE(ran, std::min<int>(points * 2, points * static_cast<int>(strategies.size())))
      << "too few feasible strategies to mean anything";
  if (copy_cost_per_byte > 0) {
    EXPECT_GT(copying, 0) << "no plan copied anything";
  } else {
    EXPECT_GT(recomputing, 0) << "no plan recomputed anything";
  }
}

BuildOptions small(int64_t batch, DType precision = DType::F32) {
  BuildOptions bo;
  bo.batch = batch;
  bo.precision = precision;
  return bo;
}

TEST(RematExec, SmallCnnEveryStrategyBitIdentical) {
  Model m(load_model_config(test_source_dir() + "/configs/small_cnn.yaml"), small(4));
  check_every_strategy(m, 3);
}

TEST(RematExec, SmallDagEveryStrategyBitIdentical) {
  Model m(load_model_config(test_source_dir() + "/configs/small_dag.yaml"), small(4));
  check_every_strategy(m, 3);
}

// linear16 at 36 x 36, batch 2 (the offload tests' model), and its problem with FLOPs costs and
// a host link of `copy_cost_per_byte`.
Model small_linear16() {
  BuildOptions bo = small(2);
  bo.input = Shape{3, 36, 36};
  return Model(load_model_config(test_source_dir() + "/configs/linear16.yaml"), bo);
}
GraphProblem linked_problem(const Model& m, double copy_cost_per_byte) {
  auto ws = [&](NodeId n) { return node_workspace_bytes(m.g, m.ops, *m.be, n); };
  GraphProblem gp = problem_from_graph(m.g, flops_costs(m.g, m.ops, ws));
  gp.problem.copy_cost_per_byte = copy_cost_per_byte;
  return gp;
}

// Offload (Note [host copies]): plans that move activations to host memory and back, with or
// without recomputation, train bit-identically to keep-everything with the measured device
// peak equal to the prediction, in the arena and in the pool. A link of 2 FLOPs per byte makes
// copies cheaper than recomputing a convolution's output, so the plans move values.
TEST(RematExec, OffloadStrategiesBitIdentical) {
  Model m = small_linear16();
  check_every_strategy(m, 3,
                       {"all-keep-offload", "chen-sqrtn-offload", "greedy-offload",
                        "lp-offload", "checkmate-offload"},
                       {MemoryMode::Arena, MemoryMode::Pool}, 2.0);
  // chen-sqrtn-offload recomputes and copies at once; on this small input its peak is above
  // the budgets above (chen-sqrtn's own is), so it runs at its own peak.
  const GraphProblem gp = linked_problem(m, 2.0);
  const ExecutionPlan keep =
      plan_keep_all(m.g, [&](NodeId n) { return node_workspace_bytes(m.g, m.ops, *m.be, n); });
  SolveResult r = solve(gp.problem, "chen-sqrtn-offload", 2 * keep.predicted_peak);
  ASSERT_TRUE(r.feasible) << r.message;
  EXPECT_GT(r.sim.offloads, 0);
  EXPECT_GT(r.sim.compute_cost, solve(gp.problem, "all-keep", keep.predicted_peak).sim.compute_cost);
  const ExecutionPlan plan = lower_schedule(m.g, gp, r.schedule, r.sim.peak_bytes);
  const auto reference = train_state(m, keep, {}, 2);
  for (MemoryMode mode : {MemoryMode::Arena, MemoryMode::Pool}) {
    SCOPED_TRACE(memory_mode_name(mode));
    const ExecutorOptions eo{mode, r.sim.peak_bytes + r.sim.peak_bytes / 4};
    std::vector<StepResult> results;
    EXPECT_TRUE(bit_identical(train_state(m, plan, eo, 2, &results), reference));
    for (const auto& sr : results) {
      EXPECT_EQ(sr.peak_bytes, plan.predicted_peak);
      EXPECT_GT(sr.recomputes, 0);
    }
  }
}

// Streamed copies (Note [streamed copies]) start earlier and keep values on the device and host
// copies longer than stage-bound ones: the plans' steps follow, and train bit-identically with
// the measured peak equal to the prediction. A link of 300 FLOPs per byte makes a convolution
// output's copy outlast its stage, so the streamed schedules differ from the stage-bound ones.
TEST(RematExec, StreamedOffloadPlansBitIdentical) {
  Model m = small_linear16();
  check_every_strategy(m, 2, {"all-keep-offload", "greedy-offload"},
                       {MemoryMode::Arena, MemoryMode::Pool}, 300.0, CopyOverlap::Stream);
  GraphProblem stream = linked_problem(m, 300.0), stage = stream;
  stream.problem.copy_overlap = CopyOverlap::Stream;
  const ExecutionPlan keep =
      plan_keep_all(m.g, [&](NodeId n) { return node_workspace_bytes(m.g, m.ops, *m.be, n); });
  const int64_t budget = keep.predicted_peak - keep.predicted_peak / 100;
  SolveResult a = solve(stream.problem, "all-keep-offload", budget);
  SolveResult b = solve(stage.problem, "all-keep-offload", budget);
  ASSERT_TRUE(a.feasible && b.feasible) << a.message << b.message;
  EXPECT_FALSE(a.schedule.offload == b.schedule.offload && a.schedule.S == b.schedule.S);
  EXPECT_LT(a.sim.total_cost, b.sim.total_cost);
  const ExecutionPlan plan = lower_schedule(m.g, stream, a.schedule, budget);
  std::vector<StepResult> results;
  const ExecutorOptions eo{MemoryMode::Arena, budget + budget / 4};
  EXPECT_TRUE(bit_identical(train_state(m, plan, eo, 2, &results), train_state(m, keep, {}, 2)));
  for (const auto& sr : results) EXPECT_EQ(sr.peak_bytes, plan.predicted_peak);
}

// Copies on streams (Note [copy streams], Note [copy orders]): the CPU backend runs each
// direction's copies at once or as late as a copy stream may, and plans that copy, stage-bound
// and streamed, train bit-identically to keep-everything under every pair of ends, with the
// measured peak the prediction. A wait the executor leaves out shows here: a compute reads a
// prefetch that has not run, or memory is reused before a copy has read or written it.
TEST(RematExec, OffloadPlansUnderEveryCopyOrder) {
  for (CpuCopyOrder order :
       {CpuCopyOrder::Latest, CpuCopyOrder::ToHostLatest, CpuCopyOrder::ToDeviceLatest}) {
    for (CopyOverlap overlap : {CopyOverlap::Stage, CopyOverlap::Stream}) {
      SCOPED_TRACE(std::to_string(static_cast<int>(order)) + " " +
                   std::to_string(static_cast<int>(overlap)));
      Model m = small_linear16();
      m.be = make_cpu_backend(order);
      check_every_strategy(m, 2, {"all-keep-offload", "greedy-offload", "chen-sqrtn-offload"},
                           {overlap == CopyOverlap::Stage ? MemoryMode::Arena : MemoryMode::Pool},
                           overlap == CopyOverlap::Stage ? 2.0 : 300.0, overlap);
    }
  }
}

// A traced step of a plan that copies shows each copy as a span on its own track, with its bytes.
TEST(RematExec, TracedCopiesAreSpansOnTheirOwnTracks) {
  Model m = small_linear16();
  const GraphProblem gp = linked_problem(m, 2);
  const int64_t keep =
      plan_keep_all(m.g, [&](NodeId n) { return node_workspace_bytes(m.g, m.ops, *m.be, n); })
          .predicted_peak;
  SolveResult r = solve(gp.problem, "all-keep-offload", keep - keep / 100);
  ASSERT_TRUE(r.feasible) << r.message;
  const ExecutionPlan plan = lower_schedule(m.g, gp, r.schedule, keep);
  ASSERT_TRUE(plan.has_copies());
  Executor ex(m.g, m.ops, *m.be, {MemoryMode::Arena, keep + keep / 4});
  ex.init_parameters(1);
  std::vector<float> x(static_cast<size_t>(m.g.value(m.g.input).desc.numel()), 0.5f);
  std::vector<int32_t> y(static_cast<size_t>(m.g.value(m.g.label).desc.numel()), 1);
  TraceWriter trace;
  ex.run_step(plan, x.data(), y.data(), 0, &trace);
  const nlohmann::json j = nlohmann::json::parse(trace.json());
  int out = 0, in = 0;
  for (const auto& e : j.at("traceEvents")) {
    if (!e.contains("cat") || e.at("cat") != "copy" || e.at("ph") != "X") continue;
    const std::string name = e.at("name");
    EXPECT_TRUE(e.at("args").contains("bytes")) << name;
    if (name.rfind("offload ", 0) == 0) out += e.at("tid") == kTraceCopyOutTrack;
    if (name.rfind("prefetch ", 0) == 0) in += e.at("tid") == kTraceCopyInTrack;
  }
  EXPECT_EQ(out, r.sim.offloads);
  EXPECT_EQ(in, r.sim.prefetches);
}

// The zoo's real architectures at a small input (the 138M-parameter VGG/FCN are covered by
// test_zoo's single step; their two extra full runs here would dominate the suite): the
// baselines, which scale to graphs of hundreds of nodes, rematerialize bit-identically.
TEST(RematExec, ZooConfigsBitIdenticalUnderBaselines) {
  for (const char* name : {"mobilenet", "resnet50", "unet", "segnet", "linear16"}) {
    SCOPED_TRACE(name);
    BuildOptions bo = small(2);
    bo.input = std::string(name) == "linear16" ? Shape{3, 36, 36} : Shape{3, 32, 32};
    Model m(load_model_config(test_source_dir() + "/configs/" + name + ".yaml"), bo);
    check_every_strategy(m, 1, {"chen-sqrtn", "chen-greedy", "chen-greedy-linear"});
  }
}

// GPT-2 in miniature (attention from primitive ops, tied embeddings, AdamW with clipping and a
// schedule): every strategy's recomputation is bit-identical to keeping everything.
TEST(RematExec, Gpt2TinyEveryStrategyBitIdentical) {
  BuildOptions bo = small(2);
  bo.sequence = 16;
  Model m(load_model_config(test_source_dir() + "/configs/gpt2_tiny.yaml"), bo);
  check_every_strategy(m, 2);
}

// bf16 (Note [bf16 execution]): recomputation stages and rounds exactly as the first
// computation, so every strategy's weights, gradients and optimizer state after two steps are
// bit-identical to keeping everything in bf16, in the arena and in the pool, and the measured
// peak of 2-byte activations is the plan's.
const std::vector<std::string> kBf16Strategies = {"checkmate", "chen-greedy", "chen-sqrtn", "lp"};

TEST(RematExec, Bf16SmallCnnEveryStrategyBitIdentical) {
  Model m(load_model_config(test_source_dir() + "/configs/small_cnn.yaml"), small(4, DType::BF16));
  check_every_strategy(m, 2, strategy_names(), {MemoryMode::Arena, MemoryMode::Pool});
}

TEST(RematExec, Bf16SmallDagBitIdenticalArenaAndPool) {
  Model m(load_model_config(test_source_dir() + "/configs/small_dag.yaml"), small(4, DType::BF16));
  check_every_strategy(m, 1, kBf16Strategies, {MemoryMode::Arena, MemoryMode::Pool});
}

TEST(RematExec, Bf16Gpt2TinyBitIdenticalArenaAndPool) {
  BuildOptions bo = small(2, DType::BF16);
  bo.sequence = 16;
  Model m(load_model_config(test_source_dir() + "/configs/gpt2_tiny.yaml"), bo);
  int bf16_values = 0;
  for (const Value& v : m.g.values) bf16_values += v.desc.dtype == DType::BF16;
  EXPECT_GT(bf16_values, 20);
  check_every_strategy(m, 1, kBf16Strategies, {MemoryMode::Arena, MemoryMode::Pool});
}

// Batch norm (running statistics) and dropout (masks) inside a chain that a tight budget forces
// to recompute: state identical to keep-everything, including the running statistics.
TEST(RematExec, BatchNormAndDropoutDoNotDriftUnderRecompute) {
  const char* yaml = R"(
name: bn_dropout
input: [3, 8, 8]
classes: 4
batch: 4
seed: 3
optimizer: {op: sgd, lr: 0.05, momentum: 0.9}
layers:
  - {name: c1, op: conv2d, filters: 8, kernel: 3, padding: 1}
  - {name: bn1, op: batchnorm}
  - {name: r1, op: relu}
  - {name: d1, op: dropout, rate: 0.3}
  - {name: c2, op: conv2d, filters: 8, kernel: 3, padding: 1}
  - {name: bn2, op: batchnorm}
  - {name: r2, op: relu}
  - {name: d2, op: dropout, rate: 0.3}
  - {name: gap, op: global_avgpool}
  - {name: fc, op: dense, units: 4}
)";
  Model m(parse_model_config(yaml, "bn_dropout.yaml"), {});
  auto ws = [&](NodeId n) { return node_workspace_bytes(m.g, m.ops, *m.be, n); };
  GraphProblem gp = problem_from_graph(m.g, flops_costs(m.g, m.ops, ws));
  ExecutionPlan keep = plan_keep_all(m.g, ws);
  auto reference = train_state(m, keep, {}, 3);
  // Chen's sqrt(n) recomputes whole segments, batch norm and dropout included.
  SolveResult r = solve(gp.problem, "chen-sqrtn", keep.predicted_peak, {});
  ASSERT_TRUE(r.feasible) << r.message;
  ExecutionPlan plan = lower_schedule(m.g, gp, r.schedule, keep.predicted_peak);
  int recomputed_bn_or_dropout = 0;
  for (const auto& s : plan.steps)
    if (s.kind == PlanStepKind::Compute && s.recompute) {
      const std::string& op = m.g.node(s.node).op;
      recomputed_bn_or_dropout += op == "batchnorm" || op == "dropout";
    }
  ASSERT_GT(recomputed_bn_or_dropout, 0) << "the tight plan recomputes no batchnorm/dropout";
  auto state = train_state(m, plan, {MemoryMode::Pool, plan.predicted_peak * 2}, 3);
  EXPECT_TRUE(bit_identical(state, reference));
}

TEST(RematExec, PoolOutOfMemoryNamesNodeAndBytes) {
  Model m(load_model_config(test_source_dir() + "/configs/small_cnn.yaml"), small(4));
  auto ws = [&](NodeId n) { return node_workspace_bytes(m.g, m.ops, *m.be, n); };
  ExecutionPlan keep = plan_keep_all(m.g, ws);
  const int64_t budget = keep.predicted_peak * 8 / 10;  // below what keep-everything needs
  try {
    train_state(m, keep, {MemoryMode::Pool, budget}, 1);
    FAIL() << "ran a keep-everything step in 80% of its peak";
  } catch (const OutOfPoolError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("node '"), std::string::npos) << msg;
    EXPECT_NE(msg.find("bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("largest free block"), std::string::npos) << msg;
  }
}

// The allocator replay predicts the pool exactly: for pool sizes stepping down from 130% of the
// keep-everything peak, the executor succeeds exactly when the replay fits, with the replay's
// peak, and runs out of memory exactly when it does not.
TEST(RematExec, PoolReplayPredictsThePool) {
  Model m(load_model_config(test_source_dir() + "/configs/small_dag.yaml"), small(4));
  auto ws = [&](NodeId n) { return node_workspace_bytes(m.g, m.ops, *m.be, n); };
  ExecutionPlan keep = plan_keep_all(m.g, ws);
  int fits = 0, fails = 0;
  for (int pct = 130; pct >= 90; pct -= 2) {
    const int64_t pool = keep.predicted_peak * pct / 100;
    PoolReplay r = replay_pool(m.g, keep, ws, pool);
    std::vector<StepResult> results;
    bool ran = true;
    try {
      train_state(m, keep, {MemoryMode::Pool, pool}, 2, &results);
    } catch (const OutOfPoolError&) {
      ran = false;
    } catch (const UserError&) {
      ran = false;  // persistent values alone do not fit
    }
    EXPECT_EQ(ran, r.fits) << "pool of " << pool << " bytes";
    if (ran && r.fits) {
      for (const auto& sr : results) EXPECT_EQ(sr.reserved_peak_bytes, r.peak_in_use) << pool;
    }
    if (!r.fits) {
      EXPECT_GT(r.shortfall, 0);
    }
    (r.fits ? fits : fails) += 1;
  }
  EXPECT_GT(fits, 0);
  EXPECT_GT(fails, 0);
}

TEST(RematExec, ArenaRejectsAPlanAboveTheBudget) {
  Model m(load_model_config(test_source_dir() + "/configs/small_cnn.yaml"), small(4));
  auto ws = [&](NodeId n) { return node_workspace_bytes(m.g, m.ops, *m.be, n); };
  ExecutionPlan keep = plan_keep_all(m.g, ws);
  EXPECT_THROW(train_state(m, keep, {MemoryMode::Arena, keep.predicted_peak * 8 / 10}, 1),
               UserError);
}

}  // namespace
}  // namespace remat
