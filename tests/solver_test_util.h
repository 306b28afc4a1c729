// Shared by the solver tests: an exhaustive search for the optimal schedule on tiny graphs and
// the tiny graphs themselves.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "solver/chain.h"
#include "solver/problem.h"
#include "solver/baselines.h"
#include "solver/schedule.h"
#include "solver/strategies.h"

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

// Solver options for tests: `seconds` of wall clock, solved to a zero gap.
inline SolveOptions exact_options(double seconds) {
  SolveOptions o;
  o.time_limit_seconds = seconds;
  o.relative_gap = 0;
  return o;
}

// Appends a node to a hand-written problem (deps ascending, earlier nodes).
inline void add_problem_node(Problem& p, const char* name, ProblemNodeKind kind, double cost,
                             int64_t bytes, int64_t workspace_bytes, std::vector<int> deps) {
  ProblemNode nd;
  nd.name = name;
  nd.kind = kind;
  nd.cost = cost;
  nd.bytes = bytes;
  nd.workspace_bytes = workspace_bytes;
  nd.deps = std::move(deps);
  p.nodes.push_back(std::move(nd));
}

// A small DAG with a skip connection and a workspace: x0 -> x1 -> x2 (x2 also reads x0),
// loss, and gradient nodes reading the forward values.
inline Problem skip_dag() {
  Problem p;
  p.name = "skip";
  p.constant_bytes = 3;
  auto add = [&](const char* name, ProblemNodeKind kind, double cost, int64_t bytes, int64_t ws,
                 std::vector<int> deps) {
    add_problem_node(p, name, kind, cost, bytes, ws, std::move(deps));
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

// Builds test problems the way the training graph is built: forward nodes, a loss, then for
// each forward node in reverse the sum of its output's gradients (when several), its weight
// gradient (a zero-byte sink) and one gradient per input, reading what the forward kept.
class TrainingProblemBuilder {
 public:
  explicit TrainingProblemBuilder(const std::string& name, int64_t constant_bytes) {
    p_.name = name;
    p_.constant_bytes = constant_bytes;
  }
  // A forward node of `cost` whose output has `bytes`, reading `in`.
  int forward(double cost, int64_t bytes, std::vector<int> in) {
    const int n = add(ProblemNodeKind::Forward, cost, bytes, in);
    fwd_.push_back({n, in});
    return n;
  }
  Problem finish(int last) {
    const int loss = add(ProblemNodeKind::Loss, 5, 1, {last});
    std::vector<std::vector<int>> grads(p_.nodes.size());
    grads[size_t(last)].push_back(loss);
    for (auto it = fwd_.rbegin(); it != fwd_.rend(); ++it) {
      auto& parts = grads[size_t(it->node)];
      if (parts.empty()) continue;
      const int64_t bytes = p_.nodes[size_t(it->node)].bytes;
      const double cost = p_.nodes[size_t(it->node)].cost;
      int dy = parts.size() == 1 ? parts[0] : add(ProblemNodeKind::Backward, 1, bytes, parts);
      add(ProblemNodeKind::Backward, cost, 0, {dy, it->node});  // weight gradient
      for (int in : it->in)
        grads[size_t(in)].push_back(
            add(ProblemNodeKind::Backward, cost, p_.nodes[size_t(in)].bytes, {dy, in}));
    }
    return p_;
  }

 private:
  int add(ProblemNodeKind kind, double cost, int64_t bytes, std::vector<int> deps) {
    ProblemNode nd;
    nd.name = "n" + std::to_string(p_.nodes.size());
    nd.kind = kind;
    nd.cost = cost;
    nd.bytes = bytes;
    nd.workspace_bytes = bytes / 4;
    std::sort(deps.begin(), deps.end());
    nd.deps = deps;
    p_.nodes.push_back(nd);
    return p_.size() - 1;
  }
  struct Fwd {
    int node;
    std::vector<int> in;
  };
  Problem p_;
  std::vector<Fwd> fwd_;
};

// A residual network's shape at a few hundred nodes: blocks of conv (expensive), batch-norm
// and relu (cheap), a skip add per block. Costs and bytes are deterministic and varied.
inline Problem residual_problem(int blocks) {
  TrainingProblemBuilder b("residual", 1000);
  int x = b.forward(50, 100, {});
  for (int k = 0; k < blocks; ++k) {
    const int64_t sz = 100 + 20 * (k % 3);
    const int c = b.forward(400 + 50 * (k % 4), sz, {x});
    const int n = b.forward(4, sz, {c});
    const int r = b.forward(1, sz, {n});
    x = b.forward(1, sz, {r, x});
  }
  return b.finish(x);
}

// A dense block's shape (DenseNet): each layer normalises and rectifies the concatenation of
// everything before it (cheap, and as large as that concatenation), convolves it to a few new
// channels (expensive, small) and concatenates them to it: the concatenations grow.
inline Problem dense_problem(int layers) {
  TrainingProblemBuilder b("dense", 1000);
  int x = b.forward(300, 64, {});
  int64_t width = 64;
  for (int k = 0; k < layers; ++k) {
    const int n = b.forward(2, width, {x});
    const int r = b.forward(1, width, {n});
    const int c = b.forward(10 * width, 16, {r});
    width += 16;
    x = b.forward(0.5, width, {x, c});
  }
  return b.finish(x);
}

// An unrolled recurrent layer's shape: per step a large, expensive input part z (reading the
// state h), a gate g, and the states c and h. c is read again three nodes on, past the next
// step's z and g: a checkpoint there is crossed (Note [cut sets] in solver/baselines.h).
inline Problem recurrent_problem(int steps) {
  TrainingProblemBuilder b("recurrent", 10);
  int h = b.forward(1, 4, {});
  int c = b.forward(1, 4, {});
  for (int k = 0; k < steps; ++k) {
    const int z = b.forward(20, 16, {h});
    const int g = b.forward(1, 4, {z});
    c = b.forward(1, 4, {g, c});
    h = b.forward(1, 4, {g, c});
  }
  return b.finish(h);
}

// The budget constant + fraction x keep-everything's activation bytes.
inline int64_t budget_at(const Problem& p, double fraction) {
  const int64_t keep = simulate(p, all_keep_schedule(p)).peak_bytes;
  return p.constant_bytes + int64_t(fraction * double(keep - p.constant_bytes));
}

}  // namespace remat
