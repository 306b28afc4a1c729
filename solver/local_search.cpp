// Local search on fitting schedules: hold a recomputed value instead, with and without a budget
// repair after the move. See solver/local_search.h.
#include "solver/local_search.h"

#include <algorithm>
#include <chrono>
#include <tuple>
#include <vector>

#include "solver/milp_model.h"

namespace remat {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// S with value i held from where it was last available (computed or held) up to stage t, where
// it was recomputed; trimmed and made retention-consistent, with its cheapest R.
Schedule hold_instead(const Problem& p, const Schedule& s, int t, int i) {
  int from = t - 1;
  while (from > i && !s.R(from, i) && !s.S(from, i)) --from;
  Schedule c;
  c.S = s.S;
  for (int u = from + 1; u <= t; ++u) c.S.set(u, i, true);
  c.S = schedule_repair_s(p, schedule_trim_s(p, c.S), &c.R);
  return c;
}

// The most bytes in use during each stage of a simulation.
std::vector<int64_t> stage_peaks(const Problem& p, const SimResult& sim) {
  std::vector<int64_t> peak(size_t(p.size()), 0);
  for (const SimStep& st : sim.steps)
    if (st.stage >= 0 && st.stage < p.size())
      peak[size_t(st.stage)] = std::max({peak[size_t(st.stage)], st.bytes_during, st.bytes_after});
  return peak;
}

// Whether hold_instead(p, s, t, i) may fit: i is absent from the stages between where it was
// last available and t, so holding it adds its bytes to each of their peaks (the trim after
// the move may free others there, so a move this passes over might have fit: a heuristic).
bool hold_may_fit(const Problem& p, const Schedule& s, const std::vector<int64_t>& peak,
                  int64_t budget, int t, int i) {
  int from = t - 1;
  while (from > i && !s.R(from, i) && !s.S(from, i)) --from;
  for (int u = from + 1; u < t; ++u)
    if (peak[size_t(u)] + p.nodes[size_t(i)].bytes > budget) return false;
  return true;
}

}  // namespace

std::vector<Recomputation> recomputations_costliest_first(const Problem& p,
                                                          const Schedule& s, bool priced_only) {
  std::vector<Recomputation> moves;
  for (int t = 1; t < p.size(); ++t)
    for (int i = 0; i < t; ++i)
      if (s.R(t, i) && (!priced_only || p.nodes[size_t(i)].cost > 0))
        moves.emplace_back(-p.nodes[size_t(i)].cost, t, i);
  std::stable_sort(moves.begin(), moves.end());
  return moves;
}

Schedule schedule_improve(const Problem& p, Schedule s, int64_t budget, double seconds,
                          double target_cost) {
  const auto t0 = Clock::now();
  SimResult sim = simulate(p, s);
  if (!sim.valid || sim.peak_bytes > budget) return s;
  auto done = [&] { return target_cost > 0 && sim.total_cost <= target_cost; };
  // With a target: given up once, a tenth of the time in, the rate so far would not reach the
  // target in the whole time (the rate only falls as the cheap holds run out).
  const double start_cost = sim.total_cost;
  auto hopeless = [&] {
    const double el = since(t0);
    return target_cost > 0 && el >= seconds / 10 &&
           (start_cost - sim.total_cost) / el * seconds < start_cost - target_cost;
  };
  for (bool improved = true; improved && !done() && since(t0) < seconds;) {
    improved = false;
    const std::vector<Recomputation> moves = recomputations_costliest_first(p, s, false);
    // With a target, moves whose value would lift a stage's peak over the budget are passed
    // over without a simulation.
    std::vector<int64_t> peak = target_cost > 0 ? stage_peaks(p, sim) : std::vector<int64_t>{};
    for (const auto& [neg_cost, t, i] : moves) {
      if (since(t0) >= seconds || hopeless()) return s;  // each move simulates the schedule
      if (!s.R(t, i)) continue;
      if (target_cost > 0 && !hold_may_fit(p, s, peak, budget, t, i)) continue;
      Schedule c = hold_instead(p, s, t, i);
      SimResult cs = simulate(p, c);
      if (!cs.valid || cs.peak_bytes > budget || cs.total_cost >= sim.total_cost) continue;
      s = std::move(c);
      sim = std::move(cs);
      improved = true;
      if (done()) return s;
      if (target_cost > 0) peak = stage_peaks(p, sim);
    }
  }
  return s;
}

// Note [repairing local search]
// schedule_improve's move (hold a value a stage recomputes, from where it was last available)
// often does not fit: the held value lifts the stages it spans above the budget, and
// schedule_improve stops at a schedule none of whose holds fit on their own. This search makes
// the move anyway and repairs the budget (Note [budget repair]: drops at the peak stage at the
// least extra cost per byte), which trades the recomputation for cheaper ones elsewhere; the
// result is kept when the simulator says it fits and costs less. Candidates are the
// recomputations R[t][i] (i < t) by cost c_i, largest first (the most a move can save); a
// repair gets at most a tenth of the time left (at least 0.2 s); after a kept move the list is
// rebuilt from the new schedule, and a pass that keeps nothing ends the search. checkmate runs
// it with the time its other stages leave (Note [checkmate at scale]).
Schedule schedule_improve_repairing(const Problem& p, Schedule s, int64_t budget,
                                    double seconds) {
  const auto t0 = Clock::now();
  SimResult sim = simulate(p, s);
  if (!sim.valid || sim.peak_bytes > budget) return s;
  for (bool improved = true; improved && since(t0) < seconds;) {
    improved = false;
    const std::vector<Recomputation> moves = recomputations_costliest_first(p, s, true);
    for (const auto& [neg_cost, t, i] : moves) {
      const double left = seconds - since(t0);
      if (left <= 0) break;
      Schedule c = hold_instead(p, s, t, i);
      SimResult cs = simulate(p, c);
      if (!cs.valid) continue;
      if (cs.peak_bytes > budget) {
        std::optional<Schedule> fit = schedule_fit_budget(p, c.S, budget, std::max(0.2, left / 10));
        if (!fit) continue;
        c = std::move(*fit);
        cs = simulate(p, c);
        if (!cs.valid || cs.peak_bytes > budget) continue;
      }
      if (cs.total_cost >= sim.total_cost * (1 - 1e-12)) continue;
      s = std::move(c);
      sim = std::move(cs);
      improved = true;
      break;
    }
  }
  return s;
}

}  // namespace remat
