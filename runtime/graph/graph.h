// The training graph: single-output nodes in topological order (forward, loss, backward, then
// optimizer updates) over a table of values. Persistent values (parameters, their gradients,
// optimizer state, buffers such as running statistics, the input batch and labels) are kept
// apart from activations; their bytes are one constant. Saved to / loaded from JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/attrs.h"
#include "runtime/core/tensor.h"

namespace remat {

class OpRegistry;

using ValueId = int;
using NodeId = int;
constexpr ValueId kNoValue = -1;

enum class ValueKind {
  Activation,  // produced by a node; the solver decides when it lives
  Input,       // the input batch
  Label,       // the labels
  Param,       // a trainable parameter ("conv1.weight")
  ParamGrad,   // gradient of a parameter ("conv1.weight.grad"), written by a backward node
  OptState,    // optimizer state ("conv1.weight.momentum", ".adam_m", ".adam_v")
  Buffer,      // non-trainable state ("bn1.running_mean")
};
const char* value_kind_name(ValueKind k);
ValueKind value_kind_from_name(const std::string& s);
inline bool value_is_persistent(ValueKind k) { return k != ValueKind::Activation; }

enum class NodeKind { Forward, Loss, Backward, Update };
const char* node_kind_name(NodeKind k);
NodeKind node_kind_from_name(const std::string& s);

// How a persistent value is initialised before the first step. Normal: N(0, init_std^2).
enum class InitKind { Zeros, Ones, HeNormal, GlorotUniform, Normal, None };

// What a trainable parameter is to its layer, for per-parameter optimizer rules (AdamW exempts
// biases, normalization scales/shifts and embedding tables from weight decay by default).
enum class ParamRole { Weight, Bias, Norm, Embedding };
const char* param_role_name(ParamRole r);
ParamRole param_role_from_name(const std::string& s);  // throws UserError on an unknown name

struct Value {
  std::string name;
  TensorDesc desc;
  ValueKind kind = ValueKind::Activation;
  NodeId producer = -1;  // node whose output this is (-1 for Input/Label/Param/OptState/Buffer)
  InitKind init = InitKind::None;
  int64_t fan_in = 0;    // for HeNormal / GlorotUniform
  int64_t fan_out = 0;
  ValueId grad_of = kNoValue;  // ParamGrad/OptState: the parameter it belongs to
  double init_std = 0;         // for Normal
  ParamRole role = ParamRole::Weight;  // Param values only
  // Buffer values only: a constant of the model (an imported graph's tensor constant, a fixed
  // map), never written by a step; it may hold infinities (an attention mask's -inf).
  bool constant = false;
};

struct Node {
  std::string name;          // "conv1", "conv1.grad_input", ...
  std::string op;            // registry name
  NodeKind kind = NodeKind::Forward;
  AttrMap attrs;             // as written; backward nodes share their forward node's attrs
  OpAttrsPtr typed;          // parsed once by the op (never null after graph construction)
  std::vector<ValueId> inputs;
  // The value this node writes. Update nodes write their parameter in place: output is the
  // Param value, which is also inputs[0] (Note [in-place updates]).
  ValueId output = kNoValue;
  NodeId forward = -1;       // backward nodes: the forward node they differentiate
  uint64_t seed = 0;         // per-node seed (dropout masks replay from it)
};

// Note [in-place updates]
// Only two kinds of node write memory they do not own as their output: Update nodes (the
// parameter and its optimizer state) and batch-norm forward in training mode (its running
// statistics Buffers, once per step, on first computation only). Both touch persistent values
// only, so the rematerialization problem and recomputation never see the writes.

// The most micro-batches one optimizer step may accumulate (Note [gradient accumulation]).
constexpr int kMaxMicroBatches = 1 << 16;

class Graph {
 public:
  std::string name;
  int64_t batch = 0;         // samples of one pass (a micro-batch when micro_batches > 1)
  int micro_batches = 1;     // passes per optimizer step (runtime/graph/accumulate.h)
  std::vector<Value> values;
  std::vector<Node> nodes;
  ValueId input = kNoValue;  // the input batch [N, C, H, W]
  ValueId label = kNoValue;  // labels [N] or [N, H, W] (I32)
  ValueId loss = kNoValue;   // scalar loss (an activation, shape [1])

  ValueId add_value(Value v);
  // Appends a node producing a new activation value named like the node; returns the node id.
  NodeId add_node(Node n, const TensorDesc& out);
  // Appends a node writing an existing value (ParamGrad outputs, Update nodes).
  NodeId add_node_writing(Node n, ValueId out);

  const Value& value(ValueId v) const { return values.at(static_cast<size_t>(v)); }
  const Node& node(NodeId n) const { return nodes.at(static_cast<size_t>(n)); }
  ValueId find_value(const std::string& name) const;  // kNoValue if absent
  NodeId find_node(const std::string& name) const;    // -1 if absent

  // users()[v] = nodes reading value v, ascending.
  std::vector<std::vector<NodeId>> users() const;
  // Bytes of all persistent values (the solver's constant).
  int64_t persistent_bytes() const;
  // The activations' precision: BF16 when any value is BF16 (a bf16 model), else F32.
  DType activation_precision() const;
  // Checks topological order, ids in range, single writer per activation, typed attrs set.
  void validate() const;
};

// Nodes a plan orders: every node but the optimizer's Update nodes (which run after the plan).
// What plan, maxbatch, train and profile call a graph's "nodes".
int64_t planned_nodes(const Graph& g);

// JSON file format "remat-graph/1". Loading re-parses each node's attrs through `ops`.
std::string graph_to_json_text(const Graph& g);
Graph graph_from_json_text(const std::string& text, const OpRegistry& ops, const std::string& src);
void graph_save(const Graph& g, const std::string& path);
Graph graph_load(const std::string& path, const OpRegistry& ops);

}  // namespace remat
