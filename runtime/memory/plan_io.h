// ExecutionPlan <-> JSON ("remat-plan/1"). Steps name their nodes and values, so loading checks
// the plan against the graph it is run on: every name must exist there and mean the same node.
#pragma once

#include <string>

#include "runtime/graph/graph.h"
#include "runtime/memory/plan.h"

namespace remat {

std::string plan_to_json_text(const ExecutionPlan& plan, const Graph& g);
// UserError naming `source` and the step for a plan made for another graph or malformed
// (plan_check_structure), or whose constant is not `constant_bytes` (-1: the graph's persistent
// bytes; data parallel: the rank's layout, so a plan made for another world size or sharding is
// rejected). Sizes must lie in [0, kMaxCount].
ExecutionPlan plan_from_json_text(const std::string& text, const Graph& g, const std::string& source,
                                  int64_t constant_bytes = -1);
void plan_save(const ExecutionPlan& plan, const Graph& g, const std::string& path);
ExecutionPlan plan_load(const std::string& path, const Graph& g, int64_t constant_bytes = -1);

// Replays the steps' residency on `g`: every compute's activation inputs are in memory and its
// output is not, every free releases a value in memory, `recompute` is set exactly on repeated
// computations, every non-update node is computed and nothing is left in memory at the end.
// UserError "<source>: steps[i]: ..." otherwise, so the executor's own checks never see a
// malformed plan.
void plan_check_structure(const ExecutionPlan& plan, const Graph& g, const std::string& source);

}  // namespace remat
