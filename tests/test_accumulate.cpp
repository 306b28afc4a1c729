// Gradient accumulation (Note [gradient accumulation] in runtime/graph/accumulate.h): the graph
// gets one grad_accumulate node right after each gradient's writer; a step of K micro-batches
// leaves in every parameter gradient exactly the mean of the K gradients the micro-batches give
// on their own (bit for bit, in the accumulation's order, with and without recomputation, with
// batch norm); and it equals one K-times-larger batch within the bound on reordering a sum.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "models/build.h"
#include "models/config.h"
#include "models/data.h"
#include "ops/registry.h"
#include "runtime/executor.h"
#include "runtime/graph/accumulate.h"
#include "runtime/graph/autodiff.h"
#include "solver/from_graph.h"
#include "solver/strategies.h"
#include "tests/source_dir.h"

namespace remat {
namespace {

const OpRegistry& registry() {
  static const OpRegistry ops = make_builtin_registry();
  return ops;
}

Graph training_graph(const ModelConfig& cfg, int64_t batch, int micro_batches) {
  BuildOptions bo;
  bo.batch = batch;
  return make_training_graph(build_forward_graph(cfg, registry(), bo), registry(),
                             cfg.optimizer.op, cfg.optimizer.attrs, micro_batches);
}

ModelConfig zoo(const std::string& name, const std::vector<std::string>& overrides = {}) {
  return load_model_config(test_source_dir() + "/configs/" + name + ".yaml", overrides);
}

// `samples` samples of step 0 of the config's data: inputs (4-byte floats or token ids) and labels.
struct Batch {
  std::vector<uint32_t> x;
  std::vector<int32_t> y;
};
Batch data_of(const ModelConfig& cfg, const Graph& g, int64_t samples) {
  TensorDesc in = g.value(g.input).desc, labels = g.value(g.label).desc;
  in.shape[0] = labels.shape[0] = samples;
  Batch b{std::vector<uint32_t>(static_cast<size_t>(in.numel())),
          std::vector<int32_t>(static_cast<size_t>(labels.numel()))};
  make_data_source(cfg, in, labels, "")->next_batch(0, b.x.data(), b.y.data());
  return b;
}

// Every parameter gradient of `g` after one step, by name.
std::map<std::string, std::vector<float>> gradients(const Executor& ex, const Graph& g) {
  std::map<std::string, std::vector<float>> out;
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].kind == ValueKind::ParamGrad)
      out[g.values[v].name] = ex.read(static_cast<ValueId>(v));
  return out;
}

ExecutionPlan keep_all(const Graph& g, Backend& be) {
  return plan_keep_all(g, [&](NodeId n) { return node_workspace_bytes(g, registry(), be, n); });
}

// A plan at a budget a quarter of the way from the minimum to keep-everything (recomputes).
ExecutionPlan budgeted(const Graph& g, Backend& be, const std::string& strategy) {
  auto ws = [&](NodeId n) { return node_workspace_bytes(g, registry(), be, n); };
  GraphProblem gp = problem_from_graph(g, flops_costs(g, registry(), ws));
  const int64_t lo = problem_min_budget(gp.problem), hi = keep_all(g, be).predicted_peak;
  for (int64_t budget = lo + (hi - lo) / 4; budget < hi; budget += (hi - lo) / 8) {
    SolveOptions so;
    so.time_limit_seconds = 3;
    SolveResult r = solve(gp.problem, strategy, budget, so);
    if (r.feasible) return lower_schedule(g, gp, r.schedule, budget);
  }
  ADD_FAILURE() << strategy << " found no plan below keep-everything";
  return keep_all(g, be);
}

TEST(Accumulate, EachGradientWriterIsFollowedByItsAccumulateNode) {
  const ModelConfig cfg = zoo("gpt2_tiny");
  const Graph one = training_graph(cfg, 2, 1), three = training_graph(cfg, 2, 3);
  EXPECT_EQ(one.micro_batches, 1);
  EXPECT_EQ(three.micro_batches, 3);
  int written = 0;
  for (const Value& v : one.values) written += v.kind == ValueKind::ParamGrad && v.producer >= 0;
  ASSERT_GT(written, 0);
  EXPECT_EQ(planned_nodes(three), planned_nodes(one) + written);
  int checked = 0;
  for (const Value& v : three.values) {
    if (v.kind != ValueKind::ParamGrad || v.producer < 0) continue;
    const Node& acc = three.node(v.producer);
    ASSERT_EQ(acc.op, "grad_accumulate") << v.name;
    EXPECT_EQ(acc.name, v.name + "_accumulate");
    ASSERT_EQ(acc.inputs.size(), 1u);
    const Value& micro = three.value(acc.inputs[0]);
    EXPECT_EQ(micro.name, v.name + ".micro");
    EXPECT_EQ(micro.kind, ValueKind::Activation);
    EXPECT_EQ(micro.desc.shape, v.desc.shape);
    EXPECT_EQ(micro.producer, v.producer - 1) << "the micro-batch gradient lives one node";
    ++checked;
  }
  EXPECT_EQ(checked, written);
  // The count survives the graph file.
  const Graph back = graph_from_json_text(graph_to_json_text(three), registry(), "three.json");
  EXPECT_EQ(back.micro_batches, 3);
  EXPECT_EQ(back.nodes.size(), three.nodes.size());
}

TEST(Accumulate, OutOfRangeCountsAreErrors) {
  Graph g = training_graph(zoo("small_cnn"), 2, 1);
  for (int k : {0, -1, kMaxMicroBatches + 1}) {
    try {
      Graph copy = g;
      add_gradient_accumulation(copy, registry(), k);
      ADD_FAILURE() << k << " accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("micro-batches per step is not in [1, "),
                std::string::npos)
          << e.what();
    }
  }
  try {
    parse_model_config("name: m\ninput: [1, 4, 4]\nclasses: 2\nbatch: 2\naccumulate: 0\n"
                       "layers:\n  - {name: f, op: flatten}\n  - {name: d, op: dense, units: 2}\n",
                       "m.yaml");
    ADD_FAILURE() << "accumulate: 0 accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("m.yaml:5:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("accumulate"), std::string::npos) << e.what();
  }
}

// One step of K micro-batches against K separate steps of one micro-batch each (the same
// weights before each): every parameter gradient is (g_0 + g_1 + ... + g_{K-1}) * float(1/K),
// summed in that order, bit for bit; the step's loss is the mean of theirs; the measured peak is
// the plan's. (Gradient clipping, which rescales the gradients it reads in place after the
// accumulation, is off: the test reads the gradients after the step.)
void expect_sum_of_micro_batches(const std::string& config, int64_t batch, int k,
                                 const std::string& strategy) {
  SCOPED_TRACE(config + " batch " + std::to_string(batch) + " x " + std::to_string(k) + ", " +
               strategy);
  const ModelConfig cfg =
      zoo(config, config == "gpt2_tiny" ? std::vector<std::string>{"optimizer.clip_norm=0"}
                                        : std::vector<std::string>{});
  const Graph acc = training_graph(cfg, batch, k), one = training_graph(cfg, batch, 1);
  std::unique_ptr<Backend> be = make_cpu_backend();
  const Batch data = data_of(cfg, acc, batch * k);
  const size_t x_per = data.x.size() / static_cast<size_t>(k),
               y_per = data.y.size() / static_cast<size_t>(k);

  const ExecutionPlan plan = strategy == "all-keep" ? keep_all(acc, *be) : budgeted(acc, *be, strategy);
  Executor ex(acc, registry(), *be, ExecutorOptions{MemoryMode::Arena, plan.predicted_peak * 2});
  ex.init_parameters(cfg.seed);
  const StepResult r = ex.run_step(plan, data.x.data(), data.y.data(), 0);
  EXPECT_EQ(r.peak_bytes, plan.predicted_peak);
  if (strategy != "all-keep") {
    EXPECT_GT(r.recomputes, 0) << "the budgeted plan recomputes nothing";
  }
  const auto got = gradients(ex, acc);

  const ExecutionPlan plan1 = keep_all(one, *be);
  Executor ex1(one, registry(), *be);
  std::map<std::string, std::vector<float>> want;
  double losses = 0;
  for (int m = 0; m < k; ++m) {
    ex1.init_parameters(cfg.seed);
    losses += ex1.run_step(plan1, data.x.data() + x_per * m, data.y.data() + y_per * m, 0).loss;
    for (auto& [name, g] : gradients(ex1, one)) {
      std::vector<float>& sum = want[name];
      if (m == 0) sum = g;
      else
        for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
    }
  }
  const float scale = static_cast<float>(1.0 / k);
  ASSERT_EQ(got.size(), want.size());
  for (auto& [name, sum] : want) {
    for (float& v : sum) v *= scale;
    const std::vector<float>& g = got.at(name);
    ASSERT_EQ(g.size(), sum.size()) << name;
    size_t differ = 0;
    for (size_t i = 0; i < g.size(); ++i) differ += std::memcmp(&g[i], &sum[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << name << ": " << differ << " of " << g.size() << " elements differ";
  }
  EXPECT_EQ(r.loss, static_cast<float>(losses / k));
}

TEST(Accumulate, TheGradientIsTheMeanOfTheMicroBatchesBitForBit) {
  expect_sum_of_micro_batches("gpt2_tiny", 2, 2, "all-keep");  // layer norm, tied embeddings
  expect_sum_of_micro_batches("gpt2_tiny", 1, 3, "checkmate");
  expect_sum_of_micro_batches("small_cnn", 4, 3, "all-keep");  // batch norm per micro-batch
  expect_sum_of_micro_batches("small_cnn", 4, 2, "chen-greedy");
}

// One step of K = 2 micro-batches of N = 4 against one batch of 8 (an MLP: no batch norm, and
// every weight-gradient element is a sum over the samples of one product each). The two runs
// add the same L = 8 terms t_n (the per-sample gradients, scaled by powers of two, exactly) in
// different orders, and a sum of L terms computed in any order is within gamma_{L-1} sum |t_n|
// of the exact sum (gamma_m = m u / (1 - m u), u = 2^-24; Higham, Accuracy and Stability of
// Numerical Algorithms, 4.2). So |accumulated - batch| <= 2 gamma_L sum_n |t_n| per element,
// with sum_n |t_n| from the per-sample gradients (batch 1, summed on the host in double). The
// losses are means of 8 positive terms: within 2 gamma_L of each other, relatively.
TEST(Accumulate, EqualsOneBatchKTimesLargerWithinTheReorderingBound) {
  const std::string yaml =
      "name: mlp\ninput: [2, 4, 4]\nclasses: 5\nbatch: 4\nseed: 3\n"
      "layers:\n"
      "  - {name: flat, op: flatten}\n"
      "  - {name: fc1, op: dense, units: 16, activation: relu}\n"
      "  - {name: fc2, op: dense, units: 5}\n";
  const ModelConfig cfg = parse_model_config(yaml, "mlp.yaml");
  constexpr int K = 2, N = 4, L = K * N;
  const Graph acc = training_graph(cfg, N, K), big = training_graph(cfg, L, 1),
              single = training_graph(cfg, 1, 1);
  std::unique_ptr<Backend> be = make_cpu_backend();
  const Batch data = data_of(cfg, big, L);

  auto one_step = [&](const Graph& g, const uint32_t* x, const int32_t* y, float* loss) {
    Executor ex(g, registry(), *be);
    ex.init_parameters(cfg.seed);
    *loss = ex.run_step(keep_all(g, *be), x, y, 0).loss;
    return gradients(ex, g);
  };
  float loss_acc = 0, loss_big = 0, loss_one = 0;
  const auto g_acc = one_step(acc, data.x.data(), data.y.data(), &loss_acc);
  const auto g_big = one_step(big, data.x.data(), data.y.data(), &loss_big);
  std::map<std::string, std::vector<double>> abs_terms;  // sum_n |t_n| per element
  const size_t x_per = data.x.size() / L, y_per = data.y.size() / L;
  for (int n = 0; n < L; ++n)
    for (const auto& [name, g] : one_step(single, data.x.data() + x_per * n,
                                          data.y.data() + y_per * n, &loss_one)) {
      std::vector<double>& s = abs_terms[name];
      s.resize(g.size());
      for (size_t i = 0; i < g.size(); ++i) s[i] += std::fabs(g[i]) / L;
    }
  const double u = std::ldexp(1.0, -24), gamma = L * u / (1 - L * u);
  int compared = 0, differing = 0;
  for (const auto& [name, a] : g_acc) {
    const std::vector<float>& b = g_big.at(name);
    const std::vector<double>& s = abs_terms.at(name);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_LE(std::fabs(static_cast<double>(a[i]) - b[i]), 2 * gamma * s[i])
          << name << "[" << i << "]: " << a[i] << " vs " << b[i] << ", sum |t| " << s[i];
      ++compared;
      differing += a[i] != b[i];
    }
  }
  EXPECT_GT(compared, 100);
  EXPECT_LE(std::fabs(loss_acc - loss_big), 2 * gamma * loss_big) << loss_acc << " vs " << loss_big;
  std::printf("%d of %d gradient elements differ in their last bits (summation order)\n",
              differing, compared);
}

TEST(Accumulate, APlanThatRecomputesAnAccumulateNodeIsRefused) {
  const ModelConfig cfg = zoo("small_cnn");
  const Graph g = training_graph(cfg, 2, 2);
  std::unique_ptr<Backend> be = make_cpu_backend();
  ExecutionPlan plan = keep_all(g, *be);
  // Run the first accumulate node a second time, right after its first run.
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& s = plan.steps[i];
    if (s.kind == PlanStepKind::Compute && g.node(s.node).op == "grad_accumulate") {
      PlanStep again = s;
      again.recompute = true;
      plan.steps.insert(plan.steps.begin() + static_cast<long>(i) + 1, again);
      break;
    }
  }
  Executor ex(g, registry(), *be);
  ex.init_parameters(cfg.seed);
  const Batch data = data_of(cfg, g, 4);
  try {
    ex.run_step(plan, data.x.data(), data.y.data(), 0);
    ADD_FAILURE() << "a second accumulation ran";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("which writes the persistent"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace remat
