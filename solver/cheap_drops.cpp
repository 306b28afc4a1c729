// Cheap drops: keep everything except the values that are cheapest to recompute, dropped
// across the stretches where holding them costs the most (Note [cheap drops]).
#include <algorithm>
#include <chrono>
#include <numeric>

#include "solver/baselines.h"
#include "solver/milp_model.h"
#include "solver/strategies.h"

namespace remat {
namespace {

using Clock = std::chrono::steady_clock;

// Value `value` is not held entering stages from .. until - 1; the cheapest R recomputes it
// where it is read next (or holds it again from `until`, computing it in stage until - 1).
struct Drop {
  int value, from, until;
  double score;  // ascending: the drops tried first
};

// Note [cheap drops]
// Keeping everything is the cheapest schedule; the budget only asks that some values not be
// held across the long stretch between their forward use and their backward use. Where the
// graph has many cheap, large values — batch norm and ReLU outputs, DenseNet's growing
// concatenations, attention probabilities — dropping exactly those and recomputing each where
// it is next read costs almost nothing, and Memory-Efficient DenseNet (Pleiss et al. 2017) is
// this schedule built by hand. The Chen baselines cannot express it (they checkpoint segments
// of the forward pass) and LP rounding reaches it slowly on a thousand nodes.
// Two lists of drops, each searched the same way (drop_search):
// - stretch drops: (value i, a stretch between two consecutive reads — or from its computation
//   to its first read — of at least one stage), ranked by cost(i) / (bytes(i) x stages in the
//   stretch). The peak is often in the backward pass, between two reads of a value that the
//   backward reads twice, and this list reaches it.
// - gap drops: every stretch of a forward value i after its last forward read — to its first
//   backward read, between two backward reads, after the last — each ending with the stage that
//   reads i again, which recomputes it; all ranked by cost(i) / bytes(i). A value the backward
//   never reads gets the stretch after its last forward read when it is an input (directly or
//   transitively) of one it does read: S holds every value a later stage needs, so a batch norm
//   output that only its ReLU reads stays held across the whole gap as long as that ReLU output
//   is recomputed from it, and dropping the ReLU saves nothing until its input is dropped too.
//   Ranking by cost per byte alone drops every normalise, rectify and concatenate of a DenseNet
//   everywhere before its first convolution: the Pleiss schedule (tests/test_cheap_drops.cpp
//   builds it by hand). DenseNet-121 b32 at 40 % of keep-everything's activations: 1.009x
//   where the stretch drops fit nothing and checkmate returned 1.137x.
// The schedule of the first m drops of a list is tried at m = 1, 2, 4, ... and then bisected to
// the smallest m that fits; then the drops are undone one by one, the costliest first, wherever
// the schedule still fits (a drop far from the peak saves nothing there), while the deadline
// lasts (max batch's probes, which need only a schedule within their cost cap, skip the undoing
// when the first fits it). The cheaper of the two lists' schedules is returned. Every schedule
// goes through simulate().
struct Found {
  Schedule s;
  double cost;  // its simulated cost
};

// `keep_S`: the all-keep schedule's S, which every drop clears entries of.
std::optional<Found> drop_search(const Problem& p, int64_t budget, const BoolMatrix& keep_S,
                                 std::vector<Drop> drops, Clock::time_point deadline,
                                 double cost_cap) {
  if (drops.empty()) return std::nullopt;
  std::stable_sort(drops.begin(), drops.end(),
                   [](const Drop& a, const Drop& b) { return a.score < b.score; });
  // The schedule of the drops marked in `on`, simulated.
  auto build = [&](const std::vector<uint8_t>& on, SimResult* sim) {
    Schedule s;
    s.S = keep_S;
    for (size_t k = 0; k < drops.size(); ++k)
      if (on[k])
        for (int t = drops[k].from; t < drops[k].until; ++t) s.S.set(t, drops[k].value, false);
    s.R = derive_cheapest_r(p, s.S);
    *sim = simulate(p, s);
    return s;
  };
  auto fits = [&](const SimResult& sim) { return sim.valid && sim.peak_bytes <= budget; };
  auto late = [&] { return Clock::now() > deadline; };
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
    if (m == drops.size() || late()) return std::nullopt;
  }
  while (hi - lo > 1 && !late()) {
    const size_t mid = lo + (hi - lo) / 2;
    build(prefix(mid), &sim);
    (fits(sim) ? hi : lo) = mid;
  }
  std::vector<uint8_t> on = prefix(hi);
  Schedule best = build(on, &sim);
  double best_cost = sim.total_cost;
  if (cost_cap > 0 && best_cost <= cost_cap) return Found{std::move(best), best_cost};
  // Undo the costliest drops first, wherever the schedule still fits and gets cheaper.
  std::vector<size_t> order(hi);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return p.nodes[size_t(drops[a].value)].cost > p.nodes[size_t(drops[b].value)].cost;
  });
  for (size_t k : order) {
    if (late()) break;
    on[k] = 0;
    Schedule c = build(on, &sim);
    if (fits(sim) && sim.total_cost <= best_cost) {
      best = std::move(c);
      best_cost = sim.total_cost;
    } else {
      on[k] = 1;
    }
  }
  return Found{std::move(best), best_cost};
}

std::vector<Drop> stretch_drops(const Problem& p, const std::vector<std::vector<int>>& users) {
  std::vector<Drop> drops;
  for (int i = 0; i < p.size(); ++i) {
    const double bytes = static_cast<double>(p.nodes[size_t(i)].bytes);
    if (bytes <= 0) continue;
    int prev = i;  // every stretch between two reads (or the computation and the first read)
    for (int j : users[size_t(i)]) {
      if (j - prev > 1)
        drops.push_back({i, prev + 1, j, p.nodes[size_t(i)].cost / (bytes * (j - prev - 1))});
      prev = j;
    }
  }
  return drops;
}

std::vector<Drop> gap_drops(const Problem& p, const std::vector<std::vector<int>>& users) {
  std::vector<Drop> drops;
  const int n = p.size();
  // A value the backward never reads matters after its last forward read only as the input of
  // one that is recomputed there: one the backward reads, or (transitively) such an input.
  std::vector<uint8_t> recomputable(size_t(n), 0);
  for (int i = n - 1; i >= 0; --i)
    for (int j : users[size_t(i)])
      if (p.nodes[size_t(j)].kind == ProblemNodeKind::Backward || recomputable[size_t(j)])
        recomputable[size_t(i)] = 1;
  for (int i = 0; i < n; ++i) {
    const ProblemNode& nd = p.nodes[size_t(i)];
    if (nd.bytes <= 0 || nd.kind != ProblemNodeKind::Forward || !recomputable[size_t(i)]) continue;
    int last_forward = i;
    for (int j : users[size_t(i)])
      if (p.nodes[size_t(j)].kind != ProblemNodeKind::Backward) last_forward = j;
    // Not held from after the last forward read through the next backward read's stage, which
    // recomputes it; and likewise between every two backward reads, and after the last.
    const double score = nd.cost / static_cast<double>(nd.bytes);
    int prev = last_forward;
    for (int j : users[size_t(i)]) {
      if (j <= last_forward) continue;
      if (j - prev > 1) drops.push_back({i, prev + 1, j + 1, score});
      prev = j;
    }
    if (n - prev > 1) drops.push_back({i, prev + 1, n, score});
  }
  return drops;
}

}  // namespace

std::optional<Schedule> solve_cheap_drops(const Problem& p, int64_t budget, double seconds,
                                          double cost_cap) {
  const auto t0 = Clock::now();
  auto at = [&](double s) {
    return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  const auto users = problem_users(p);
  const BoolMatrix keep_S = all_keep_schedule(p).S;
  std::optional<Found> best;
  // The gap drops (usually the better) get half the time, the stretch drops the rest.
  for (auto [drops, until] : {std::pair{gap_drops(p, users), at(seconds / 2)},
                              std::pair{stretch_drops(p, users), at(seconds)}}) {
    std::optional<Found> f = drop_search(p, budget, keep_S, std::move(drops), until, cost_cap);
    if (f && (!best || f->cost < best->cost)) best = std::move(f);
    if (best && cost_cap > 0 && best->cost <= cost_cap) break;
  }
  if (!best) return std::nullopt;
  best->s.strategy = "cheap-drops";
  best->s.status = "heuristic";
  return std::move(best->s);
}

}  // namespace remat
