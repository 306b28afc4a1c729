// Shared by the solver tests: an exhaustive search for the optimal schedule on tiny graphs and
// the tiny graphs themselves.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "solver/chain.h"
#include "solver/problem.h"
#include "solver/baselines.h"
#include "solver/schedule.h"

namespace remat {

// Exhaustive search: every S in canonical form (a value held entering stage t is read in stage
// t or held on into t+1; any other S has a canonical twin with the same R, cost and simulated
// memory), stage by stage, with R = derive_cheapest_r. Prunes only on exact facts: the cost so
// far, and the held bytes entering a stage (the simulator keeps every canonical held value).
struct BruteForce {
  BruteForce(const Problem& problem, int64_t bytes) : p(problem), budget(bytes) {}
  const Problem& p;
  int64_t budget;
  std::vector<std::vector<int>> users = problem_users(p);
  std::optional<double> best;
  long leaves = 0;

  void stage(int t, BoolMatrix& S, double cost_so_far) {
    const int n = p.size();
    BoolMatrix R = derive_cheapest_r(p, S);  // row t depends only on S row t
    double c = cost_so_far;
    for (int i = 0; i <= t; ++i)
      if (R(t, i)) c += p.nodes[i].cost;
    if (best && c >= *best - 1e-9) return;
    // Held values not read in stage t must be held on (canonical form).
    std::vector<int> must, may;
    for (int i = 0; i < t; ++i) {
      if (!S(t, i)) continue;
      bool read = false;
      for (int j : users[i]) read |= (j <= t && R(t, j));
      if (!read) must.push_back(i);
    }
    if (t == n - 1) {
      if (!must.empty()) return;
      ++leaves;
      Schedule s;
      s.R = R;
      s.S = S;
      SimResult sim = simulate(p, s);
      if (sim.valid && sim.peak_bytes <= budget && (!best || sim.total_cost < *best))
        best = sim.total_cost;
      return;
    }
    for (int i = 0; i <= t; ++i) {
      bool avail = R(t, i) || (i < t && S(t, i));
      if (avail && std::find(must.begin(), must.end(), i) == must.end()) may.push_back(i);
    }
    for (uint32_t mask = (1u << may.size()); mask-- > 0;) {
      int64_t held = p.constant_bytes;
      for (int i = 0; i < n; ++i) S.set(t + 1, i, false);
      for (int i : must) S.set(t + 1, i, true), held += p.nodes[i].bytes;
      for (size_t b = 0; b < may.size(); ++b)
        if (mask >> b & 1) S.set(t + 1, may[b], true), held += p.nodes[may[b]].bytes;
      if (held <= budget) stage(t + 1, S, c);
    }
    for (int i = 0; i < n; ++i) S.set(t + 1, i, false);
  }

  std::optional<double> run() {
    BoolMatrix S(p.size(), p.size());
    stage(0, S, 0);
    return best;
  }
};

// A small DAG with a skip connection and a workspace: x0 -> x1 -> x2 (x2 also reads x0),
// loss, and gradient nodes reading the forward values.
inline Problem skip_dag() {
  Problem p;
  p.name = "skip";
  p.constant_bytes = 3;
  auto add = [&](const char* name, ProblemNodeKind kind, double cost, int64_t bytes, int64_t ws,
                 std::vector<int> deps) {
    ProblemNode nd;
    nd.name = name;
    nd.kind = kind;
    nd.cost = cost;
    nd.bytes = bytes;
    nd.workspace_bytes = ws;
    nd.deps = deps;
    p.nodes.push_back(nd);
  };
  using K = ProblemNodeKind;
  add("x0", K::Forward, 3, 8, 0, {});
  add("x1", K::Forward, 5, 6, 3, {0});
  add("x2", K::Forward, 2, 5, 0, {0, 1});
  add("loss", K::Loss, 1, 1, 4, {2});
  add("g2", K::Backward, 4, 2, 2, {1, 2, 3});
  add("g1", K::Backward, 7, 2, 0, {0, 1, 4});
  add("g0", K::Backward, 2, 1, 0, {0, 5});
  return p;
}

inline Problem varied_chain(int layers) {
  std::vector<double> cost;
  std::vector<int64_t> bytes;
  for (int k = 0; k < layers; ++k) {
    cost.push_back(1 + (k * 7) % 5);
    bytes.push_back(9 - (k * 5) % 7);
  }
  Problem p = make_chain_problem(cost, bytes, 5);
  // Small gradients and some workspace, so that budgets between the minimum and all-keep
  // force different amounts of recomputation.
  for (int i = 0; i < p.size(); ++i) {
    if (p.nodes[i].kind != ProblemNodeKind::Forward) p.nodes[i].bytes = 1;
    p.nodes[i].workspace_bytes = (i * 3) % 4;
  }
  return p;
}

// A residual network's shape at a few hundred nodes: blocks of conv (expensive), batch-norm
// and relu (cheap), a skip add per block; backward nodes read what the forward kept; weight
// gradients are zero-byte sinks. Costs and bytes are deterministic and varied.
inline Problem residual_problem(int blocks) {
  Problem p;
  p.name = "residual";
  p.constant_bytes = 1000;
  auto add = [&](ProblemNodeKind kind, double cost, int64_t bytes, std::vector<int> deps) {
    ProblemNode nd;
    nd.name = "n" + std::to_string(p.nodes.size());
    nd.kind = kind;
    nd.cost = cost;
    nd.bytes = bytes;
    nd.workspace_bytes = bytes / 4;
    std::sort(deps.begin(), deps.end());
    nd.deps = deps;
    p.nodes.push_back(nd);
    return p.size() - 1;
  };
  using K = ProblemNodeKind;
  struct Fwd {
    int node;
    std::vector<int> in;
  };
  std::vector<Fwd> fwd;
  int x = add(K::Forward, 50, 100, {});
  fwd.push_back({x, {}});
  for (int b = 0; b < blocks; ++b) {
    const int64_t sz = 100 + 20 * (b % 3);
    int c = add(K::Forward, 400 + 50 * (b % 4), sz, {x});
    fwd.push_back({c, {x}});
    int n = add(K::Forward, 4, sz, {c});
    fwd.push_back({n, {c}});
    int r = add(K::Forward, 1, sz, {n});
    fwd.push_back({r, {n}});
    int s = add(K::Forward, 1, sz, {r, x});
    fwd.push_back({s, {r, x}});
    x = s;
  }
  int loss = add(K::Loss, 5, 1, {x});
  std::vector<std::vector<int>> grads(p.nodes.size());
  grads[size_t(x)].push_back(loss);
  for (auto it = fwd.rbegin(); it != fwd.rend(); ++it) {
    auto& parts = grads[size_t(it->node)];
    if (parts.empty()) continue;
    int dy = parts.size() == 1 ? parts[0]
                               : add(K::Backward, 1, p.nodes[size_t(it->node)].bytes, parts);
    add(K::Backward, p.nodes[size_t(it->node)].cost, 0, {dy, it->node});  // weight gradient
    for (int in : it->in)
      grads[size_t(in)].push_back(add(K::Backward, p.nodes[size_t(it->node)].cost,
                                      p.nodes[size_t(in)].bytes, {dy, in}));
  }
  return p;
}

// The budget constant + fraction x keep-everything's activation bytes.
inline int64_t budget_at(const Problem& p, double fraction) {
  const int64_t keep = simulate(p, all_keep_schedule(p)).peak_bytes;
  return p.constant_bytes + int64_t(fraction * double(keep - p.constant_bytes));
}

}  // namespace remat
