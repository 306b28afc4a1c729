// The fused attention op (ops/attention.cpp, Note [fused attention]): equal to the written-out
// composition it replaces (matmul with scale, softmax, matmul) in values and gradients, dropout
// that replays, its errors, and configs/gpt2_fused.yaml: GPT-2's parameters without any T x T
// value, less memory than configs/gpt2.yaml keeping everything, a CPU step whose measured peak is
// the predicted one, and recomputation under a budget that reproduces keep-everything's losses
// bit for bit. (Finite differences and the CUDA comparison: the transformer cases of
// tests/op_cases.h.)
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "models/build.h"
#include "models/config.h"
#include "models/data.h"
#include "ops/registry.h"
#include "runtime/backends/backend.h"
#include "runtime/executor.h"
#include "runtime/graph/autodiff.h"
#include "runtime/memory/plan.h"
#include "solver/from_graph.h"
#include "solver/strategies.h"
#include "tests/op_harness.h"
#include "tests/op_test_util.h"
#include "tests/source_dir.h"

namespace remat {
namespace {

using Floats = std::vector<float>;

const OpRegistry& registry() {
  static const OpRegistry r = make_builtin_registry();
  return r;
}

Floats random_values(size_t n, uint32_t seed) {
  Floats v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i * 31 + seed * 7 + 1)));
  return v;
}

// Every element within FP32 roundoff of the written-out result: the fused op sums in double and
// rounds once; the written-out ops round scores and probabilities to FP32 on the way (a few
// units of 2^-24 relative each, times the T-term sums): 1e-5 of the values' scale.
void expect_close(const Floats& want, const Floats& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(want[i], got[i], 1e-5 * (1.0 + std::fabs(want[i]))) << what << " element " << i;
}

struct Shape4 {
  int64_t n, h, t, d;
  size_t count() const { return static_cast<size_t>(n * h * t * d); }
};

void fused_equals_written_out(const Shape4& s, bool causal, double scale) {
  const Floats q = random_values(s.count(), 1), k = random_values(s.count(), 2),
               v = random_values(s.count(), 3), dout = random_values(s.count(), 4);
  auto x = [&] { return f32({s.n, s.h, s.t, s.d}); };
  // Written out: scores = scale q k^T, probs = softmax(scores), out = probs v.
  OpHarness scores(registry(), {"matmul", attr_map({{"transpose_b", true}, {"scale", scale}}), {x(), x()}});
  scores.set_input(0, q);
  scores.set_input(1, k);
  const Floats s_val = scores.forward();
  OpHarness probs(registry(), {"softmax", attr_map({{"causal", causal}}), {f32({s.n, s.h, s.t, s.t})}});
  probs.set_input(0, s_val);
  const Floats p_val = probs.forward();
  OpHarness av(registry(), {"matmul", {}, {f32({s.n, s.h, s.t, s.t}), x()}});
  av.set_input(0, p_val);
  av.set_input(1, v);
  const Floats out = av.forward();
  const auto g_av = av.gradients(dout);            // d probs, d v
  const auto g_probs = probs.gradients(g_av[0]);   // d scores
  const auto g_scores = scores.gradients(g_probs[0]);  // d q, d k

  OpHarness fused(registry(), {"attention", attr_map({{"causal", causal}, {"scale", scale}}), {x(), x(), x()}});
  fused.set_input(0, q);
  fused.set_input(1, k);
  fused.set_input(2, v);
  expect_close(out, fused.forward(), "output");
  const auto g = fused.gradients(dout);
  expect_close(g_scores[0], g[0], "dq");
  expect_close(g_scores[1], g[1], "dk");
  expect_close(g_av[1], g[2], "dv");
}

TEST(Attention, EqualsTheWrittenOutOpsCausal) { fused_equals_written_out({2, 3, 7, 4}, true, 0.5); }
TEST(Attention, EqualsTheWrittenOutOpsFull) { fused_equals_written_out({1, 2, 5, 3}, false, -1.3); }
TEST(Attention, EqualsTheWrittenOutOpsRowsLongerThanHeads) {
  fused_equals_written_out({1, 1, 33, 2}, true, 1.0 / std::sqrt(2.0));
}

// Without `scale` the op scales by 1 / sqrt(D), as GPT-2's written-out 0.125 for D = 64.
TEST(Attention, DefaultScaleIsOneOverSqrtD) {
  const OpCase c{"attention", {}, {f32({1, 2, 3, 4}), f32({1, 2, 3, 4}), f32({1, 2, 3, 4})}};
  OpCase explicit_scale = c;
  explicit_scale.attrs = attr_map({{"scale", 0.5}});
  OpHarness a(registry(), c), b(registry(), explicit_scale);
  for (int i = 0; i < 3; ++i) {
    a.set_input(i, random_values(24, i + 5));
    b.set_input(i, random_values(24, i + 5));
  }
  EXPECT_EQ(a.forward(), b.forward());
}

// Dropout: about `rate` of the weights dropped, the same mask on a rerun of the same step, a
// different one at another step, and the gradient's mask the forward's (finite differences in
// tests/op_cases.h's attention_dropout case).
TEST(Attention, DropoutReplaysAndChangesWithTheStep) {
  const OpCase c{"attention", attr_map({{"dropout", 0.5}, {"causal", false}}),
                 {f32({1, 1, 64, 1}), f32({1, 1, 64, 1}), f32({1, 1, 64, 1})}};
  OpHarness h(registry(), c);
  h.set_input(0, Floats(64, 0.0f));  // uniform probabilities 1/64
  h.set_input(1, Floats(64, 0.0f));
  h.set_input(2, Floats(64, 1.0f));  // out_i = (kept keys of row i) * 2 / 64
  const Floats first = h.forward();
  EXPECT_EQ(first, h.forward());
  double mean = 0;
  for (float y : first) mean += y / 64.0;
  EXPECT_NEAR(mean, 1.0, 0.1);  // 64 x 64 keep decisions at rate 0.5, scaled by 2
  for (float y : first) EXPECT_EQ(std::fmod(y * 32.0f, 1.0f), 0.0f) << y;  // whole keys kept
}

TEST(Attention, ErrorsNameTheShapes) {
  EXPECT_HAS(case_error({"attention", {}, {f32({2, 3, 4}), f32({2, 3, 4}), f32({2, 3, 4})}}),
             "attention expects heads [N, H, T, D]");
  EXPECT_HAS(case_error({"attention", {}, {f32({1, 2, 3, 4}), f32({1, 2, 5, 4}), f32({1, 2, 3, 4})}}),
             "attention expects q, k and v of one shape");
  EXPECT_HAS(case_error({"attention", attr_map({{"dropout", 1.0}}),
                         {f32({1, 2, 3, 4}), f32({1, 2, 3, 4}), f32({1, 2, 3, 4})}}),
             "field 'dropout'");
}

// The token layout (Note [attention layouts]): attention on a packed qkv [N, T, 3C] with
// `heads` is, bit for bit, the heads layout on q, k, v split out of it, its output merged back
// and its three gradients packed side by side (the same double sums in the same order, the
// same dropout numbering).
TEST(Attention, PackedQkvEqualsTheHeadsLayoutBitForBit) {
  const int64_t n = 2, t = 6, h = 3, d = 4, c = h * d;
  for (bool causal : {true, false}) {
    const AttrMap heads_attrs = attr_map({{"causal", causal}, {"dropout", 0.25}});
    AttrMap packed_attrs = heads_attrs;
    packed_attrs.values["heads"] = h;
    const Floats qkv = random_values(static_cast<size_t>(n * t * 3 * c), 9);
    const Floats dout = random_values(static_cast<size_t>(n * t * c), 10);
    // [N, H, T, D] element of part p (0 q, 1 k, 2 v) and the token tensor's index of it.
    auto token_at = [&](int64_t s, int64_t i, int64_t p, int64_t hh, int64_t e, int64_t width) {
      return static_cast<size_t>((s * t + i) * width + p * c + hh * d + e);
    };
    auto heads_at = [&](int64_t s, int64_t hh, int64_t i, int64_t e) {
      return static_cast<size_t>(((s * h + hh) * t + i) * d + e);
    };
    std::vector<Floats> parts(3, Floats(static_cast<size_t>(n * h * t * d)));
    Floats dout_heads(parts[0].size());
    for (int64_t s = 0; s < n; ++s)
      for (int64_t hh = 0; hh < h; ++hh)
        for (int64_t i = 0; i < t; ++i)
          for (int64_t e = 0; e < d; ++e) {
            for (int p = 0; p < 3; ++p)
              parts[p][heads_at(s, hh, i, e)] = qkv[token_at(s, i, p, hh, e, 3 * c)];
            dout_heads[heads_at(s, hh, i, e)] = dout[token_at(s, i, 0, hh, e, c)];
          }
    const TensorDesc x = f32({n, h, t, d});
    OpHarness split(registry(), {"attention", heads_attrs, {x, x, x}});
    for (int p = 0; p < 3; ++p) split.set_input(p, parts[p]);
    const Floats out_heads = split.forward();
    const auto g_heads = split.gradients(dout_heads);
    OpHarness packed(registry(), {"attention", packed_attrs, {f32({n, t, 3 * c})}});
    packed.set_input(0, qkv);
    const Floats out = packed.forward();
    const auto g = packed.gradients(dout);
    ASSERT_EQ(out.size(), dout.size());
    ASSERT_EQ(g.size(), 1u);
    ASSERT_EQ(g[0].size(), qkv.size());
    for (int64_t s = 0; s < n; ++s)
      for (int64_t hh = 0; hh < h; ++hh)
        for (int64_t i = 0; i < t; ++i)
          for (int64_t e = 0; e < d; ++e) {
            ASSERT_EQ(out[token_at(s, i, 0, hh, e, c)], out_heads[heads_at(s, hh, i, e)]);
            for (int p = 0; p < 3; ++p)
              ASSERT_EQ(g[0][token_at(s, i, p, hh, e, 3 * c)], g_heads[p][heads_at(s, hh, i, e)])
                  << "gradient " << p << " sample " << s << " head " << hh << " row " << i;
          }
  }
}

TEST(Attention, PackedQkvErrorsNameTheShapes) {
  const AttrMap two_heads = attr_map({{"heads", int64_t{2}}});
  EXPECT_HAS(case_error({"attention", two_heads, {f32({2, 5, 16})}}),
             "attention with heads 2 expects qkv [N, T, 3C]");
  EXPECT_HAS(case_error({"attention", two_heads, {f32({2, 5, 3, 6})}}),
             "attention with heads 2 expects qkv [N, T, 3C]");
  EXPECT_HAS(case_error({"attention", two_heads, {f32({2, 5, 18}), f32({2, 5, 18})}}),
             "attention with heads expects one input");
  EXPECT_HAS(case_error({"attention", {}, {f32({2, 5, 18})}}), "attention expects 3 inputs");
  EXPECT_HAS(case_error({"attention", attr_map({{"heads", int64_t{0}}}), {f32({2, 5, 18})}}),
             "field 'heads'");
}

// ---- configs/gpt2_fused.yaml ----------------------------------------------------------------

ModelConfig load(const std::string& name) {
  return load_model_config(test_source_dir() + "/configs/" + name + ".yaml");
}

Graph training_graph(const ModelConfig& cfg, const BuildOptions& bo = {}) {
  return make_training_graph(build_forward_graph(cfg, registry(), bo), registry(),
                             cfg.optimizer.op, cfg.optimizer.attrs);
}

int64_t param_count(const Graph& g) {
  int64_t n = 0;
  for (const Value& v : g.values)
    if (v.kind == ValueKind::Param) n += v.desc.numel();
  return n;
}

// The same parameters as gpt2.yaml, no value of T x T elements per head, and keep-everything's
// planned peak below the written-out form's by at least the 12 layers' stored probabilities.
TEST(Gpt2Fused, NoSequenceSquaredValuesAndLessMemory) {
  const Graph fused = training_graph(load("gpt2_fused"));
  const Graph written = training_graph(load("gpt2"));
  EXPECT_EQ(param_count(fused), 124439808);
  EXPECT_EQ(param_count(fused), param_count(written));
  const int64_t t = 1024;
  for (const Value& v : fused.values) {
    const Shape& sh = v.desc.shape;
    ASSERT_FALSE(sh.size() >= 2 && sh[sh.size() - 1] == t && sh[sh.size() - 2] == t)
        << v.name << " is a T x T value " << shape_str(sh);
  }
  EXPECT_TRUE(written.find_value("h.0.probs") >= 0);  // the written-out form has them
  auto keep_peak = [](const Graph& g) {
    const Problem p = problem_from_graph(g, flops_costs(g, registry())).problem;
    const SolveResult keep = solve(p, "all-keep", int64_t{1} << 50, {});
    EXPECT_TRUE(keep.feasible);
    return keep.sim.peak_bytes;
  };
  const int64_t probs_bytes = 12 * int64_t{8} * 12 * t * t * 4;  // layers x N H T T floats
  EXPECT_LT(keep_peak(fused), keep_peak(written) - probs_bytes);
}

// gpt2_tiny with the fused op (and attention dropout 0.1) in place of its written-out attention:
// on split q, k, v heads, or (packed) on one c_attn linear's qkv, as configs/gpt2_fused.yaml.
ModelConfig tiny_fused(bool packed = false) {
  std::ifstream f(test_source_dir() + "/configs/gpt2_tiny.yaml");
  std::stringstream text;
  text << f.rdbuf();
  std::string yaml = text.str();
  const std::string written =
      "      - {name: scores, op: matmul, inputs: [q_heads, k_heads], transpose_b: true, scale: 0.25}\n"
      "      - {name: probs, op: softmax, causal: true}\n"
      "      - {name: attended, op: matmul, inputs: [probs, v_heads]}\n";
  const size_t at = yaml.find(written);
  EXPECT_NE(at, std::string::npos) << "configs/gpt2_tiny.yaml's attention changed";
  if (at == std::string::npos) return load("gpt2_tiny");
  yaml.replace(at, written.size(),
               "      - {name: attended, op: attention, inputs: [q_heads, k_heads, v_heads], "
               "causal: true, scale: 0.25, dropout: 0.1}\n");
  if (packed) {
    const size_t from = yaml.find("      - {name: q, op: linear");
    const std::string merged = "      - {name: merged, op: merge_heads}\n";
    const size_t to = yaml.find(merged);
    EXPECT_TRUE(from != std::string::npos && to != std::string::npos && from < to);
    if (from == std::string::npos || to == std::string::npos) return load("gpt2_tiny");
    yaml.replace(from, to + merged.size() - from,
                 "      - {name: c_attn, op: linear, units: 192, init_std: 0.02}\n"
                 "      - {name: attended, op: attention, heads: 4, causal: true, scale: 0.25, "
                 "dropout: 0.1}\n");
  }
  return parse_model_config(yaml, packed ? "gpt2_tiny_packed.yaml" : "gpt2_tiny_fused.yaml");
}

// Three CPU steps keeping everything (first loss about ln V, measured peak = predicted), then
// under budgets that make the plan recompute: the losses equal keep-everything's bit for bit
// (the attention's dropout masks replay).
void cpu_steps_keep_everything_and_recomputing(const ModelConfig& cfg) {
  const Graph g = training_graph(cfg);
  auto run = [&](const std::string& strategy, double fraction, int* recomputes) {
    auto be = make_cpu_backend();
    Executor ex(g, registry(), *be);
    ex.init_parameters(cfg.seed);
    const auto ws = [&](NodeId n) { return ex.workspace_bytes(n); };
    ExecutionPlan plan = plan_keep_all(g, ws);
    if (strategy != "all-keep") {
      const GraphProblem gp = problem_from_graph(g, flops_costs(g, registry(), ws));
      const int64_t lo = problem_min_budget(gp.problem);
      const int64_t budget = lo + static_cast<int64_t>(fraction * (plan.predicted_peak - lo));
      const SolveResult r = solve(gp.problem, strategy, budget, {});
      EXPECT_TRUE(r.feasible) << r.message;
      plan = lower_schedule(g, gp, r.schedule, budget);
    }
    auto data = make_data_source(cfg, g.value(g.input).desc, g.value(g.label).desc, cfg.dir);
    std::vector<float> losses;
    *recomputes = 0;
    const size_t tokens = static_cast<size_t>(g.value(g.input).desc.numel());
    for (int64_t s = 0; s < 3; ++s) {
      std::vector<int32_t> ids(tokens), targets(tokens);
      data->next_batch(s, ids.data(), targets.data());
      const StepResult r = ex.run_step(plan, ids.data(), targets.data(), s);
      EXPECT_EQ(r.peak_bytes, plan.predicted_peak) << strategy;
      *recomputes += r.recomputes;
      losses.push_back(r.loss);
    }
    return losses;
  };
  int none = 0;
  const std::vector<float> keep = run("all-keep", 1.0, &none);
  ASSERT_TRUE(std::isfinite(keep[0]));
  EXPECT_NEAR(keep[0], std::log(static_cast<double>(cfg.vocab)), 1.0);
  EXPECT_EQ(none, 0);
  for (double fraction : {0.3, 0.6}) {
    int some = 0;
    EXPECT_EQ(run("chen-greedy", fraction, &some), keep) << fraction;
    EXPECT_GT(some, 0) << fraction;
  }
}

TEST(Gpt2Fused, CpuStepsKeepEverythingAndRecomputing) {
  cpu_steps_keep_everything_and_recomputing(tiny_fused());
}
// The same with q, k and v packed in one linear (Note [attention layouts]): no split_heads,
// merge_heads or gradient slices in the graph.
TEST(Gpt2Fused, PackedQkvCpuStepsKeepEverythingAndRecomputing) {
  const ModelConfig cfg = tiny_fused(true);
  const Graph g = training_graph(cfg);
  for (const Node& n : g.nodes)
    EXPECT_TRUE(n.op != "split_heads" && n.op != "merge_heads" && n.op != "concat_slice") << n.name;
  cpu_steps_keep_everything_and_recomputing(cfg);
}

}  // namespace
}  // namespace remat
