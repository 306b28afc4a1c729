// Baselines: keep everything, and Chen et al.'s sqrt(n) and greedy checkpointing, each with
// articulation-point or linearised (every forward node) candidates. See Note [segment schedule].
#include "solver/baselines.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include "solver/strategies.h"

namespace remat {

std::vector<int> forward_nodes(const Problem& p) {
  std::vector<int> out;
  for (int i = 0; i < p.size(); ++i)
    if (p.nodes[i].kind == ProblemNodeKind::Forward) out.push_back(i);
  return out;
}

std::vector<int> forward_articulation_points(const Problem& p) {
  const int n = p.size();
  auto in_graph = [&](int i) { return p.nodes[i].kind != ProblemNodeKind::Backward; };
  std::vector<std::vector<int>> adj(n);
  for (int i = 0; i < n; ++i) {
    if (!in_graph(i)) continue;
    for (int d : p.nodes[i].deps)
      if (in_graph(d)) {
        adj[i].push_back(d);
        adj[d].push_back(i);
      }
  }
  // Iterative Tarjan (graphs may be thousands of nodes deep).
  std::vector<int> disc(n, -1), low(n, 0), parent(n, -1), child_count(n, 0);
  std::vector<uint8_t> is_ap(n, 0);
  int timer = 0;
  for (int root = 0; root < n; ++root) {
    if (!in_graph(root) || disc[root] >= 0) continue;
    std::vector<std::pair<int, size_t>> stack = {{root, 0}};
    disc[root] = low[root] = timer++;
    while (!stack.empty()) {
      auto& [u, next] = stack.back();
      if (next < adj[u].size()) {
        int v = adj[u][next++];
        if (disc[v] < 0) {
          parent[v] = u;
          ++child_count[u];
          disc[v] = low[v] = timer++;
          stack.push_back({v, 0});
        } else if (v != parent[u]) {
          low[u] = std::min(low[u], disc[v]);
        }
      } else {
        int done = u;
        stack.pop_back();
        int par = parent[done];
        if (par >= 0) {
          low[par] = std::min(low[par], low[done]);
          if (parent[par] >= 0 && low[done] >= disc[par]) is_ap[par] = 1;
        }
      }
    }
    if (child_count[root] > 1) is_ap[root] = 1;
  }
  std::vector<int> out;
  for (int i : forward_nodes(p))
    if (is_ap[i]) out.push_back(i);
  return out;
}

Schedule all_keep_schedule(const Problem& p) {
  const int n = p.size();
  Schedule s;
  s.strategy = "all-keep";
  s.status = "heuristic";
  s.R = BoolMatrix(n, n);
  s.S = BoolMatrix(n, n);
  for (int t = 0; t < n; ++t) {
    s.R.set(t, t, true);
    for (int i = 0; i < t; ++i) s.S.set(t, i, true);
  }
  return s;
}

Schedule segment_schedule(const Problem& p, const std::vector<int>& checkpoints,
                          const std::string& strategy) {
  const int n = p.size();
  const auto users = problem_users(p);
  // last_user[i]: the last stage that uses value i (-1 if none).
  std::vector<int> last_user(n, -1);
  for (int i = 0; i < n; ++i)
    if (!users[i].empty()) last_user[i] = users[i].back();
  // First backward stage: the forward pass ends just before it.
  int backward_start = n;
  for (int i = 0; i < n; ++i)
    if (p.nodes[i].kind == ProblemNodeKind::Backward) {
      backward_start = i;
      break;
    }
  // segment[i]: -1 for checkpoints and non-forward nodes (never dropped), else the number of
  // checkpoints before i.
  std::vector<int> segment(n, -1);
  std::vector<uint8_t> is_checkpoint(n, 0);
  for (int c : checkpoints) is_checkpoint[c] = 1;
  std::vector<std::vector<int>> members;
  int seg = 0;
  bool open = false;
  for (int i : forward_nodes(p)) {
    if (is_checkpoint[i]) {
      if (open) ++seg;
      open = false;
      continue;
    }
    if (!open) members.emplace_back();
    open = true;
    segment[i] = seg;
    members[seg].push_back(i);
  }
  // Needed later in the forward pass (stages t+1 .. backward_start-1).
  auto forward_needs_after = [&](int i, int t) {
    auto it = std::upper_bound(users[i].begin(), users[i].end(), t);
    return it != users[i].end() && *it < backward_start;
  };

  Schedule s;
  s.strategy = strategy;
  s.status = "heuristic";
  s.R = BoolMatrix(n, n);
  s.S = BoolMatrix(n, n);
  std::vector<uint8_t> need(n), available(n), seg_done(members.size(), 0);
  for (int t = 0; t < n; ++t) {
    const uint8_t* held = s.S.row(t);
    std::fill(need.begin(), need.end(), 0);
    need[t] = 1;
    bool grew = true;
    while (grew) {  // closure over needs; in the backward pass, whole segments at once
      grew = false;
      // Walking down from t, each needed node's missing deps (Note [row scans]).
      for (int i = last_set(need.data(), 0, t + 1); i >= 0; i = last_set(need.data(), 0, i))
        for (int d : p.nodes[i].deps)
          if (!held[d]) need[d] = 1;
      if (t < backward_start) break;
      // Nodes needed here whose segment is not recomputed yet: the whole segment. Members set
      // here belong to a segment now done, so the scan need not revisit them.
      for (int i = first_set(need.data(), 0, t); i < t; i = first_set(need.data(), i + 1, t)) {
        if (segment[i] < 0 || seg_done[segment[i]]) continue;
        seg_done[segment[i]] = 1;
        for (int m : members[segment[i]])
          if (m < t && last_user[m] >= t && !held[m] && !need[m]) {
            need[m] = 1;
            grew = true;
          }
      }
    }
    s.R.set_row(t, need.data(), t + 1);
    if (t + 1 >= n) break;
    for (int i = 0; i <= t; ++i) available[i] = need[i] | held[i];
    for (int i = first_set(available.data(), 0, t + 1); i <= t;
         i = first_set(available.data(), i + 1, t + 1)) {
      if (last_user[i] <= t) continue;
      bool droppable = segment[i] >= 0 && t + 1 <= backward_start;
      if (droppable && t + 1 < backward_start) droppable = !forward_needs_after(i, t);
      if (!droppable || t + 1 > backward_start) s.S.set(t + 1, i, true);
    }
  }
  return s;
}

namespace {

// What the segmentations of one problem share, computed once per search: each forward value's
// last forward or loss reader (for its cut sets, Note [cut sets]) and whether the backward pass
// reads it (for a lower bound on a segmentation's peak).
class Segmentations {
 public:
  explicit Segmentations(const Problem& p)
      : p_(p), last_forward_reader_(static_cast<size_t>(p.size()), -1),
        read_backward_(static_cast<size_t>(p.size()), 0) {
    const auto users = problem_users(p);
    for (int i = 0; i < p.size(); ++i)
      for (int u : users[static_cast<size_t>(i)]) {
        if (p.nodes[u].kind == ProblemNodeKind::Backward)
          read_backward_[static_cast<size_t>(i)] = 1;
        else
          last_forward_reader_[static_cast<size_t>(i)] =
              std::max(last_forward_reader_[static_cast<size_t>(i)], u);
      }
  }

  std::vector<int> with_cut_sets(const std::vector<int>& checkpoints) const {
    const int n = p_.size();
    std::vector<uint8_t> is_checkpoint(static_cast<size_t>(n), 0);
    for (int c : checkpoints) is_checkpoint[static_cast<size_t>(c)] = 1;
    // cuts_below[i]: the number of checkpoints with an index below i.
    std::vector<int> cuts_below(static_cast<size_t>(n) + 1, 0);
    for (int i = 0; i < n; ++i) cuts_below[i + 1] = cuts_below[i] + is_checkpoint[i];
    std::vector<int> out;
    for (int i : forward_nodes(p_)) {
      const int last = last_forward_reader_[static_cast<size_t>(i)];
      // A checkpoint strictly between i and its last forward reader: i crosses that cut.
      if (is_checkpoint[i] || (last > i && cuts_below[last] > cuts_below[i + 1])) out.push_back(i);
    }
    return out;
  }

  // Every held value that the backward pass reads is held as it starts (Note [segment
  // schedule]): with the constant, a lower bound on the peak that needs no simulation.
  int64_t peak_bound(const std::vector<int>& held) const {
    int64_t bytes = p_.constant_bytes;
    for (int c : held)
      if (read_backward_[static_cast<size_t>(c)]) bytes += p_.nodes[c].bytes;
    return bytes;
  }

  // The cheaper of the segment schedules of `checkpoints` alone and with their cut sets that
  // fits the budget, its simulation in *sim; ties go to the lower peak.
  std::optional<Schedule> cheaper(const std::vector<int>& checkpoints, const std::string& strategy,
                                  int64_t budget, SimResult* sim) const {
    CheapestSchedule best;
    const std::vector<int> cut = with_cut_sets(checkpoints);
    for (const std::vector<int>* held : {&checkpoints, &cut}) {
      if (held == &cut && cut == checkpoints) break;  // no value crosses a cut: the same schedule
      if (peak_bound(*held) > budget) continue;
      Schedule s = segment_schedule(p_, *held, strategy);
      const SimResult r = simulate(p_, s);
      if (r.valid && r.peak_bytes <= budget) best.offer(std::move(s), r);
    }
    if (best.schedule) *sim = best.sim;
    return best.schedule;
  }

 private:
  const Problem& p_;
  std::vector<int> last_forward_reader_;
  std::vector<uint8_t> read_backward_;
};

}  // namespace

std::vector<int> with_cut_sets(const Problem& p, const std::vector<int>& checkpoints) {
  return Segmentations(p).with_cut_sets(checkpoints);
}

namespace {

std::vector<int> candidates(const Problem& p, bool linearized) {
  return linearized ? forward_nodes(p) : forward_articulation_points(p);
}

// The thresholds in an order that covers their whole range early: every 2^k-th first, then
// those halfway between, and so on. A search cut short by its time limit has then tried
// thresholds from the whole range (each probe takes ~10 ms at 2,000 nodes), not only the
// smallest ones.
std::vector<int64_t> coarse_to_fine(const std::vector<int64_t>& sorted) {
  const size_t m = sorted.size();
  size_t stride = 1;
  while (stride * 2 < m) stride *= 2;
  std::vector<int64_t> out;
  out.reserve(m);
  for (size_t i = 0; i < m; i += stride) out.push_back(sorted[i]);
  for (; stride > 1; stride /= 2)
    for (size_t i = stride / 2; i < m; i += stride) out.push_back(sorted[i]);
  return out;
}

}  // namespace

std::optional<Schedule> solve_all_keep(const Problem& p) { return all_keep_schedule(p); }

std::optional<Schedule> solve_chen_sqrtn(const Problem& p, int64_t budget, bool linearized) {
  std::vector<int> cand = candidates(p, linearized);
  const int m = static_cast<int>(cand.size());
  const int k = static_cast<int>(std::floor(std::sqrt(static_cast<double>(m))));
  std::vector<int> chosen;
  for (int j = 1; j <= k; ++j) chosen.push_back(cand[(static_cast<int64_t>(j) * m) / (k + 1)]);
  chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
  SimResult sim;
  return Segmentations(p).cheaper(chosen, linearized ? "chen-sqrtn-linear" : "chen-sqrtn", budget,
                                  &sim);
}

namespace {

// Note [greedy thresholds]
// Chen et al.'s greedy rule takes a threshold b: walking the forward nodes in order with a
// running sum of their bytes, a candidate whose running sum exceeds b becomes a checkpoint and
// the sum restarts after it. The checkpoints change only where b reaches one of the running sums
// at a chosen checkpoint: for b in [b_k, b_k+1) the rule gives one segmentation, and b_k+1 is
// the smallest running sum among the checkpoints chosen at b_k (from there on that candidate is
// passed over). Walking these thresholds from 0 visits every segmentation the rule can give,
// each once, where a fixed grid of thresholds can step over some (GPT-2's linearised greedy in
// bf16 fitted batch 36 with the grid this replaced, 41 with every threshold).
// kGreedyThresholdCap (baselines.h) bounds the walk.

struct GreedyRule {
  std::vector<int> fwd;
  std::vector<uint8_t> is_cand;
  GreedyRule(const Problem& p, const std::vector<int>& candidates)
      : fwd(forward_nodes(p)), is_cand(static_cast<size_t>(p.size()), 0) {
    for (int c : candidates) is_cand[static_cast<size_t>(c)] = 1;
  }
  std::vector<int> checkpoints(const Problem& p, int64_t threshold, int64_t* next) const {
    std::vector<int> chosen;
    int64_t running = 0, change = INT64_MAX;
    for (int i : fwd) {
      running += p.nodes[i].bytes;
      if (is_cand[static_cast<size_t>(i)] && running > threshold) {
        chosen.push_back(i);
        change = std::min(change, running);  // from this threshold on, i is passed over
        running = 0;
      }
    }
    if (next) *next = change;
    return chosen;
  }
};

}  // namespace

std::vector<int> greedy_checkpoints(const Problem& p, const std::vector<int>& candidates,
                                    int64_t threshold, int64_t* next) {
  return GreedyRule(p, candidates).checkpoints(p, threshold, next);
}

std::vector<int64_t> greedy_thresholds(const Problem& p, const std::vector<int>& candidates,
                                       size_t cap) {
  const GreedyRule rule(p, candidates);
  std::vector<int64_t> out;
  for (int64_t b = 0; b != INT64_MAX && out.size() < cap;) {
    out.push_back(b);
    rule.checkpoints(p, b, &b);
  }
  return out;
}

namespace {

// The order the greedy search tries the thresholds in: first those of a grid between the
// smallest node and the whole forward pass (geometric and linear sweeps, total / k for k
// segments), then every other one (Note [greedy thresholds]), each group coarse to fine. A
// search its time limit cuts short has covered the grid: on DenseNet-121's linearised
// candidates (1,791 thresholds, ~12 ms a probe at batch 64) the whole walk takes 20 s, while
// the grid's ~400 segmentations take a fifth of that.
std::vector<int64_t> search_order(const Problem& p, const std::vector<int64_t>& walk) {
  const std::vector<int> fwd = forward_nodes(p);
  int64_t total = 0, smallest = INT64_MAX;
  for (int i : fwd) {
    total += p.nodes[i].bytes;
    if (p.nodes[i].bytes > 0) smallest = std::min(smallest, p.nodes[i].bytes);
  }
  if (smallest == INT64_MAX) smallest = 1;
  std::set<int64_t> grid = {0, total};
  const int kSweep = 128;
  for (int j = 0; j <= kSweep; ++j) {
    const double f = static_cast<double>(j) / kSweep;
    grid.insert(static_cast<int64_t>(smallest * std::pow(double(total) / smallest, f)));
    grid.insert(smallest + static_cast<int64_t>(f * double(total - smallest)));
  }
  for (size_t k = 1; k <= fwd.size() && k <= 512; ++k) grid.insert(total / static_cast<int64_t>(k));
  // Each grid value stands for the walk's threshold that starts its interval.
  std::vector<uint8_t> on_grid(walk.size(), 0);
  for (int64_t g : grid) {
    const auto it = std::upper_bound(walk.begin(), walk.end(), g);
    if (it != walk.begin()) on_grid[static_cast<size_t>(it - walk.begin() - 1)] = 1;
  }
  std::vector<int64_t> first, rest;
  for (size_t k = 0; k < walk.size(); ++k) (on_grid[k] ? first : rest).push_back(walk[k]);
  std::vector<int64_t> order = coarse_to_fine(first);
  for (int64_t b : coarse_to_fine(rest)) order.push_back(b);
  return order;
}

}  // namespace

std::vector<int64_t> greedy_search_order(const Problem& p, const std::vector<int>& candidates) {
  return search_order(p, greedy_thresholds(p, candidates, kGreedyThresholdCap));
}

std::optional<Schedule> cheaper_segment_schedule(const Problem& p,
                                                 const std::vector<int>& checkpoints,
                                                 const std::string& strategy, int64_t budget,
                                                 SimResult* sim) {
  return Segmentations(p).cheaper(checkpoints, strategy, budget, sim);
}

std::optional<Schedule> solve_chen_greedy(const Problem& p, int64_t budget, bool linearized,
                                          double seconds, double cost_cap) {
  const auto t0 = std::chrono::steady_clock::now();
  auto late = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds;
  };
  const std::vector<int> cand = candidates(p, linearized);
  const GreedyRule rule(p, cand);
  const std::string name = linearized ? "chen-greedy-linear" : "chen-greedy";
  CheapestSchedule best;
  const Segmentations segmentations(p);
  for (int64_t b : greedy_search_order(p, cand)) {
    if (late()) break;
    const std::vector<int> chosen = rule.checkpoints(p, b, nullptr);
    SimResult sim;
    auto s = segmentations.cheaper(chosen, name, budget, &sim);
    if (!s) continue;
    best.offer(std::move(*s), sim);
    if (cost_cap > 0 && best.sim.total_cost <= cost_cap) break;
  }
  return best.schedule;
}

}  // namespace remat
