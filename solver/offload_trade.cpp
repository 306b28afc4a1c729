// Copies for recomputations: a local search that replaces a schedule's recomputations by
// copies to host memory and back where that is cheaper (Note [copies for recomputations]).
#include <algorithm>
#include <chrono>
#include <limits>

#include "solver/local_search.h"
#include "solver/offload.h"
#include "solver/offload_moves.h"

namespace remat {
namespace {

// Note [copies for recomputations]
// checkmate's schedule recomputes what does not fit; a copy to host memory and back may free the
// same bytes for less, above all under streamed copies (Note [streamed copies]), where a copy runs
// behind the computes of many stages. A local search from the best schedule so far tries each
// recomputation of a value v in a stage t, costliest first: S holds v from the last stage u before
// t that computes or holds it through t, R's rows u..t are derived again (the recomputation goes,
// and whatever only it needed; a value an earlier move prefetches arrives without being computed),
// holds nobody reads are cleared, and where that no longer fits, offload_to_fit moves the values
// waiting at the peak (v among them) to host memory (Note [offload to fit]). Where that fails or
// costs no less, the greedy's moves (greedy_to_fit, Note [greedy offload]) free the peak instead,
// each waiting value moved or recomputed, whichever adds less time per byte, given up once the
// cost reaches the schedule's: holding a dear value may pay for recomputing a cheap one. The
// simulator prices the result; the first that fits and costs less is taken, and the search goes on
// down the new schedule's recomputations from the traded one's place; after each pass, prefetches
// start earlier where the compute stream waits for them (Note [earlier prefetches]); passes from
// the costliest repeat until one changes nothing or the time runs out. Holding v may alone fit the
// budget: then the search lowers the cost without a copy (where checkmate stopped at its time
// limit with a gap).

// Clears S where a value without copies (`copied` 0) is held but not read before it is
// computed again. Stages run from the last: whether stage t + 1 still holds a value is settled
// before stage t asks.
void clear_idle_holds(const Problem& p, const std::vector<std::vector<int>>& users,
                      const std::vector<uint8_t>& copied, Schedule& s) {
  const int n = p.size();
  for (int t = n - 1; t > 0; --t) {
    const uint8_t* held = s.S.row(t);
    for (int i = first_set(held, 0, t); i < t; i = first_set(held, i + 1, t)) {
      if (copied[size_t(i)]) continue;
      bool read = false;
      for (int u : users[size_t(i)]) read = read || (u <= t && s.R(t, u));
      const bool carried = t + 1 < n && s.S(t + 1, i) && !s.R(t, i);
      if (!read && !carried) s.S.set(t, i, false);
    }
  }
}

// `s` with the recomputation of v in stage t replaced by holding v from its last stage before
// t, written into `c` (whose storage a search reuses); false when v has copies already
// (`copied`: s's values with copies) or nothing holds it before t.
bool hold(const Problem& p, const std::vector<std::vector<int>>& users, const Schedule& s,
          const std::vector<uint8_t>& copied, int v, int t, std::vector<uint8_t>& need,
          Schedule& c) {
  if (copied[size_t(v)]) return false;
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
  clear_idle_holds(p, users, copied, c);
  return true;
}

// `c` made to fit both budgets where it does not (offload_to_fit; where that fails or costs
// `cost` or more, greedy_to_fit), priced into `cs`; false unless the result fits and costs
// less than `cost`.
bool fit_cheaper(const Problem& p, int64_t budget, int64_t host_budget, double cost,
                 double seconds, Schedule& c, SimResult& cs) {
  cs = simulate(p, c);
  if (!fits_budgets(cs, budget, host_budget)) {
    std::optional<Schedule> moved = offload_to_fit(p, c, budget, host_budget);
    if (moved) cs = simulate(p, *moved);
    if (!moved || cs.total_cost >= cost) {
      moved = greedy_to_fit(p, c, budget, host_budget, seconds, cost);
      if (moved) cs = simulate(p, *moved);
    }
    if (!moved) return false;
    c = std::move(*moved);
  }
  return fits_budgets(cs, budget, host_budget) && cs.total_cost < cost;
}

}  // namespace

std::optional<Schedule> trade_recomputes_for_copies(const Problem& p, const Schedule& base,
                                                    int64_t budget, int64_t host_budget,
                                                    double time_limit_seconds) {
  if (p.copy_cost_per_byte <= 0) return std::nullopt;
  const auto t0 = std::chrono::steady_clock::now();
  auto time_left = [&] {
    return time_limit_seconds -
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const int n = p.size();
  Schedule s = base;
  if (!s.has_copies()) s.offload = BoolMatrix(n, n), s.prefetch = BoolMatrix(n, n);
  SimResult sim = simulate(p, s);
  if (!fits_budgets(sim, budget, host_budget)) return std::nullopt;
  const auto users = problem_users(p);
  std::vector<uint8_t> need(size_t(n), 0);
  Schedule c;  // each candidate, in storage kept across them
  SimResult cs;
  // A pass goes down the recomputations once, costliest first; after a trade it goes on from
  // the traded one's place in the new schedule's list. After each pass prefetches start
  // earlier where that pays (Note [earlier prefetches]). Passes repeat until one changes nothing.
  const Recomputation top{-std::numeric_limits<double>::infinity(), 0, 0};
  Recomputation from = top;
  for (bool pass_traded = false; time_left() > 0;) {
    const std::vector<uint8_t> copied = values_with_copies(s, n);  // hold adds no copies
    const std::vector<Recomputation> moves = recomputations_costliest_first(p, s, true);
    bool traded = false;
    for (auto m = std::lower_bound(moves.begin(), moves.end(), from);
         m != moves.end() && !traded && time_left() > 0; ++m) {
      const auto& [neg_cost, t, v] = *m;
      if (!hold(p, users, s, copied, v, t, need, c) ||
          !fit_cheaper(p, budget, host_budget, sim.total_cost, time_left(), c, cs))
        continue;
      std::swap(s, c), std::swap(sim, cs), from = *m, traded = pass_traded = true;
    }
    if (traded) continue;
    const bool retimed = prefetch_earlier(p, budget, host_budget, time_left(), s);
    if (!pass_traded && !retimed) break;  // a whole pass changed nothing
    if (retimed) sim = simulate(p, s);
    from = top, pass_traded = false;
  }
  return s;
}

}  // namespace remat
