// The Checkmate MILP solved with COIN-OR Cbc (the only Cbc branch-and-cut caller), and
// solve_checkmate_milp: model (milp_model.cpp) -> Cbc -> S -> cheapest R -> simulate.
//
// Cbc's C API (2.10) has no incumbent/bound callback (only a message callback without a user
// pointer that fires only for printed messages), so this file drives CbcMain1 through the C++
// API, which runs the same default strategy as Cbc_solve and takes a CbcEventHandler.
#include <chrono>
#include <cstdio>
#include <string>

#include "CbcEventHandler.hpp"
#include "CbcModel.hpp"
#include "CbcSolver.hpp"
#include "OsiClpSolverInterface.hpp"
#include "runtime/check.h"
#include "solver/milp_model.h"
#include "solver/strategies.h"

namespace remat {
namespace {

using Clock = std::chrono::steady_clock;

// Reports incumbent and bound about once a second (and on every new incumbent). Cbc clones the
// handler into its branch-and-bound model, so the state lives behind a pointer.
struct ProgressState {
  const MilpProgress* progress = nullptr;
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
    if (now > state_->deadline) return stop;
    if (!state_->progress || !*state_->progress) return noAction;
    bool has = model_->bestSolution() != nullptr;
    double inc = has ? model_->getObjValue() : -1;
    bool new_inc = has && inc != state_->last_incumbent;
    if (now - state_->last_report >= 1.0 || new_inc ||
        which == solution || which == heuristicSolution) {
      state_->last_report = now;
      state_->last_incumbent = inc;
      if ((*state_->progress)(now, inc, model_->getBestPossibleObjValue())) return stop;
    }
    return noAction;
  }

 private:
  ProgressState* state_;
};

}  // namespace

MilpRun milp_run_cbc(const MilpModel& m, const SolveOptions& opt,
                     const std::vector<double>* start, const MilpProgress& progress) {
  const auto t0 = Clock::now();
  OsiClpSolverInterface solver;
  solver.loadProblem(m.num_cols(), m.num_rows(), m.starts.data(), m.index.data(),
                     m.value.data(), m.col_lb.data(), m.col_ub.data(), m.obj.data(),
                     m.row_lb.data(), m.row_ub.data());
  for (int j = 0; j < m.num_cols(); ++j)
    if (m.is_int[j]) solver.setInteger(j);
  solver.messageHandler()->setLogLevel(opt.log_level >= 2 ? 1 : 0);

  // The root LP runs inside Clp, where neither Cbc's limit nor our event handler is checked;
  // on large graphs (MobileNet: ~250 nodes) it alone can take many minutes. Solve it first
  // under the time limit (Clp's CPU seconds: its wall-clock limit is not checked in
  // initialSolve; one thread, so the two agree); if it does not finish, there is no incumbent.
  const double limit = std::max(0.01, opt.time_limit_seconds);
  solver.getModelPtr()->setMaximumSeconds(limit);
  solver.initialSolve();
  solver.getModelPtr()->setMaximumSeconds(-1.0);
  if (!solver.isProvenOptimal()) {
    MilpRun run;
    run.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    run.infeasible = solver.isProvenPrimalInfeasible();
    run.root_lp_unfinished = !run.infeasible;
    return run;
  }

  CbcModel model(solver);
  CbcSolverUsefulData data;
  data.noPrinting_ = opt.log_level < 2;
  CbcMain0(model, data);
  model.setLogLevel(opt.log_level >= 2 ? 1 : 0);
  ProgressState state{&progress, t0, -1, -1, std::max(0.01, opt.time_limit_seconds)};
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
  std::snprintf(sec, sizeof sec, "%g", std::max(0.01, opt.time_limit_seconds));
  std::snprintf(ratio, sizeof ratio, "%g", std::max(0.0, opt.relative_gap));
  std::snprintf(threads, sizeof threads, "%d", std::max(1, opt.threads));
  std::snprintf(log, sizeof log, "%d", opt.log_level >= 2 ? opt.log_level - 1 : 0);
  // Cbc's "sec" counts CPU seconds; the wall-clock limit is the event handler's deadline.
  // ("-timeMode elapsed" made a second CbcMain1 call in one process crash in
  // CglPreProcess::postProcess, Cbc 2.10.8.)
  std::vector<const char*> argv{"remat", "-log", log, "-sec", sec, "-ratio", ratio};
  if (opt.threads > 1) argv.insert(argv.end(), {"-threads", threads});
  argv.insert(argv.end(), {"-solve", "-quit"});
  CbcMain1(int(argv.size()), argv.data(), model, nullptr, data);

  MilpRun run;
  run.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
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
  return run;
}

std::optional<Schedule> solve_checkmate_milp(const Problem& p, int64_t budget,
                                             const SolveOptions& opt,
                                             const Schedule* warm_start) {
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
  MilpRun run = milp_run_cbc(m, opt, start.empty() ? nullptr : &start, progress);

  std::optional<Schedule> best;
  double best_cost = 0;
  auto consider = [&](Schedule s) {
    SimResult sim = simulate(p, s);
    if (!sim.valid || sim.peak_bytes > budget) return;
    if (!best || sim.total_cost < best_cost) best = std::move(s), best_cost = sim.total_cost;
  };
  if (run.has_solution) {
    // The incumbent's S with the cheapest R valid for it (which computes values the MILP
    // recomputes only to checkpoint them), and, as a fallback, S with such values dropped.
    Schedule s;
    s.strategy = "checkmate";
    s.S = milp_s_from_solution(m, run.x.data(), 0.5);
    s.R = derive_cheapest_r(p, s.S);
    Schedule repaired = s;
    repaired.S = schedule_repair_s(p, s.S, &repaired.R);
    consider(std::move(s));
    consider(std::move(repaired));
  }
  if (warm) consider(*warm);
  if (!best) return std::nullopt;
  best->strategy = "checkmate";
  best->solve_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  best->lower_bound = run.infeasible ? 0 : std::max(0.0, std::min(best_cost, run.bound * m.cost_scale));
  double gap = best_cost > 0 ? (best_cost - best->lower_bound) / best_cost : 0;
  best->status = run.optimal || gap <= opt.relative_gap ? "optimal"
                 : run.seconds >= opt.time_limit_seconds * 0.99 ? "time-limit"
                                                                 : "feasible";
  return best;
}

}  // namespace remat
