// The offload strategies: a greedy that moves waiting values to host memory, the offload MILP
// and checkmate-offload, which combines them with checkmate.
#include "solver/offload.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "runtime/memory/allocator.h"
#include "solver/milp_model.h"

namespace remat {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

bool fits(const SimResult& sim, int64_t budget, int64_t host_budget) {
  return sim.valid && sim.peak_bytes <= budget &&
         (host_budget <= 0 || sim.host_peak_bytes <= host_budget);
}

// Note [offload to fit]
// A value held entering stages a..c (S[a..c][i] = 1), neither computed nor read in stages
// a+1..c-1, and read in stage c, waits on the device through stages a+1..c-1. Moving it: an
// offload in the first of those stages where it is held (a, or a+1 when stage a computes it)
// unless an earlier offload made a host copy, S cleared in between, and a prefetch in stage
// c-1 (S[c] stays: the prefetch provides it). The device then holds it through neither stage
// between the offload's stage and the prefetch's. Where the peak is, the largest value
// waiting there moves first; the simulator judges each result.
// Under CopyOverlap::Stream (Note [streamed copies]) a copy may take several stages, so each
// one starts as many stages early as it needs to hide behind their compute: the offload in an
// earlier stage that holds the value (it is on the device there anyway), then, if that is not
// enough, the value stays on the device after stage a; the prefetch that many stages before the
// read. Neither reaches the stage being relieved.
struct Wait {
  int value = -1;
  int offload_stage = -1;  // -1: an earlier offload's host copy serves
  int clear_from = -1;     // S[clear_from..prefetch_stage][value] are cleared
  int prefetch_stage = -1;
};

// Each stage's compute cost in `s` (what a streamed copy hides behind); empty under Stage
// overlap.
std::vector<double> stage_costs(const Problem& p, const Schedule& s) {
  if (p.copy_overlap == CopyOverlap::Stage) return {};
  const int n = p.size();
  std::vector<double> c(size_t(n), 0);
  for (int t = 0; t < n; ++t)
    for (int i = first_set(s.R.row(t), 0, t + 1); i <= t; i = first_set(s.R.row(t), i + 1, t + 1))
      c[size_t(t)] += p.nodes[size_t(i)].cost;
  return c;
}

// Spreads w's copies over the stages around it (Note [offload to fit], streamed copies): the
// offload back through the stages that hold the value, then the stages after it that keep it;
// the prefetch back from the read; each until the stages' compute covers the copy, none
// reaching stage t.
void spread(const Problem& p, const Schedule& s, const std::vector<double>& stage_cost, int t,
            Wait& w) {
  const double copy = double(p.nodes[size_t(w.value)].bytes) * p.copy_cost_per_byte;
  if (w.offload_stage >= 0) {
    double hidden = stage_cost[size_t(w.offload_stage)];
    for (int& o = w.offload_stage; hidden < copy && o - 1 > w.value && s.S(o - 1, w.value); --o)
      hidden += stage_cost[size_t(o - 1)];
    for (; hidden < copy && w.clear_from < t; ++w.clear_from)
      hidden += stage_cost[size_t(w.clear_from)];
  }
  for (double hidden = stage_cost[size_t(w.prefetch_stage)];
       hidden < copy && w.prefetch_stage - 1 > t; --w.prefetch_stage)
    hidden += stage_cost[size_t(w.prefetch_stage - 1)];
}

// The waiting values around stage t whose move would free their bytes in stage t.
std::vector<Wait> waits_at(const Problem& p, const std::vector<std::vector<int>>& users,
                           const std::vector<double>& stage_cost, const Schedule& s, int t) {
  const int n = p.size();
  std::vector<Wait> out;
  for (int i = 0; i < t; ++i) {
    if (!s.S(t, i) || stage_reads(users, s, t, i)) continue;
    int c = t + 1;
    while (c < n && s.S(c, i) && !stage_reads(users, s, c, i)) ++c;
    if (c >= n || !s.S(c, i)) continue;  // not read again while held: nothing to bring back
    int a = t;
    while (a - 1 > i && s.S(a - 1, i) && !stage_reads(users, s, a - 1, i)) --a;
    // a: the first stage of the wait; the value was read (or made) in stage a - 1.
    bool on_host = false;
    for (int u = 0; u < a && !on_host; ++u) on_host = s.offload(u, i) != 0;
    Wait w{i, on_host ? -1 : a, on_host ? a : a + 1, c - 1};
    if (t < w.clear_from || t >= w.prefetch_stage) continue;
    if (!stage_cost.empty()) spread(p, s, stage_cost, t, w);
    out.push_back(w);
  }
  return out;
}

void apply(Schedule& s, const Wait& w) {
  if (w.offload_stage >= 0) s.offload.set(w.offload_stage, w.value, true);
  for (int u = w.clear_from; u <= w.prefetch_stage; ++u) s.S.set(u, w.value, false);
  s.prefetch.set(w.prefetch_stage, w.value, true);
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
    if (fits(sim, budget, host_budget)) return s;
    if (sim.peak_bytes <= budget) return std::nullopt;  // the host budget binds: moving adds
    std::vector<Wait> ws =
        waits_at(p, users, stage_cost, s, sim.steps[size_t(sim.peak_step)].stage);
    if (ws.empty()) return std::nullopt;
    auto larger = [&](const Wait& x, const Wait& y) {
      return p.nodes[size_t(x.value)].bytes < p.nodes[size_t(y.value)].bytes;
    };
    apply(s, *std::max_element(ws.begin(), ws.end(), larger));
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
  if (fits(simulate(p, *keep), budget, host_budget)) return keep;
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
    for (const Wait& w : waits_at(p, users, stage_cost, s, t)) apply(s, w);
  if (!fits(simulate(p, s), budget, host_budget)) return std::nullopt;
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
  if (warm_start && fits(simulate(p, *warm_start), budget, host_budget))
    start = milp_point_from_schedule(m, p, warm_start->R, warm_start->S, warm_start);
  MilpRun run = milp_run_cbc(m, opt, start.empty() ? nullptr : &start, nullptr);
  std::optional<Schedule> best;
  double best_cost = 0;
  if (run.has_solution) {
    Schedule s = milp_offload_schedule(m, run.x.data());
    SimResult sim = simulate(p, s);
    if (fits(sim, budget, host_budget)) best = std::move(s), best_cost = sim.total_cost;
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
  if (!run.infeasible)
    best->lower_bound = std::max(0.0, std::min(best_cost, run.bound * m.cost_scale));
  const double gap = best_cost > 0 ? (best_cost - best->lower_bound) / best_cost : 0;
  best->status = run.optimal || gap <= opt.relative_gap ? "optimal" : "feasible";
  return best;
}

// Note [checkmate-offload]
// Offload can only lower the optimum: every schedule without copies is one with none. So the
// strategy starts from checkmate's answer at the budget (a third of the limit) and the
// schedules it is given (SolveOptions::candidates: plan passes the answers of the strategies it
// ran before, so checkmate-offload is never above them), then tries
// what copies add: all-keep-offload, and offload_to_fit from checkmate's schedules at budgets
// 1.25, 1.5 and 2 times larger (recompute less, move the rest), each while time is left; the
// cheapest that fits is the incumbent. Where the Checkmate MILP is small (full_milp_is_small),
// the offload MILP then runs from it for the rest of the limit, and its bound is the lower
// bound. On larger graphs the answer is heuristic and its lower bound the all-keep cost; so it
// is under CopyOverlap::Stream, where the MILP's stage-bound time is only an upper bound on
// each schedule's (Note [streamed copies]): its schedule is one more candidate.
std::optional<Schedule> solve_checkmate_offload(const Problem& p, int64_t budget,
                                                const SolveOptions& opt, std::string* why) {
  const auto t0 = Clock::now();
  const int64_t host_budget = opt.host_budget;
  std::optional<Schedule> best;
  double best_cost = 0;
  // The cheapest schedule that fit the device but not the host budget (the greedy searches run
  // without the host budget, so that a budget too small for them can be named).
  double host_rejected = -1;
  auto offer = [&](std::optional<Schedule> c) {
    if (!c) return;
    SimResult sim = simulate(p, *c);
    if (sim.valid && sim.peak_bytes <= budget && !fits(sim, budget, host_budget) &&
        (host_rejected < 0 || sim.total_cost < host_rejected))
      host_rejected = sim.total_cost;
    if (!fits(sim, budget, host_budget) || (best && sim.total_cost >= best_cost)) return;
    best = std::move(c), best_cost = sim.total_cost;
  };
  auto left = [&] { return opt.time_limit_seconds - seconds_since(t0); };
  SolveOptions part = opt;
  part.time_limit_seconds = opt.time_limit_seconds / 3;
  part.phase = nullptr;
  part.progress = nullptr;  // the live line shows this strategy's phases, not checkmate's
  SolveResult base = solve(p, "checkmate", budget, part);
  if (base.feasible) offer(base.schedule);
  if (opt.candidates)
    for (const Schedule& c : *opt.candidates) offer(c);
  if (p.copy_cost_per_byte > 0) {
    offer(solve_all_keep_offload(p, budget, 0));
    for (double f : {1.25, 1.5, 2.0}) {
      const int64_t larger = static_cast<int64_t>(double(budget) * f);
      if (left() < opt.time_limit_seconds / 6 || larger > problem_total_bytes(p)) break;
      part.time_limit_seconds = std::min(left() / 4, opt.time_limit_seconds / 6);
      SolveResult r = solve(p, "checkmate", larger, part);
      if (r.feasible) offer(offload_to_fit(p, r.schedule, budget, 0));
    }
    if (full_milp_is_small(p) && left() > 1) {
      if (opt.phase) opt.phase("offload MILP", opt.progress_user);
      SolveOptions milp = opt;
      milp.time_limit_seconds = left();
      const Schedule* warm = best ? &*best : nullptr;
      std::optional<Schedule> m = solve_offload_milp(p, budget, host_budget, milp, warm);
      if (m && p.copy_overlap == CopyOverlap::Stream) {
        offer(std::move(m));  // the MILP's bound is on stage-bound time (Note [streamed copies])
      } else if (m) {
        const Schedule proof = *m;  // its bound holds whichever schedule is kept
        offer(std::move(m));
        best->lower_bound = proof.lower_bound;
        best->bound_source = "offload MILP";
        best->models = proof.models;
        best->status = proof.status;
      }
    }
  }
  const bool host_bound = host_rejected >= 0 && (!best || host_rejected < best_cost);
  const std::string host_note =
      host_bound ? "the host budget " + pool_format_bytes(host_budget) +
                       " is too small for the copies that would help"
                 : "";
  if (!best) {
    if (why)
      *why = p.copy_cost_per_byte <= 0 ? base.message
             : host_bound ? "no schedule without copies fits the budget, and " + host_note
                          : "no schedule with or without copies fits the budget";
    return std::nullopt;
  }
  best->strategy = "checkmate-offload";
  if (best->bound_source.empty()) {
    double once = 0;  // every node runs at least once, whatever moves
    for (const ProblemNode& nd : p.nodes) once += nd.cost;
    best->lower_bound = once;
    best->bound_source = "every node runs once";
    best->status = "heuristic";
  }
  if (p.copy_cost_per_byte <= 0)
    best->note = "the problem has no host link (copy_cost_per_byte 0): checkmate's schedule";
  else if (host_bound && !best->has_copies())
    best->note = host_note + ": a schedule without copies";
  return best;
}

}  // namespace remat
