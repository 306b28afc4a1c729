// Bridges the training graph and the solver: the FLOPs cost model, the Problem a graph and a
// cost table define, and lowering a solved Schedule back to an ExecutionPlan on the graph.
#pragma once

#include <functional>
#include <vector>

#include "runtime/graph/costs.h"
#include "runtime/graph/graph.h"
#include "runtime/graph/op.h"
#include "runtime/memory/plan.h"
#include "solver/problem.h"
#include "solver/schedule.h"

namespace remat {

// Every non-update node's cost from its op's cost function: max(FLOPs, output elements), so
// data-movement ops (concat, flatten) are never free to recompute. Output bytes are the
// activation's bytes (0 for persistent outputs such as parameter gradients); workspace is the
// CPU backend's (the op's own, and in bf16 its staging: Note [bf16 execution]), or
// `workspace(node)` when given (a device backend's choice).
CostTable flops_costs(const Graph& g, const OpRegistry& ops,
                      const std::function<int64_t(NodeId)>& workspace = nullptr);

// The problem a graph defines: one problem node per non-update graph node, in order; deps are
// the producers of its activation inputs; constant = `constant_bytes`, or the graph's
// persistent bytes when -1 (data parallel: the rank's layout, runtime/memory/param_layout.h).
// `node_of[i]` is the graph node of problem node i. Throws UserError if the table does not
// match the graph (names, count, batch).
struct GraphProblem {
  Problem problem;
  std::vector<NodeId> node_of;
};
GraphProblem problem_from_graph(const Graph& g, const CostTable& costs, int64_t constant_bytes = -1);

// Replays `s` with the simulator and turns its steps into plan steps on the graph. Throws if
// the schedule is invalid. Frees of persistent outputs (bytes 0 in the problem) are dropped.
ExecutionPlan lower_schedule(const Graph& g, const GraphProblem& gp, const Schedule& s,
                             int64_t budget);

}  // namespace remat
