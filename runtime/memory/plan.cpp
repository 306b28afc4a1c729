// The keep-everything plan: each node once, every activation freed after its last use.
#include "runtime/memory/plan.h"

#include <algorithm>

namespace remat {

ExecutionPlan plan_keep_all(const Graph& g, const std::function<int64_t(NodeId)>& workspace,
                            int64_t constant_bytes) {
  ExecutionPlan plan;
  plan.graph_name = g.name;
  plan.strategy = "all-keep";
  plan.constant_bytes = constant_bytes >= 0 ? constant_bytes : g.persistent_bytes();
  std::vector<NodeId> last_use(g.values.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (ValueId v : g.nodes[i].inputs) last_use[static_cast<size_t>(v)] = static_cast<NodeId>(i);
  int64_t in_use = plan.constant_bytes;
  plan.predicted_peak = in_use;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.kind == NodeKind::Update) continue;
    const Value& out = g.value(n.output);
    const bool activation = out.kind == ValueKind::Activation;
    PlanStep c;
    c.node = static_cast<NodeId>(i);
    c.value = n.output;
    c.bytes_during = in_use + (activation ? out.desc.alloc_bytes() : 0) + alloc_bytes(workspace(c.node));
    if (activation) in_use += out.desc.alloc_bytes();
    c.bytes_after = in_use;
    plan.predicted_peak = std::max(plan.predicted_peak, c.bytes_during);
    plan.steps.push_back(c);
    // Free the node's inputs whose last use this was, then its own output if nothing reads it.
    std::vector<ValueId> dead;
    for (ValueId v : n.inputs)
      if (last_use[static_cast<size_t>(v)] == c.node && g.value(v).kind == ValueKind::Activation)
        dead.push_back(v);
    if (activation && last_use[static_cast<size_t>(n.output)] < c.node) dead.push_back(n.output);
    std::sort(dead.begin(), dead.end());
    dead.erase(std::unique(dead.begin(), dead.end()), dead.end());
    for (ValueId v : dead) {
      in_use -= g.value(v).desc.alloc_bytes();
      PlanStep f;
      f.kind = PlanStepKind::Free;
      f.value = v;
      f.bytes_during = f.bytes_after = in_use;
      plan.steps.push_back(f);
    }
  }
  return plan;
}

bool ExecutionPlan::has_copies() const {
  for (const PlanStep& s : steps)
    if (s.kind == PlanStepKind::Offload) return true;
  return false;
}

bool plan_steps_equal(const std::vector<PlanStep>& a, const std::vector<PlanStep>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].kind != b[i].kind || a[i].node != b[i].node || a[i].value != b[i].value ||
        a[i].recompute != b[i].recompute)
      return false;
  return true;
}

}  // namespace remat
