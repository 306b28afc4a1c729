// add_gradient_accumulation(): a grad_accumulate node after every node that writes a parameter
// gradient (Note [gradient accumulation]).
#include "runtime/graph/accumulate.h"

#include <utility>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/graph/op.h"

namespace remat {

void add_gradient_accumulation(Graph& g, const OpRegistry& ops, int micro_batches) {
  if (micro_batches < 1 || micro_batches > kMaxMicroBatches)
    REMAT_USER_ERROR("accumulate: " << micro_batches << " micro-batches per step is not in [1, "
                                    << kMaxMicroBatches << "]");
  g.micro_batches = micro_batches;
  if (micro_batches == 1) return;
  for (const Node& n : g.nodes)
    REMAT_CHECK(n.kind != NodeKind::Update,
                "add_gradient_accumulation expects a graph without optimizer updates");
  const OpDef& op = ops.get("grad_accumulate");
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size() * 2);
  std::vector<NodeId> renumbered(g.nodes.size(), -1);
  std::vector<std::pair<ValueId, NodeId>> producers;  // (value, its new producer)
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node n = g.nodes[i];
    if (n.forward >= 0) n.forward = renumbered[static_cast<size_t>(n.forward)];
    renumbered[i] = static_cast<NodeId>(nodes.size());
    const ValueId out = n.output;
    if (g.value(out).kind != ValueKind::ParamGrad) {
      producers.emplace_back(out, renumbered[i]);
      nodes.push_back(std::move(n));
      continue;
    }
    // The node writes this micro-batch's gradient; the next one adds it into the parameter's.
    Value micro;
    micro.name = g.value(out).name + ".micro";
    micro.desc = g.value(out).desc;
    micro.producer = renumbered[i];
    n.output = g.add_value(std::move(micro));
    Node acc;
    acc.name = g.value(out).name + "_accumulate";
    acc.op = op.name;
    acc.kind = NodeKind::Backward;
    acc.attrs.origin = n.attrs.origin;
    AttrReader r(acc.attrs);
    acc.typed = op.parse(r);
    acc.inputs = {n.output};
    acc.output = out;
    acc.forward = n.forward;
    acc.seed = n.seed;
    nodes.push_back(std::move(n));
    producers.emplace_back(out, static_cast<NodeId>(nodes.size()));
    nodes.push_back(std::move(acc));
  }
  g.nodes = std::move(nodes);
  for (auto [v, p] : producers) g.values[static_cast<size_t>(v)].producer = p;
  g.validate();
}

}  // namespace remat
