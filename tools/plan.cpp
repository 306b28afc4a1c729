// plan: solves a rematerialization problem at a budget with one or all strategies, prints a
// comparison table (or JSON lines), and optionally writes the chosen schedule.
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "runtime/check.h"
#include "solver/baselines.h"
#include "solver/strategies.h"
#include "tools/cli.h"
#include "tools/problem_flags.h"

namespace remat {
namespace {

struct ProgressLine {
  std::string strategy;
  bool printed = false;
};

// The live "\r" line while the MILP runs (SolveOptions::progress).
void print_progress(double elapsed, double incumbent, double bound, void* user) {
  auto* line = static_cast<ProgressLine*>(user);
  char inc[32] = "-", gap[32] = "-";
  if (incumbent >= 0 && incumbent < 1e40) {  // solvers report "none" as < 0 or as +huge
    std::snprintf(inc, sizeof inc, "%.6g", incumbent);
    if (incumbent > 0) std::snprintf(gap, sizeof gap, "%.2f%%", 100 * (incumbent - bound) / incumbent);
  }
  std::fprintf(stderr, "\r  %s: %7.1fs  incumbent %s  bound %.6g  gap %s      ",
               line->strategy.c_str(), elapsed, inc, bound, gap);
  std::fflush(stderr);
  line->printed = true;
}

std::string status_of(const SolveResult& r) {
  if (!r.feasible) return r.message.empty() ? "infeasible" : r.message;
  return r.schedule.status.empty() ? "ok" : r.schedule.status;
}

int run(int argc, char** argv) {
  FlagParser flags("plan", "Solve a rematerialization problem at a memory budget.");
  add_problem_flags(flags);
  flags.add("budget", "BYTES", "memory budget, constant bytes included (e.g. 15GB)");
  add_solve_flags(flags);
  flags.add("output", "FILE", "write the chosen schedule (remat-schedule/1 JSON)")
      .alias("-o", "output")
      .add("json", "", "one JSON object per strategy instead of a table");
  if (!flags.parse(argc, argv)) return 0;
  if (!flags.has("budget")) REMAT_USER_ERROR("plan: --budget is required");
  const Problem p = problem_from_flags(flags);
  const int64_t budget = flags.get_bytes("budget");
  const std::vector<std::string> strategies = strategies_from_flags(flags);
  SolveOptions opt = solve_options_from_flags(flags);
  const bool json = flags.has("json");
  if (json && !flags.has("log-level")) opt.log_level = 0;
  ProgressLine line;
  if (opt.log_level >= 1) {
    opt.progress = print_progress;
    opt.progress_user = &line;
  }
  solve_check_budget(p, budget);
  const double keep_cost = simulate(p, all_keep_schedule(p)).total_cost;

  if (!json) {
    std::printf("problem %s: %d nodes, constant %s, minimum budget %s, budget %s\n",
                p.name.c_str(), p.size(), format_bytes(p.constant_bytes).c_str(),
                format_bytes(problem_min_budget(p)).c_str(), format_bytes(budget).c_str());
    std::printf("%-20s %-8s %14s %9s %12s %9s %8s  %s\n", "strategy", "feasible", "cost",
                "overhead", "peak", "time(s)", "gap", "status");
  }
  std::optional<SolveResult> chosen;
  for (const std::string& name : strategies) {
    line.strategy = name;
    line.printed = false;
    SolveResult r = solve(p, name, budget, opt);
    if (line.printed) std::fprintf(stderr, "\n");
    const double cost = r.feasible ? r.sim.total_cost : 0;
    const double overhead = r.feasible && keep_cost > 0 ? cost / keep_cost : 0;
    if (json) {
      nlohmann::json j = {{"strategy", name},          {"feasible", r.feasible},
                          {"cost", cost},              {"overhead", overhead},
                          {"peak_bytes", r.feasible ? r.sim.peak_bytes : 0},
                          {"solve_seconds", r.solve_seconds},
                          {"gap", r.gap},              {"status", status_of(r)}};
      std::printf("%s\n", j.dump().c_str());
    } else if (r.feasible) {
      std::printf("%-20s %-8s %14.6g %8.3fx %12s %9.3f %7.2f%%  %s\n", name.c_str(), "yes", cost,
                  overhead, format_bytes(r.sim.peak_bytes).c_str(), r.solve_seconds,
                  100 * r.gap, status_of(r).c_str());
    } else {
      std::printf("%-20s %-8s %14s %9s %12s %9.3f %8s  %s\n", name.c_str(), "no", "-", "-", "-",
                  r.solve_seconds, "-", status_of(r).c_str());
    }
    std::fflush(stdout);
    bool better = r.feasible && (!chosen || r.sim.total_cost < chosen->sim.total_cost);
    if (better || (strategies.size() == 1 && !chosen)) chosen = std::move(r);
  }
  if (flags.has("output")) {
    if (!chosen || !chosen->feasible)
      REMAT_USER_ERROR("plan: no feasible schedule at budget " << budget
                                                              << " bytes; nothing written to "
                                                              << flags.get("output"));
    schedule_save(chosen->schedule, flags.get("output"), &chosen->sim);
    if (!json)
      std::printf("wrote %s (%s)\n", flags.get("output").c_str(), chosen->strategy.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace remat

int main(int argc, char** argv) {
  return remat::run_main([&] { return remat::run(argc, argv); });
}
