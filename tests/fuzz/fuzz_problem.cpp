// libFuzzer harness: remat-problem/1 JSON, then what tools compute from a problem before they
// solve (minimum budget, all-keep total, rescaling to another batch, the all-keep simulation).
#include "solver/problem.h"
#include "solver/schedule.h"
#include "solver/strategies.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace remat;
  fuzz::user_errors_only([&] {
    const Problem p = problem_from_json_text(fuzz::as_text(data, size), "fuzz.json");
    problem_min_budget(p);
    problem_total_bytes(p);
    problem_at_batch(p, 2 * p.batch + 1);
    if (p.size() <= 64) simulate(p, *solve_all_keep(p));
  });
  return 0;
}
