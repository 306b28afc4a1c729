// Reverse-mode autodiff over the forward graph: derives backward nodes from each op's gradient
// rule, sums the gradients of values with several consumers, routes parameter gradients into
// persistent ParamGrad values, and appends one optimizer update node per trainable parameter.
#pragma once

#include <string>

#include "runtime/graph/graph.h"
#include "runtime/graph/op.h"

namespace remat {

// `forward` must end in a Loss node (forward.loss set). The result is one training graph:
// forward nodes, the loss, backward nodes, then Update nodes (Note [in-place updates]).
// Backward nodes that no parameter gradient needs (e.g. the gradient of the input batch) are
// pruned. `optimizer_attrs` are parsed by the optimizer op (errors carry their positions);
// the op may give each parameter's update node its own attrs (OpDef::optimizer_param_attrs)
// and ask for global-norm gradient clipping (OpDef::optimizer_clip_norm, Note [gradient
// clipping] in autodiff.cpp). With micro_batches > 1, parameter gradients accumulate over that
// many micro-batches per step (Note [gradient accumulation] in runtime/graph/accumulate.h).
// Ends with graph_check_sizes().
Graph make_training_graph(const Graph& forward, const OpRegistry& ops,
                          const std::string& optimizer_op, const AttrMap& optimizer_attrs,
                          int micro_batches = 1);

// Note [checked sizes] for a whole graph: every node's op cost (bytes moved, workspace) is in
// range, and the bytes of all values together (persistent and activations) plus the largest
// workspace lie within kMaxCount, so the sums plans, arenas and pools form from a subset of them
// cannot overflow. A UserError names the graph, node and field.
void graph_check_sizes(const Graph& g, const OpRegistry& ops);

}  // namespace remat
