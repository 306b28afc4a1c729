// ExecutionPlan: the straight list of compute and free steps one training step runs, with the
// bytes predicted in use after each step. Lowered from a schedule (solver/) or built here for
// the keep-everything baseline. Update nodes run after the steps, in graph order.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/graph/graph.h"

namespace remat {

// Offload, Prefetch and HostFree move activations over the host link (Note [offload
// semantics] in solver/schedule.h): Offload copies a resident activation into its host buffer
// (device bytes unchanged), Prefetch allocates its device buffer again and copies the host
// buffer back, HostFree releases the host buffer. The executor runs the copies in plan order.
enum class PlanStepKind { Compute, Free, Offload, Prefetch, HostFree };

struct PlanStep {
  PlanStepKind kind = PlanStepKind::Compute;
  NodeId node = -1;          // Compute: the node run
  ValueId value = kNoValue;  // the activation freed, copied or prefetched (Compute: the output)
  bool recompute = false;    // Compute of a node already computed earlier this step
  int64_t bytes_during = 0;  // predicted bytes in use while the node runs (workspace included)
  int64_t bytes_after = 0;   // predicted bytes in use after this step
};

struct ExecutionPlan {
  std::string graph_name;
  std::string strategy;
  int64_t budget = 0;          // bytes; 0 = no budget
  int64_t constant_bytes = 0;  // persistent values (params, grads, state, batch, labels)
  int64_t predicted_peak = 0;  // max bytes_during over the steps, constant included
  int64_t predicted_host_peak = 0;  // host copies alive at once, at most (0: none)
  std::vector<PlanStep> steps;

  // Whether any step moves a value over the host link.
  bool has_copies() const;
};

// True when `a` and `b` are the same compute / free sequence (kind, node, value, recompute): what
// an arena or a gradient-bucket schedule prepared for one plan can be reused for.
bool plan_steps_equal(const std::vector<PlanStep>& a, const std::vector<PlanStep>& b);

// Every non-update node once, in order; each activation freed right after its last use (Note
// [memory semantics] in solver/schedule.h). `workspace(node)` gives each node's workspace bytes;
// `constant_bytes` the bytes resident all step (-1: the graph's persistent bytes; data parallel:
// the rank's layout, runtime/memory/param_layout.h).
ExecutionPlan plan_keep_all(const Graph& g, const std::function<int64_t(NodeId)>& workspace,
                            int64_t constant_bytes = -1);

}  // namespace remat
