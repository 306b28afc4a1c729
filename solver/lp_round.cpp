// The LP relaxation of the Checkmate MILP (Clp) with two-phase rounding: round S (swept
// thresholds and seeded randomized rounding), derive the cheapest valid R, simulate, keep the
// cheapest schedule that fits; roundings (and the all-keep schedule) that exceed the budget are
// repaired by dropping held values at the peak stage. The LP objective is a proven lower bound.
#include <chrono>
#include <memory>
#include <random>
#include <set>

#include "solver/baselines.h"

#include "ClpEventHandler.hpp"
#include "CoinWarmStartBasis.hpp"
#include "OsiClpSolverInterface.hpp"
#include "solver/milp_model.h"
#include "solver/relaxation_search.h"
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

// The largest bytes in use during stage t.
int64_t stage_peak(const SimResult& sim, int t) {
  int64_t peak = 0;
  for (const SimStep& st : sim.steps)
    if (st.stage == t) peak = std::max({peak, st.bytes_during, st.bytes_after});
  return peak;
}

// FNV-1a over the set entries of a boolean matrix (to recognise schedules seen before).
uint64_t matrix_hash(const BoolMatrix& m) {
  uint64_t h = 1469598103934665603ull;
  for (int r = 0; r < m.rows(); ++r)
    for (int c = 0; c < r; ++c)
      if (m(r, c)) h = (h ^ uint64_t(r * 65537 + c)) * 1099511628211ull;
  return h;
}

}  // namespace

// Note [budget repair]
// A rounding whose peak exceeds the budget is repaired greedily. A schedule's S can be read in
// two ways: as is, with the cheapest R that also computes values only to hold them
// (derive_cheapest_r's retention), or made retention-consistent by dropping such holds
// (schedule_repair_s); the start and every accepted move take the better reading (candidate
// moves are judged as is, which is cheaper). At the stage holding the peak, the moves are: drop a held value
// there, or for the rest of its hold until it is next read (the cheapest R recomputes it where
// needed); defer a value the stage computes only to hold (it is computed where it is next
// read instead); hold a value the stage recomputes, from where it was last available
// (recomputing a long segment inside one stage can cost more memory than holding its result),
// or from the stage before, which then computes it to hold it;
// hold a value that a later stage recomputes from inputs resident at the peak (they stay
// resident only for it). The move taken lowers the total excess over the budget (summed over
// stages) at the least extra cost per byte. When none does, up to 16 times a sideways move is
// taken instead: one that leaves the total as it is but lowers the peak stage's own excess,
// to a schedule not seen before (some repairs need two moves, the first only shifting the
// excess to a neighbouring stage). Repeat until the schedule fits, no move helps, or the
// deadline passes (checked before every candidate: the best move among those judged in time
// is still taken).
std::optional<Schedule> schedule_fit_budget(const Problem& p, const BoolMatrix& S0,
                                            int64_t budget, double deadline_seconds) {
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  const int n = p.size();
  const auto users = problem_users(p);
  // The two readings of S (see the Note), simulated.
  auto readings = [&](const BoolMatrix& S) {
    std::vector<std::pair<Schedule, SimResult>> out;
    Schedule as_is;
    as_is.S = schedule_trim_s(p, S);
    as_is.R = derive_cheapest_r(p, as_is.S);
    Schedule repaired;
    repaired.S = schedule_repair_s(p, as_is.S, &repaired.R);
    for (Schedule* c : {&as_is, &repaired}) {
      SimResult sim = simulate(p, *c);
      if (sim.valid) out.emplace_back(std::move(*c), std::move(sim));
    }
    return out;
  };
  Schedule s;
  SimResult sim;
  {
    auto start = readings(S0);
    if (start.empty()) return std::nullopt;
    auto pick = std::min_element(start.begin(), start.end(), [&](const auto& a, const auto& b) {
      return budget_excess(a.second, n, budget) < budget_excess(b.second, n, budget);
    });
    s = std::move(pick->first);
    sim = std::move(pick->second);
  }
  std::set<uint64_t> visited{matrix_hash(s.S)};
  int sideways_left = 16;
  // First stage after `from` whose computations read value i (n if none).
  auto next_read = [&](int i, int from) {
    for (int u = from + 1; u < n; ++u)
      for (int j : users[size_t(i)])
        if (j <= u && s.R(u, j)) return u;
    return n;
  };
  for (;;) {
    if (sim.peak_bytes <= budget) return s;
    if (elapsed() > deadline_seconds) return std::nullopt;
    const int t = sim.steps[sim.peak_step].stage;
    const double excess = budget_excess(sim, n, budget);
    double best_score = 0;
    std::optional<Schedule> best;
    std::optional<SimResult> best_sim;
    std::optional<Schedule> side;  // a move that only shifts the excess to another stage
    std::optional<SimResult> side_sim;
    // Candidates are read as is (R with retention): trimming and the repaired reading happen
    // once per accepted move, not per candidate, which keeps an iteration cheap at n ~ 1000.
    // Each candidate simulates the whole schedule: at n ~ 3,500 a stage's candidates take a
    // minute, so the deadline is checked per candidate, not only per accepted move.
    auto consider = [&](BoolMatrix S) {
      if (elapsed() > deadline_seconds) return;
      Schedule c;
      c.S = std::move(S);
      c.R = derive_cheapest_r(p, c.S);
      SimResult cs = simulate(p, c);
      if (!cs.valid) return;
      const double saved = excess - budget_excess(cs, n, budget);
      if (saved <= 0) {
        if (saved == 0 && stage_peak(cs, t) < stage_peak(sim, t) &&
            !visited.count(matrix_hash(c.S)) && (!side || cs.total_cost < side_sim->total_cost))
          side = std::move(c), side_sim = std::move(cs);
        return;
      }
      const double score = (cs.total_cost - sim.total_cost) / saved;
      if (!best || score < best_score) best_score = score, best = std::move(c), best_sim = cs;
    };
    // Holds value i into stage u from where it was last available (computed or held).
    auto hold_until = [&](int i, int u) {
      int from = u - 1;
      while (from > i && !s.R(from, i) && !s.S(from, i)) --from;
      BoolMatrix S = s.S;
      for (int v = from + 1; v <= u; ++v) S.set(v, i, true);
      consider(std::move(S));
    };
    // Stops holding i from stage `from` until (not including) stage `until`.
    auto release = [&](int i, int from, int until) {
      BoolMatrix S = s.S;
      for (int v = from; v < until && v < n; ++v) S.set(v, i, false);
      consider(std::move(S));
    };
    // Values resident at the peak: only moves that touch one of them, or a recomputation of
    // the peak stage, can lower the peak.
    std::vector<uint8_t> live(size_t(n), 0);
    for (int k = 0; k <= sim.peak_step; ++k)
      live[size_t(sim.steps[size_t(k)].node)] = sim.steps[size_t(k)].kind == StepKind::Compute;
    for (int i = 0; i < t; ++i) {
      if (s.S(t, i) && live[size_t(i)]) {  // drop a held value: here, or until next read
        release(i, t, t + 1);
        release(i, t, next_read(i, t - 1) + 1);
      } else if (s.R(t, i)) {
        if (live[size_t(i)] && t + 1 < n && s.S(t + 1, i))
          release(i, t + 1, next_read(i, t) + 1);  // defer a value computed only to hold
        hold_until(i, t);  // hold a value t recomputes
        if (t > i + 1 && !s.S(t - 1, i)) {  // or compute it in the stage before, to hold
          BoolMatrix S = s.S;
          S.set(t, i, true);
          consider(std::move(S));
        }
      }
    }
    // A value resident at the peak only for a recomputation in a later stage: hold what that
    // recomputation produces instead, so the value can go earlier.
    std::vector<uint8_t> tried(size_t(n), 0);
    for (size_t k = size_t(sim.peak_step) + 1; k < sim.steps.size(); ++k) {
      const SimStep& st = sim.steps[k];
      if (st.kind != StepKind::Compute) {
        live[size_t(st.node)] = 0;
        continue;
      }
      bool reads_live = false;
      for (int d : p.nodes[size_t(st.node)].deps) reads_live |= live[size_t(d)] != 0;
      if (st.recompute && st.stage > t && reads_live && !tried[size_t(st.node)]) {
        tried[size_t(st.node)] = 1;
        hold_until(st.node, st.stage);
      }
      for (int d : p.nodes[size_t(st.node)].deps) live[size_t(d)] = 0;  // first later use found
    }
    if (!best && side && sideways_left > 0) {  // Note [budget repair]: a sideways step
      --sideways_left;
      best = std::move(side);
      best_sim = std::move(side_sim);
    }
    if (!best) return std::nullopt;
    // The accepted move, in whichever reading of its trimmed S is better.
    auto read = readings(best->S);
    read.emplace_back(std::move(*best), std::move(*best_sim));
    auto pick = std::min_element(read.begin(), read.end(), [&](const auto& a, const auto& b) {
      const double ea = budget_excess(a.second, n, budget), eb = budget_excess(b.second, n, budget);
      return ea < eb || (ea == eb && a.second.total_cost < b.second.total_cost);
    });
    s = std::move(pick->first);
    sim = std::move(pick->second);
    visited.insert(matrix_hash(s.S));
  }
}

namespace {

// Stops Clp at a wall-clock deadline (Clp's own limit counts CPU seconds, and is not checked
// in initialSolve at all: on a loaded machine a 60 s limit ran 260 s). Checked after every
// simplex iteration, which is cheap next to the iteration itself.
class WallClockStop : public ClpEventHandler {
 public:
  explicit WallClockStop(Clock::time_point deadline) : deadline_(deadline) {}
  ClpEventHandler* clone() const override { return new WallClockStop(*this); }
  int event(Event which) override {
    if (which != endOfIteration) return -1;
    return Clock::now() > deadline_ ? 0 : -1;  // 0: stop, status "stopped by event"
  }

 private:
  Clock::time_point deadline_;
};

}  // namespace

LpStatus milp_solve_lp(const MilpModel& m, double seconds, int log_level,
                       std::vector<double>* x, double* objective, LpBasis* basis) {
  OsiClpSolverInterface lp;
  lp.messageHandler()->setLogLevel(log_level >= 2 ? 1 : 0);
  lp.messageHandler()->setFilePointer(stderr);  // stdout carries the tools' results
  lp.getModelPtr()->messageHandler()->setFilePointer(stderr);
  lp.loadProblem(m.num_cols(), m.num_rows(), m.starts.data(), m.index.data(), m.value.data(),
                 m.col_lb.data(), m.col_ub.data(), m.obj.data(), m.row_lb.data(),
                 m.row_ub.data());
  const double limit = std::max(0.01, seconds);
  WallClockStop stop(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(limit)));
  lp.getModelPtr()->passInEventHandler(&stop);
  lp.getModelPtr()->setMaximumSeconds(limit);  // CPU seconds: never more than wall seconds
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

namespace {

// The Checkmate MILP's own LP (milp_build) with two-phase rounding: S rounded at swept
// thresholds and at random, the cheapest R for it, and repair of over-budget seeds.
std::optional<Schedule> full_lp_rounding(const Problem& p, int64_t budget, const SolveOptions& opt,
                                         double seconds, double* lp_bound, LpBasis* basis,
                                         std::string* model) {
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  MilpBuildOptions bo;
  bo.budget = budget;
  MilpModel m = milp_build(p, bo);
  *model = "Checkmate LP " + std::to_string(m.num_rows()) + " x " + std::to_string(m.num_cols());

  std::vector<double> xv;
  double obj = 0;
  if (milp_solve_lp(m, seconds, opt.log_level, &xv, &obj, basis) != LpStatus::Optimal)
    return std::nullopt;
  *lp_bound = obj * m.cost_scale;
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
  for (int k = 1; k <= 99 && elapsed() < seconds; ++k)
    consider(milp_s_from_solution(m, x, k / 100.0));
  std::mt19937_64 rng(opt.seed);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  for (int k = 0; k < opt.rounding_samples && elapsed() < seconds; ++k) {
    BoolMatrix S(m.n, m.n);
    for (int t = 1; t < m.n; ++t)
      for (int i = 0; i < t; ++i)
        if (m.s(t, i) >= 0 && uni(rng) < x[m.s(t, i)]) S.set(t, i, true);
    consider(S);
  }
  // Repair seeds that exceed the budget (Note [budget repair]): the LP rounded at 1/2 and
  // near 1 (holds only what the LP holds firmly), and the all-keep schedule.
  std::vector<BoolMatrix> seeds{milp_s_from_solution(m, x, 0.5),
                                milp_s_from_solution(m, x, 0.95)};
  seeds.push_back(all_keep_schedule(p).S);
  for (const BoolMatrix& seed : seeds) {
    const double left = seconds - elapsed();
    if (left <= 0) break;
    auto s = schedule_fit_budget(p, seed, budget, left / 2);
    if (!s) continue;
    SimResult sim = simulate(p, *s);
    if (!best || sim.total_cost < best_cost) best = std::move(s), best_cost = sim.total_cost;
  }
  return best;
}

}  // namespace

int64_t full_milp_pairs(const Problem& p) {
  const auto md = max_descendant(p, problem_users(p));
  int64_t pairs = 0;
  for (int t = 0; t < p.size(); ++t)
    for (int i = 0; i < t; ++i) pairs += md[i] >= t ? 1 : 0;
  return pairs;
}

bool full_milp_is_small(const Problem& p) { return full_milp_pairs(p) <= kSmallMilpPairs; }

// Note [lp strategy]
// `lp` is the stage relaxation's LP with rounding (Note [stage relaxation]), which scales to
// thousands of nodes, and, where the Checkmate MILP is small, that MILP's own LP with rounding
// too (its basis then starts the MILP's root). The result is the cheapest schedule of either
// that fits, and the larger of the two LP bounds.
std::optional<Schedule> solve_lp_rounding(const Problem& p, int64_t budget, const SolveOptions& opt,
                                          double* lp_bound, LpBasis* basis, std::string* why,
                                          std::string* bound_source) {
  const auto t0 = Clock::now();
  auto left = [&] {
    return opt.time_limit_seconds - std::chrono::duration<double>(Clock::now() - t0).count();
  };
  if (lp_bound) *lp_bound = 0;
  if (basis) basis->clear();
  if (budget < problem_min_budget(p)) {
    if (why) *why = "the budget is below the minimum any schedule needs";
    return std::nullopt;
  }
  const bool small = full_milp_is_small(p);
  RelaxationSearch rs =
      relaxation_lp_search(p, budget, opt, small ? left() / 2 : left());
  std::optional<Schedule> best = std::move(rs.best);
  double bound = rs.bound;
  std::string source = rs.bound_source;
  std::string models = rs.model;
  if (small && !rs.infeasible && left() > 0) {
    double full_bound = 0;
    std::string full_model;
    auto full = full_lp_rounding(p, budget, opt, left(), &full_bound, basis, &full_model);
    models += "; " + full_model;
    if (full && (!best || simulate(p, *full).total_cost < simulate(p, *best).total_cost))
      best = std::move(full);
    if (full_bound > bound) bound = full_bound, source = "Checkmate LP";
  }
  if (lp_bound) *lp_bound = bound;
  if (bound_source) *bound_source = source;
  if (!best) {
    if (why) *why = rs.failure;
    return std::nullopt;
  }
  const double cost = simulate(p, *best).total_cost;
  best->strategy = "lp";
  best->lower_bound = std::min(bound, cost);
  best->bound_source = source;
  best->models = models;
  best->solve_seconds = opt.time_limit_seconds - left();
  best->status = "heuristic";
  return best;
}

}  // namespace remat
