// The profiler: measures every non-update node of a training graph on a backend (median
// milliseconds over repeats, spread, output and workspace bytes) into a CostTable, and names
// the cache file a measured table is kept in. Works with any Backend.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "runtime/backends/backend.h"
#include "runtime/graph/costs.h"
#include "runtime/graph/graph.h"
#include "runtime/graph/op.h"

namespace remat {

struct ProfileOptions {
  int warmup = 2;     // untimed runs per node before the timed ones
  int repeats = 10;   // timed runs per node (>= 1); the median is recorded
  uint64_t seed = 1;  // input data
  int64_t link_bytes = int64_t(64) << 20;  // each timed copy over the host link (measure_link)
  // Called after each node is measured (index among the profiled nodes, their count, result).
  std::function<void(size_t index, size_t count, const NodeCost& cost)> on_node;
};

// Measures each non-Update node of `g` in graph order. Each node runs alone: its inputs
// (persistent ones included) and output get their own raw_alloc'ed buffers, filled with
// valid data (floats in [-1, 1], BF16 values rounded from them; Buffers such as running
// variances in [0.5, 1.5]; a block of 2^20 random floats repeated over a larger tensor; int
// labels in [0, classes) with classes = dim 1 of the node's first input), plus its workspace; all
// are freed right after. The table has unit "ms", device be.name(), model g.name, batch
// g.batch; bytes = output bytes for an Activation output, else 0. Errors name the node.
CostTable profile_graph(const Graph& g, const OpRegistry& ops, Backend& be,
                        const ProfileOptions& opt = {});

// The host link of `be`: `repeats` timed copies of `bytes` each way between a raw_alloc'ed
// buffer and a host_alloc'ed one (pinned memory on a GPU), after one untimed copy each way;
// the median rate of each direction. Synchronous: each timed copy ends with synchronize().
LinkCost measure_link(Backend& be, int64_t bytes, int repeats);

// True when `t` describes `g`: the same non-update node names in order, and each entry's
// bytes equal the node's activation output bytes. Otherwise false with `why` (may be null).
// Used to reject a cached table whose graph has changed (another input size, a new layer).
bool costs_match_graph(const CostTable& t, const Graph& g, std::string* why);

// Where a measured table for (model, batch, device) is cached:
// $REMAT_CACHE_DIR, else $XDG_CACHE_HOME/remat, else $HOME/.cache/remat, then
// "<model>-b<batch>-<device>.json" with every character outside [A-Za-z0-9._-] replaced by
// '_'. Does not create the folder.
std::string profile_cache_path(const std::string& model, int64_t batch,
                               const std::string& device_name);

// The cache key of a graph: "<model>-<C>x<H>x<W>" (the per-sample input size).
std::string profile_cache_key(const Graph& g);

// profile_graph() through the cache: a cached table (unit ms) that still matches the graph is
// reused unless `refresh`; otherwise the graph is measured and the table cached (a cache that
// cannot be written is reported in `note`, not an error). `note` says what happened. Either
// way the table has its link (profile_graph measures it; a cached table without one gets it).
CostTable profile_graph_cached(const Graph& g, const OpRegistry& ops, Backend& be,
                               const ProfileOptions& opt, bool refresh, std::string* note);

}  // namespace remat
