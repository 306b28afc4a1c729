// Cheap drops: keep everything except the values that are cheapest to recompute per byte and
// stage they would be held (Note [cheap drops]).
#include <algorithm>
#include <chrono>
#include <numeric>

#include "solver/baselines.h"
#include "solver/milp_model.h"
#include "solver/strategies.h"

namespace remat {

// Note [cheap drops]
// Keeping everything is the cheapest schedule; the budget only asks that some values not be
// held across the long stretch between their forward use and their backward use. Where the
// graph has many cheap, large values — batch norm and ReLU outputs, DenseNet's growing
// concatenations, attention probabilities — dropping exactly those and recomputing each where
// it is next read costs almost nothing, and Memory-Efficient DenseNet (Pleiss et al. 2017) is
// this schedule built by hand. The Chen baselines cannot express it (they checkpoint segments
// of the forward pass) and LP rounding reaches it slowly on a thousand nodes.
// A drop is (value i, a stretch between two consecutive reads — or from its computation to its
// first read — of at least one stage): i is not held across that stretch, and the cheapest R
// recomputes it (and any dropped input, transitively) where it is read next. A value has one
// drop per stretch: the peak is often in the backward pass, between two reads of a value that
// the backward reads twice. Drops are ranked by cost(i) / (bytes(i) x stages in the stretch). The schedule of the first m drops is tried at m = 1,
// 2, 4, ... and then bisected to the smallest m that fits; then the drops are undone one by
// one, the costliest first, wherever the schedule still fits (a drop far from the peak saves
// nothing there), while the deadline lasts. Every schedule goes through simulate().
std::optional<Schedule> solve_cheap_drops(const Problem& p, int64_t budget, double seconds) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  const int n = p.size();
  const auto users = problem_users(p);
  const Schedule keep = all_keep_schedule(p);
  struct Drop {
    int value, from, until;  // not held entering stages from .. until - 1 (read again at until)
    double score;
  };
  std::vector<Drop> drops;
  for (int i = 0; i < n; ++i) {
    const double bytes = static_cast<double>(p.nodes[size_t(i)].bytes);
    if (bytes <= 0) continue;
    int prev = i;  // every stretch between two reads (or the computation and the first read)
    for (int j : users[size_t(i)]) {
      if (j - prev > 1)
        drops.push_back({i, prev + 1, j, p.nodes[size_t(i)].cost / (bytes * (j - prev - 1))});
      prev = j;
    }
  }
  // No value waits between two reads (a forward-only chain, an evaluation graph): nothing to drop.
  if (drops.empty()) return std::nullopt;
  std::stable_sort(drops.begin(), drops.end(),
                   [](const Drop& a, const Drop& b) { return a.score < b.score; });
  // The schedule of the drops marked in `on`, simulated.
  auto build = [&](const std::vector<uint8_t>& on, SimResult* sim) {
    Schedule s;
    s.S = keep.S;
    for (size_t k = 0; k < drops.size(); ++k)
      if (on[k])
        for (int t = drops[k].from; t < drops[k].until; ++t) s.S.set(t, drops[k].value, false);
    s.R = derive_cheapest_r(p, s.S);
    *sim = simulate(p, s);
    return s;
  };
  auto fits = [&](const SimResult& sim) { return sim.valid && sim.peak_bytes <= budget; };
  auto prefix = [&](size_t m) {
    std::vector<uint8_t> on(drops.size(), 0);
    std::fill(on.begin(), on.begin() + static_cast<std::ptrdiff_t>(m), 1);
    return on;
  };
  SimResult sim;
  size_t lo = 0, hi = 0;  // prefix lo does not fit, hi does
  for (size_t m = 1;; m = std::min(drops.size(), 2 * m)) {
    build(prefix(m), &sim);
    if (fits(sim)) {
      hi = m;
      break;
    }
    lo = m;
    if (m == drops.size() || elapsed() > seconds) return std::nullopt;
  }
  while (hi - lo > 1 && elapsed() < seconds) {
    const size_t mid = lo + (hi - lo) / 2;
    build(prefix(mid), &sim);
    (fits(sim) ? hi : lo) = mid;
  }
  std::vector<uint8_t> on = prefix(hi);
  Schedule best = build(on, &sim);
  double best_cost = sim.total_cost;
  // Undo the costliest drops first, wherever the schedule still fits and gets cheaper.
  std::vector<size_t> order(hi);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return p.nodes[size_t(drops[a].value)].cost > p.nodes[size_t(drops[b].value)].cost;
  });
  for (size_t k : order) {
    if (elapsed() > seconds) break;
    on[k] = 0;
    Schedule c = build(on, &sim);
    if (fits(sim) && sim.total_cost <= best_cost) {
      best = std::move(c);
      best_cost = sim.total_cost;
    } else {
      on[k] = 1;
    }
  }
  best.strategy = "cheap-drops";
  best.status = "heuristic";
  return best;
}

}  // namespace remat
