// Shared by the training tests: a plan that must recompute, the one `strategy` gives at the
// budget halfway between the graph's smallest and keeping everything.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "runtime/executor.h"
#include "runtime/memory/plan.h"
#include "solver/from_graph.h"
#include "solver/problem.h"
#include "solver/strategies.h"

namespace remat {

// `strategy`'s plan halfway between the smallest budget and keeping everything, FLOPs costs and
// `be`'s workspaces; keep-everything's plan for "keep". A test failure when the strategy finds
// no schedule (then keep-everything's plan comes back) or, with `must_recompute`, when the plan
// recomputes nothing.
inline ExecutionPlan halfway_plan(const Graph& g, const OpRegistry& ops, Backend& be,
                                  const std::string& strategy = "checkmate",
                                  bool must_recompute = true) {
  auto ws = [&](NodeId n) { return node_workspace_bytes(g, ops, be, n); };
  const ExecutionPlan keep = plan_keep_all(g, ws);
  if (strategy == "keep") return keep;
  const GraphProblem gp = problem_from_graph(g, flops_costs(g, ops, ws));
  const int64_t budget = (problem_min_budget(gp.problem) + keep.predicted_peak) / 2;
  SolveOptions so;
  so.time_limit_seconds = 10;  // any feasible schedule will do
  const SolveResult solved = solve(gp.problem, strategy, budget, so);
  if (!solved.feasible) {
    ADD_FAILURE() << g.name << " on " << be.name() << ", " << strategy << ": " << solved.message;
    return keep;
  }
  ExecutionPlan plan = lower_schedule(g, gp, solved.schedule, budget);
  if (must_recompute) {
    EXPECT_TRUE(std::any_of(plan.steps.begin(), plan.steps.end(),
                            [](const PlanStep& st) { return st.recompute; }))
        << g.name << " on " << be.name() << ", " << strategy << ": the plan recomputes nothing";
  }
  return plan;
}

}  // namespace remat
