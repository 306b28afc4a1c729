// "lp-offload": lp's counterpart with copies, the offload MILP's LP relaxation rounded in
// three phases (Note [lp-offload]).
#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <random>

#include "solver/milp_model.h"
#include "solver/offload.h"
#include "solver/offload_moves.h"
#include "solver/offload_pick.h"
#include "solver/relaxation_search.h"

namespace remat {
namespace {

using Clock = std::chrono::steady_clock;

// Note [lp-offload]
// lp (Note [lp strategy]) rounds an LP relaxation in two phases: S, then the cheapest R for
// it. lp-offload rounds the offload MILP's LP relaxation (Note [offload in the MILP]) where the
// Checkmate MILP is small (full_milp_is_small), in three. Phase one rounds S and the copies at
// one threshold (0.01 .. 0.99) or at random (SolveOptions::rounding_samples, seeded): a held
// value is offloaded where OUT* passes, and prefetched where IN* passes while its host copy
// exists; between the two it leaves S, and the stage after the prefetch holds it. Phase two
// derives the cheapest R, a prefetched value arriving for the next stage without being computed
// there, in both readings of S (as rounded, and retention-consistent, the copied values' holds
// kept; schedule_candidates_for_s). Phase three fits the budget: the values waiting at the
// peak move to host memory (offload_to_fit, Note [offload to fit]); where none waits there,
// the held value without copies whose drop (until its next read, which then recomputes it)
// lowers the peak at the least cost per byte is dropped, and the moves are tried again. Where
// no rounding fits, the LP is solved again at a budget lowered by the least overshoot (Note
// [relaxation margin]).
// On every graph, also the stage relaxation's roundings (lp's, which scale to thousands of
// nodes) at 1.25, 1.5 and 2 times the budget, their waiting values moved until they fit: the
// relaxation's budget relaxed, the excess sent to host memory. lp's own answer at the budget
// (a third of the limit) is a candidate, so lp-offload is never above lp, and from the
// cheapest the search that trades recomputations for copies (Note [copies for
// recomputations]) runs for what is left. Its lower bound is the offload LP's objective under
// stage-bound copies where that LP was solved, and otherwise every node's cost once (under
// streamed copies the LP's stage-bound time bounds nothing).

// An offload model's solution rounded (phases one and two of Note [lp-offload]; `on` says
// whether a column's value rounds to 1): S, the offloads of held values, the prefetches of
// their host copies (the value is then not held from the copy until the prefetch's stage, and
// held in the next), and the cheapest R for them.
Schedule round_offload_solution(const Problem& p, const MilpModel& m, const double* x,
                                const std::function<bool(double)>& on) {
  const int n = m.n;
  Schedule s;
  s.S = BoolMatrix(n, n);
  for (int t = 1; t < n; ++t)
    for (int i = 0; i < t; ++i)
      if (m.s(t, i) >= 0 && on(x[m.s(t, i)])) s.S.set(t, i, true);
  s.offload = BoolMatrix(n, n);
  s.prefetch = BoolMatrix(n, n);
  for (int i = 0; i < n; ++i) {
    int host_from = -1;  // the first stage after the offload whose copy is on the host
    for (int t = i + 1; t < n; ++t) {
      if (host_from < 0 && m.out(t, i) >= 0 && s.S(t, i) && on(x[m.out(t, i)])) {
        s.offload.set(t, i, true);
        host_from = t + 1;
      } else if (host_from >= 0 && host_from <= t && m.in(t, i) >= 0 && on(x[m.in(t, i)])) {
        s.prefetch.set(t, i, true);
        for (int u = host_from; u <= t; ++u) s.S.set(u, i, false);
        s.S.set(t + 1, i, true);
        host_from = t + 1;  // the host copy serves later prefetches too
      }
    }
  }
  s.R = derive_cheapest_r_with_copies(p, s);
  return s;
}

// The other reading of a rounding (schedule_candidates_for_s): S made retention-consistent
// (schedule_repair_s: nothing computed only to be held), the columns of the values with copies
// kept as they are.
Schedule repaired_reading(const Problem& p, const Schedule& s) {
  Schedule r = s;
  r.S = schedule_repair_s(p, s.S, nullptr);
  const std::vector<uint8_t> copied = values_with_copies(s, p.size());
  for (int i = 0; i < p.size(); ++i)
    if (copied[size_t(i)])
      for (int t = 0; t < p.size(); ++t) r.S.set(t, i, s.S(t, i));
  r.R = derive_cheapest_r_with_copies(p, r);
  return r;
}

// Phase three: a rounding over the budget moves the values waiting at the peak to host memory
// (offload_to_fit); where none waits there, a value held at the peak stage without copies is
// dropped there until it is next read (then recomputed), the one that lowers the peak at the
// least cost per byte, and the moves are tried again. nullopt when neither lowers the peak.
std::optional<Schedule> fit_budget(const Problem& p, Schedule s, int64_t budget) {
  const int n = p.size();
  const auto users = problem_users(p);
  for (int round = 0; round < n; ++round) {
    SimResult sim = simulate(p, s);
    if (!sim.valid) return std::nullopt;
    if (sim.peak_bytes <= budget) return s;
    if (std::optional<Schedule> moved = offload_to_fit(p, s, budget, 0)) return moved;
    const int t = sim.steps[size_t(sim.peak_step)].stage;
    std::optional<Schedule> best;
    double best_score = 0;
    const std::vector<uint8_t> copied = values_with_copies(s, n);
    for (int i = 0; i < t; ++i) {
      if (!s.S(t, i) || copied[size_t(i)]) continue;
      Schedule c = s;
      for (int u = t; u < n && c.S(u, i); ++u) {
        c.S.set(u, i, false);
        if (stage_reads(users, s, u, i)) break;
      }
      c.R = derive_cheapest_r_with_copies(p, c);
      SimResult cs = simulate(p, c);
      if (!cs.valid || cs.peak_bytes >= sim.peak_bytes) continue;
      const double score =
          (cs.total_cost - sim.total_cost) / double(sim.peak_bytes - cs.peak_bytes);
      if (!best || score < best_score) best = std::move(c), best_score = score;
    }
    if (!best) return std::nullopt;
    s = std::move(*best);
  }
  return std::nullopt;
}

// The offload LP at `budget`, its roundings offered to `pick` until `seconds` pass; the LP's
// objective (real units) through `bound`, or 0 when it was not solved. Where no rounding fits,
// the LP is solved again at a budget lowered by the least overshoot (Note [relaxation margin]).
void offload_lp_roundings(const Problem& p, int64_t budget, int64_t host_budget,
                          const SolveOptions& opt, double seconds, OffloadPick& pick,
                          double* bound, std::string* model) {
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  *bound = 0;
  MilpBuildOptions bo;
  bo.budget = budget;
  bo.offload = true;
  bo.host_budget = host_budget;
  std::mt19937_64 rng(opt.seed);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  for (int round = 0; round < 4 && elapsed() < seconds; ++round) {
    MilpModel m = milp_build(p, bo);
    if (round == 0)
      *model = "offload LP " + std::to_string(m.num_rows()) + " x " + std::to_string(m.num_cols());
    std::vector<double> x;
    double objective = 0;
    if (milp_solve_lp(m, seconds - elapsed(), opt.log_level, &x, &objective) !=
        LpStatus::Optimal)
      return;
    if (round == 0) *bound = objective * m.cost_scale;  // later rounds bound other problems
    int64_t least_peak = std::numeric_limits<int64_t>::max();
    bool fit = false;
    auto offer = [&](Schedule s) {
      SimResult sim = simulate(p, s);
      if (!sim.valid) return;
      least_peak = std::min(least_peak, sim.peak_bytes);
      std::optional<Schedule> fitting = fit_budget(p, std::move(s), budget);
      if (!fitting) return;
      fit = true;
      pick.offer(std::move(fitting));  // over the host budget: remembered, named (OffloadPick)
    };
    auto round_at = [&](const std::function<bool(double)>& on) {
      Schedule s = round_offload_solution(p, m, x.data(), on);
      offer(repaired_reading(p, s));
      offer(std::move(s));
    };
    for (int k = 1; k <= 99 && elapsed() < seconds; ++k)
      round_at([&](double f) { return f >= k / 100.0; });
    for (int k = 0; k < opt.rounding_samples && elapsed() < seconds; ++k)
      round_at([&](double f) { return uni(rng) < f; });
    if (fit || least_peak == std::numeric_limits<int64_t>::max()) return;
    bo.budget -= least_peak - budget;  // Note [relaxation margin]
    if (bo.budget < problem_min_budget(p)) return;
  }
}

}  // namespace

std::optional<Schedule> offload_lp_rounding(const Problem& p, int64_t budget,
                                            const SolveOptions& opt, double* bound) {
  OffloadPick pick(p, budget, opt.host_budget);
  std::string model;
  offload_lp_roundings(p, budget, opt.host_budget, opt, opt.time_limit_seconds, pick, bound,
                       &model);
  return pick.best();
}

std::optional<Schedule> solve_lp_offload(const Problem& p, int64_t budget,
                                         const SolveOptions& opt, std::string* why) {
  const auto t0 = Clock::now();
  auto left = [&] {
    return opt.time_limit_seconds - std::chrono::duration<double>(Clock::now() - t0).count();
  };
  OffloadPick pick(p, budget, opt.host_budget);
  // Max batch's probes need any schedule within their cost cap, not the cheapest.
  auto capped = [&] {
    return opt.cost_cap > 0 && pick.best() && pick.best_cost() <= opt.cost_cap * (1 + 1e-9);
  };
  SolveOptions part = opt;
  part.time_limit_seconds = opt.time_limit_seconds / 3;
  part.phase = nullptr;
  std::string lp_why;
  pick.offer(solve_lp_rounding(p, budget, part, nullptr, nullptr, &lp_why));
  if (opt.candidates)
    for (const Schedule& c : *opt.candidates) pick.offer(c);
  std::string models;
  if (p.copy_cost_per_byte > 0 && !capped()) {
    double lp_bound = 0;
    if (full_milp_is_small(p) && left() > 0) {
      if (opt.phase) opt.phase("offload LP and rounding", opt.progress_user);
      const double seconds = std::min(left(), opt.time_limit_seconds / 3);
      offload_lp_roundings(p, budget, opt.host_budget, opt, seconds, pick, &lp_bound, &models);
    }
    if (opt.phase) opt.phase("LP roundings at larger budgets", opt.progress_user);
    for (double f : {1.25, 1.5, 2.0}) {
      const int64_t larger = static_cast<int64_t>(double(budget) * f);
      if (left() <= 0 || capped() || larger > problem_total_bytes(p)) break;
      const double seconds = std::min(left() / 4, opt.time_limit_seconds / 9);
      RelaxationSearch rs = relaxation_lp_search(p, larger, opt, seconds);
      if (rs.best) pick.offer(offload_to_fit(p, *rs.best, budget, 0));
    }
    if (pick.best() && left() > 0 && !capped()) {
      if (opt.phase) opt.phase("copies for recomputations", opt.progress_user);
      const Schedule from = *pick.best();
      pick.offer(trade_recomputes_for_copies(p, from, budget, opt.host_budget, left()));
    }
    if (lp_bound > 0 && p.copy_overlap == CopyOverlap::Stage) {
      Schedule proof;
      proof.lower_bound = lp_bound;
      proof.bound_source = "offload LP";
      proof.models = models;
      proof.status = "heuristic";
      pick.prove(proof);
    }
  }
  std::optional<Schedule> s = pick.finish(
      "lp-offload", "lp: " + lp_why,
      "the problem has no host link (copy_cost_per_byte 0): lp's schedule", why);
  if (s) s->solve_seconds = opt.time_limit_seconds - left();
  return s;
}

}  // namespace remat
