// solve(): the one entry point that dispatches a strategy name, checks the budget against the
// minimum any schedule needs, and replays the result through simulate().
#include <algorithm>
#include <chrono>
#include <sstream>

#include "runtime/check.h"
#include "solver/griewank.h"
#include "solver/strategies.h"

namespace remat {
namespace {

// The node that sets problem_min_budget, for the error message.
int min_budget_node(const Problem& p, int64_t* working_set) {
  int best = 0;
  int64_t best_ws = -1;
  for (int k = 0; k < p.size(); ++k) {
    const ProblemNode& n = p.nodes[k];
    int64_t ws = n.bytes + n.workspace_bytes;
    for (int d : n.deps) ws += p.nodes[d].bytes;
    if (ws > best_ws) {
      best_ws = ws;
      best = k;
    }
  }
  *working_set = best_ws;
  return best;
}

// The cheapest baseline schedule that fits, to warm-start the MILP.
std::optional<Schedule> best_baseline(const Problem& p, int64_t budget) {
  std::optional<Schedule> best;
  double best_cost = 0;
  auto consider = [&](std::optional<Schedule> s) {
    if (!s) return;
    SimResult sim = simulate(p, *s);
    if (!sim.valid || sim.peak_bytes > budget) return;
    if (!best || sim.total_cost < best_cost) {
      best = std::move(s);
      best_cost = sim.total_cost;
    }
  };
  consider(solve_all_keep(p));
  consider(solve_chen_sqrtn(p, budget, false));
  consider(solve_chen_sqrtn(p, budget, true));
  consider(solve_chen_greedy(p, budget, false));
  consider(solve_chen_greedy(p, budget, true));
  consider(solve_griewank(p, budget));
  return best;
}

double schedule_cost(const Problem& p, const Schedule& s) { return simulate(p, s).total_cost; }

// Note [checkmate warm start]
// The MILP starts from the cheapest schedule that fits among every baseline and the LP rounding
// (the LP solve is cheap next to branch and bound). That schedule is Cbc's MIP start (RINS and
// proximity search improve on it) and the fallback: the result never costs more. The LP
// rounding gets at most half of the time limit and hands its optimal LP basis to the MILP, whose
// root LP (the same LP) then costs nothing; the MILP gets what is left of the limit.
std::optional<Schedule> solve_checkmate(const Problem& p, int64_t budget, const SolveOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::optional<Schedule> warm = best_baseline(p, budget);
  SolveOptions lp_opt = opt;
  lp_opt.time_limit_seconds = std::max(0.01, 0.5 * opt.time_limit_seconds);
  double lp_bound = 0;
  LpBasis basis;
  std::optional<Schedule> lp = solve_lp_rounding(p, budget, lp_opt, &lp_bound, &basis);
  if (lp && (!warm || schedule_cost(p, *lp) < schedule_cost(p, *warm))) warm = std::move(lp);
  SolveOptions milp_opt = opt;
  milp_opt.time_limit_seconds = std::max(0.01, opt.time_limit_seconds - elapsed());
  std::optional<Schedule> s =
      solve_checkmate_milp(p, budget, milp_opt, warm ? &*warm : nullptr, &basis);
  if (!s) return s;
  const double cost = schedule_cost(p, *s);
  s->lower_bound = std::min(cost, std::max(s->lower_bound, lp_bound));
  if (cost > 0 && (cost - s->lower_bound) / cost <= opt.relative_gap) s->status = "optimal";
  else if (elapsed() >= 0.95 * opt.time_limit_seconds) s->status = "time-limit";
  s->solve_seconds = elapsed();
  return s;
}

}  // namespace

void solve_check_budget(const Problem& p, int64_t budget) {
  const int64_t min_budget = problem_min_budget(p);
  if (budget >= min_budget) return;
  int64_t ws = 0;
  int k = min_budget_node(p, &ws);
  REMAT_USER_ERROR("budget " << budget << " bytes is below the minimum " << min_budget
                             << " bytes any schedule needs (node '" << p.nodes[k].name
                             << "': constant " << p.constant_bytes << " + working set " << ws
                             << ")");
}

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> kNames = {
      "all-keep",           "chen-sqrtn", "chen-sqrtn-linear", "chen-greedy",
      "chen-greedy-linear", "griewank",   "lp",                "checkmate"};
  return kNames;
}

SolveResult solve(const Problem& p, const std::string& strategy, int64_t budget,
                  const SolveOptions& opt) {
  const auto& names = strategy_names();
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
  else if (strategy == "chen-greedy") s = solve_chen_greedy(p, budget, false);
  else if (strategy == "chen-greedy-linear") s = solve_chen_greedy(p, budget, true);
  else if (strategy == "griewank") {
    if (!problem_is_chain(p)) r.message = "griewank: not applicable, graph is not a chain";
    else s = solve_griewank(p, budget);
  } else if (strategy == "lp") {
    double bound = 0;
    s = solve_lp_rounding(p, budget, opt, &bound);
    if (s && s->lower_bound <= 0) s->lower_bound = bound;
  } else if (strategy == "checkmate") {
    s = solve_checkmate(p, budget, opt);
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
  r.feasible = r.sim.valid && r.sim.peak_bytes <= budget;
  if (!r.sim.valid) {
    r.message = strategy + ": produced an invalid schedule: " + r.sim.error;
  } else if (!r.feasible) {
    std::ostringstream os;
    os << strategy << ": schedule peak " << r.sim.peak_bytes << " bytes exceeds the budget "
       << budget;
    r.message = os.str();
  }
  if (r.feasible && !r.schedule.note.empty()) r.message = strategy + ": " + r.schedule.note;
  if (r.feasible && r.schedule.lower_bound > 0 && r.sim.total_cost > 0)
    r.gap = std::max(0.0, (r.sim.total_cost - r.schedule.lower_bound) / r.sim.total_cost);
  return r;
}

}  // namespace remat
