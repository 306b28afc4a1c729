// Static arena planning: greedy-by-size interval packing and its checker.
// Largest buffers first is the heuristic TFLite (ArenaPlanner's greedy-by-size) and ggml's
// graph allocator use: big buffers are the hardest to fit, and small ones fill their gaps.
#include "runtime/arena.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "runtime/check.h"

namespace remat {

namespace {

int64_t round_up(int64_t bytes, int64_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

void validate(const std::vector<ArenaRequest>& requests, int64_t alignment) {
  REMAT_CHECK(alignment > 0, "arena alignment must be positive, got " << alignment);
  for (const auto& r : requests) {
    REMAT_CHECK(r.bytes >= 0, "arena buffer '" << r.name << "' has negative size " << r.bytes);
    REMAT_CHECK(r.first >= 0 && r.first <= r.last, "arena buffer '" << r.name
                                                       << "' has an invalid lifetime [" << r.first
                                                       << ", " << r.last << "]");
  }
}

bool live_together(const ArenaRequest& a, const ArenaRequest& b) {
  return a.first <= b.last && b.first <= a.last;
}

}  // namespace

int64_t arena_lower_bound(const std::vector<ArenaRequest>& requests, int64_t alignment) {
  validate(requests, alignment);
  // Sweep: +bytes at first, -bytes after last. Ends sort before starts at the same step.
  std::vector<std::pair<int64_t, int64_t>> events;  // (step*2 + 0 for end / 1 for start, delta)
  events.reserve(requests.size() * 2);
  for (const auto& r : requests) {
    int64_t b = round_up(r.bytes, alignment);
    if (b == 0) continue;
    events.push_back({static_cast<int64_t>(r.first) * 2 + 1, b});
    events.push_back({(static_cast<int64_t>(r.last) + 1) * 2, -b});
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0, best = 0;
  for (const auto& e : events) {
    live += e.second;
    best = std::max(best, live);
  }
  return best;
}

ArenaPlan plan_arena(const std::vector<ArenaRequest>& requests, int64_t alignment) {
  validate(requests, alignment);
  const size_t n = requests.size();
  std::vector<int64_t> size(n);
  for (size_t i = 0; i < n; ++i) size[i] = round_up(requests[i].bytes, alignment);

  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (size[a] != size[b]) return size[a] > size[b];
    return requests[a].first < requests[b].first;
  });

  ArenaPlan plan;
  plan.alignment = alignment;
  plan.offsets.assign(n, 0);
  std::vector<size_t> placed;  // indices already given an offset
  std::vector<std::pair<int64_t, int64_t>> busy;  // (offset, end) of placed overlapping ones
  for (size_t i : order) {
    if (size[i] == 0) continue;
    busy.clear();
    for (size_t j : placed)
      if (live_together(requests[i], requests[j])) busy.push_back({plan.offsets[j], plan.offsets[j] + size[j]});
    std::sort(busy.begin(), busy.end());
    // Lowest gap that fits: walk the busy ranges in address order.
    int64_t cursor = 0;
    for (const auto& [begin, end] : busy) {
      if (begin - cursor >= size[i]) break;
      cursor = std::max(cursor, end);
    }
    plan.offsets[i] = cursor;
    plan.arena_bytes = std::max(plan.arena_bytes, cursor + size[i]);
    placed.push_back(i);
  }
  plan.lower_bound = arena_lower_bound(requests, alignment);
  return plan;
}

void check_arena(const std::vector<ArenaRequest>& requests, const ArenaPlan& plan) {
  validate(requests, plan.alignment);
  REMAT_CHECK(plan.offsets.size() == requests.size(),
              "arena plan has " << plan.offsets.size() << " offsets for " << requests.size()
                                << " buffers");
  const size_t n = requests.size();
  for (size_t i = 0; i < n; ++i) {
    const auto& r = requests[i];
    const int64_t off = plan.offsets[i];
    REMAT_CHECK(off >= 0 && off % plan.alignment == 0,
                "arena buffer '" << r.name << "' at offset " << off << " (alignment "
                                 << plan.alignment << ")");
    REMAT_CHECK(off + r.bytes <= plan.arena_bytes, "arena buffer '" << r.name << "' ends at "
                                                                    << off + r.bytes
                                                                    << " past the arena of "
                                                                    << plan.arena_bytes << " bytes");
  }
  // Sort by first step; each buffer is compared with the later-starting ones that begin
  // before it ends, which is every live-together pair exactly once.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return requests[a].first < requests[b].first; });
  for (size_t x = 0; x < n; ++x) {
    const auto& a = requests[order[x]];
    const int64_t ao = plan.offsets[order[x]];
    if (a.bytes == 0) continue;
    for (size_t y = x + 1; y < n && requests[order[y]].first <= a.last; ++y) {
      const auto& b = requests[order[y]];
      const int64_t bo = plan.offsets[order[y]];
      if (b.bytes == 0) continue;
      if (ao < bo + b.bytes && bo < ao + a.bytes) {
        REMAT_FAIL("arena buffers '" << a.name << "' (steps " << a.first << ".." << a.last
                                     << ", bytes [" << ao << ", " << ao + a.bytes << ")) and '"
                                     << b.name << "' (steps " << b.first << ".." << b.last
                                     << ", bytes [" << bo << ", " << bo + b.bytes
                                     << ")) are live together and overlap in memory");
      }
    }
  }
}

PlanBuffers plan_buffers(const Graph& g, const ExecutionPlan& plan,
                         const std::function<int64_t(NodeId)>& workspace) {
  PlanBuffers out;
  const int n = static_cast<int>(plan.steps.size());
  out.output_request.assign(plan.steps.size(), -1);
  out.workspace_request.assign(plan.steps.size(), -1);
  std::vector<int> open(g.values.size(), -1);  // value -> request index while live
  std::vector<int> times(g.values.size(), 0);  // materializations so far, for names
  for (int i = 0; i < n; ++i) {
    const PlanStep& s = plan.steps[static_cast<size_t>(i)];
    const size_t v = static_cast<size_t>(s.value);
    if (s.kind == PlanStepKind::Compute) {
      const Node& node = g.node(s.node);
      const int64_t ws = workspace(s.node);
      if (ws > 0) {
        out.workspace_request[static_cast<size_t>(i)] = static_cast<int>(out.requests.size());
        out.requests.push_back({ws, i, i, node.name + ".workspace"});
      }
      const Value& val = g.value(node.output);
      if (val.kind != ValueKind::Activation) continue;
      const size_t o = static_cast<size_t>(node.output);
      REMAT_CHECK(open[o] < 0, "plan step " << i << " computes '" << val.name
                                            << "' while it is still in memory");
      open[o] = static_cast<int>(out.requests.size());
      out.output_request[static_cast<size_t>(i)] = open[o];
      const int k = times[o]++;
      out.requests.push_back({val.desc.bytes(), i, n - 1, k ? val.name + "#" + std::to_string(k) : val.name});
    } else {
      REMAT_CHECK(s.value >= 0 && v < open.size() && open[v] >= 0,
                  "plan step " << i << " frees value " << s.value << " that is not in memory");
      out.requests[static_cast<size_t>(open[v])].last = i;
      open[v] = -1;
    }
  }
  return out;
}

}  // namespace remat
