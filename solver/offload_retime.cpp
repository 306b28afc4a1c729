// Earlier prefetches: a local search that starts a schedule's prefetches sooner where the
// compute stream waits for them (Note [earlier prefetches]).
#include <algorithm>
#include <chrono>

#include "solver/offload.h"
#include "solver/offload_moves.h"

namespace remat {
namespace {

// Note [earlier prefetches]
// A move to host memory prefetches its value as late as the wait allows, spread back under
// streamed copies only as far as the stage the move relieves (Note [offload to fit]). Moves
// made later shift the peak, and copies queued on one stream delay each other: a prefetch then
// arrives after the stage that reads it has started, and the compute stream waits. For each
// prefetch, in stage order, the search tries it 1, 2, ... stages earlier (at most kMaxShift),
// the value held from there (S set up to the old stage), as far as the stage after the value's
// offload or one where the value is on the device anyway; of those that fit both budgets (not
// only the nearest: where the prefetch lands among a stage's frees moves the peak either way),
// the cheapest is taken when it costs less. Passes repeat until one changes nothing or the time
// runs out.
constexpr int kMaxShift = 64;  // stages a prefetch may move up in one step

// The stage of the last offload of value i before stage t, or -1.
int offload_before(const Schedule& s, int i, int t) {
  for (int u = t - 1; u >= 0; --u)
    if (s.offload(u, i)) return u;
  return -1;
}

}  // namespace

bool prefetch_earlier(const Problem& p, int64_t budget, int64_t host_budget,
                      double time_limit_seconds, Schedule& s) {
  if (!s.has_copies()) return false;
  const auto t0 = std::chrono::steady_clock::now();
  auto out_of_time = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >
           time_limit_seconds;
  };
  const int n = p.size();
  SimResult sim = simulate(p, s);
  if (!fits_budgets(sim, budget, host_budget)) return false;
  bool changed = false;
  Schedule c;
  for (bool pass_changed = true; pass_changed && !out_of_time();) {
    pass_changed = false;
    for (int t = 1; t < n && !out_of_time(); ++t) {
      for (int i = first_set(s.prefetch.row(t), 0, t); i < t;
           i = first_set(s.prefetch.row(t), i + 1, t)) {
        const int stop = std::max(offload_before(s, i, t), t - 1 - kMaxShift);
        std::optional<Schedule> best;
        SimResult best_sim;
        c = s;
        c.prefetch.set(t, i, false);
        for (int e = t - 1; e > stop && !c.S(e, i) && !c.R(e, i) && !c.offload(e, i); --e) {
          c.S.set(e + 1, i, true);
          c.prefetch.set(e + 1, i, false);
          c.prefetch.set(e, i, true);
          SimResult cs = simulate(p, c);
          if (!fits_budgets(cs, budget, host_budget)) continue;
          const double bar = best ? best_sim.total_cost : sim.total_cost;
          if (cs.total_cost < bar) best = c, best_sim = std::move(cs);
        }
        if (!best) continue;
        s = std::move(*best), sim = std::move(best_sim), pass_changed = changed = true;
      }
    }
  }
  return changed;
}

}  // namespace remat
