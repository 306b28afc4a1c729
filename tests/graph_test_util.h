// Helpers for tests of training graphs: counting a graph's nodes of one op, and the small CNN's
// training graph with its keep-everything plan for tests that edit plans.
#pragma once

#include <cstdint>
#include <string>

#include "models/build.h"
#include "models/config.h"
#include "ops/registry.h"
#include "runtime/graph/autodiff.h"
#include "runtime/memory/plan.h"
#include "tests/source_dir.h"

namespace remat::test {

inline int count_op(const Graph& g, const std::string& op) {
  int k = 0;
  for (const Node& n : g.nodes) k += n.op == op;
  return k;
}

// configs/small_cnn.yaml's training graph at batch 2 and its keep-everything plan (workspace
// not counted).
struct SmallCnnGraph {
  OpRegistry ops = make_builtin_registry();
  Graph g;
  ExecutionPlan plan;
  SmallCnnGraph() {
    const ModelConfig cfg = load_model_config(test_source_dir() + "/configs/small_cnn.yaml");
    BuildOptions bo;
    bo.batch = 2;
    g = make_training_graph(build_forward_graph(cfg, ops, bo), ops, cfg.optimizer.op,
                            cfg.optimizer.attrs);
    plan = plan_keep_all(g, [](NodeId) { return int64_t{0}; });
  }
};

}  // namespace remat::test
