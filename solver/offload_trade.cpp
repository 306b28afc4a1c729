// Copies for recomputations: a local search that replaces a schedule's recomputations by
// copies to host memory and back where that is cheaper (Note [copies for recomputations]).
#include <chrono>

#include "solver/local_search.h"
#include "solver/offload.h"
#include "solver/offload_moves.h"

namespace remat {
namespace {

// Note [copies for recomputations]
// checkmate's schedule recomputes what does not fit; a copy to host memory and back may free
// the same bytes for less, above all under streamed copies (Note [streamed copies]), where a
// copy runs behind the computes of many stages. A local search from the best schedule so far
// tries each recomputation of a value v in a stage t, costliest first: S holds v from the last
// stage u before t that computes or holds it through t, R's rows u..t are derived again (the
// recomputation goes, and whatever only it needed; a value an earlier move prefetches arrives
// without being computed), holds nobody reads are cleared, and where
// that no longer fits, offload_to_fit moves the values waiting at the peak (v among them) to
// host memory (Note [offload to fit]). The simulator prices the result; the first that fits
// and costs less is taken and the search starts again from it, until a pass finds nothing or
// its time runs out. Holding v may alone fit the budget: then the search lowers the cost
// without a copy (where checkmate stopped at its time limit with a gap).

// Clears S where a value without copies is held but not read before it is computed again.
void clear_idle_holds(const Problem& p, const std::vector<std::vector<int>>& users, Schedule& s) {
  const int n = p.size();
  for (int i = 0; i < n; ++i) {
    if (value_has_copies(s, i)) continue;
    for (int t = n - 1; t > i; --t) {
      if (!s.S(t, i)) continue;
      bool read = false;
      for (int u : users[size_t(i)]) read = read || (u <= t && s.R(t, u));
      const bool carried = t + 1 < n && s.S(t + 1, i) && !s.R(t, i);
      if (!read && !carried) s.S.set(t, i, false);
    }
  }
}

// `s` with the recomputation of v in stage t replaced by holding v from its last stage before
// t, written into `c` (whose storage a search reuses); false when v has copies already or
// nothing holds it before t.
bool hold(const Problem& p, const std::vector<std::vector<int>>& users, const Schedule& s, int v,
          int t, std::vector<uint8_t>& need, Schedule& c) {
  if (value_has_copies(s, v)) return false;
  int u = t - 1;
  while (u >= v && !s.R(u, v) && !s.S(u, v)) --u;
  if (u < v) return false;
  c = s;
  for (int w = u + 1; w <= t; ++w) c.S.set(w, v, true);
  const std::vector<uint8_t> zero(size_t(p.size()), 0);
  for (int w = u; w <= t; ++w) {
    c.R.set_row(w, zero.data(), p.size());
    derive_cheapest_r_row_with_copies(p, c, w, need, c.R);  // prefetched values arrive
  }
  clear_idle_holds(p, users, c);
  return true;
}

}  // namespace

std::optional<Schedule> trade_recomputes_for_copies(const Problem& p, const Schedule& base,
                                                    int64_t budget, int64_t host_budget,
                                                    double time_limit_seconds) {
  if (p.copy_cost_per_byte <= 0) return std::nullopt;
  const auto t0 = std::chrono::steady_clock::now();
  auto out_of_time = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >
           time_limit_seconds;
  };
  const int n = p.size();
  Schedule s = base;
  if (!s.has_copies()) s.offload = BoolMatrix(n, n), s.prefetch = BoolMatrix(n, n);
  SimResult sim = simulate(p, s);
  if (!fits_budgets(sim, budget, host_budget)) return std::nullopt;
  const auto users = problem_users(p);
  std::vector<uint8_t> need(size_t(n), 0);
  Schedule c;  // each candidate, in storage kept across them
  for (bool improved = true; improved && !out_of_time();) {
    improved = false;
    for (const auto& [neg_cost, t, v] : recomputations_costliest_first(p, s, true)) {
      if (out_of_time()) break;
      if (!hold(p, users, s, v, t, need, c)) continue;
      SimResult cs = simulate(p, c);
      if (!fits_budgets(cs, budget, host_budget)) {  // move values to host memory until it fits
        std::optional<Schedule> moved = offload_to_fit(p, c, budget, host_budget);
        if (!moved) continue;
        c = std::move(*moved);
        cs = simulate(p, c);
      }
      if (!fits_budgets(cs, budget, host_budget) || cs.total_cost >= sim.total_cost) continue;
      s = std::move(c), sim = std::move(cs), improved = true;
      break;
    }
  }
  return s;
}

}  // namespace remat
