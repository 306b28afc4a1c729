// Static arena planning: when every buffer's lifetime is known ahead (an ExecutionPlan's
// steps), assign byte offsets once so a training step does no allocator work and cannot
// fragment. Greedy interval packings, as TFLite's and ggml's memory planners do.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/graph/graph.h"
#include "runtime/memory/plan.h"

namespace remat {

// One buffer: `bytes` live over the plan steps first..last, both inclusive (a buffer written
// at step i and last read at step j is live at i and j, so an op's output never shares memory
// with its inputs). A value that is freed and recomputed is two requests.
struct ArenaRequest {
  int64_t bytes = 0;
  int first = 0;
  int last = 0;
  std::string name;  // for error messages
};

struct ArenaPlan {
  std::vector<int64_t> offsets;  // per request, bytes from the arena base (a multiple of alignment)
  int64_t arena_bytes = 0;       // the arena size the offsets need
  int64_t lower_bound = 0;       // arena_lower_bound(): no plan can be smaller
  int64_t alignment = 1;         // the alignment the plan was made with
};

// The largest sum of (alignment-rounded) bytes live at one step: a lower bound on any plan's
// arena_bytes. 0 for no requests.
int64_t arena_lower_bound(const std::vector<ArenaRequest>& requests, int64_t alignment);

// The work units (about one per buffer looked at) plan_arena gives the search for a packing at
// the lower bound when no greedy packing reaches it: at most about 0.1 s on one core for a plan
// of thousands of buffers, spent only on such plans.
constexpr int64_t kArenaSearchWork = int64_t{1} << 22;

// Offsets for `requests`: sizes rounded up to `alignment` (> 0); the smallest of a few greedy
// packings (Note [arena packing] in arena.cpp), each buffer placed where it overlaps no
// already-placed buffer whose lifetime overlaps its own, or, when none reaches the lower
// bound, a packing at the bound found by arena_search() within `search_work` units (0: greedy
// only). Deterministic. Zero-byte buffers get offset 0.
// Throws Error (naming the buffer) on bytes < 0, first < 0 or first > last.
ArenaPlan plan_arena(const std::vector<ArenaRequest>& requests, int64_t alignment,
                     int64_t search_work = kArenaSearchWork);

// Throws Error naming both buffers if two buffers live at a common step overlap in memory,
// or if an offset is negative, unaligned, or runs past arena_bytes.
void check_arena(const std::vector<ArenaRequest>& requests, const ArenaPlan& plan);

// The buffers one training step of `plan` needs, for plan_arena(): each activation from the
// Compute step that writes it to the Free step that releases it (or the last step if the plan
// never frees it; a recomputed or prefetched value is a new buffer), and each Compute step's workspace
// (`workspace(node)` bytes, live at that step only). Persistent values are not included.
struct PlanBuffers {
  std::vector<ArenaRequest> requests;
  std::vector<int> output_request;     // per plan step: request of the value it writes, or -1
  std::vector<int> workspace_request;  // per plan step: request of its workspace, or -1
};
// Throws Error when the plan computes a value that is still live or frees one that is not.
PlanBuffers plan_buffers(const Graph& g, const ExecutionPlan& plan,
                         const std::function<int64_t(NodeId)>& workspace);
// The host buffers of a plan's copies: each from the Offload step that writes it to the HostFree
// step that releases it; output_request maps each Offload, Prefetch and HostFree step to its
// buffer (no workspace). A Prefetch's device buffer is plan_buffers'.
PlanBuffers plan_host_buffers(const Graph& g, const ExecutionPlan& plan);

}  // namespace remat
