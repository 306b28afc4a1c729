// Griewank/revolve baseline for chains: the binomial checkpointing schedule computed by DP over
// (steps, slots), expressed as S (checkpoints held until their reversal) with R derived from S.
#include "solver/griewank.h"

#include <functional>
#include <limits>

#include "solver/baselines.h"
#include "solver/strategies.h"

namespace remat {

bool problem_is_chain(const Problem& p, int* steps) {
  const int n = p.size();
  if (n < 3 || n % 2 == 0) return false;
  const int l = (n - 1) / 2;
  for (int k = 0; k < l; ++k) {
    const ProblemNode& f = p.nodes[k];
    if (f.kind != ProblemNodeKind::Forward) return false;
    if (k == 0 ? !f.deps.empty() : f.deps != std::vector<int>{k - 1}) return false;
  }
  if (p.nodes[l].kind != ProblemNodeKind::Loss || p.nodes[l].deps != std::vector<int>{l - 1})
    return false;
  for (int k = l - 1; k >= 0; --k) {
    const int idx = 2 * l - k;
    const int prev = idx - 1;  // loss for k = l-1, else b_{k+1}
    const ProblemNode& b = p.nodes[idx];
    if (b.kind != ProblemNodeKind::Backward) return false;
    bool has_prev = false;
    for (int d : b.deps) {
      if (d == prev) has_prev = true;
      else if (d != k && d != k - 1) return false;
    }
    if (!has_prev) return false;
  }
  if (steps) *steps = l;
  return true;
}

RevolveTable revolve_table(int steps, int slots) {
  const int64_t kInf = std::numeric_limits<int64_t>::max() / 4;
  RevolveTable t;
  t.cost.assign(slots + 1, std::vector<int64_t>(steps + 1, kInf));
  t.split.assign(slots + 1, std::vector<int>(steps + 1, 0));
  for (int c = 1; c <= slots; ++c) {
    t.cost[c][0] = 0;
    if (steps >= 1) t.cost[c][1] = 0;
    for (int l = 2; l <= steps; ++l) {
      // One slot: advance from the start to every step in turn.
      int64_t best = static_cast<int64_t>(l) * (l - 1) / 2;
      int best_split = 0;
      if (c >= 2) {
        for (int m = 1; m < l; ++m) {
          int64_t v = m + t.cost[c - 1][l - m] + t.cost[c][m];
          if (v < best) {
            best = v;
            best_split = m;
          }
        }
      }
      t.cost[c][l] = best;
      t.split[c][l] = best_split;
    }
  }
  return t;
}

namespace {

// The revolve schedule for a chain of l steps; `table` covers at least `slots` slots.
Schedule revolve_schedule(const Problem& p, int l, const RevolveTable& table, int slots,
                          bool keep_outputs) {
  const int n = p.size();
  auto stage_of_reversal = [&](int step) { return 2 * l - step; };  // b_step's stage
  Schedule s;
  s.strategy = "griewank";
  s.status = "heuristic";
  s.S = BoolMatrix(n, n);
  auto hold = [&](int node, int from_stage, int to_stage) {
    for (int t = from_stage; t <= to_stage; ++t) s.S.set(t, node, true);
  };
  // Every stage holds its predecessor: the forward chain, the loss input, the gradient chain.
  for (int t = 1; t < n; ++t) s.S.set(t, t - 1, true);
  // The first reversal (b_{l-1}) uses the end of the forward sweep directly.
  for (int d : p.nodes[stage_of_reversal(l - 1)].deps)
    if (d < l) hold(d, d + 1, stage_of_reversal(l - 1));
  // reverse(lo, hi, c): reverse steps lo..hi-1 with state x_lo = output of f_{lo-1} (or the
  // input for lo = 0) held. A checkpoint x_m (m > lo) is taken while advancing: during the
  // forward sweep (stage m-1) when `sweep`, else in the stage of the next reversal (b_{hi-1});
  // it is held until step m is reversed.
  std::function<void(int, int, int, bool)> reverse = [&](int lo, int hi, int c, bool sweep) {
    if (hi - lo <= 1) return;
    const int m = c >= 2 ? lo + table.split[c][hi - lo] : lo;
    if (m == lo) return;  // one slot: every reversal advances from x_lo
    const int created = sweep ? m - 1 : stage_of_reversal(hi - 1);
    hold(m - 1, created + 1, stage_of_reversal(m));
    reverse(m, hi, c - 1, sweep);
    reverse(lo, m, c, false);
  };
  reverse(0, l, slots, true);
  if (keep_outputs)
    for (int i = 0; i + 1 < l; ++i) s.S.set(stage_of_reversal(i), i, true);
  s.R = derive_cheapest_r(p, s.S);
  return s;
}

}  // namespace

std::optional<Schedule> griewank_schedule(const Problem& p, int slots, bool keep_outputs) {
  int l = 0;
  if (!problem_is_chain(p, &l) || slots < 1) return std::nullopt;
  return revolve_schedule(p, l, revolve_table(l, slots), slots, keep_outputs);
}

std::optional<Schedule> solve_griewank(const Problem& p, int64_t budget) {
  int l = 0;
  if (!problem_is_chain(p, &l)) return std::nullopt;
  // More slots never cost more; sweep them all (bounded so huge chains stay fast).
  const int max_slots = l <= 400 ? l : 64;
  const RevolveTable table = revolve_table(l, max_slots);
  CheapestSchedule best;
  for (int c = 1; c <= 2 * max_slots; ++c) {
    Schedule s = revolve_schedule(p, l, table, (c + 1) / 2, c % 2 == 0);
    SimResult sim = simulate(p, s);
    if (sim.valid && sim.peak_bytes <= budget) best.offer(std::move(s), sim);
  }
  return best.schedule;
}

}  // namespace remat
