// The LP relaxation of the Checkmate MILP (Clp) with two-phase rounding: round S (swept
// thresholds and seeded randomized rounding), derive the cheapest valid R, simulate, keep the
// cheapest schedule that fits. The LP objective is a proven lower bound on any schedule's cost.
#include <chrono>
#include <random>

#include "ClpSimplex.hpp"
#include "solver/milp_model.h"
#include "solver/strategies.h"

namespace remat {

std::optional<Schedule> solve_lp_rounding(const Problem& p, int64_t budget, const SolveOptions& opt,
                                          double* lp_bound) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  if (lp_bound) *lp_bound = 0;
  if (budget < problem_min_budget(p)) return std::nullopt;
  MilpBuildOptions bo;
  bo.budget = budget;
  MilpModel m = milp_build(p, bo);

  ClpSimplex lp;
  lp.setLogLevel(opt.log_level >= 2 ? 1 : 0);
  lp.loadProblem(m.num_cols(), m.num_rows(), m.starts.data(), m.index.data(), m.value.data(),
                 m.col_lb.data(), m.col_ub.data(), m.obj.data(), m.row_lb.data(),
                 m.row_ub.data());
  lp.setMaximumSeconds(std::max(0.01, opt.time_limit_seconds));
  lp.dual();
  if (lp.status() != 0) return std::nullopt;  // infeasible LP: no schedule fits at all
  const double bound = lp.objectiveValue() * m.cost_scale;
  if (lp_bound) *lp_bound = bound;
  const double* x = lp.primalColumnSolution();

  std::optional<Schedule> best;
  double best_cost = 0;
  auto consider = [&](const BoolMatrix& S_rounded) {
    Schedule s;
    s.strategy = "lp";
    s.S = schedule_repair_s(p, S_rounded, &s.R);
    SimResult sim = simulate(p, s);
    if (!sim.valid || sim.peak_bytes > budget) return;
    if (!best || sim.total_cost < best_cost) best = std::move(s), best_cost = sim.total_cost;
  };
  for (int k = 1; k <= 99 && elapsed() < opt.time_limit_seconds; ++k)
    consider(milp_s_from_solution(m, x, k / 100.0));
  std::mt19937_64 rng(opt.seed);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  for (int k = 0; k < opt.rounding_samples && elapsed() < opt.time_limit_seconds; ++k) {
    BoolMatrix S(m.n, m.n);
    for (int t = 1; t < m.n; ++t)
      for (int i = 0; i < t; ++i)
        if (m.s(t, i) >= 0 && uni(rng) < x[m.s(t, i)]) S.set(t, i, true);
    consider(S);
  }
  if (!best) return std::nullopt;
  best->lower_bound = std::min(bound, best_cost);
  best->solve_seconds = elapsed();
  best->status = "heuristic";
  return best;
}

}  // namespace remat
