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

}  // namespace

Schedule schedule_improve(const Problem& p, Schedule s, int64_t budget, double seconds) {
  const auto t0 = Clock::now();
  const int n = p.size();
  SimResult sim = simulate(p, s);
  if (!sim.valid || sim.peak_bytes > budget) return s;
  for (bool improved = true; improved && since(t0) < seconds;) {
    improved = false;
    for (int t = 1; t < n && since(t0) < seconds; ++t)
      for (int i = 0; i < t; ++i) {
        if (!s.R(t, i)) continue;
        if (since(t0) >= seconds) break;  // each move simulates the whole schedule
        Schedule c = hold_instead(p, s, t, i);
        SimResult cs = simulate(p, c);
        if (!cs.valid || cs.peak_bytes > budget || cs.total_cost >= sim.total_cost) continue;
        s = std::move(c);
        sim = std::move(cs);
        improved = true;
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
  const int n = p.size();
  SimResult sim = simulate(p, s);
  if (!sim.valid || sim.peak_bytes > budget) return s;
  for (bool improved = true; improved && since(t0) < seconds;) {
    improved = false;
    std::vector<std::tuple<double, int, int>> moves;  // (-c_i, t, i)
    for (int t = 1; t < n; ++t)
      for (int i = 0; i < t; ++i)
        if (s.R(t, i) && p.nodes[size_t(i)].cost > 0) moves.emplace_back(-p.nodes[size_t(i)].cost, t, i);
    std::sort(moves.begin(), moves.end());
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
