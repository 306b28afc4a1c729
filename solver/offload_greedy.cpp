// greedy-offload: the baseline that frees memory at the peak by recomputing or offloading,
// whichever adds less time per byte (Note [greedy offload]).
#include <algorithm>
#include <chrono>
#include <limits>

#include "solver/offload.h"
#include "solver/offload_moves.h"

namespace remat {
namespace {

// Note [greedy offload]
// The greedy by recompute cost per byte (Capuchin's choice between swapping and recomputing): from
// keep-everything (greedy_to_fit runs it from any schedule, as the search of Note [copies for
// recomputations] does), while the schedule does not fit, one of the values waiting at its peak
// stage leaves the device for its wait, the way that adds the least time per byte it frees: moved
// to host memory (Note [offload to fit]; under streamed copies, spread), or dropped after its last
// read and recomputed where it is read again, with whatever that needs and is not held or
// prefetched (derive_cheapest_r_row_with_copies). The simulator prices each candidate; the kLargest
// largest waiting values are tried, and the larger wins a tie (hidden copies all add nothing). It
// fits the budget or stops where the peak has nothing waiting (or at its time limit); nothing is
// tuned to a model.
constexpr size_t kLargest = 8;

// `s` with w's value dropped after its last read before w.first and recomputed in w.read.
Schedule recompute_wait(const Problem& p, const Schedule& s, const Wait& w,
                        std::vector<uint8_t>& need) {
  Schedule r = s;
  for (int u = w.first; u <= w.read; ++u) r.S.set(u, w.value, false);
  for (int u = std::max(0, w.first - 1); u <= w.read; ++u)
    derive_cheapest_r_row_with_copies(p, r, u, need, r.R);  // prefetched values arrive
  return r;
}

}  // namespace

std::optional<Schedule> greedy_to_fit(const Problem& p, const Schedule& base, int64_t budget,
                                      int64_t host_budget, double time_limit_seconds,
                                      double cost_cap) {
  if (p.copy_cost_per_byte <= 0) return std::nullopt;
  const auto t0 = std::chrono::steady_clock::now();
  auto out_of_time = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >
           time_limit_seconds;
  };
  const int n = p.size();
  Schedule s = base;
  if (!s.has_copies()) s.offload = BoolMatrix(n, n), s.prefetch = BoolMatrix(n, n);
  const auto users = problem_users(p);
  std::vector<uint8_t> need(size_t(n), 0);
  SimResult sim = simulate(p, s);
  for (int moves = 0; moves < 4 * n && sim.valid && !out_of_time(); ++moves) {
    if (fits_budgets(sim, budget, host_budget)) return s;
    if (sim.peak_bytes <= budget) return std::nullopt;  // the host budget binds
    if (sim.total_cost >= cost_cap) return std::nullopt;
    std::vector<Wait> ws =
        waits_at(p, users, stage_costs(p, s), s, sim.steps[size_t(sim.peak_step)].stage);
    auto bytes = [&](const Wait& w) { return p.nodes[size_t(w.value)].bytes; };
    std::stable_sort(ws.begin(), ws.end(),
                     [&](const Wait& a, const Wait& b) { return bytes(a) > bytes(b); });
    if (ws.size() > kLargest) ws.resize(kLargest);
    std::optional<Schedule> best;
    SimResult best_sim;
    double best_score = 0;
    for (const Wait& w : ws)
      for (bool copy : {true, false}) {
        Schedule c = copy ? s : recompute_wait(p, s, w, need);
        if (copy) apply_wait(c, w);
        SimResult cs = simulate(p, c);
        if (!cs.valid) continue;
        const double score =
            (cs.total_cost - sim.total_cost) / double(std::max<int64_t>(1, bytes(w)));
        if (best && score >= best_score) continue;
        best = std::move(c), best_sim = std::move(cs), best_score = score;
      }
    if (!best) return std::nullopt;
    s = std::move(*best), sim = std::move(best_sim);
  }
  return std::nullopt;
}

std::optional<Schedule> solve_greedy_offload(const Problem& p, int64_t budget,
                                             int64_t host_budget, double time_limit_seconds) {
  std::optional<Schedule> keep = solve_all_keep(p);
  if (!keep) return std::nullopt;
  std::optional<Schedule> s = greedy_to_fit(p, *keep, budget, host_budget, time_limit_seconds,
                                            std::numeric_limits<double>::infinity());
  if (s) s->strategy = "greedy-offload";
  return s;
}

}  // namespace remat
