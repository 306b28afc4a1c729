// solve(): the one entry point that dispatches a strategy name, checks the budget against the
// minimum any schedule needs, and replays the result through simulate().
#include <algorithm>
#include <chrono>
#include <sstream>

#include "runtime/memory/allocator.h"
#include "runtime/core/check.h"
#include "solver/griewank.h"
#include "solver/offload.h"
#include "solver/strategies.h"

namespace remat {
namespace {

// The node that sets problem_min_budget, for the error message.
int min_budget_node(const Problem& p, int64_t* working_set) {
  int best = 0;
  int64_t best_ws = -1;
  for (int k = 0; k < p.size(); ++k) {
    const int64_t ws = problem_working_set(p, k);
    if (ws > best_ws) {
      best_ws = ws;
      best = k;
    }
  }
  *working_set = best_ws;
  return best;
}

}  // namespace

void solve_check_budget(const Problem& p, int64_t budget) {
  const int64_t min_budget = problem_min_budget(p);
  if (budget >= min_budget) return;
  int64_t ws = 0;
  int k = min_budget_node(p, &ws);
  REMAT_USER_ERROR("budget " << pool_format_bytes(budget) << " is below the minimum "
                             << pool_format_bytes(min_budget) << " any schedule needs (node '"
                             << p.nodes[k].name << "': constant "
                             << pool_format_bytes(p.constant_bytes) << " + working set "
                             << pool_format_bytes(ws) << ")");
}

const std::vector<std::string>& offload_strategy_names() {
  static const std::vector<std::string> names{"all-keep-offload", "chen-sqrtn-offload",
                                              "greedy-offload", "lp-offload",
                                              "checkmate-offload"};
  return names;
}

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> kNames = {
      "all-keep",           "chen-sqrtn", "chen-sqrtn-linear", "chen-greedy",
      "chen-greedy-linear", "griewank",   "lp",                "checkmate"};
  return kNames;
}

SolveResult solve(const Problem& p, const std::string& strategy, int64_t budget,
                  const SolveOptions& opt) {
  std::vector<std::string> names = strategy_names();
  for (const auto& n : offload_strategy_names()) names.push_back(n);
  if (std::find(names.begin(), names.end(), strategy) == names.end()) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    REMAT_USER_ERROR("unknown strategy '" << strategy << "' (known: " << list << ")");
  }
  solve_check_budget(p, budget);
  SolveResult r;
  r.strategy = strategy;
  const auto start = std::chrono::steady_clock::now();
  std::optional<Schedule> s;
  if (strategy == "all-keep") s = solve_all_keep(p);
  else if (strategy == "chen-sqrtn") s = solve_chen_sqrtn(p, budget, false);
  else if (strategy == "chen-sqrtn-linear") s = solve_chen_sqrtn(p, budget, true);
  else if (strategy == "chen-greedy" || strategy == "chen-greedy-linear")
    s = solve_chen_greedy(p, budget, strategy == "chen-greedy-linear", opt.time_limit_seconds,
                          opt.cost_cap);
  else if (strategy == "griewank") {
    if (!problem_is_chain(p)) r.message = "griewank: not applicable, graph is not a chain";
    else s = solve_griewank(p, budget);
  } else if (strategy == "lp") {
    double bound = 0;
    std::string why;
    if (opt.phase) opt.phase("LP relaxation and rounding", opt.progress_user);
    s = solve_lp_rounding(p, budget, opt, &bound, nullptr, &why);
    if (s && s->lower_bound <= 0) s->lower_bound = bound;
    if (!s) r.message = "lp: " + why;
  } else if (strategy == "checkmate") {
    std::string why;
    s = solve_checkmate(p, budget, opt, &why);
    if (!s) r.message = "checkmate: " + why;
  } else if (strategy == "all-keep-offload") {
    std::string why;
    s = solve_all_keep_offload(p, budget, opt.host_budget, &why);
    if (!s && !why.empty()) r.message = "all-keep-offload: " + why;
  } else if (strategy == "chen-sqrtn-offload") {
    s = solve_chen_sqrtn_offload(p, budget, opt.host_budget);
    if (!s && p.copy_cost_per_byte <= 0) r.message = "chen-sqrtn-offload: the problem has no host link";
  } else if (strategy == "greedy-offload") {
    s = solve_greedy_offload(p, budget, opt.host_budget, opt.time_limit_seconds);
    if (!s && p.copy_cost_per_byte <= 0) r.message = "greedy-offload: the problem has no host link";
  } else if (strategy == "lp-offload") {
    std::string why;
    if (opt.phase) opt.phase("LP relaxation and rounding", opt.progress_user);
    s = solve_lp_offload(p, budget, opt, &why);
    if (!s) r.message = "lp-offload: " + why;
  } else if (strategy == "checkmate-offload") {
    std::string why;
    s = solve_checkmate_offload(p, budget, opt, &why);
    if (!s) r.message = "checkmate-offload: " + why;
  }
  r.solve_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!s) {
    if (r.message.empty()) r.message = strategy + ": no schedule found that fits the budget";
    return r;
  }
  if (s->strategy.empty()) s->strategy = strategy;
  r.schedule = std::move(*s);
  r.sim = simulate(p, r.schedule);
  const bool host_fits = opt.host_budget <= 0 || r.sim.host_peak_bytes <= opt.host_budget;
  r.feasible = r.sim.valid && r.sim.peak_bytes <= budget && host_fits;
  if (!r.sim.valid) {
    r.message = strategy + ": produced an invalid schedule: " + r.sim.error;
  } else if (!r.feasible) {
    std::ostringstream os;
    if (r.sim.peak_bytes > budget)
      os << strategy << ": schedule peak " << pool_format_bytes(r.sim.peak_bytes)
         << " exceeds the budget " << pool_format_bytes(budget);
    else
      os << strategy << ": host copies peak at " << pool_format_bytes(r.sim.host_peak_bytes)
         << ", over the host budget " << pool_format_bytes(opt.host_budget);
    r.message = os.str();
  }
  if (r.feasible && !r.schedule.note.empty()) r.message = strategy + ": " + r.schedule.note;
  if (r.feasible && r.schedule.lower_bound > 0 && r.sim.total_cost > 0)
    r.gap = std::max(0.0, (r.sim.total_cost - r.schedule.lower_bound) / r.sim.total_cost);
  return r;
}

}  // namespace remat
