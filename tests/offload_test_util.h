// Shared by the offload tests: a chain where one value waits long enough to move, and an
// exhaustive search over keep, recompute and offload on tiny graphs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "solver/problem.h"
#include "solver/schedule.h"
#include "tests/solver_test_util.h"

namespace remat {

// x0 (10 bytes) waits while x1..x5 run (x3 is large), then g reads x0 and x5.
inline Problem waiting_chain(double copy_cost_per_byte, double x0_cost = 1) {
  Problem p;
  p.name = "waiting";
  p.copy_cost_per_byte = copy_cost_per_byte;
  using K = ProblemNodeKind;
  add_problem_node(p, "x0", K::Forward, x0_cost, 10, 0, {});
  add_problem_node(p, "x1", K::Forward, 2, 4, 0, {0});
  add_problem_node(p, "x2", K::Forward, 2, 4, 0, {1});
  add_problem_node(p, "x3", K::Forward, 2, 12, 0, {2});
  add_problem_node(p, "x4", K::Forward, 2, 4, 0, {3});
  add_problem_node(p, "x5", K::Forward, 2, 4, 0, {4});
  add_problem_node(p, "g", K::Loss, 1, 1, 0, {0, 5});
  return p;
}

// Exhaustive search over keep, recompute and offload in canonical form: per stage, the cheapest
// R for its S (derive_cheapest_r), offloads of held values not yet on host, prefetches of host
// copies that are then held into the next stage, and S[t+1] among the values on the device in
// stage t, with every value held entering t and neither read nor offloaded there held on.
struct OffloadBruteForce {
  OffloadBruteForce(const Problem& problem, int64_t bytes) : p(problem), budget(bytes) {}
  const Problem& p;
  int64_t budget;
  std::vector<std::vector<int>> users = problem_users(p);
  std::optional<double> best;

  void stage(int t, Schedule& s, double cost_so_far) {
    const int n = p.size();
    BoolMatrix R = derive_cheapest_r(p, s.S);
    for (int i = 0; i <= t; ++i) s.R.set(t, i, R(t, i));
    double compute = 0;
    for (int i = 0; i <= t; ++i) compute += R(t, i) ? p.nodes[i].cost : 0;
    std::vector<int> held, on_host;
    for (int i = 0; i < t; ++i) {
      if (s.S(t, i)) held.push_back(i);
      bool h = false;
      for (int u = 0; u < t; ++u) h |= s.offload(u, i);
      if (h && !s.S(t, i) && !R(t, i) && t + 1 < n) on_host.push_back(i);
    }
    std::vector<int> movable;
    for (int i : held) {
      bool h = false;
      for (int u = 0; u < t; ++u) h |= s.offload(u, i);
      if (!h) movable.push_back(i);
    }
    for (uint32_t om = 0; om < (1u << movable.size()); ++om)
      for (uint32_t pm = 0; pm < (1u << on_host.size()); ++pm) {
        int64_t out = 0, in = 0;
        for (size_t b = 0; b < movable.size(); ++b) {
          s.offload.set(t, movable[b], om >> b & 1);
          out += (om >> b & 1) ? p.nodes[movable[b]].bytes : 0;
        }
        for (size_t b = 0; b < on_host.size(); ++b) {
          s.prefetch.set(t, on_host[b], pm >> b & 1);
          in += (pm >> b & 1) ? p.nodes[on_host[b]].bytes : 0;
        }
        const double c = cost_so_far + compute +
                         std::max(0.0, double(std::max(out, in)) * p.copy_cost_per_byte - compute);
        if (!best || c < *best - 1e-9) next(t, s, c);
      }
    for (int i = 0; i < n; ++i) s.offload.set(t, i, false), s.prefetch.set(t, i, false);
  }

  void next(int t, Schedule& s, double cost) {
    const int n = p.size();
    if (t == n - 1) {
      SimResult sim = simulate(p, s);
      if (sim.valid && sim.peak_bytes <= budget && (!best || sim.total_cost < *best))
        best = sim.total_cost;
      return;
    }
    std::vector<int> must, may;
    for (int i = 0; i <= t; ++i) {
      const bool read = s.R(t, i) || [&] {
        for (int j : users[i])
          if (j <= t && s.R(t, j)) return true;
        return false;
      }();
      if (i < t && s.S(t, i) && !read && !s.offload(t, i))
        must.push_back(i);
      else if (s.prefetch(t, i))
        must.push_back(i);
      else if (s.R(t, i) || (i < t && s.S(t, i)))
        may.push_back(i);
    }
    for (uint32_t mask = 0; mask < (1u << may.size()); ++mask) {
      int64_t held = p.constant_bytes;
      for (int i = 0; i < n; ++i) s.S.set(t + 1, i, false);
      for (int i : must) s.S.set(t + 1, i, true), held += p.nodes[i].bytes;
      for (size_t b = 0; b < may.size(); ++b)
        if (mask >> b & 1) s.S.set(t + 1, may[b], true), held += p.nodes[may[b]].bytes;
      if (held <= budget) stage(t + 1, s, cost);
    }
    for (int i = 0; i < n; ++i) s.S.set(t + 1, i, false);
  }

  std::optional<double> run() {
    const int n = p.size();
    Schedule s;
    s.R = BoolMatrix(n, n), s.S = BoolMatrix(n, n);
    s.offload = BoolMatrix(n, n), s.prefetch = BoolMatrix(n, n);
    stage(0, s, 0);
    return best;
  }
};

}  // namespace remat
