// The simulator: replays a Schedule into ordered compute/free steps with exact memory
// accounting (Note [memory semantics]); the single source of truth for peak bytes and cost.
#include "solver/schedule.h"

#include <algorithm>
#include <sstream>

namespace remat {
namespace {

std::string node_label(const Problem& p, int i) {
  return "'" + p.nodes[i].name + "' (" + std::to_string(i) + ")";
}

// Shape and validity (Note [frontier-advancing stages]); returns an error or "".
std::string check_schedule(const Problem& p, const Schedule& s) {
  const int n = p.size();
  std::ostringstream os;
  if (s.R.rows() != n || s.R.cols() != n || s.S.rows() != n || s.S.cols() != n) {
    os << "schedule shape R " << s.R.rows() << "x" << s.R.cols() << ", S " << s.S.rows() << "x"
       << s.S.cols() << " does not match the problem's " << n << " nodes";
    return os.str();
  }
  // Each test scans for its first violation (Note [row scans]); the error names that one.
  // Held entering t, but neither held entering t-1 nor computed in it.
  std::vector<uint8_t> unavailable(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t) {
    const uint8_t* r = s.R.row(t);
    const uint8_t* h = s.S.row(t);
    if (!r[t]) {
      os << "stage " << t << ": does not compute its frontier node " << node_label(p, t);
      return os.str();
    }
    if (int i = first_set(r, t + 1, n); i < n) {
      os << "stage " << t << ": computes node " << node_label(p, i) << " beyond the frontier";
      return os.str();
    }
    if (int i = first_set(h, t, n); i < n) {
      os << "stage " << t << ": holds node " << node_label(p, i)
         << ", which is not computed before stage " << t;
      return os.str();
    }
    if (t > 0) {
      const uint8_t* held_before = s.S.row(t - 1);
      const uint8_t* computed_before = s.R.row(t - 1);
      for (int i = 0; i < t; ++i)
        unavailable[size_t(i)] = h[i] & ~(held_before[i] | computed_before[i]);
      if (int i = first_set(unavailable.data(), 0, t); i < t) {
        os << "stage " << t << ": holds node " << node_label(p, i)
           << ", which is neither held entering stage " << t - 1 << " nor computed in it";
        return os.str();
      }
    }
    for (int i = first_set(r, 0, t + 1); i <= t; i = first_set(r, i + 1, t + 1)) {
      for (int d : p.nodes[i].deps) {
        if (r[d] || h[d]) continue;  // d < i: computed earlier in the stage, or held
        os << "stage " << t << ": computing node " << node_label(p, i) << " needs "
           << node_label(p, d) << ", which is neither held entering stage " << t
           << " nor computed earlier in it";
        return os.str();
      }
    }
  }
  return "";
}

}  // namespace

SimResult simulate(const Problem& p, const Schedule& s) {
  SimResult r;
  r.error = check_schedule(p, s);
  if (!r.error.empty()) return r;
  const int n = p.size();

  // The ordered computes, and for each the index of the last compute that uses its output
  // before the node is computed again (-1: unused, freed right after it runs).
  struct Event {
    int stage, node;
  };
  std::vector<Event> events;
  for (int t = 0; t < n; ++t) {
    const uint8_t* r = s.R.row(t);
    for (int i = first_set(r, 0, t + 1); i <= t; i = first_set(r, i + 1, t + 1))
      events.push_back({t, i});
  }
  const int m = static_cast<int>(events.size());
  std::vector<int> last_use(m, -1);
  std::vector<int> current(n, -1);  // event that produced the live instance of each node
  for (int e = 0; e < m; ++e) {
    for (int d : p.nodes[events[e].node].deps) last_use[current[d]] = e;
    current[events[e].node] = e;
  }
  // frees_after[e]: events whose instance dies right after event e.
  std::vector<std::vector<int>> frees_after(m);
  for (int e = 0; e < m; ++e) frees_after[last_use[e] < 0 ? e : last_use[e]].push_back(e);

  std::vector<uint8_t> computed(n, 0);
  r.steps.reserve(2 * size_t(m));
  int64_t in_use = p.constant_bytes;
  r.peak_bytes = in_use;
  auto note_peak = [&](int64_t bytes) {
    if (bytes > r.peak_bytes || r.peak_step < 0) {
      r.peak_bytes = std::max(r.peak_bytes, bytes);
      r.peak_step = static_cast<int>(r.steps.size());
    }
  };
  for (int e = 0; e < m; ++e) {
    const ProblemNode& node = p.nodes[events[e].node];
    SimStep c;
    c.kind = StepKind::Compute;
    c.node = events[e].node;
    c.stage = events[e].stage;
    c.recompute = computed[c.node] != 0;
    c.bytes_during = in_use + node.bytes + node.workspace_bytes;
    in_use += node.bytes;
    c.bytes_after = in_use;
    note_peak(c.bytes_during);
    r.steps.push_back(c);
    computed[c.node] = 1;
    r.total_cost += node.cost;
    ++r.computes;
    if (c.recompute) ++r.recomputes;
    std::vector<int>& dying = frees_after[e];
    std::sort(dying.begin(), dying.end(),
              [&](int a, int b) { return events[a].node < events[b].node; });
    for (int d : dying) {
      SimStep f;
      f.kind = StepKind::Free;
      f.node = events[d].node;
      f.stage = events[e].stage;
      in_use -= p.nodes[f.node].bytes;
      f.bytes_during = in_use;
      f.bytes_after = in_use;
      r.steps.push_back(f);
    }
  }
  r.valid = true;
  return r;
}

}  // namespace remat
