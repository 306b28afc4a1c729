// Deciding what one training step runs: the keep-everything plan, or a schedule solved for a
// budget (or loaded from a file) and lowered onto the training graph.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "runtime/backends/backend.h"
#include "runtime/graph/graph.h"
#include "runtime/memory/plan.h"
#include "solver/problem.h"

namespace remat {

struct StepPlanOptions {
  std::optional<int64_t> budget;      // none: keep everything, no cap
  std::string strategy = "checkmate";
  std::string cost_model = "flops";   // flops | profile | a cost-table file
  std::string schedule_file;          // a schedule (`plan -o`) or execution plan (`train
                                      // --save-plan`) made earlier: skips solving
  double time_limit = 60;             // solver seconds
  int threads = 1;
  int log_level = 1;
  // The bytes resident all step that the plan is made around: -1 the graph's persistent bytes;
  // data parallel: the rank's layout (runtime/memory/param_layout.h), sharding included.
  int64_t constant_bytes = -1;
  // The host link for the offload strategies (Note [offload semantics]): none when 0.
  double link_bytes_per_second = 0;
  double device_flops = 100e12;  // FLOPs costs: the rate copy time converts at
  CopyOverlap copy_overlap = CopyOverlap::Stage;  // Note [streamed copies]
  int64_t host_budget = 0;       // host bytes the copies may hold at once; 0: no limit
};

struct StepPlan {
  ExecutionPlan plan;
  std::string cost_unit = "flops";
  double cost = 0;             // total cost of the plan's computes
  double all_keep_cost = 0;    // cost of computing every node once
  double solve_seconds = 0;
  double gap = 0;
  std::string status;
};

// `solver_budget` may be below opt.budget to leave room for alignment (see run_training).
StepPlan make_step_plan(const Graph& g, const OpRegistry& ops, Backend& be,
                        const StepPlanOptions& opt, int64_t solver_budget);

}  // namespace remat
