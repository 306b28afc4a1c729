// The Checkmate MILP solved with COIN-OR Cbc (the only Cbc branch-and-cut caller), and
// solve_checkmate_milp: model (milp_model.cpp) -> Cbc -> S -> cheapest R -> simulate.
//
// Cbc's C API (2.10) has no incumbent/bound callback (only a message callback without a user
// pointer that fires only for printed messages), so this file drives CbcMain1 through the C++
// API, which runs the same default strategy as Cbc_solve and takes a CbcEventHandler.
//
// Note [hard solver deadline]
// Cbc checks its time limit between nodes, and our event handler only runs on its events; its
// preprocessing, probing and root cut passes check neither (MobileNet, ~250 nodes: a 60 s
// limit ran past 6 minutes). So Cbc runs in a child process (solver/child_run.h) that streams
// progress, every incumbent and the final result back; the parent kills it at the limit plus
// a grace of 0.5 s + 5 %, keeping the last incumbent and bound it received. A crash in Cbc only
// loses the search, not the caller.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>

#include "CbcEventHandler.hpp"
#include "CbcModel.hpp"
#include "CbcSolver.hpp"
#include "CoinWarmStartBasis.hpp"
#include "OsiClpSolverInterface.hpp"
#include "runtime/core/check.h"
#include "solver/child_run.h"
#include "solver/milp_model.h"
#include "solver/strategies.h"

namespace remat {
namespace {

using Clock = std::chrono::steady_clock;

// Records from the Cbc process (Note [hard solver deadline]).
constexpr int kProgressTag = 1;   // {elapsed seconds, incumbent or -1, bound}
constexpr int kIncumbentTag = 2;  // {objective, x...}: a new incumbent in the model's columns
constexpr int kResultTag = 3;     // {has_solution, objective, bound, optimal, infeasible,
                                  //  root_lp_unfinished, x...}

// Reports incumbent and bound about once a second and on every new incumbent, and stops Cbc at
// the wall-clock deadline or when the parent asks. Cbc clones the handler into its
// branch-and-bound model, so the state lives behind a pointer.
//
// Note [sub-MIP events]
// Cbc's heuristics (RINS, RENS, the local-branching family) solve restricted sub-MIPs whose
// models have a parent (CbcModel::parentModel) and call this handler too. A sub-MIP's "best
// possible" value bounds only its restricted problem, so it can lie above the whole problem's
// optimum: on U-Net (ResNet-50) at 40 % the live line showed such a bound (gap 1.84 %) while
// Cbc's own tree stayed at its root bound (gap 3.59 %), and a search killed at its deadline
// would have kept that last record as its proof. Sub-MIPs get only the deadline check; bounds
// and incumbents are reported from the search's own model.
struct ProgressState {
  ChildChannel* channel = nullptr;
  int num_cols = 0;
  Clock::time_point start;
  double last_report = -1;
  double last_incumbent = -1;
  double deadline = 1e30;  // wall-clock seconds (Cbc's own "sec" is CPU time)
};

class ProgressHandler : public CbcEventHandler {
 public:
  explicit ProgressHandler(ProgressState* state) : state_(state) {}
  CbcEventHandler* clone() const override { return new ProgressHandler(*this); }
  CbcAction event(CbcEvent which) override {
    if (!model_) return noAction;
    double now = std::chrono::duration<double>(Clock::now() - state_->start).count();
    if (now > state_->deadline || state_->channel->stop_requested()) return stop;
    if (model_->parentModel()) return noAction;  // Note [sub-MIP events]
    const double* best = model_->bestSolution();
    double inc = best ? model_->getObjValue() : -1;
    bool new_inc = best && inc != state_->last_incumbent;
    // After preprocessing removed columns, the incumbent is in another space: only the final
    // result (postprocessed by Cbc) carries it then.
    if (new_inc && model_->getNumCols() == state_->num_cols) {
      std::vector<double> rec{inc};
      rec.insert(rec.end(), best, best + state_->num_cols);
      state_->channel->send(kIncumbentTag, rec);
    }
    if (now - state_->last_report >= 1.0 || new_inc ||
        which == solution || which == heuristicSolution) {
      state_->last_report = now;
      state_->last_incumbent = inc;
      state_->channel->send(kProgressTag, {now, inc, model_->getBestPossibleObjValue()});
    }
    return noAction;
  }

 private:
  ProgressState* state_;
};

// When every objective coefficient is an integer in Problem units on integer columns, objective
// values move in steps of their gcd g, so Cbc may prune any node whose bound is within g of the
// incumbent. Returns g in model units (slightly less, against rounding), or 0.
double objective_increment(const MilpModel& m) {
  long long g = 0;
  for (int j = 0; j < m.num_cols() && g >= 0; ++j) {
    if (m.obj[j] == 0) continue;
    double c = std::abs(m.obj[j] * m.cost_scale), r = std::round(c);
    bool integral = m.is_int[j] && r >= 1 && r <= 1e12 && std::abs(c - r) <= 1e-9 * c;
    g = integral ? std::gcd(g, static_cast<long long>(r)) : -1;
  }
  return g > 0 ? double(g) / m.cost_scale * (1 - 1e-6) : 0;
}

// One Cbc run in this process; progress, incumbents and the result go to `channel`.
void run_cbc_here(const MilpModel& m, const SolveOptions& opt, const std::vector<double>* start,
                  const LpBasis* root_basis, ChildChannel& channel) {
  const auto t0 = Clock::now();
  const double limit = std::max(0.01, opt.time_limit_seconds);
  auto send_result = [&](const MilpRun& r) {
    std::vector<double> rec{double(r.has_solution), r.objective,       r.bound,
                            double(r.optimal),      double(r.infeasible),
                            double(r.root_lp_unfinished)};
    rec.insert(rec.end(), r.x.begin(), r.x.end());
    channel.send(kResultTag, rec);
  };
  OsiClpSolverInterface solver;
  solver.loadProblem(m.num_cols(), m.num_rows(), m.starts.data(), m.index.data(),
                     m.value.data(), m.col_lb.data(), m.col_ub.data(), m.obj.data(),
                     m.row_lb.data(), m.row_ub.data());
  for (int j = 0; j < m.num_cols(); ++j)
    if (m.is_int[j]) solver.setInteger(j);
  solver.messageHandler()->setLogLevel(opt.log_level >= 2 ? 1 : 0);

  // The root LP runs inside Clp, where neither Cbc's limit nor our event handler is checked.
  // Solve it first under the limit (Clp's CPU seconds: its wall-clock limit is not checked in
  // initialSolve; one thread, so the two agree). If it does not finish, there is no incumbent.
  solver.getModelPtr()->setMaximumSeconds(limit);
  if (root_basis && root_basis->size() == size_t(m.num_cols() + m.num_rows())) {
    CoinWarmStartBasis basis;
    basis.setSize(m.num_cols(), m.num_rows());
    for (int j = 0; j < m.num_cols(); ++j)
      basis.setStructStatus(j, CoinWarmStartBasis::Status((*root_basis)[j] & 3));
    for (int i = 0; i < m.num_rows(); ++i)
      basis.setArtifStatus(i, CoinWarmStartBasis::Status((*root_basis)[m.num_cols() + i] & 3));
    solver.setWarmStart(&basis);
    solver.resolve();  // from an optimal basis: no iterations
  } else {
    solver.initialSolve();
  }
  solver.getModelPtr()->setMaximumSeconds(-1.0);
  if (!solver.isProvenOptimal()) {
    MilpRun run;
    run.infeasible = solver.isProvenPrimalInfeasible();
    run.root_lp_unfinished = !run.infeasible;
    send_result(run);
    return;
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  channel.send(kProgressTag, {elapsed, -1, solver.getObjValue()});

  CbcModel model(solver);
  CbcSolverUsefulData data;
  data.noPrinting_ = opt.log_level < 2;
  CbcMain0(model, data);
  model.setLogLevel(opt.log_level >= 2 ? 1 : 0);
  ProgressState state{&channel, m.num_cols(), t0, -1, -1, limit};
  ProgressHandler handler(&state);
  model.passInEventHandler(&handler);

  if (start) {
    REMAT_CHECK(int(start->size()) == m.num_cols(), "MIP start has " << start->size()
                                                        << " values for " << m.num_cols()
                                                        << " columns");
    std::vector<std::pair<std::string, double>> mip_start;
    for (int j = 0; j < m.num_cols(); ++j)
      if (m.is_int[j]) mip_start.push_back({model.solver()->getColName(j), (*start)[j]});
    model.setMIPStart(mip_start);
  }

  char sec[32], ratio[32], threads[16], log[16];
  std::snprintf(sec, sizeof sec, "%g", limit);
  std::snprintf(ratio, sizeof ratio, "%g", std::max(0.0, opt.relative_gap));
  std::snprintf(threads, sizeof threads, "%d", std::max(1, opt.threads));
  std::snprintf(log, sizeof log, "%d", opt.log_level >= 2 ? opt.log_level - 1 : 0);
  // Cbc's "sec" counts CPU seconds; the wall-clock limit is the event handler's deadline.
  // ("-timeMode elapsed" made a second CbcMain1 call in one process crash in
  // CglPreProcess::postProcess, Cbc 2.10.8.)
  std::vector<const char*> argv{"remat", "-log", log, "-sec", sec, "-ratio", ratio};
  if (opt.threads > 1) argv.insert(argv.end(), {"-threads", threads});
  if (!opt.cbc_preprocess) argv.insert(argv.end(), {"-preprocess", "off"});
  char increment[32];
  if (double inc = objective_increment(m); inc > 0) {
    std::snprintf(increment, sizeof increment, "%.12g", inc);
    argv.insert(argv.end(), {"-increment", increment});
  }
  argv.insert(argv.end(), {"-solve", "-quit"});
  CbcMain1(int(argv.size()), argv.data(), model, nullptr, data);

  MilpRun run;
  run.infeasible = model.isProvenInfeasible();
  if (!run.infeasible) run.bound = model.getBestPossibleObjValue();
  const double* best = model.bestSolution();
  if (best && !run.infeasible) {
    run.has_solution = true;
    run.x.assign(best, best + m.num_cols());
    run.objective = model.getObjValue();
    run.optimal = model.isProvenOptimal() && !model.isSecondsLimitReached();
    if (run.optimal && run.bound > run.objective) run.bound = run.objective;
  }
  send_result(run);
}

}  // namespace

MilpRun milp_run_cbc(const MilpModel& m, const SolveOptions& opt,
                     const std::vector<double>* start, const MilpProgress& progress,
                     const LpBasis* root_basis) {
  const auto t0 = Clock::now();
  const double limit = std::max(0.01, opt.time_limit_seconds);
  MilpRun run, last;  // the final result; what the progress records said before it
  bool finished = false, got_bound = false;
  const size_t cols = size_t(m.num_cols());
  auto on_record = [&](int tag, const std::vector<double>& d) {
    if (tag == kProgressTag && d.size() == 3) {
      if (d[2] > -1e30 && d[2] < 1e30) last.bound = d[2], got_bound = true;
      return progress && progress(d[0], d[1], d[2]);
    }
    if (tag == kIncumbentTag && d.size() == 1 + cols) {
      last.has_solution = true;
      last.objective = d[0];
      last.x.assign(d.begin() + 1, d.end());
    }
    if (tag == kResultTag && d.size() >= 6) {
      run.has_solution = d[0] != 0 && d.size() == 6 + cols;
      run.objective = d[1];
      run.bound = d[2];
      run.optimal = d[3] != 0;
      run.infeasible = d[4] != 0;
      run.root_lp_unfinished = d[5] != 0;
      if (run.has_solution) run.x.assign(d.begin() + 6, d.end());
      finished = true;
    }
    return false;
  };
  std::string why;
  ChildEnd end = child_run([&](ChildChannel& ch) { run_cbc_here(m, opt, start, root_basis, ch); },
                           limit * 1.05 + 0.5, on_record, &why);
  if (!finished) {
    run = last;
    run.killed = end == ChildEnd::Killed;
    run.failure = end == ChildEnd::Crashed ? why : "";
    run.root_lp_unfinished = !got_bound;
  }
  run.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return run;
}

std::optional<Schedule> solve_checkmate_milp(const Problem& p, int64_t budget,
                                             const SolveOptions& opt,
                                             const Schedule* warm_start,
                                             const LpBasis* root_basis) {
  const auto t0 = Clock::now();
  if (budget < problem_min_budget(p)) return std::nullopt;
  MilpBuildOptions bo;
  bo.objective = MilpObjective::MinCost;
  bo.budget = budget;
  MilpModel m = milp_build(p, bo);

  // The warm start, trimmed of values it never reads (the MILP charges for them).
  std::optional<Schedule> warm;
  std::vector<double> start;
  if (warm_start) {
    Schedule w;
    w.strategy = "checkmate";
    w.S = schedule_repair_s(p, schedule_trim_s(p, warm_start->S), &w.R);
    SimResult sim = simulate(p, w);
    if (sim.valid && sim.peak_bytes <= budget) {
      warm = w;
      start = milp_point_from_schedule(m, p, w.R, w.S);
    }
  }

  MilpProgress progress;
  if (opt.progress) {
    progress = [&](double el, double inc, double bound) {
      opt.progress(el, inc < 0 ? -1 : inc * m.cost_scale, bound * m.cost_scale,
                   opt.progress_user);
      return false;
    };
  }
  MilpRun run = milp_run_cbc(m, opt, start.empty() ? nullptr : &start, progress, root_basis);

  std::optional<Schedule> best;
  double best_cost = 0;
  auto consider = [&](Schedule s) {
    SimResult sim = simulate(p, s);
    if (!sim.valid || sim.peak_bytes > budget) return;
    if (!best || sim.total_cost < best_cost) best = std::move(s), best_cost = sim.total_cost;
  };
  if (run.has_solution) {
    BoolMatrix S = milp_s_from_solution(m, run.x.data(), 0.5);
    for (Schedule& c : schedule_candidates_for_s(p, S)) consider(std::move(c));
  }
  const bool from_milp = best.has_value();
  if (warm) consider(*warm);
  if (!best) return std::nullopt;
  if (!run.has_solution) {
    std::string why = !run.failure.empty()     ? "Cbc failed (" + run.failure + ")"
                      : run.root_lp_unfinished ? "its root LP did not finish"
                      : run.killed             ? "Cbc overran the limit in preprocessing or root cuts"
                                               : "Cbc found none";
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f", run.seconds);
    best->note = std::string("no MILP incumbent in ") + secs + " s (" + why +
                 "): the warm start, best of LP rounding and the baselines (" +
                 (warm_start->strategy.empty() ? "?" : warm_start->strategy) + ")";
  } else if (!from_milp) {
    best->note = "the MILP incumbent did not fit after deriving R: the warm start (" +
                 warm_start->strategy + ")";
  }
  best->strategy = "checkmate";
  best->models = "Checkmate MILP " + std::to_string(m.num_rows()) + " x " + std::to_string(m.num_cols());
  best->solve_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  best->lower_bound = run.infeasible ? 0 : std::max(0.0, std::min(best_cost, run.bound * m.cost_scale));
  double gap = best_cost > 0 ? (best_cost - best->lower_bound) / best_cost : 0;
  best->status = run.optimal || gap <= opt.relative_gap ? "optimal"
                 : run.seconds >= opt.time_limit_seconds * 0.99 ? "time-limit"
                                                                 : "feasible";
  return best;
}

}  // namespace remat
