// Dynamic programming over held sets (Note [held-set search]).
//
// Note [held-set search]
// simulate() derives memory from R alone: a value lives from its computation to its last use
// before it is computed again (Note [memory semantics]). Let L_t be the values live entering
// stage t. Given L_t and L_{t+1}, the cheapest stage t computes node t, every value of
// L_{t+1} \ L_t, and, transitively, each of their dependencies not in L_t: the closure. Any
// other valid R_t contains the closure (a value held entering t is never recomputed in t: its
// users come after it in ascending order, so the held instance would be dead already), costs
// at least as much, and has at least as much resident at every point of the stage. So the
// cheapest schedule is a shortest path through layers of held sets with closure transitions,
// which this search finds exactly: its optimum is the optimum over all schedules (the
// Checkmate MILP's), a real proof, not a relaxation.
// Charging: a stage starts with constant + the held values it uses or keeps (a held value it
// neither uses nor keeps is charged only up to the previous stage's end), then replays the
// closure in ascending order exactly as simulate() does. For a schedule whose held sets are its
// live sets the charge is simulate()'s; for any path it is at least simulate()'s for the
// schedule built from it, so every path the search accepts fits.
// Pruning keeps the proof: a held set whose bytes exceed the budget can not be resident; a path
// whose cost so far plus every later node once reaches the ceiling can not beat it. Held values
// come from the Checkmate MILP's columns (value i only while a node >= t depends on it).
// The search is exponential in the held-set count; it is for small graphs and tight budgets,
// where the MILP's LP bound is weakest (uniform-width chains a few activations above their
// constant), and gives up at a transition cap.
#include "solver/held_set_search.h"

#include <algorithm>
#include <bitset>
#include <chrono>
#include <functional>
#include <unordered_map>
#include <vector>

#include "runtime/core/check.h"
#include "solver/milp_model.h"

namespace remat {
namespace {

using Set = std::bitset<kHeldSetMaxNodes>;

struct State {
  Set held;
  double cost = 0;  // of stages before this boundary
  int parent = -1;  // index in the previous layer
};

class Search {
 public:
  Search(const Problem& p, int64_t budget, double ceiling, bool extras)
      : p_(p), n_(p.size()), budget_(budget), ceiling_(ceiling), extras_(extras),
        last_(p.size(), -1), last_user_(p.size(), -1) {
    deps_.resize(n_);
    for (int i = 0; i < n_; ++i)
      for (int d : p.nodes[i].deps) deps_[i].set(d), last_user_[d] = i;
    md_ = max_descendant(p, problem_users(p));
    rest_.assign(n_ + 1, 0);
    for (int t = n_ - 1; t >= 0; --t) rest_[t] = rest_[t + 1] + p.nodes[t].cost;
  }

  // The values stage t computes to produce `need` (node t and new held values) given `held`.
  Set closure(const Set& held, Set need, int t) const {
    Set r;
    for (int i = t; i >= 0; --i) {
      if (!need[i] || held[i]) continue;
      r.set(i);
      need |= deps_[i];
    }
    return r;
  }

  double cost_of(const Set& r, int t) const {
    double c = 0;
    for (int i = 0; i <= t; ++i)
      if (r[i]) c += p_.nodes[i].cost;
    return c;
  }

  // Whether stage t fits the budget: it enters holding `held`, computes `r` in ascending order
  // and leaves holding `keep` (charging as in the Note).
  bool stage_fits(const Set& held, const Set& r, const Set& keep, int t) {
    Set used;
    for (int k = 0; k <= t; ++k) {
      if (!r[k]) continue;
      for (int d : p_.nodes[k].deps) last_[d] = k;
      used |= deps_[k];
    }
    int64_t in_use = p_.constant_bytes;
    for (int i = 0; i < t; ++i)
      if (held[i] && (used[i] || keep[i])) in_use += p_.nodes[i].bytes;
    bool fits = in_use <= budget_;
    for (int k = 0; k <= t && fits; ++k) {
      if (!r[k]) continue;
      const ProblemNode& nd = p_.nodes[k];
      fits = in_use + nd.bytes + nd.workspace_bytes <= budget_;
      in_use += nd.bytes;
      for (int d : nd.deps)
        if (last_[d] == k && !keep[d]) in_use -= p_.nodes[d].bytes;
      if (last_[k] < 0 && !keep[k]) in_use -= nd.bytes;
    }
    for (int k = 0; k <= t; ++k)
      if (r[k])
        for (int d : p_.nodes[k].deps) last_[d] = -1;
    return fits;
  }

  HeldSetSearch run(const HeldSetLimits& limits) {
    const int64_t max_transitions = limits.max_transitions;
    const double seconds = limits.seconds;
    int64_t visits = 0;  // depth-first calls
    const auto t0 = std::chrono::steady_clock::now();
    HeldSetSearch out;
    std::vector<std::vector<State>> layers(n_ + 1);
    layers[0].push_back({});
    for (int t = 0; t < n_; ++t) {
      std::vector<State>& next = layers[t + 1];
      std::unordered_map<Set, int> index;
      std::vector<int> cand;  // values that may be held entering t + 1
      for (int i = 0; i <= t && t + 1 < n_; ++i)
        if (md_[i] >= t + 1) cand.push_back(i);
      // The costliest to drop first: the owed bound then prunes near the root.
      auto owe = [&](int v) { return last_user_[v] > t ? p_.nodes[v].cost : 0.0; };
      std::stable_sort(cand.begin(), cand.end(), [&](int a, int b) { return owe(a) > owe(b); });
      std::stable_sort(layers[t].begin(), layers[t].end(),
                       [](const State& a, const State& b) { return a.cost < b.cost; });
      for (int si = 0; si < int(layers[t].size()); ++si) {
        const State s = layers[t][si];
        Set node_t;
        node_t.set(t);
        const Set r0 = closure(s.held, node_t, t);
        const double base = s.cost + cost_of(r0, t);
        // Depth-first over cand, each value kept or not. A value neither held nor in r0 is
        // computed only to be kept (it widens the closure). A value dropped while a later node
        // reads it directly must be computed again later: its cost is owed (a lower bound on
        // what the rest of the path adds beyond every later node once).
        // While node t (the stage's last compute) runs, every kept value, t's inputs, t's
        // output and its workspace are resident: a necessary condition checked per value.
        Set keep, extra, at_t = deps_[t];
        at_t.set(t);
        int64_t keep_bytes = p_.constant_bytes + p_.nodes[t].workspace_bytes;
        for (int i = 0; i <= t; ++i)
          if (at_t[i]) keep_bytes += p_.nodes[i].bytes;
        auto leaf = [&](const Set& r, double cost) {
          if (++out.transitions > max_transitions) return false;
          if (!stage_fits(s.held, r, keep, t)) return true;
          auto [it, fresh] = index.emplace(keep, int(next.size()));
          if (fresh) next.push_back({keep, cost, si});
          else if (cost < next[it->second].cost) next[it->second] = {keep, cost, si};
          return true;
        };
        std::function<bool(int, const Set&, double, double)> dfs =
            [&](int j, const Set& r, double cost, double owed) -> bool {
          // The clock, every 1024 visits (pruned branches too: they can be most of the work).
          if ((++visits & 1023) == 0 &&
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >
                  seconds)
            return false;
          if (cost + owed + rest_[t + 1] >= ceiling_) return true;
          if (j == int(cand.size())) return leaf(r, cost);
          const int v = cand[j];
          if (!dfs(j + 1, r, cost, owed + owe(v))) return false;
          const int64_t b = at_t[v] ? 0 : p_.nodes[v].bytes;
          if (keep_bytes + b > budget_) return true;
          Set r2 = r;
          double cost2 = cost;
          if (!s.held[v] && !r[v]) {
            if (!extras_) return true;
            extra.set(v);
            Set need = extra;
            need.set(t);
            r2 = closure(s.held, need, t);
            cost2 = s.cost + cost_of(r2, t);
          }
          keep.set(v);
          keep_bytes += b;
          bool go = dfs(j + 1, r2, cost2, owed);
          keep.reset(v);
          keep_bytes -= b;
          extra.reset(v);
          return go;
        };
        if (!dfs(0, r0, base, 0)) {
          out.capped = out.transitions > max_transitions;
          out.stopped = out.capped
                            ? "transition cap " + std::to_string(max_transitions)
                            : "time limit";
          return out;
        }
      }
    }
    out.complete = true;
    if (layers[n_].empty()) return out;
    out.best = rebuild(layers);
    return out;
  }

 private:
  Schedule rebuild(const std::vector<std::vector<State>>& layers) const {
    Schedule s;
    s.R = BoolMatrix(n_, n_);
    s.S = BoolMatrix(n_, n_);
    int idx = 0;
    for (int t = n_ - 1; t >= 0; --t) {
      const State& to = layers[t + 1][idx];
      const State& from = layers[t][to.parent];
      Set need = to.held & ~from.held;
      need.set(t);
      const Set r = closure(from.held, need, t);
      for (int i = 0; i <= t; ++i) {
        if (r[i]) s.R.set(t, i, true);
        if (from.held[i] && i < t) s.S.set(t, i, true);
      }
      idx = to.parent;
    }
    return s;
  }

  const Problem& p_;
  const int n_;
  const int64_t budget_;
  const double ceiling_;
  const bool extras_;  // whether a stage may compute values only to keep them
  std::vector<Set> deps_;
  std::vector<int> md_;
  std::vector<double> rest_;  // rest_[t]: every node >= t computed once
  std::vector<int> last_;     // scratch for stage_fits: last user of each value in the stage
  std::vector<int> last_user_;  // the last node that reads each value (-1: none)
};

}  // namespace

HeldSetSearch held_set_search(const Problem& p, int64_t budget, double ceiling,
                              HeldSetSpace space, const HeldSetLimits& limits) {
  HeldSetSearch out;
  if (p.size() > kHeldSetMaxNodes) {
    out.stopped = std::to_string(p.size()) + " nodes (the search takes at most " +
                  std::to_string(kHeldSetMaxNodes) + ")";
    return out;
  }
  if (budget < problem_min_budget(p)) {
    out.complete = true;  // no schedule fits (Note [memory semantics])
    return out;
  }
  Search search(p, budget, ceiling, space == HeldSetSpace::Exact);
  out = search.run(limits);
  if (out.best) {
    SimResult sim = simulate(p, *out.best);
    REMAT_CHECK(sim.valid && sim.peak_bytes <= budget,
                "held-set search built a schedule that does not fit: "
                    << (sim.valid ? "peak " + std::to_string(sim.peak_bytes) : sim.error));
    out.best->strategy = "checkmate";
    if (space == HeldSetSpace::Exact && out.complete) {
      out.best->status = "optimal";
      out.best->lower_bound = sim.total_cost;
      out.best->bound_source = "held-set search (exact)";
    }
  }
  return out;
}

}  // namespace remat
