// The offload strategies: a greedy that moves waiting values to host memory, the offload MILP
// and checkmate-offload, which combines them with checkmate.
#include "solver/offload.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "runtime/memory/allocator.h"
#include "solver/milp_model.h"
#include "solver/offload_moves.h"
#include "solver/offload_pick.h"

namespace remat {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// offload_to_fit's moves, with the copies spread over `stage_cost` (streamed) or not (empty).
std::optional<Schedule> move_to_fit(const Problem& p, const Schedule& base, int64_t budget,
                                    int64_t host_budget, const std::vector<double>& stage_cost) {
  const int n = p.size();
  const auto users = problem_users(p);
  Schedule s = base;
  if (!s.has_copies()) s.offload = BoolMatrix(n, n), s.prefetch = BoolMatrix(n, n);
  for (int moves = 0; moves <= n * n; ++moves) {
    SimResult sim = simulate(p, s);
    if (!sim.valid) return std::nullopt;
    if (fits_budgets(sim, budget, host_budget)) return s;
    if (sim.peak_bytes <= budget) return std::nullopt;  // the host budget binds: moving adds
    std::vector<Wait> ws =
        waits_at(p, users, stage_cost, s, sim.steps[size_t(sim.peak_step)].stage);
    if (ws.empty()) return std::nullopt;
    auto larger = [&](const Wait& x, const Wait& y) {
      return p.nodes[size_t(x.value)].bytes < p.nodes[size_t(y.value)].bytes;
    };
    apply_wait(s, *std::max_element(ws.begin(), ws.end(), larger));
  }
  return std::nullopt;
}

}  // namespace

// Under Stream overlap the moves with spread copies hold values longer, which can call for
// more moves than copies kept within their stages; both run, and the faster answer is kept.
std::optional<Schedule> offload_to_fit(const Problem& p, const Schedule& base, int64_t budget,
                                       int64_t host_budget) {
  if (p.copy_cost_per_byte <= 0) return std::nullopt;
  std::optional<Schedule> within = move_to_fit(p, base, budget, host_budget, {});
  if (p.copy_overlap == CopyOverlap::Stage) return within;
  std::optional<Schedule> spread = move_to_fit(p, base, budget, host_budget, stage_costs(p, base));
  if (!within || !spread) return within ? within : spread;
  return simulate(p, *spread).total_cost <= simulate(p, *within).total_cost ? spread : within;
}

std::optional<Schedule> solve_all_keep_offload(const Problem& p, int64_t budget,
                                               int64_t host_budget, std::string* why) {
  std::optional<Schedule> keep = solve_all_keep(p);
  if (!keep) return std::nullopt;
  keep->strategy = "all-keep-offload";
  if (fits_budgets(simulate(p, *keep), budget, host_budget)) return keep;
  std::optional<Schedule> s = offload_to_fit(p, *keep, budget, host_budget);
  if (!s && why && host_budget > 0)
    if (std::optional<Schedule> unbounded = offload_to_fit(p, *keep, budget, 0))
      *why = "the host budget " + pool_format_bytes(host_budget) +
             " is too small: its copies need " +
             pool_format_bytes(simulate(p, *unbounded).host_peak_bytes);
  return s;
}

// Note [offload every checkpoint]
// chen-sqrtn-offload, the offload counterpart of Chen's sqrt(n) baseline: its segmentation
// (checkpoints every sqrt(n) forward nodes, segments recomputed in the backward pass) with every
// value that waits on the device moved to host memory, not only those at the peak: each of
// offload_to_fit's moves (Note [offload to fit]) at every stage, in stage order. The checkpoints
// are what waits longest; whatever else is held unread between two reads moves too. It fits the
// budget or not; nothing is tuned to it.
std::optional<Schedule> solve_chen_sqrtn_offload(const Problem& p, int64_t budget,
                                                 int64_t host_budget) {
  if (p.copy_cost_per_byte <= 0) return std::nullopt;
  std::optional<Schedule> base = solve_chen_sqrtn(p, std::numeric_limits<int64_t>::max(), false);
  if (!base) return std::nullopt;
  const int n = p.size();
  const auto users = problem_users(p);
  Schedule s = *base;
  s.offload = BoolMatrix(n, n);
  s.prefetch = BoolMatrix(n, n);
  const std::vector<double> stage_cost = stage_costs(p, s);
  for (int t = 0; t < n; ++t)
    for (const Wait& w : waits_at(p, users, stage_cost, s, t)) apply_wait(s, w);
  if (!fits_budgets(simulate(p, s), budget, host_budget)) return std::nullopt;
  s.strategy = "chen-sqrtn-offload";
  return s;
}

std::optional<Schedule> solve_offload_milp(const Problem& p, int64_t budget, int64_t host_budget,
                                           const SolveOptions& opt, const Schedule* warm_start) {
  const auto t0 = Clock::now();
  if (p.copy_cost_per_byte <= 0 || budget < problem_min_budget(p)) return std::nullopt;
  MilpBuildOptions bo;
  bo.budget = budget;
  bo.offload = true;
  bo.host_budget = host_budget;
  MilpModel m = milp_build(p, bo);
  std::vector<double> start;
  if (warm_start && fits_budgets(simulate(p, *warm_start), budget, host_budget))
    start = milp_point_from_schedule(m, p, warm_start->R, warm_start->S, warm_start);
  MilpRun run = milp_run_cbc(m, opt, start.empty() ? nullptr : &start, nullptr);
  std::optional<Schedule> best;
  double best_cost = 0;
  if (run.has_solution) {
    Schedule s = milp_offload_schedule(m, run.x.data());
    SimResult sim = simulate(p, s);
    if (fits_budgets(sim, budget, host_budget)) best = std::move(s), best_cost = sim.total_cost;
  }
  if (warm_start && !start.empty()) {
    SimResult sim = simulate(p, *warm_start);
    if (!best || sim.total_cost < best_cost) best = *warm_start, best_cost = sim.total_cost;
  }
  if (!best) return std::nullopt;
  best->strategy = "checkmate-offload";
  best->models =
      "offload MILP " + std::to_string(m.num_rows()) + " x " + std::to_string(m.num_cols());
  best->solve_seconds = seconds_since(t0);
  best->lower_bound =
      run.infeasible ? 0 : std::max(0.0, std::min(best_cost, run.bound * m.cost_scale));
  best->bound_source = "offload MILP";
  const double gap = best_cost > 0 ? (best_cost - best->lower_bound) / best_cost : 0;
  best->status = run.optimal || gap <= opt.relative_gap ? "optimal" : "feasible";
  return best;
}

// Note [checkmate-offload]
// Offload can only lower the optimum: every schedule without copies is one with none. So the
// strategy starts from checkmate's answer at the budget (a third of the limit) and the
// schedules it is given (SolveOptions::candidates: plan passes the answers of the strategies it
// ran before, so checkmate-offload is never above them), then tries what copies add:
// all-keep-offload, greedy-offload, and offload_to_fit from checkmate's schedules at budgets
// 1.25, 1.5 and 2 times larger (recompute less, move the rest), each while time is left. From
// the cheapest that fits, the search that trades recomputations for copies (Note [copies for
// recomputations]) runs for the rest of the limit, or a sixth of it where the Checkmate MILP is
// small (full_milp_is_small): there the offload MILP then runs from its answer for the rest,
// and its bound is the lower bound. On larger graphs the answer is heuristic and its lower
// bound the all-keep cost; so it is under CopyOverlap::Stream, where the MILP's stage-bound
// time is only an upper bound on each schedule's (Note [streamed copies]): its schedule is one
// more candidate.
std::optional<Schedule> solve_checkmate_offload(const Problem& p, int64_t budget,
                                                const SolveOptions& opt, std::string* why) {
  const auto t0 = Clock::now();
  OffloadPick pick(p, budget, opt.host_budget);
  auto left = [&] { return opt.time_limit_seconds - seconds_since(t0); };
  SolveOptions part = opt;
  part.time_limit_seconds = opt.time_limit_seconds / 3;
  part.phase = nullptr;
  part.progress = nullptr;  // the live line shows this strategy's phases, not checkmate's
  SolveResult base = solve(p, "checkmate", budget, part);
  if (base.feasible) pick.offer(base.schedule);
  if (opt.candidates)
    for (const Schedule& c : *opt.candidates) pick.offer(c);
  if (p.copy_cost_per_byte > 0) {
    // The greedy searches run without the host budget, so that one too small can be named.
    pick.offer(solve_all_keep_offload(p, budget, 0));
    pick.offer(solve_greedy_offload(p, budget, 0, opt.time_limit_seconds / 6));
    for (double f : {1.25, 1.5, 2.0}) {
      const int64_t larger = static_cast<int64_t>(double(budget) * f);
      if (left() < opt.time_limit_seconds / 6 || larger > problem_total_bytes(p)) break;
      part.time_limit_seconds = std::min(left() / 4, opt.time_limit_seconds / 6);
      SolveResult r = solve(p, "checkmate", larger, part);
      if (r.feasible) pick.offer(offload_to_fit(p, r.schedule, budget, 0));
    }
    if (pick.best() && left() > 0) {
      if (opt.phase) opt.phase("copies for recomputations", opt.progress_user);
      const Schedule from = *pick.best();
      const bool milp_follows = full_milp_is_small(p);
      const double limit = milp_follows ? std::min(left(), opt.time_limit_seconds / 6) : left();
      pick.offer(trade_recomputes_for_copies(p, from, budget, opt.host_budget, limit));
    }
    if (full_milp_is_small(p) && left() > 1) {
      if (opt.phase) opt.phase("offload MILP", opt.progress_user);
      SolveOptions milp = opt;
      milp.time_limit_seconds = left();
      const std::optional<Schedule> warm = pick.best();
      std::optional<Schedule> m =
          solve_offload_milp(p, budget, opt.host_budget, milp, warm ? &*warm : nullptr);
      // Its bound is on stage-bound time: under Stream, not a bound (Note [streamed copies]).
      if (m && p.copy_overlap == CopyOverlap::Stage) pick.prove(*m);
      pick.offer(std::move(m));
    }
  }
  return pick.finish("checkmate-offload", base.message,
                     "the problem has no host link (copy_cost_per_byte 0): checkmate's schedule",
                     why);
}

}  // namespace remat
