// The LP relaxation of the Checkmate MILP (Clp) with two-phase rounding: round S (swept
// thresholds and seeded randomized rounding), derive the cheapest valid R, simulate, keep the
// cheapest schedule that fits; roundings (and the all-keep schedule) that exceed the budget are
// repaired by dropping held values at the peak stage. The LP objective is a proven lower bound.
#include <chrono>
#include <memory>
#include <random>

#include "solver/baselines.h"

#include "CoinWarmStartBasis.hpp"
#include "OsiClpSolverInterface.hpp"
#include "solver/milp_model.h"
#include "solver/strategies.h"

namespace remat {
namespace {

using Clock = std::chrono::steady_clock;

// Sum over stages of the bytes by which the stage's peak exceeds the budget.
double budget_excess(const SimResult& sim, int n, int64_t budget) {
  std::vector<int64_t> peak(n, 0);
  for (const SimStep& st : sim.steps)
    if (st.stage >= 0 && st.stage < n)
      peak[st.stage] = std::max({peak[st.stage], st.bytes_during, st.bytes_after});
  double excess = 0;
  for (int64_t b : peak) excess += double(std::max<int64_t>(0, b - budget));
  return excess;
}

}  // namespace

// Note [budget repair]
// A rounding whose peak exceeds the budget is repaired greedily: at the stage holding the peak,
// take the one move that lowers the total excess over the budget (summed over stages, so every
// move makes progress and the loop ends) at the least extra cost per byte, where a
// move either drops a held value (the cheapest R then recomputes it where needed) or holds a
// value the stage recomputes from where it was last available (recomputing a long segment
// inside one stage can cost more memory than holding its result); repeat until the schedule
// fits, no move helps, or the deadline passes.
std::optional<Schedule> schedule_fit_budget(const Problem& p, const BoolMatrix& S0,
                                            int64_t budget, double deadline_seconds) {
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  Schedule s;
  s.S = schedule_repair_s(p, schedule_trim_s(p, S0), &s.R);
  SimResult sim = simulate(p, s);
  for (;;) {
    if (!sim.valid) return std::nullopt;
    if (sim.peak_bytes <= budget) return s;
    if (elapsed() > deadline_seconds) return std::nullopt;
    const int t = sim.steps[sim.peak_step].stage;
    const double excess = budget_excess(sim, p.size(), budget);
    double best_score = 0;
    std::optional<Schedule> best;
    std::optional<SimResult> best_sim;
    auto consider = [&](BoolMatrix S) {
      Schedule c;
      c.S = schedule_repair_s(p, schedule_trim_s(p, S), &c.R);
      SimResult cs = simulate(p, c);
      if (!cs.valid) return;
      const double saved = excess - budget_excess(cs, p.size(), budget);
      if (saved <= 0) return;
      const double score = (cs.total_cost - sim.total_cost) / saved;
      if (!best || score < best_score) best_score = score, best = std::move(c), best_sim = cs;
    };
    for (int i = 0; i < t; ++i) {
      if (s.S(t, i)) {  // drop a held value (recomputed in t if t needs it)
        BoolMatrix S = s.S;
        S.set(t, i, false);
        consider(std::move(S));
      } else if (s.R(t, i)) {  // hold a value t recomputes, from where it was last available
        int from = t - 1;
        while (from > i && !s.R(from, i) && !s.S(from, i)) --from;
        BoolMatrix S = s.S;
        for (int u = from + 1; u <= t; ++u) S.set(u, i, true);
        consider(std::move(S));
      }
    }
    if (!best) return std::nullopt;
    s = std::move(*best);
    sim = std::move(*best_sim);
  }
}

LpStatus milp_solve_lp(const MilpModel& m, double seconds, int log_level,
                       std::vector<double>* x, double* objective, LpBasis* basis) {
  OsiClpSolverInterface lp;
  lp.messageHandler()->setLogLevel(log_level >= 2 ? 1 : 0);
  lp.loadProblem(m.num_cols(), m.num_rows(), m.starts.data(), m.index.data(), m.value.data(),
                 m.col_lb.data(), m.col_ub.data(), m.obj.data(), m.row_lb.data(),
                 m.row_ub.data());
  // Clp's CPU seconds: its wall-clock limit is not checked in initialSolve (one thread).
  lp.getModelPtr()->setMaximumSeconds(std::max(0.01, seconds));
  lp.initialSolve();
  if (lp.isProvenPrimalInfeasible()) return LpStatus::Infeasible;
  if (!lp.isProvenOptimal()) return LpStatus::Unknown;
  const double* sol = lp.getColSolution();
  if (x) x->assign(sol, sol + m.num_cols());
  if (objective) *objective = lp.getObjValue();
  if (basis) {
    std::unique_ptr<CoinWarmStart> ws(lp.getWarmStart());
    const auto* b = dynamic_cast<const CoinWarmStartBasis*>(ws.get());
    basis->clear();
    if (b) {
      for (int j = 0; j < m.num_cols(); ++j) basis->push_back(b->getStructStatus(j));
      for (int i = 0; i < m.num_rows(); ++i) basis->push_back(b->getArtifStatus(i));
    }
  }
  return LpStatus::Optimal;
}

std::optional<Schedule> solve_lp_rounding(const Problem& p, int64_t budget, const SolveOptions& opt,
                                          double* lp_bound, LpBasis* basis) {
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  if (lp_bound) *lp_bound = 0;
  if (basis) basis->clear();
  if (budget < problem_min_budget(p)) return std::nullopt;
  MilpBuildOptions bo;
  bo.budget = budget;
  MilpModel m = milp_build(p, bo);

  std::vector<double> xv;
  double obj = 0;
  if (milp_solve_lp(m, opt.time_limit_seconds, opt.log_level, &xv, &obj, basis) !=
      LpStatus::Optimal)
    return std::nullopt;  // infeasible LP: no schedule fits at all
  const double bound = obj * m.cost_scale;
  if (lp_bound) *lp_bound = bound;
  const double* x = xv.data();

  std::optional<Schedule> best;
  double best_cost = 0;
  auto consider = [&](const BoolMatrix& S_rounded) {
    for (Schedule& s : schedule_candidates_for_s(p, S_rounded)) {
      SimResult sim = simulate(p, s);
      if (!sim.valid || sim.peak_bytes > budget) continue;
      if (!best || sim.total_cost < best_cost) best = std::move(s), best_cost = sim.total_cost;
    }
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
  // Repair seeds that exceed the budget (Note [budget repair]): the LP rounded at 1/2 and
  // near 1 (holds only what the LP holds firmly), and the all-keep schedule.
  const double limit = opt.time_limit_seconds;
  std::vector<BoolMatrix> seeds{milp_s_from_solution(m, x, 0.5),
                                milp_s_from_solution(m, x, 0.95)};
  seeds.push_back(all_keep_schedule(p).S);
  for (const BoolMatrix& seed : seeds) {
    const double left = limit - elapsed();
    if (left <= 0) break;
    auto s = schedule_fit_budget(p, seed, budget, left / 2);
    if (!s) continue;
    SimResult sim = simulate(p, *s);
    if (!best || sim.total_cost < best_cost) best = std::move(s), best_cost = sim.total_cost;
  }
  if (!best) return std::nullopt;
  best->strategy = "lp";
  best->lower_bound = std::min(bound, best_cost);
  best->solve_seconds = elapsed();
  best->status = "heuristic";
  return best;
}

}  // namespace remat
