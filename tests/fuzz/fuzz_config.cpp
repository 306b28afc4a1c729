// libFuzzer harness: a YAML model config through the whole front end (parse, forward graph,
// training graph with its size checks, FLOPs costs, the rematerialization problem). Configs of
// more than kMaxBuiltLayers layers are only parsed: building ResNet-50's training graph takes
// seconds under ASan, and mutations of it would starve the rest.
#include "runtime/core/checked.h"
#include "solver/problem.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace remat;
  static const OpRegistry ops = make_builtin_registry();
  fuzz::user_errors_only([&] {
    const ModelConfig cfg = parse_model_config(fuzz::as_text(data, size), "fuzz.yaml");
    constexpr size_t kMaxBuiltLayers = 64;
    if (cfg.layers.size() > kMaxBuiltLayers) return;
    const Graph fwd = build_forward_graph(cfg, ops, {});
    const Graph g = make_training_graph(fwd, ops, cfg.optimizer.op, cfg.optimizer.attrs);
    const GraphProblem gp = problem_from_graph(g, flops_costs(g, ops));
    problem_min_budget(gp.problem);
  });
  return 0;
}
