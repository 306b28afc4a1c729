// Static arena planning: greedy interval packings (Note [arena packing]) and their checker.
#include "runtime/memory/arena.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <utility>

#include "runtime/core/check.h"
#include "runtime/memory/arena_search.h"

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

namespace {

// The placed buffers by time: each is listed in every bucket of steps its lifetime touches,
// so a buffer's neighbours are found in the buckets of its own lifetime instead of among every
// placed buffer (Note [arena packing]).
class PlacedByTime {
 public:
  explicit PlacedByTime(const std::vector<ArenaRequest>& requests) : requests_(requests) {
    int steps = 0;
    int64_t spans = 0;  // the steps of every lifetime together
    for (const auto& r : requests) {
      steps = std::max(steps, r.last + 1);
      spans += r.last - r.first + 1;
    }
    // At most ~4096 buckets, and at most about 8 entries per buffer on average (a plan that
    // holds most of its values for most of its steps would list each in thousands).
    const auto n = static_cast<int64_t>(std::max<size_t>(1, requests.size()));
    width_ = static_cast<int>(std::max<int64_t>({16, steps / 4096, spans / (8 * n)}));
    buckets_.resize(static_cast<size_t>(steps / width_ + 1));
    seen_.assign(requests.size(), 0);
  }
  void add(size_t j) {
    for (int b = requests_[j].first / width_; b <= requests_[j].last / width_; ++b)
      buckets_[size_t(b)].push_back(j);
  }
  // Calls f(j) once for every placed j live at a step in common with request i.
  template <typename F>
  void for_each_live_with(size_t i, F f) {
    ++stamp_;
    for (int b = requests_[i].first / width_; b <= requests_[i].last / width_; ++b)
      for (size_t j : buckets_[size_t(b)])
        if (seen_[j] != stamp_) {
          seen_[j] = stamp_;
          if (live_together(requests_[i], requests_[j])) f(j);
        }
  }

 private:
  const std::vector<ArenaRequest>& requests_;
  int width_ = 16;  // steps per bucket
  std::vector<std::vector<size_t>> buckets_;
  std::vector<uint32_t> seen_;  // the query stamp that last visited each request
  uint32_t stamp_ = 0;
};

// One packing: buffers in `order`, each at the lowest offset (or, with best_fit, in the
// smallest gap) where it overlaps no already-placed buffer live at a common step.
ArenaPlan pack(const std::vector<ArenaRequest>& requests, const std::vector<int64_t>& size,
               const std::vector<size_t>& order, bool best_fit, int64_t alignment) {
  ArenaPlan plan;
  plan.alignment = alignment;
  plan.offsets.assign(requests.size(), 0);
  PlacedByTime placed(requests);
  std::vector<std::pair<int64_t, int64_t>> busy;  // (offset, end) of placed overlapping ones
  for (size_t i : order) {
    if (size[i] == 0) continue;
    busy.clear();
    placed.for_each_live_with(i, [&](size_t j) {
      busy.push_back({plan.offsets[j], plan.offsets[j] + size[j]});
    });
    std::sort(busy.begin(), busy.end());
    int64_t cursor = 0, chosen = -1, chosen_gap = INT64_MAX;
    for (const auto& [begin, end] : busy) {
      const int64_t gap = begin - cursor;
      if (gap >= size[i] && (!best_fit || gap < chosen_gap)) {
        chosen = cursor, chosen_gap = gap;
        if (!best_fit) break;
      }
      cursor = std::max(cursor, end);
    }
    plan.offsets[i] = chosen >= 0 ? chosen : cursor;
    plan.arena_bytes = std::max(plan.arena_bytes, plan.offsets[i] + size[i]);
    placed.add(i);
  }
  return plan;
}

// The skyline packing (Sekiyama et al., "Profile-guided memory optimization for deep neural
// networks", 2018): time on the x axis, addresses on the y axis, the placed buffers' upper
// edge a skyline of segments. Take the lowest segment; place the first buffer in `order`
// whose lifetime lies within it at the segment's height; if none fits, raise the segment to
// its lower neighbour. Nothing is ever placed under the skyline, so no two buffers overlap.
ArenaPlan pack_skyline(const std::vector<ArenaRequest>& requests, const std::vector<int64_t>& size,
                       const std::vector<size_t>& order, int64_t alignment) {
  ArenaPlan plan;
  plan.alignment = alignment;
  plan.offsets.assign(requests.size(), 0);
  struct Segment {
    int begin, end;  // steps [begin, end)
    int64_t height;
  };
  int steps = 0;
  std::vector<size_t> todo;
  for (size_t i : order)
    if (size[i] > 0) todo.push_back(i), steps = std::max(steps, requests[i].last + 1);
  std::vector<Segment> sky = {{0, steps, 0}};
  auto merge = [&] {
    std::vector<Segment> out;
    for (const Segment& s : sky) {
      if (s.begin == s.end) continue;
      if (!out.empty() && out.back().height == s.height) out.back().end = s.end;
      else out.push_back(s);
    }
    sky = std::move(out);
  };
  while (!todo.empty()) {
    size_t low = 0;
    for (size_t k = 1; k < sky.size(); ++k)
      if (sky[k].height < sky[low].height) low = k;
    const Segment seg = sky[low];
    auto fits = std::find_if(todo.begin(), todo.end(), [&](size_t i) {
      return requests[i].first >= seg.begin && requests[i].last < seg.end;
    });
    if (fits == todo.end()) {  // nothing fits: raise to the lower neighbour
      int64_t h = INT64_MAX;
      if (low > 0) h = sky[low - 1].height;
      if (low + 1 < sky.size()) h = std::min(h, sky[low + 1].height);
      REMAT_CHECK(h != INT64_MAX, "arena skyline: a buffer fits in no time range");
      sky[low].height = h;
      merge();
      continue;
    }
    const size_t i = *fits;
    todo.erase(fits);
    plan.offsets[i] = seg.height;
    plan.arena_bytes = std::max(plan.arena_bytes, seg.height + size[i]);
    const Segment parts[3] = {{seg.begin, requests[i].first, seg.height},
                              {requests[i].first, requests[i].last + 1, seg.height + size[i]},
                              {requests[i].last + 1, seg.end, seg.height}};
    sky.erase(sky.begin() + static_cast<std::ptrdiff_t>(low));
    sky.insert(sky.begin() + static_cast<std::ptrdiff_t>(low), parts, parts + 3);
    merge();
  }
  return plan;
}

}  // namespace

// Note [arena packing]
// Offsets for buffers with known lifetimes is dynamic storage allocation, NP-hard in general,
// and no single greedy rule reaches the lower bound (the most bytes live at one step) on every
// training plan: largest-first (TFLite, ggml) leaves holes on U-Net-like plans whose skip
// connections live long, which the skyline packing fills. We try a few orders (largest first;
// earliest start first, the left-edge order optimal for intervals of one size; largest size x
// lifetime; longest lifetime), each placed first-fit, best-fit and by the skyline, and keep
// the smallest arena, stopping as soon as one reaches the bound. When none does, a bounded
// backtracking search looks for a packing at the bound (Note [arena search] in
// arena_search.cpp): gpt2_tiny's checkmate plans have one that every greedy misses by 64 or
// 128 KiB.
// arena_bench measures the result against the bound across the zoo.
// Plans of 10^5 buffers and more exist: checkmate with 8 s on NASNet-Large (2 x 43 x 43, bf16, 30 %
// of the way from the minimum to keeping everything) returned a schedule of 777,176 buffers that
// recomputes most values at many stages, and scanning every placed buffer for each new one ran past
// 5 minutes (killed there). First-fit now finds a buffer's neighbours through buckets of its
// lifetime's steps (PlacedByTime; the same packing, 6-7 s there), and the skyline, quadratic in the
// buffers, runs only up to kSkylineMaxBuffers of them (NASNet-Large's other checkmate plans have
// 7,000-10,000; a random set of 20,000 took 12 s with it, 3.2 s without).
constexpr size_t kSkylineMaxBuffers = 12000;

ArenaPlan plan_arena(const std::vector<ArenaRequest>& requests, int64_t alignment,
                     int64_t search_work) {
  validate(requests, alignment);
  const size_t n = requests.size();
  std::vector<int64_t> size(n);
  for (size_t i = 0; i < n; ++i) size[i] = round_up(requests[i].bytes, alignment);
  const int64_t bound = arena_lower_bound(requests, alignment);
  auto length = [&](size_t i) { return int64_t(requests[i].last - requests[i].first + 1); };
  using Less = std::function<bool(size_t, size_t)>;
  const std::vector<Less> orders = {
      [&](size_t a, size_t b) {
        return size[a] != size[b] ? size[a] > size[b] : requests[a].first < requests[b].first;
      },
      [&](size_t a, size_t b) {
        return requests[a].first != requests[b].first ? requests[a].first < requests[b].first
                                                      : size[a] > size[b];
      },
      [&](size_t a, size_t b) {  // in double: bytes x steps may pass int64
        return double(size[a]) * double(length(a)) > double(size[b]) * double(length(b));
      },
      [&](size_t a, size_t b) {
        return length(a) != length(b) ? length(a) > length(b) : size[a] > size[b];
      },
  };
  ArenaPlan best;
  bool have = false;
  for (const Less& less : orders) {
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), less);
    for (int placement = 0; placement < 3; ++placement) {
      if (placement == 2 && n > kSkylineMaxBuffers) break;  // quadratic: Note [arena packing]
      ArenaPlan plan = placement == 2 ? pack_skyline(requests, size, order, alignment)
                                      : pack(requests, size, order, placement == 1, alignment);
      if (!have || plan.arena_bytes < best.arena_bytes) best = std::move(plan), have = true;
      if (best.arena_bytes <= bound) break;
    }
    if (best.arena_bytes <= bound) break;
  }
  if (have && best.arena_bytes > bound && search_work > 0) {
    ArenaSearchResult found = arena_search(requests, size, bound, search_work);
    if (found.found) best.offsets = std::move(found.offsets), best.arena_bytes = bound;
  }
  if (!have) best.alignment = alignment;
  best.lower_bound = bound;
  return best;
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
    } else if (s.kind == PlanStepKind::Prefetch) {  // the value's device buffer, again
      const Value& val = g.value(s.value);
      REMAT_CHECK(s.value >= 0 && v < open.size() && open[v] < 0,
                  "plan step " << i << " prefetches '" << val.name << "' while it is in memory");
      open[v] = static_cast<int>(out.requests.size());
      out.output_request[static_cast<size_t>(i)] = open[v];
      const int k = times[v]++;
      out.requests.push_back({val.desc.bytes(), i, n - 1, val.name + "#" + std::to_string(k)});
    } else if (s.kind == PlanStepKind::Free) {
      REMAT_CHECK(s.value >= 0 && v < open.size() && open[v] >= 0,
                  "plan step " << i << " frees value " << s.value << " that is not in memory");
      out.requests[static_cast<size_t>(open[v])].last = i;
      open[v] = -1;
    }
  }
  return out;
}

PlanBuffers plan_host_buffers(const Graph& g, const ExecutionPlan& plan) {
  PlanBuffers out;
  const int n = static_cast<int>(plan.steps.size());
  out.output_request.assign(plan.steps.size(), -1);
  std::vector<int> open(g.values.size(), -1);  // value -> its host buffer while it has one
  for (int i = 0; i < n; ++i) {
    const PlanStep& s = plan.steps[static_cast<size_t>(i)];
    const size_t v = static_cast<size_t>(s.value);
    if (s.kind == PlanStepKind::Offload) {
      REMAT_CHECK(open[v] < 0, "plan step " << i << " offloads '" << g.value(s.value).name
                                            << "', which has a host copy");
      open[v] = static_cast<int>(out.requests.size());
      out.requests.push_back({g.value(s.value).desc.bytes(), i, n - 1, g.value(s.value).name});
    } else if (s.kind == PlanStepKind::Prefetch || s.kind == PlanStepKind::HostFree) {
      REMAT_CHECK(open[v] >= 0, "plan step " << i << " reads the host copy of '"
                                             << g.value(s.value).name << "', which has none");
    } else {
      continue;
    }
    out.output_request[static_cast<size_t>(i)] = open[v];
    if (s.kind == PlanStepKind::HostFree) out.requests[size_t(open[v])].last = i, open[v] = -1;
  }
  return out;
}

}  // namespace remat
