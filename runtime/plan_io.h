// ExecutionPlan <-> JSON ("remat-plan/1"). Steps name their nodes and values, so loading checks
// the plan against the graph it is run on: every name must exist there and mean the same node.
#pragma once

#include <string>

#include "runtime/graph.h"
#include "runtime/plan.h"

namespace remat {

std::string plan_to_json_text(const ExecutionPlan& plan, const Graph& g);
// UserError naming `source` and the step for a plan made for another graph or malformed, or
// whose constant is not `constant_bytes` (-1: the graph's persistent bytes; data parallel: the
// rank's layout, so a plan made for another world size or sharding is rejected).
ExecutionPlan plan_from_json_text(const std::string& text, const Graph& g, const std::string& source,
                                  int64_t constant_bytes = -1);
void plan_save(const ExecutionPlan& plan, const Graph& g, const std::string& path);
ExecutionPlan plan_load(const std::string& path, const Graph& g, int64_t constant_bytes = -1);

// The "format" field of a JSON file ("" if it has none or is not JSON): lets `train --plan`
// accept both execution plans and schedules.
std::string json_file_format(const std::string& path);

}  // namespace remat
