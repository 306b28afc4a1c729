// Batch norm with a fused activation (Note [batchnorm activation] in ops/batchnorm.cpp) and the
// builder's `fuse: batchnorm_relu` (Note [batchnorm + relu fusion] in
// models/batchnorm_relu_fusion.cpp): which pairs fuse (a batchnorm read only by a relu or relu6
// layer) and which do not; the fused graph has one node and one value fewer per pair, the same
// parameters, and trains bit for bit as the graph as written, in fp32 and bf16, channels-first and
// channels-last, keeping everything and under a budget that recomputes; a bad `fuse` value names
// its line.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "models/build.h"
#include "models/config.h"
#include "models/data.h"
#include "ops/registry.h"
#include "runtime/backends/backend.h"
#include "runtime/core/check.h"
#include "runtime/executor.h"
#include "tests/graph_test_util.h"
#include "runtime/graph/autodiff.h"
#include "tests/halfway_plan.h"
#include "tests/source_dir.h"

namespace remat {
namespace {

using test::count_op;

const OpRegistry& registry() {
  static const OpRegistry r = make_builtin_registry();
  return r;
}

ModelConfig config(const std::string& name, std::vector<std::string> overrides) {
  return load_model_config(test_source_dir() + "/configs/" + name + ".yaml", overrides);
}

// Losses of `steps` steps and every parameter after them.
struct TrainRun {
  std::vector<float> losses;
  std::vector<std::vector<float>> params;
  std::vector<std::string> param_names;
};

TrainRun train(const ModelConfig& cfg, const BuildOptions& bo, bool budgeted, int steps) {
  const OpRegistry& ops = registry();
  const Graph g = make_training_graph(build_forward_graph(cfg, ops, bo), ops, cfg.optimizer.op,
                                      cfg.optimizer.attrs);
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  const ExecutionPlan plan = halfway_plan(g, ops, *cpu, budgeted ? "checkmate" : "keep");
  Executor ex(g, ops, *cpu, ExecutorOptions{MemoryMode::Arena, plan.predicted_peak * 2});
  ex.init_parameters(cfg.seed);
  const TensorDesc& in = g.value(g.input).desc;
  const TensorDesc& lab = g.value(g.label).desc;
  auto data = make_data_source(cfg, in, lab, "");
  std::vector<uint8_t> x(static_cast<size_t>(in.bytes()));
  std::vector<int32_t> y(static_cast<size_t>(lab.numel()));
  TrainRun r;
  for (int s = 0; s < steps; ++s) {
    data->next_batch(s, x.data(), y.data());
    const StepResult res = ex.run_step(plan, x.data(), y.data(), s);
    EXPECT_EQ(res.peak_bytes, plan.predicted_peak) << "step " << s;
    r.losses.push_back(res.loss);
  }
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].kind == ValueKind::Param) {
      r.param_names.push_back(g.values[v].name);
      r.params.push_back(ex.read(static_cast<ValueId>(v)));
    }
  return r;
}

void expect_bit_identical(const TrainRun& a, const TrainRun& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&a.losses[i], &b.losses[i], sizeof(float)), 0)
        << "step " << i << ": " << a.losses[i] << " vs " << b.losses[i];
  ASSERT_EQ(a.param_names, b.param_names);
  for (size_t k = 0; k < a.params.size(); ++k) {
    ASSERT_EQ(a.params[k].size(), b.params[k].size());
    EXPECT_EQ(std::memcmp(a.params[k].data(), b.params[k].data(), a.params[k].size() * 4), 0)
        << a.param_names[k];
  }
}

TEST(BnReluFusion, PairsFuseIntoOneNodeWithTheSameParameters) {
  const std::vector<std::string> fuse = {"fuse=batchnorm_relu"};
  // small_cnn: two batchnorm -> relu pairs; mobilenet: batchnorm -> relu6 throughout.
  for (const char* name : {"small_cnn", "mobilenet", "resnet50"}) {
    SCOPED_TRACE(name);
    BuildOptions bo;
    bo.batch = 2;
    bo.input = Shape{3, 32, 32};
    const Graph plain = build_forward_graph(config(name, {}), registry(), bo);
    const Graph fused = build_forward_graph(config(name, fuse), registry(), bo);
    int pairs = 0;
    for (const Node& n : fused.nodes)
      if (n.op == "batchnorm" && n.attrs.has("activation")) ++pairs;
    EXPECT_GT(pairs, 0);
    EXPECT_EQ(fused.nodes.size() + pairs, plain.nodes.size());
    EXPECT_EQ(fused.values.size() + pairs, plain.values.size());
    EXPECT_EQ(count_op(fused, "relu") + count_op(fused, "relu6") + pairs,
              count_op(plain, "relu") + count_op(plain, "relu6"));
    EXPECT_EQ(fused.persistent_bytes(), plain.persistent_bytes());
    // No relu is left reading a batchnorm that only it reads.
    const std::vector<std::vector<NodeId>> users = fused.users();
    for (const Node& n : fused.nodes) {
      if (n.op != "relu" && n.op != "relu6") continue;
      const NodeId p = fused.value(n.inputs[0]).producer;
      if (p >= 0 && fused.node(p).op == "batchnorm") {
        EXPECT_GT(users[static_cast<size_t>(n.inputs[0])].size(), 1u) << n.name;
      }
    }
  }
  BuildOptions bo;
  bo.batch = 2;
  bo.input = Shape{3, 32, 32};
  const Graph r50 = build_forward_graph(config("resnet50", fuse), registry(), bo);
  int r50_pairs = 0;
  for (const Node& n : r50.nodes) r50_pairs += n.op == "batchnorm" && n.attrs.has("activation");
  EXPECT_EQ(r50_pairs, 33);  // each bottleneck's first two (16 x 2) and the stem's
}

TEST(BnReluFusion, WhatElseReadsTheBatchNormKeepsThePair) {
  const std::string head =
      "name: m\ninput: [3, 8, 8]\nclasses: 3\nbatch: 4\nfuse: batchnorm_relu\n"
      "layers:\n  - {name: c, op: conv2d, filters: 4, kernel: 3}\n";
  const std::string tail = "  - {name: f, op: flatten}\n  - {name: d, op: dense, units: 3}\n";
  auto build = [&](const std::string& layers) {
    return build_forward_graph(parse_model_config(head + layers + tail, "m.yaml"), registry());
  };
  // Read twice: by the relu and by an add.
  const Graph two = build(
      "  - {name: bn, op: batchnorm}\n  - {name: r, op: relu}\n"
      "  - {name: s, op: add, inputs: [bn, r]}\n");
  EXPECT_NE(two.find_node("r"), -1);
  EXPECT_FALSE(two.node(two.find_node("bn")).attrs.has("activation"));
  // A batchnorm with its own activation, and an add before the relu (small_dag's residual).
  const Graph own =
      build("  - {name: bn, op: batchnorm, activation: relu6}\n  - {name: r, op: relu}\n");
  EXPECT_NE(own.find_node("r"), -1);
  const Graph add = build(
      "  - {name: bn, op: batchnorm}\n  - {name: s, op: add, inputs: [bn, c]}\n"
      "  - {name: r, op: relu}\n");
  EXPECT_NE(add.find_node("r"), -1);
  // The relu named later resolves to the fused node; a relu as the last layer feeds the loss.
  const Graph named = build(
      "  - {name: bn, op: batchnorm}\n  - {name: r, op: relu}\n"
      "  - {name: p, op: maxpool, kernel: 2, inputs: [r]}\n");
  EXPECT_EQ(named.find_node("r"), -1);
  EXPECT_EQ(named.node(named.find_node("p")).inputs[0], named.find_value("bn"));
  // Without the key nothing fuses.
  const ModelConfig plain = parse_model_config(
      "name: m\ninput: [3, 8, 8]\nclasses: 3\nbatch: 4\nlayers:\n"
      "  - {name: bn, op: batchnorm}\n  - {name: r, op: relu}\n" +
          tail,
      "m.yaml");
  EXPECT_NE(build_forward_graph(plain, registry()).find_node("r"), -1);
}

TEST(BnReluFusion, ABadValueNamesItsLine) {
  try {
    parse_model_config(
        "name: m\ninput: [3, 8, 8]\nclasses: 3\nbatch: 4\nfuse: bn_relu\nlayers:\n"
        "  - {name: d, op: dense, units: 3}\n",
        "m.yaml");
    FAIL() << "fuse: bn_relu was accepted";
  } catch (const UserError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("m.yaml:5"), std::string::npos) << w;
    EXPECT_NE(w.find("batchnorm_relu"), std::string::npos) << w;
  }
}

// small_cnn (relu) and mobilenet (relu6) train bit for bit as written, in fp32 and bf16, and
// channels-last; keeping everything and under a budget that recomputes the fused nodes.
TEST(BnReluFusion, TrainsBitForBitAsTheGraphAsWritten) {
  struct Case {
    const char* model;
    std::vector<std::string> overrides;
    bool budgeted;
  };
  const std::vector<Case> cases = {
      {"small_cnn", {}, false},
      {"small_cnn", {}, true},
      {"small_cnn", {"precision=bf16"}, true},
      {"small_cnn", {"layout=channels_last", "precision=bf16"}, false},
      {"mobilenet", {"precision=bf16"}, true},
  };
  for (const Case& c : cases) {
    std::string what = std::string(c.model) + (c.budgeted ? " under a budget" : " keeping all");
    for (const std::string& o : c.overrides) what += " " + o;
    SCOPED_TRACE(what);
    BuildOptions bo;
    bo.batch = 4;
    if (std::string(c.model) == "mobilenet") bo.input = Shape{3, 32, 32};
    std::vector<std::string> fused = c.overrides;
    fused.push_back("fuse=batchnorm_relu");
    const TrainRun a = train(config(c.model, c.overrides), bo, c.budgeted, 3);
    const TrainRun b = train(config(c.model, fused), bo, c.budgeted, 3);
    expect_bit_identical(a, b);
    ASSERT_EQ(a.losses.size(), 3u);
    EXPECT_NE(a.losses[0], a.losses[2]);  // it trains
  }
}

}  // namespace
}  // namespace remat
