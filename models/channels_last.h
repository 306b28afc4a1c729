// The graph builder's channels-last pass (Note [channels-last layout] in channels_last.cpp):
// which 4-D activations a `layout: channels_last` model stores NHWC, and the `layout` nodes
// where that changes.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/graph/graph.h"
#include "runtime/graph/op.h"

namespace remat {

class ChannelsLastPlacer {
 public:
  // `on`: the model's layout is channels_last; off, place() only rejects data_format.
  ChannelsLastPlacer(Graph& g, const OpRegistry& ops, uint64_t model_seed, bool on)
      : g_(g), ops_(ops), seed_(model_seed), on_(on) {}

  // Before the node's shape inference: gives `node` (a layer of op `op`, typed attrs parsed)
  // the inputs its form needs — NHWC when it has a channels-last form here (then it also gets
  // data_format: channels_last and is parsed again), channels-first otherwise — and updates
  // `data` to match. `where` prefixes errors and names the layer in conversion nodes.
  void place(Node& node, const OpDef& op, std::vector<TensorDesc>& data, const std::string& where);
  // After the node was added: whether its output `out` is stored channels-last.
  void record(ValueId out);
  // Whether `v` is stored channels-last ([N, H, W, C]).
  bool stored_last(ValueId v) const { return last_.count(v) > 0; }
  // `v` stored channels-first: v itself, or its conversion.
  ValueId channels_first(ValueId v, const std::string& where);

 private:
  ValueId convert(ValueId v, bool to_last, const std::string& where);

  Graph& g_;
  const OpRegistry& ops_;
  uint64_t seed_;
  bool on_;
  std::set<ValueId> last_;                          // values stored NHWC
  std::map<std::pair<ValueId, bool>, ValueId> made_;  // (value, to_last) -> its conversion
  bool pending_ = false;                            // place() chose the channels-last form
};

}  // namespace remat
