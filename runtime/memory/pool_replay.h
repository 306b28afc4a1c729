// Replays a plan's allocations through the caching allocator without touching memory, to learn
// before a step runs whether the pool of a given size serves every request (fragmentation
// included) — the pool-mode counterpart of the arena's size check.
#pragma once

#include <cstdint>
#include <functional>

#include "runtime/graph/graph.h"
#include "runtime/memory/plan.h"

namespace remat {

struct PoolReplay {
  bool fits = false;
  int64_t peak_in_use = 0;  // the allocator's peak (rounded blocks), when it fits
  int64_t shortfall = 0;    // when it does not: bytes the failing request lacked in one block
};

// The persistent values first, as the executor allocates them (one block of
// `persistent_bytes`, their region in runtime/memory/param_layout.h; -1: the one-process layout),
// then every plan step's output and workspace, then each update's workspace.
PoolReplay replay_pool(const Graph& g, const ExecutionPlan& plan,
                       const std::function<int64_t(NodeId)>& workspace, int64_t pool_bytes,
                       int64_t persistent_bytes = -1);

}  // namespace remat
