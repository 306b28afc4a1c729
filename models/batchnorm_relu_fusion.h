// The graph builder's batchnorm + relu fusion pass (Note [batchnorm + relu fusion] in
// batchnorm_relu_fusion.cpp): which batchnorm and relu layers of a forward graph become one node.
#pragma once

#include <map>
#include <string>

#include "runtime/graph/graph.h"

namespace remat {

struct BnReluFusion {
  std::map<std::string, std::string> fused_into;  // relu layer -> batchnorm layer
  std::map<std::string, std::string> activation;  // batchnorm layer -> "relu" | "relu6"
};

// The pairs of `g` (a forward graph built as written) that fuse.
BnReluFusion bn_relu_pairs(const Graph& g);

}  // namespace remat
