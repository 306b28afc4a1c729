// FLOPs cost model, graph -> problem, and schedule -> execution plan lowering.
#include "solver/from_graph.h"

#include <algorithm>

#include "runtime/backends/backend.h"
#include "runtime/core/check.h"
#include "runtime/executor.h"

namespace remat {

CostTable flops_costs(const Graph& g, const OpRegistry& ops,
                      const std::function<int64_t(NodeId)>& workspace) {
  // The CPU path's workspace is what the CPU backend asks for: the op's own, plus in a bf16
  // node the FP32 copies it stages (Note [bf16 execution]).
  std::unique_ptr<Backend> cpu = workspace ? nullptr : make_cpu_backend();
  CostTable t;
  t.model = g.name;
  t.device = "flops-model";
  t.unit = "flops";
  t.batch = g.batch;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.kind == NodeKind::Update) continue;
    std::vector<TensorDesc> in;
    for (ValueId v : n.inputs) in.push_back(g.value(v).desc);
    const Value& out = g.value(n.output);
    OpCost c = ops.get(n.op).cost(*n.typed, in, out.desc);
    NodeCost nc;
    nc.name = n.name;
    nc.cost = std::max(c.flops, static_cast<double>(out.desc.numel()));
    nc.bytes = out.kind == ValueKind::Activation ? out.desc.bytes() : 0;
    nc.workspace_bytes = workspace ? workspace(static_cast<NodeId>(i))
                                   : node_workspace_bytes(g, ops, *cpu, static_cast<NodeId>(i));
    t.nodes.push_back(std::move(nc));
  }
  return t;
}

GraphProblem problem_from_graph(const Graph& g, const CostTable& costs, int64_t constant_bytes) {
  GraphProblem gp;
  Problem& p = gp.problem;
  p.name = g.name;
  p.cost_unit = costs.unit;
  p.batch = g.batch;
  p.constant_bytes = constant_bytes >= 0 ? constant_bytes : g.persistent_bytes();
  for (ValueId v : {g.input, g.label})
    if (v != kNoValue) p.batch_constant_bytes += g.value(v).desc.alloc_bytes();
  std::vector<int> index_of(g.nodes.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.kind == NodeKind::Update) continue;
    const size_t k = gp.node_of.size();
    if (k >= costs.nodes.size() || costs.nodes[k].name != n.name)
      REMAT_USER_ERROR("cost table for '" << costs.model << "' does not match graph '" << g.name
                                          << "' at node " << k << " ('" << n.name << "' vs '"
                                          << (k < costs.nodes.size() ? costs.nodes[k].name : "<none>")
                                          << "'): re-profile this model and batch");
    if (costs.batch != g.batch)
      REMAT_USER_ERROR("cost table for '" << costs.model << "' was measured at batch " << costs.batch
                                          << ", the graph has batch " << g.batch);
    const NodeCost& c = costs.nodes[k];
    ProblemNode pn;
    pn.name = n.name;
    pn.kind = n.kind == NodeKind::Forward ? ProblemNodeKind::Forward
              : n.kind == NodeKind::Loss  ? ProblemNodeKind::Loss
                                          : ProblemNodeKind::Backward;
    pn.cost = c.cost;
    const Value& out = g.value(n.output);
    // Allocation sizes (Note [allocation size]): what the arena and the pool will hold.
    pn.bytes = out.kind == ValueKind::Activation ? out.desc.alloc_bytes() : 0;
    pn.workspace_bytes = alloc_bytes(c.workspace_bytes);
    for (ValueId v : n.inputs) {
      const Value& in = g.value(v);
      if (in.kind != ValueKind::Activation) continue;
      pn.deps.push_back(index_of[static_cast<size_t>(in.producer)]);
    }
    std::sort(pn.deps.begin(), pn.deps.end());
    pn.deps.erase(std::unique(pn.deps.begin(), pn.deps.end()), pn.deps.end());
    index_of[i] = static_cast<int>(k);
    gp.node_of.push_back(static_cast<NodeId>(i));
    p.nodes.push_back(std::move(pn));
  }
  if (gp.node_of.size() != costs.nodes.size())
    REMAT_USER_ERROR("cost table for '" << costs.model << "' has " << costs.nodes.size()
                                        << " nodes, graph '" << g.name << "' has "
                                        << gp.node_of.size());
  problem_validate(p, "graph '" + g.name + "'");
  return gp;
}

ExecutionPlan lower_schedule(const Graph& g, const GraphProblem& gp, const Schedule& schedule,
                             int64_t budget) {
  // A node that writes a persistent value (a parameter's gradient, Note [gradient accumulation])
  // runs once, in its own stage: a recomputation would rewrite it for nothing, or add a
  // micro-batch's gradient twice. Its value costs no bytes, so holding it from then on is free.
  Schedule s = schedule;
  for (int k = 0; k < s.R.cols(); ++k) {
    if (g.value(g.node(gp.node_of[static_cast<size_t>(k)]).output).kind == ValueKind::Activation)
      continue;
    for (int t = k + 1; t < s.R.rows(); ++t) s.R.set(t, k, false), s.S.set(t, k, true);
    for (int t = 0; t < s.offload.rows(); ++t)  // zero bytes: nothing to move
      s.offload.set(t, k, false), s.prefetch.set(t, k, false);
  }
  SimResult sim = simulate(gp.problem, s);
  REMAT_CHECK(sim.valid, "cannot lower an invalid " << s.strategy << " schedule: " << sim.error);
  ExecutionPlan plan;
  plan.graph_name = g.name;
  plan.strategy = s.strategy;
  plan.budget = budget;
  plan.constant_bytes = gp.problem.constant_bytes;
  plan.predicted_peak = sim.peak_bytes;
  plan.predicted_host_peak = sim.host_peak_bytes;
  for (const SimStep& st : sim.steps) {
    const NodeId node = gp.node_of[static_cast<size_t>(st.node)];
    const ValueId out = g.node(node).output;
    PlanStep ps;
    ps.value = out;
    ps.bytes_during = st.bytes_during;
    ps.bytes_after = st.bytes_after;
    if (st.kind == StepKind::Compute) {
      ps.kind = PlanStepKind::Compute;
      ps.node = node;
      ps.recompute = st.recompute;
    } else {
      if (g.value(out).kind != ValueKind::Activation) continue;
      ps.kind = st.kind == StepKind::Free       ? PlanStepKind::Free
                : st.kind == StepKind::Offload  ? PlanStepKind::Offload
                : st.kind == StepKind::Prefetch ? PlanStepKind::Prefetch
                                                : PlanStepKind::HostFree;
    }
    plan.steps.push_back(ps);
  }
  return plan;
}

}  // namespace remat
