// maxbatch: the largest batch whose schedule fits a memory budget, per strategy.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "runtime/check.h"
#include "solver/strategies.h"
#include "tools/cli.h"
#include "tools/problem_flags.h"

namespace remat {
namespace {

int run(int argc, char** argv) {
  FlagParser flags("maxbatch", "Find the largest batch that trains within a memory budget.");
  add_problem_flags(flags);
  flags.add("budget", "BYTES", "memory budget, constant bytes included (e.g. 15GB)");
  add_solve_flags(flags);
  flags.add("json", "", "one JSON object per strategy instead of a table");
  if (!flags.parse(argc, argv)) return 0;
  if (!flags.has("budget")) REMAT_USER_ERROR("maxbatch: --budget is required");
  const Problem p = problem_from_flags(flags);
  const int64_t budget = flags.get_bytes("budget");
  SolveOptions opt = solve_options_from_flags(flags);
  const bool json = flags.has("json");
  if (json && !flags.has("log-level")) opt.log_level = 0;
  if (!json)
    std::printf("%-20s %10s %12s %9s  %s\n", "strategy", "batch", "upper bound", "time(s)",
                "status");
  for (const std::string& name : strategies_from_flags(flags)) {
    MaxBatchResult r = max_batch(p, name, budget, opt);
    if (json) {
      nlohmann::json j = {{"strategy", name},       {"batch", r.batch},
                          {"upper_bound", r.upper_bound}, {"solve_seconds", r.solve_seconds},
                          {"status", r.status}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%-20s %10lld %12lld %9.3f  %s\n", name.c_str(),
                  static_cast<long long>(r.batch), static_cast<long long>(r.upper_bound),
                  r.solve_seconds, r.status.c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace remat

int main(int argc, char** argv) {
  return remat::run_main([&] { return remat::run(argc, argv); });
}
