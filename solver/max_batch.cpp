// Max batch: the largest batch whose schedule fits a budget with compute cost at most one extra
// forward pass over all-keep. Baselines: binary search over batch with solve(). "checkmate":
// the MinPeak MILP (milp_model.h) minimises peak activation bytes per sample under the cost
// cap; batch = (budget - constant) / P, verified with simulate; the bound on P bounds batch.
#include <chrono>
#include <cmath>
#include <limits>

#include "runtime/check.h"
#include "solver/milp_model.h"
#include "solver/strategies.h"

namespace remat {
namespace {

using Clock = std::chrono::steady_clock;

// All-keep cost plus one forward pass, at the problem's own batch.
double cost_cap(const Problem& p) {
  double all = 0, fwd = 0;
  for (const auto& nd : p.nodes) {
    all += nd.cost;
    if (nd.kind == ProblemNodeKind::Forward) fwd += nd.cost;
  }
  return all + fwd;
}

// Whether `s` fits `budget` at `batch` within the cost cap (costs scale linearly with batch).
bool schedule_fits(const Problem& p, const Schedule& s, int64_t batch, int64_t budget) {
  if (batch <= 0) return true;
  Problem pb = problem_at_batch(p, batch);
  SimResult sim = simulate(pb, s);
  double cap = cost_cap(pb);
  return sim.valid && sim.peak_bytes <= budget && sim.total_cost <= cap * (1 + 1e-9);
}

// A baseline strategy's schedule at `batch` if it fits within the cap.
std::optional<Schedule> baseline_at(const Problem& p, const std::string& strategy,
                                    int64_t batch, int64_t budget, const SolveOptions& opt) {
  Problem pb = problem_at_batch(p, batch);
  if (problem_min_budget(pb) > budget) return std::nullopt;
  SolveResult r = solve(pb, strategy, budget, opt);
  if (!r.feasible || r.sim.total_cost > cost_cap(pb) * (1 + 1e-9)) return std::nullopt;
  return r.schedule;
}

// Binary search for the largest batch at which the strategy fits (batch 0 if even 1 does not).
MaxBatchResult search_strategy(const Problem& p, const std::string& strategy, int64_t budget,
                               const SolveOptions& opt, std::optional<Schedule>* best_sched) {
  MaxBatchResult res;
  res.strategy = strategy;
  auto fits = [&](int64_t b) {
    auto s = baseline_at(p, strategy, b, budget, opt);
    if (s && best_sched && b > res.batch) *best_sched = s;
    return s.has_value();
  };
  if (!fits(1)) return res;
  int64_t lo = 1, hi = 2;  // fits(lo); hi unknown
  while (fits(hi)) {
    lo = hi;
    res.batch = lo;
    hi *= 2;
  }
  res.batch = lo;
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid)) lo = mid, res.batch = lo;
    else hi = mid;
  }
  res.batch = lo;
  res.upper_bound = lo;
  res.status = "exact-search";
  return res;
}

// The largest batch at which `s` fits, starting from the guess `b0`.
int64_t largest_fitting_batch(const Problem& p, const Schedule& s, int64_t b0, int64_t budget) {
  int64_t b = std::max<int64_t>(0, b0);
  while (b > 0 && !schedule_fits(p, s, b, budget)) --b;
  while (schedule_fits(p, s, b + 1, budget)) ++b;
  return b;
}

const char* const kBaselines[] = {"all-keep",           "chen-sqrtn", "chen-sqrtn-linear",
                                  "chen-greedy",        "chen-greedy-linear", "griewank"};

}  // namespace

MaxBatchResult max_batch(const Problem& p, const std::string& strategy, int64_t budget,
                         const SolveOptions& opt) {
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  if (strategy != "checkmate") {
    MaxBatchResult r = search_strategy(p, strategy, budget, opt, nullptr);
    r.solve_seconds = elapsed();
    return r;
  }
  MaxBatchResult res;
  res.strategy = strategy;
  const double room = double(budget - p.constant_bytes);  // bytes for activations
  if (room <= 0) {
    res.status = "infeasible";
    return res;
  }
  // Warm starts: each baseline's best schedule (a schedule's structure is batch-independent).
  std::vector<Schedule> starts;
  for (const char* b : kBaselines) {
    std::optional<Schedule> s;
    MaxBatchResult r = search_strategy(p, b, budget, opt, &s);
    if (s) starts.push_back(*s);
    res.batch = std::max(res.batch, r.batch);
  }
  if (auto all = solve_all_keep(p)) starts.push_back(*all);

  MilpBuildOptions bo;
  bo.objective = MilpObjective::MinPeak;
  bo.cost_cap = cost_cap(p);
  MilpModel m = milp_build(p, bo);
  const double per_model_unit = m.byte_scale;  // bytes per sample for P = 1
  std::vector<double> start;
  double start_p = 0;
  for (const Schedule& s0 : starts) {
    Schedule s;
    s.S = schedule_repair_s(p, schedule_trim_s(p, s0.S), &s.R);
    SimResult sim = simulate(p, s);
    if (!sim.valid || sim.total_cost > bo.cost_cap * (1 + 1e-9)) continue;
    auto x = milp_point_from_schedule(m, p, s.R, s.S);
    if (start.empty() || x[m.p_col] < start_p) start = x, start_p = x[m.p_col];
  }
  auto to_batch = [&](double pm) {
    return pm > 0 ? room / (pm * per_model_unit) : std::numeric_limits<double>::infinity();
  };
  // Stops as soon as the incumbent's batch equals the bound's: a gap on P below one batch
  // step proves nothing more about the batch.
  MilpProgress progress = [&](double el, double inc, double bound) {
    if (opt.progress)
      opt.progress(el, inc < 0 ? -1 : to_batch(inc), to_batch(bound), opt.progress_user);
    if (inc <= 0 || bound <= 0) return false;
    return std::floor(to_batch(inc) * (1 - 1e-9)) >= std::floor(to_batch(bound) + 1e-9);
  };
  SolveOptions mopt = opt;
  mopt.time_limit_seconds = std::max(1.0, opt.time_limit_seconds - elapsed());
  MilpRun run = milp_run_cbc(m, mopt, start.empty() ? nullptr : &start, progress);
  if (run.has_solution) {
    Schedule s;
    s.S = schedule_repair_s(p, milp_s_from_solution(m, run.x.data(), 0.5), &s.R);
    int64_t guess = int64_t(std::floor(to_batch(run.objective)));
    res.batch = std::max(res.batch, largest_fitting_batch(p, s, guess, budget));
  }
  if (!run.infeasible && run.bound > 0) {
    double ub = std::floor(to_batch(run.bound) + 1e-9);
    res.upper_bound = std::max<int64_t>(res.batch, int64_t(std::min(ub, 9e18)));
  } else {
    res.upper_bound = run.infeasible ? res.batch : std::numeric_limits<int64_t>::max();
  }
  res.status = res.upper_bound == res.batch ? "optimal"
               : run.has_solution && run.seconds >= mopt.time_limit_seconds * 0.99 ? "time-limit"
               : run.has_solution ? "feasible"
                                  : "no-incumbent";
  res.solve_seconds = elapsed();
  return res;
}

}  // namespace remat
