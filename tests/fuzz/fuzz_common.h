// Shared by the libFuzzer harnesses: the model plans and cost tables are resolved against
// (configs/small_dag.yaml at batch 4, the graph of tests/data/small_dag_b4.json), and the
// harnesses' oracle: a UserError is a clear refusal; any other exception escapes, so libFuzzer
// reports it as a crash, like a sanitizer finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "models/build.h"
#include "models/config.h"
#include "ops/registry.h"
#include "runtime/graph/autodiff.h"
#include "runtime/core/check.h"
#include "solver/from_graph.h"

namespace remat::fuzz {

struct SmallDag {
  OpRegistry ops = make_builtin_registry();
  Graph g;
  GraphProblem gp;
  SmallDag() {
    const ModelConfig cfg = load_model_config(std::string(REMAT_SOURCE_DIR) + "/configs/small_dag.yaml");
    BuildOptions bo;
    bo.batch = 4;
    g = make_training_graph(build_forward_graph(cfg, ops, bo), ops, cfg.optimizer.op,
                            cfg.optimizer.attrs);
    gp = problem_from_graph(g, flops_costs(g, ops));
  }
};

// Built on first use and kept for the whole run (a harness calls it for every input).
inline const SmallDag& small_dag() {
  static const SmallDag m;
  return m;
}

inline std::string as_text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

template <typename F>
void user_errors_only(F&& f) {
  try {
    f();
  } catch (const UserError&) {
  }
}

}  // namespace remat::fuzz
