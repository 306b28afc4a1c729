// libFuzzer harness: remat-costs/1 JSON, matched against small_dag's training graph and turned
// into its problem.
#include "runtime/graph/costs.h"
#include "runtime/profiler.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace remat;
  const fuzz::SmallDag& m = fuzz::small_dag();
  fuzz::user_errors_only([&] {
    const CostTable t = costs_from_json_text(fuzz::as_text(data, size), "fuzz.json");
    std::string why;
    if (!costs_match_graph(t, m.g, &why)) return;
    problem_min_budget(problem_from_graph(m.g, t).problem);
  });
  return 0;
}
