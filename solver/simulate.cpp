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
  for (int t = 0; t < n; ++t) {
    if (!s.R(t, t)) {
      os << "stage " << t << ": does not compute its frontier node " << node_label(p, t);
      return os.str();
    }
    for (int i = t + 1; i < n; ++i) {
      if (s.R(t, i)) {
        os << "stage " << t << ": computes node " << node_label(p, i)
           << " beyond the frontier";
        return os.str();
      }
    }
    for (int i = t; i < n; ++i) {
      if (s.S(t, i)) {
        os << "stage " << t << ": holds node " << node_label(p, i)
           << ", which is not computed before stage " << t;
        return os.str();
      }
    }
    for (int i = 0; i < t; ++i) {
      if (s.S(t, i) && !s.S(t - 1, i) && !s.R(t - 1, i)) {
        os << "stage " << t << ": holds node " << node_label(p, i)
           << ", which is neither held entering stage " << t - 1 << " nor computed in it";
        return os.str();
      }
    }
    for (int i = 0; i <= t; ++i) {
      if (!s.R(t, i)) continue;
      for (int d : p.nodes[i].deps) {
        if (s.R(t, d) || s.S(t, d)) continue;  // d < i: computed earlier in the stage, or held
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
  for (int t = 0; t < n; ++t)
    for (int i = 0; i <= t; ++i)
      if (s.R(t, i)) events.push_back({t, i});
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
    std::vector<int> dying = frees_after[e];
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
