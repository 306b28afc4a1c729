// The simulator: replays a Schedule into ordered compute/free steps with exact memory
// accounting (Note [memory semantics]); the single source of truth for peak bytes and cost.
#include "solver/schedule.h"

#include <algorithm>
#include <optional>
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
  const bool no_copies = s.offload.rows() == 0 && s.prefetch.rows() == 0;
  if (!no_copies && (s.offload.rows() != n || s.offload.cols() != n || s.prefetch.rows() != n ||
                     s.prefetch.cols() != n)) {
    os << "schedule copies: offload " << s.offload.rows() << "x" << s.offload.cols()
       << ", prefetch " << s.prefetch.rows() << "x" << s.prefetch.cols()
       << " do not match the problem's " << n << " nodes";
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
      const uint8_t* arrived = s.has_copies() ? s.prefetch.row(t - 1) : nullptr;
      for (int i = 0; i < t; ++i)
        unavailable[size_t(i)] =
            h[i] & ~(held_before[i] | computed_before[i] | (arrived ? arrived[i] : 0));
      if (int i = first_set(unavailable.data(), 0, t); i < t) {
        os << "stage " << t << ": holds node " << node_label(p, i)
           << ", which is neither held entering stage " << t - 1
           << " nor computed or prefetched in it";
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

// The copies (Note [offload semantics]); returns an error or "". Runs after check_schedule.
std::string check_copies(const Problem& p, const Schedule& s) {
  const int n = p.size();
  std::ostringstream os;
  if (!s.has_copies()) return "";
  std::vector<uint8_t> on_host(size_t(n), 0);  // offloaded in an earlier stage
  for (int t = 0; t < n; ++t) {
    const uint8_t* out = s.offload.row(t);
    const uint8_t* in = s.prefetch.row(t);
    if (p.copy_cost_per_byte <= 0 && (first_set(out, 0, n) < n || first_set(in, 0, n) < n)) {
      os << "stage " << t << ": copies values over a host link the problem does not have"
         << " (copy_cost_per_byte 0)";
      return os.str();
    }
    for (int i = first_set(out, 0, n); i < n; i = first_set(out, i + 1, n)) {
      if (i < t && s.S(t, i)) continue;
      os << "stage " << t << ": offloads node " << node_label(p, i)
         << ", which is not held entering stage " << t;
      return os.str();
    }
    for (int i = first_set(in, 0, n); i < n; i = first_set(in, i + 1, n)) {
      if (i >= t || !on_host[size_t(i)]) {
        os << "stage " << t << ": prefetches node " << node_label(p, i)
           << ", which no earlier stage offloads";
        return os.str();
      }
      if (s.S(t, i) || s.R(t, i)) {
        os << "stage " << t << ": prefetches node " << node_label(p, i)
           << ", which is already on the device in stage " << t;
        return os.str();
      }
    }
    for (int i = first_set(out, 0, n); i < n; i = first_set(out, i + 1, n)) on_host[size_t(i)] = 1;
  }
  return "";
}

}  // namespace

bool stage_reads(const std::vector<std::vector<int>>& users, const Schedule& s, int t, int i) {
  if (s.R(t, i)) return true;
  for (int j : users[size_t(i)])
    if (j <= t && s.R(t, j)) return true;
  return false;
}

namespace {

// One step's order of events: per stage, its prefetches (device bytes from the stage's start),
// its computes, then its end (copies finish; prefetched values become the ones read).
enum class EventKind { Prefetch, Compute, End };
struct Event {
  EventKind kind;
  int stage, node;
};

struct EventList {
  std::vector<Event> events;
  std::vector<int> end_of;    // [stage] -> index of its End event
  std::vector<int> death;     // [event] -> the event after which the instance it made is freed
  // Each offload's host copy, in issue order (stage, then node): its node, and the End event
  // that frees it.
  struct HostCopy {
    int node, end;
  };
  std::vector<HostCopy> host_copies;
  std::vector<int> offloaded; // the instance (event) each offload copies, in issue order
};

// Under Stream overlap, the stage whose end a value offloaded in stage t stays on the device
// for at least (Note [streamed copies]): the last of the stages from t on that hold it, or the
// one before when that one reads it (the read keeps it as long, and is where the MILP may free
// it).
int offloaded_held_until(const std::vector<std::vector<int>>& users, const Schedule& s, int t,
                         int i) {
  const int n = s.S.rows();
  int e = t;
  while (e + 1 < n && s.S(e + 1, i)) ++e;
  return e > t && stage_reads(users, s, e, i) ? e - 1 : e;
}

// The stage whose end frees the host copy a prefetch of value i in stage t reads from, as far as
// this prefetch is concerned: t itself under Stage overlap; under Stream overlap the stage
// before the first one that reads the prefetched value (Note [streamed copies]).
int host_copy_needed_until(const Problem& p, const std::vector<std::vector<int>>& users,
                           const Schedule& s, int t, int i) {
  if (p.copy_overlap == CopyOverlap::Stage) return t;
  for (int u = t + 1; u < p.size() && s.S(u, i); ++u)
    if (stage_reads(users, s, u, i)) return u - 1;
  return t;
}

EventList order_events(const Problem& p, const Schedule& s) {
  const int n = p.size();
  const bool copies = s.has_copies();
  const bool streamed = copies && p.copy_overlap == CopyOverlap::Stream;
  const std::vector<std::vector<int>> users =
      streamed ? problem_users(p) : std::vector<std::vector<int>>{};
  EventList l;
  for (int t = 0; t < n; ++t) {
    if (copies)
      for (int i = first_set(s.prefetch.row(t), 0, n); i < n;
           i = first_set(s.prefetch.row(t), i + 1, n))
        l.events.push_back({EventKind::Prefetch, t, i});
    const uint8_t* r = s.R.row(t);
    for (int i = first_set(r, 0, t + 1); i <= t; i = first_set(r, i + 1, t + 1))
      l.events.push_back({EventKind::Compute, t, i});
    l.end_of.push_back(static_cast<int>(l.events.size()));
    l.events.push_back({EventKind::End, t, -1});
  }
  // Lifetimes: an instance lives until its last read before the node is made again, until the
  // end of a stage that offloads it (under Stream overlap, of the stages after it that hold it:
  // Note [streamed copies]), and a prefetched one at least until it arrives.
  const int m = static_cast<int>(l.events.size());
  l.death.assign(size_t(m), -1);
  // host_current[i]: the host copy (index into host_copies) a prefetch of i reads.
  std::vector<int> current(size_t(n), -1), host_current(size_t(n), -1);
  auto extend = [&](int inst, int e) {
    l.death[size_t(inst)] = std::max(l.death[size_t(inst)], e);
  };
  for (int t = 0, e = 0; t < n; ++t) {
    if (copies)
      for (int i = first_set(s.offload.row(t), 0, n); i < n;
           i = first_set(s.offload.row(t), i + 1, n)) {
        const int held_until = streamed ? offloaded_held_until(users, s, t, i) : t;
        extend(current[size_t(i)], l.end_of[size_t(held_until)]);
        l.offloaded.push_back(current[size_t(i)]);
        l.host_copies.push_back({i, l.end_of[t]});
      }
    for (; l.events[size_t(e)].kind != EventKind::End; ++e) {
      const Event& ev = l.events[size_t(e)];
      if (ev.kind == EventKind::Prefetch) {
        extend(e, l.end_of[t]);
        int& h = l.host_copies[size_t(host_current[size_t(ev.node)])].end;
        h = std::max(h, l.end_of[size_t(host_copy_needed_until(p, users, s, t, ev.node))]);
        continue;
      }
      for (int d : p.nodes[ev.node].deps) extend(current[size_t(d)], e);
      current[size_t(ev.node)] = e;
      extend(e, e);
    }
    // The stage's host copies and prefetched values are the ones later stages read.
    if (copies) {
      int k = static_cast<int>(l.host_copies.size());
      for (int i = last_set(s.offload.row(t), 0, n); i >= 0; i = last_set(s.offload.row(t), 0, i))
        host_current[size_t(i)] = --k;
    }
    for (int f = e - 1; f >= 0 && l.events[size_t(f)].stage == t; --f)
      if (l.events[size_t(f)].kind == EventKind::Prefetch)
        current[size_t(l.events[size_t(f)].node)] = f;
    ++e;
  }
  return l;
}

// Stage t's copy time beyond its computes (Note [offload semantics]).
double copy_excess(const Problem& p, const Schedule& s, int t, double compute, SimResult& r) {
  const int n = p.size();
  int64_t out = 0, in = 0;
  for (int i = first_set(s.offload.row(t), 0, n); i < n; i = first_set(s.offload.row(t), i + 1, n))
    out += p.nodes[i].bytes, ++r.offloads;
  for (int i = first_set(s.prefetch.row(t), 0, n); i < n;
       i = first_set(s.prefetch.row(t), i + 1, n))
    in += p.nodes[i].bytes, ++r.prefetches;
  r.copied_bytes += out + in;
  const double longest = double(std::max(out, in)) * p.copy_cost_per_byte;
  return std::max(0.0, longest - compute);
}

// Note [streamed copies] time: the compute stream's clock, and each copy stream's, as the
// events replay in order. A copy starts when it is issued (its stage's start) and its stream is
// free; a prefetch also waits for its host copy to be complete. The compute stream waits for a
// copy only where the plan needs it done: before reading a prefetched value, before freeing a
// device copy being offloaded or prefetched, and before releasing a host copy being read.
struct StreamClock {
  const Problem& p;
  double clock = 0, out_free = 0, in_free = 0;
  std::vector<double> busy;       // [event]: the instance's copies are done at
  std::vector<double> ready;      // [node]: its current instance can be read from
  std::vector<double> host_busy;  // [node]: its host copy is complete and unread from
  StreamClock(const Problem& problem, int events)
      : p(problem), busy(size_t(events), 0), ready(size_t(p.size()), 0),
        host_busy(size_t(p.size()), 0) {}

  double copy(double& stream_free, double earliest, int node) {
    stream_free = std::max({clock, stream_free, earliest}) +
                  double(p.nodes[size_t(node)].bytes) * p.copy_cost_per_byte;
    return stream_free;
  }
  void offload(int instance, int node) {
    const double done = copy(out_free, 0, node);
    busy[size_t(instance)] = std::max(busy[size_t(instance)], done);
    host_busy[size_t(node)] = done;
  }
  void prefetch(int event, int node) {
    const double arrives = copy(in_free, host_busy[size_t(node)], node);
    busy[size_t(event)] = ready[size_t(node)] = arrives;
    host_busy[size_t(node)] = std::max(host_busy[size_t(node)], arrives);
  }
  void compute(int node) {
    for (int d : p.nodes[size_t(node)].deps) clock = std::max(clock, ready[size_t(d)]);
    clock += p.nodes[size_t(node)].cost;
    ready[size_t(node)] = 0;
  }
  void free_instance(int event) { clock = std::max(clock, busy[size_t(event)]); }
  void free_host(int node) { clock = std::max(clock, host_busy[size_t(node)]); }
};

}  // namespace

SimResult simulate(const Problem& p, const Schedule& s) {
  SimResult r;
  r.error = check_schedule(p, s);
  if (r.error.empty()) r.error = check_copies(p, s);
  if (!r.error.empty()) return r;
  const int n = p.size();
  const bool copies = s.has_copies();
  const EventList l = order_events(p, s);
  const int m = static_cast<int>(l.events.size());
  std::vector<std::vector<int>> frees_after(
      static_cast<size_t>(m));  // instances dying after each event
  for (int e = 0; e < m; ++e)
    if (l.events[size_t(e)].kind != EventKind::End)
      frees_after[size_t(l.death[size_t(e)])].push_back(e);
  // Host copies released at each End event, by node.
  std::vector<std::vector<int>> host_frees(static_cast<size_t>(m));
  for (const EventList::HostCopy& h : l.host_copies)
    host_frees[size_t(h.end)].push_back(h.node);

  std::vector<uint8_t> computed(n, 0);
  r.steps.reserve(2 * size_t(m));
  int64_t in_use = p.constant_bytes, host_in_use = 0;
  r.peak_bytes = in_use;
  auto note_peak = [&](int64_t bytes) {
    if (bytes > r.peak_bytes || r.peak_step < 0) {
      r.peak_bytes = std::max(r.peak_bytes, bytes);
      r.peak_step = static_cast<int>(r.steps.size());
    }
  };
  double stage_compute = 0;
  std::optional<StreamClock> streams;
  if (copies && p.copy_overlap == CopyOverlap::Stream) streams.emplace(p, m);
  size_t offloaded = 0;  // into l.offloaded
  for (int e = 0; e < m; ++e) {
    const Event& ev = l.events[size_t(e)];
    if (copies && (e == 0 || l.events[size_t(e) - 1].kind == EventKind::End)) {
      for (int i = first_set(s.offload.row(ev.stage), 0, n); i < n;
           i = first_set(s.offload.row(ev.stage), i + 1, n)) {
        host_in_use += p.nodes[i].bytes;
        r.steps.push_back({StepKind::Offload, i, ev.stage, false, in_use, in_use});
        if (streams) streams->offload(l.offloaded[offloaded], i);
        ++offloaded;
      }
      r.host_peak_bytes = std::max(r.host_peak_bytes, host_in_use);
    }
    if (ev.kind == EventKind::End) {
      if (copies) {
        const double excess = copy_excess(p, s, ev.stage, stage_compute, r);
        if (!streams) r.copy_cost += excess;
      }
      for (int i : host_frees[size_t(e)]) {
        host_in_use -= p.nodes[size_t(i)].bytes;
        r.steps.push_back({StepKind::HostFree, i, ev.stage, false, in_use, in_use});
        if (streams) streams->free_host(i);
      }
      stage_compute = 0;
    } else if (ev.kind == EventKind::Prefetch) {
      if (streams) streams->prefetch(e, ev.node);
      in_use += p.nodes[ev.node].bytes;
      r.steps.push_back({StepKind::Prefetch, ev.node, ev.stage, false, in_use, in_use});
      note_peak(in_use);
    } else {
      const ProblemNode& node = p.nodes[ev.node];
      SimStep c;
      c.kind = StepKind::Compute;
      c.node = ev.node;
      c.stage = ev.stage;
      c.recompute = computed[c.node] != 0;
      c.bytes_during = in_use + node.bytes + node.workspace_bytes;
      in_use += node.bytes;
      c.bytes_after = in_use;
      note_peak(c.bytes_during);
      r.steps.push_back(c);
      computed[c.node] = 1;
      if (streams) streams->compute(c.node);
      r.compute_cost += node.cost;
      stage_compute += node.cost;
      ++r.computes;
      if (c.recompute) ++r.recomputes;
    }
    std::vector<int>& dying = frees_after[size_t(e)];
    std::sort(dying.begin(), dying.end(),
              [&](int a, int b) { return l.events[size_t(a)].node < l.events[size_t(b)].node; });
    for (int d : dying) {
      SimStep f;
      f.kind = StepKind::Free;
      f.node = l.events[size_t(d)].node;
      f.stage = ev.stage;
      if (streams) streams->free_instance(d);
      in_use -= p.nodes[f.node].bytes;
      f.bytes_during = in_use;
      f.bytes_after = in_use;
      r.steps.push_back(f);
    }
  }
  if (streams) r.copy_cost = std::max(0.0, streams->clock - r.compute_cost);
  r.total_cost = r.compute_cost + r.copy_cost;
  r.valid = true;
  return r;
}

}  // namespace remat
