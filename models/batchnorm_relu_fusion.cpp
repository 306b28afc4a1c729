// The graph builder's batchnorm + relu fusion pass: reads the fusable pairs off a forward graph.
#include "models/batchnorm_relu_fusion.h"

#include <vector>

namespace remat {

// Note [batchnorm + relu fusion]
// Under `fuse: batchnorm_relu` every batchnorm layer whose output is read by one relu or relu6
// layer and nothing else (not a cast, a layout conversion, an add, the loss) becomes one node,
// the batchnorm with that activation (Note [batchnorm activation] in ops/batchnorm.cpp): the
// graph is built once as written, the pairs are read off it, and it is built again with the
// batchnorm node carrying `activation` and the relu layer's name standing for the batchnorm
// node's output (later layers that name the relu read it). The fused graph computes the same
// values bit for bit (tests/test_bn_relu_fusion.cpp); the relu's node and the normalised value
// before it are gone, so the solver plans one value and one node fewer per pair (33 pairs in
// ResNet-50, 27 in MobileNet, 94 in Inception V3, 121 in DenseNet-121). Parameter names do not
// change (a relu has none): checkpoints move between the two forms.

BnReluFusion bn_relu_pairs(const Graph& g) {
  BnReluFusion f;
  const std::vector<std::vector<NodeId>> users = g.users();
  for (const Node& n : g.nodes) {
    if (n.kind != NodeKind::Forward || (n.op != "relu" && n.op != "relu6") || n.inputs.size() != 1)
      continue;
    const ValueId v = n.inputs[0];
    const NodeId p = g.value(v).producer;
    if (p < 0 || users[static_cast<size_t>(v)].size() != 1) continue;
    const Node& bn = g.node(p);
    if (bn.kind != NodeKind::Forward || bn.op != "batchnorm" || bn.attrs.has("activation"))
      continue;
    f.fused_into[n.name] = bn.name;
    f.activation[bn.name] = n.op;
  }
  return f;
}

}  // namespace remat
