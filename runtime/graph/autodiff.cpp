// make_training_graph(): reverse-mode autodiff, parameter-gradient routing, optimizer updates,
// and pruning of backward nodes nothing needs.
#include "runtime/graph/autodiff.h"

#include <algorithm>

#include "runtime/core/check.h"
#include "runtime/graph/accumulate.h"

namespace remat {

namespace {

// Appends Backward nodes for one forward node's gradient rule.
class Emitter : public GradEmitter {
 public:
  Emitter(Graph& g, const OpRegistry& ops, const Node& fwd, NodeId fwd_id)
      : g_(g), ops_(ops), fwd_(fwd), fwd_id_(fwd_id) {}

  ValueId emit(const std::string& suffix, const std::string& op, std::vector<ValueId> inputs,
               const TensorDesc& out) override {
    return emit(suffix, op, std::move(inputs), out, fwd_.attrs, fwd_.typed);
  }

  ValueId emit(const std::string& suffix, const std::string& op, std::vector<ValueId> inputs,
               const TensorDesc& out, AttrMap attrs, OpAttrsPtr typed) override {
    const OpDef& def = ops_.get(op);
    Node n;
    n.name = fwd_.name + "." + suffix;
    n.op = op;
    n.kind = NodeKind::Backward;
    n.attrs = std::move(attrs);
    if (!typed) {
      AttrReader r(n.attrs);
      typed = def.parse(r);
    }
    n.typed = std::move(typed);
    n.inputs = std::move(inputs);
    n.forward = fwd_id_;
    n.seed = fwd_.seed;
    for (ValueId v : n.inputs)
      REMAT_CHECK(v >= 0 && v < static_cast<ValueId>(g_.values.size()),
                  "gradient of '" << fwd_.name << "' emitted '" << n.name << "' reading value " << v);
    NodeId id = g_.add_node(std::move(n), out);
    return g_.nodes[static_cast<size_t>(id)].output;
  }

  const Graph& graph() const override { return g_; }

 private:
  Graph& g_;
  const OpRegistry& ops_;
  const Node& fwd_;  // a copy owned by the caller: g_.nodes may reallocate while emitting
  NodeId fwd_id_;
};

// Note [running parameter sums]
// A parameter read by several nodes (a recurrent layer unrolled over T steps reads its weights
// T times; tied embeddings twice) gets one gradient contribution per read. Summed by one n-ary
// add after the backward pass, every contribution would stay resident from the node that wrote
// it to the end of the step: on a two-layer LSTM of 16 steps the second layer's 15 weight
// gradient pieces (60 KB at batch 16) were held across the first layer's backward and made the
// step's peak. Instead each contribution is added to the running sum as it arrives (the add
// placed right after the node that wrote it), so at most the sum and one piece are resident,
// as with PyTorch's AccumulateGrad. The adds run in the order the n-ary add summed (arrival
// order, left to right), and a parameter's gradient is FP32 in every precision, so the values
// are bit-identical; the last sum becomes the persistent "<param>.grad". Activations' gradients
// keep the n-ary add: a bf16 gradient summed pairwise would round at every step.

// Returns the single gradient of a value from its contributions, emitting an n-ary add when
// there are several.
ValueId sum_contributions(Graph& g, const OpRegistry& ops, const std::vector<ValueId>& parts,
                          const std::string& name, NodeId forward) {
  if (parts.size() == 1) return parts[0];
  Node n;
  n.name = name;
  n.op = "add";
  n.kind = NodeKind::Backward;
  AttrReader r(n.attrs);
  n.typed = ops.get("add").parse(r);
  n.inputs = parts;
  n.forward = forward;
  TensorDesc desc = g.value(parts[0]).desc;
  for (ValueId p : parts)
    REMAT_CHECK(g.value(p).desc == desc, "gradient contributions to '" << name
                                            << "' differ in shape");
  NodeId id = g.add_node(std::move(n), desc);
  return g.nodes[static_cast<size_t>(id)].output;
}

// Note [split gradients]
// A value read only through slices that tile one of its axes (torch.chunk, ONNX's Split,
// qkv.split(C, dim=2)) gets one gradient contribution per slice, each a channel_slice_grad: the
// slice's dy among zeros, the value's full size. Summing them holds k full-size values and adds
// k - 1 times; the gradient is exactly the slices' dy joined along that axis, which one concat
// writes once. Where every contribution is a channel_slice_grad of one axis and layout and
// their ranges tile the axis, make_training_graph emits that concat instead of the add (the
// channel_slice_grad nodes, then unread, are pruned); anything else (a slice not read on the
// way to the loss, overlapping slices, another reader of the value) is summed as before. The
// values are the same (the sum adds zeros).
ValueId join_slice_gradients(Graph& g, const OpRegistry& ops, const std::vector<ValueId>& parts,
                             const std::string& name, NodeId forward) {
  if (parts.size() < 2) return kNoValue;
  struct Piece {
    int64_t offset;
    ValueId dy;
  };
  std::vector<Piece> pieces;
  int64_t total = -1, axis = -1;
  std::string layout;
  for (ValueId p : parts) {
    const NodeId producer = g.value(p).producer;
    if (producer < 0 || g.node(producer).op != "channel_slice_grad") return kNoValue;
    AttrReader r(g.node(producer).attrs);
    const int64_t t = r.require_int("total", 1, int64_t{1} << 40);
    const int64_t a = r.get_int("axis", 1, 1, 16);
    const std::string f = r.get_string("data_format", "channels_first");
    if (total >= 0 && (t != total || a != axis || f != layout)) return kNoValue;
    total = t, axis = a, layout = f;
    pieces.push_back({r.require_int("offset", 0, int64_t{1} << 40), g.node(producer).inputs[0]});
  }
  const TensorDesc desc = g.value(parts[0]).desc;
  const size_t at = layout == "channels_last" ? desc.shape.size() - 1 : static_cast<size_t>(axis);
  std::sort(pieces.begin(), pieces.end(),
            [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
  int64_t next = 0;
  for (const Piece& pc : pieces) {
    if (pc.offset != next) return kNoValue;  // a gap or an overlap
    next += g.value(pc.dy).desc.shape.at(at);
  }
  if (next != total) return kNoValue;
  Node n;
  n.name = name;
  n.op = "concat";
  n.kind = NodeKind::Backward;
  n.attrs.origin = g.node(g.value(parts[0]).producer).attrs.origin;
  if (axis != 1) n.attrs.set("axis", axis);
  if (layout == "channels_last") n.attrs.set("data_format", layout);
  AttrReader r(n.attrs);
  n.typed = ops.get("concat").parse(r);
  for (const Piece& pc : pieces) n.inputs.push_back(pc.dy);
  n.forward = forward;
  const NodeId id = g.add_node(std::move(n), desc);
  return g.nodes[static_cast<size_t>(id)].output;
}

// Note [gradient clipping]
// Global-norm clipping needs every gradient before any update: one Update node "grad_clip"
// (op clip_grad_norm) reads all parameter gradients, in parameter order, and scales them in
// place by min(1, max_norm / (norm + 1e-6)) (torch.nn.utils.clip_grad_norm_). It writes
// persistent values only (Note [in-place updates]): its output is the first gradient, and its
// state buffer (the op's parameter, "grad_clip.state") holds the norm and the device's scratch.
// It runs after the plan like every Update node and before the parameter updates.
void add_clip_node(Graph& g, const OpRegistry& ops,
                   const std::vector<std::pair<ValueId, ValueId>>& updates, double max_norm,
                   const std::string& origin) {
  const OpDef& clip = ops.get("clip_grad_norm");
  Node n;
  n.name = "grad_clip";
  n.op = clip.name;
  n.kind = NodeKind::Update;
  n.attrs.origin = origin;
  n.attrs.set("max_norm", max_norm);
  AttrReader r(n.attrs);
  n.typed = clip.parse(r);
  std::vector<TensorDesc> data;
  for (auto [p, grad] : updates) {
    (void)p;
    n.inputs.push_back(grad);
    data.push_back(g.value(grad).desc);
  }
  for (const ParamSpec& s : clip.params(*n.typed, data))
    n.inputs.push_back(g.add_value(param_value(n.name, s)));
  const ValueId first = n.inputs[0];
  g.add_node_writing(std::move(n), first);
}

// Removes backward nodes whose outputs nothing needs, renumbering values and nodes.
Graph prune_dead_backward(const Graph& g) {
  std::vector<char> live_node(g.nodes.size(), 1), live_value(g.values.size(), 1);
  std::vector<int> uses(g.values.size(), 0);
  for (const auto& n : g.nodes)
    for (ValueId v : n.inputs) ++uses[static_cast<size_t>(v)];
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    if (n.kind != NodeKind::Backward) continue;
    const Value& out = g.value(n.output);
    if (out.kind != ValueKind::Activation || uses[static_cast<size_t>(n.output)] > 0) continue;
    live_node[i] = 0;
    live_value[static_cast<size_t>(n.output)] = 0;
    for (ValueId v : n.inputs) --uses[static_cast<size_t>(v)];
  }
  Graph out;
  out.name = g.name;
  out.batch = g.batch;
  std::vector<ValueId> vmap(g.values.size(), kNoValue);
  std::vector<NodeId> nmap(g.nodes.size(), -1);
  for (size_t i = 0, k = 0; i < g.nodes.size(); ++i)
    if (live_node[i]) nmap[i] = static_cast<NodeId>(k++);
  for (size_t v = 0; v < g.values.size(); ++v) {
    if (!live_value[v]) continue;
    Value val = g.values[v];
    if (val.producer >= 0) val.producer = nmap[static_cast<size_t>(val.producer)];
    vmap[v] = static_cast<ValueId>(out.values.size());
    out.values.push_back(std::move(val));
  }
  for (auto& val : out.values)
    if (val.grad_of != kNoValue) val.grad_of = vmap[static_cast<size_t>(val.grad_of)];
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!live_node[i]) continue;
    Node n = g.nodes[i];
    for (ValueId& v : n.inputs) v = vmap[static_cast<size_t>(v)];
    n.output = vmap[static_cast<size_t>(n.output)];
    if (n.forward >= 0) n.forward = nmap[static_cast<size_t>(n.forward)];
    out.nodes.push_back(std::move(n));
  }
  out.input = g.input == kNoValue ? kNoValue : vmap[static_cast<size_t>(g.input)];
  out.label = g.label == kNoValue ? kNoValue : vmap[static_cast<size_t>(g.label)];
  out.loss = g.loss == kNoValue ? kNoValue : vmap[static_cast<size_t>(g.loss)];
  return out;
}

}  // namespace

Graph make_training_graph(const Graph& forward, const OpRegistry& ops,
                          const std::string& optimizer_op, const AttrMap& optimizer_attrs,
                          int micro_batches) {
  REMAT_CHECK(forward.loss != kNoValue, "graph '" << forward.name << "' has no loss");
  const NodeId loss_node = forward.value(forward.loss).producer;
  REMAT_CHECK(loss_node >= 0 && forward.node(loss_node).kind == NodeKind::Loss,
              "graph '" << forward.name << "': the loss value is not produced by a loss node");
  for (const auto& n : forward.nodes)
    REMAT_CHECK(n.kind == NodeKind::Forward || n.kind == NodeKind::Loss,
                "make_training_graph expects a forward graph; node '" << n.name << "' is "
                                                                      << node_kind_name(n.kind));
  Graph g = forward;
  const size_t num_forward = g.nodes.size();

  // needs_grad: the value depends on a trainable parameter.
  std::vector<char> needs_grad(g.values.size(), 0);
  for (size_t v = 0; v < g.values.size(); ++v)
    needs_grad[v] = g.values[v].kind == ValueKind::Param;
  for (size_t i = 0; i < num_forward; ++i)
    for (ValueId v : g.nodes[i].inputs)
      if (needs_grad[static_cast<size_t>(v)]) needs_grad[static_cast<size_t>(g.nodes[i].output)] = 1;

  std::vector<std::vector<ValueId>> contrib(g.values.size());
  std::vector<int> partial_sums(g.values.size(), 0);  // running sums emitted per parameter
  for (size_t idx = static_cast<size_t>(loss_node) + 1; idx-- > 0;) {
    const Node fwd = g.nodes[idx];  // copy: emitting appends to g.nodes
    if (!needs_grad[static_cast<size_t>(fwd.output)]) continue;
    ValueId dy = kNoValue;
    if (fwd.kind != NodeKind::Loss) {
      const auto& parts = contrib[static_cast<size_t>(fwd.output)];
      if (parts.empty()) continue;  // does not reach the loss
      const NodeId at = static_cast<NodeId>(idx);
      dy = join_slice_gradients(g, ops, parts, fwd.name + ".grad_concat", at);
      if (dy == kNoValue) dy = sum_contributions(g, ops, parts, fwd.name + ".grad_sum", at);
    }
    const OpDef& def = ops.get(fwd.op);
    REMAT_CHECK(def.gradient, "op '" << fwd.op << "' (node '" << fwd.name
                                     << "') has no gradient rule");
    Emitter em(g, ops, fwd, static_cast<NodeId>(idx));
    std::vector<ValueId> grads = def.gradient(em, fwd, dy);
    REMAT_CHECK(grads.size() == fwd.inputs.size(),
                "gradient of '" << fwd.name << "' returned " << grads.size() << " values for "
                                << fwd.inputs.size() << " inputs");
    contrib.resize(g.values.size());
    for (size_t k = 0; k < grads.size(); ++k) {
      ValueId in = fwd.inputs[k];
      if (grads[k] == kNoValue || !needs_grad[static_cast<size_t>(in)]) continue;
      REMAT_CHECK(g.value(grads[k]).desc.shape == g.value(in).desc.shape,
                  "gradient of '" << fwd.name << "' input " << k << " has shape "
                                  << shape_str(g.value(grads[k]).desc.shape) << ", expected "
                                  << shape_str(g.value(in).desc.shape));
      auto& parts = contrib[static_cast<size_t>(in)];
      parts.push_back(grads[k]);
      if (g.values[static_cast<size_t>(in)].kind == ValueKind::Param && parts.size() == 2) {
        // Note [running parameter sums]
        const std::string name = g.values[static_cast<size_t>(in)].name + ".grad_partial" +
                                 std::to_string(++partial_sums[static_cast<size_t>(in)]);
        parts = {sum_contributions(g, ops, parts, name, static_cast<NodeId>(idx))};
      }
    }
  }

  // Route parameter gradients into persistent ParamGrad values.
  std::vector<int> uses(g.values.size(), 0);
  for (const auto& n : g.nodes)
    for (ValueId v : n.inputs) ++uses[static_cast<size_t>(v)];
  std::vector<std::pair<ValueId, ValueId>> param_grads;  // (param, grad)
  const size_t num_values = forward.values.size();
  for (size_t p = 0; p < num_values; ++p) {
    if (g.values[p].kind != ValueKind::Param) continue;
    const std::string grad_name = g.values[p].name + ".grad";
    auto parts = contrib[p];
    ValueId grad;
    if (parts.empty()) {
      Value v;  // unused parameter: a zero gradient, never written
      v.name = grad_name;
      v.desc = g.values[p].desc;
      v.kind = ValueKind::ParamGrad;
      v.init = InitKind::Zeros;
      grad = g.add_value(std::move(v));
    } else {
      grad = parts.size() == 1 ? parts[0]
                               : sum_contributions(g, ops, parts, grad_name,
                                                   g.node(g.value(parts[0]).producer).forward);
      Value& gv = g.values[static_cast<size_t>(grad)];
      // A shared parameter's sum is a new value, read by nothing.
      const bool unused = static_cast<size_t>(grad) >= uses.size() || uses[static_cast<size_t>(grad)] == 0;
      REMAT_CHECK(gv.kind == ValueKind::Activation && gv.producer >= static_cast<NodeId>(num_forward) &&
                      unused,
                  "gradient of parameter '" << g.values[p].name
                                            << "' is not a value of its own (unsupported op pattern)");
      gv.kind = ValueKind::ParamGrad;
      gv.name = grad_name;
      gv.init = InitKind::Zeros;
    }
    g.values[static_cast<size_t>(grad)].grad_of = static_cast<ValueId>(p);
    param_grads.emplace_back(static_cast<ValueId>(p), grad);
  }

  g = prune_dead_backward(g);
  add_gradient_accumulation(g, ops, micro_batches);

  // One optimizer update node per trainable parameter, with its state values.
  const OpDef& opt = ops.get(optimizer_op);
  REMAT_CHECK(opt.kind == NodeKind::Update && opt.optimizer_state,
              "'" << optimizer_op << "' is not an optimizer");
  AttrReader reader(optimizer_attrs);
  OpAttrsPtr typed = opt.parse(reader);
  std::vector<std::pair<ValueId, ValueId>> updates;  // (param, grad) after pruning
  for (auto [p_old, grad_old] : param_grads) {
    (void)grad_old;
    const std::string& name = forward.values[static_cast<size_t>(p_old)].name;
    ValueId p = g.find_value(name), grad = g.find_value(name + ".grad");
    REMAT_CHECK(p != kNoValue && grad != kNoValue, "lost parameter or gradient after pruning");
    updates.emplace_back(p, grad);
  }
  if (opt.optimizer_clip_norm && opt.optimizer_clip_norm(*typed) > 0 && !updates.empty())
    add_clip_node(g, ops, updates, opt.optimizer_clip_norm(*typed), optimizer_attrs.origin);
  for (auto [p, grad] : updates) {
    Node n;
    n.name = g.values[static_cast<size_t>(p)].name + ".update";
    n.op = optimizer_op;
    n.kind = NodeKind::Update;
    n.attrs = optimizer_attrs;
    n.typed = typed;
    if (opt.optimizer_param_attrs) {  // per-parameter rules (weight-decay exemptions)
      n.attrs = opt.optimizer_param_attrs(*typed, optimizer_attrs, g.value(p));
      AttrReader r(n.attrs);
      n.typed = opt.parse(r);
    }
    n.inputs = {p, grad};
    for (const auto& suffix : opt.optimizer_state(*typed)) {
      Value s;
      s.name = g.values[static_cast<size_t>(p)].name + "." + suffix;
      s.desc = g.values[static_cast<size_t>(p)].desc;
      s.kind = ValueKind::OptState;
      s.init = InitKind::Zeros;
      s.grad_of = p;
      n.inputs.push_back(g.add_value(std::move(s)));
    }
    g.add_node_writing(std::move(n), p);
  }
  g.validate();
  graph_check_sizes(g, ops);
  return g;
}

void graph_check_sizes(const Graph& g, const OpRegistry& ops) {
  int64_t total = 0;
  for (const Value& v : g.values)
    total = checked_add(total, v.desc.bytes(), "graph '" + g.name + "': value '" + v.name + "'",
                        "bytes (sum of every value of the step)");
  int64_t max_workspace = 0;
  for (const Node& n : g.nodes) {
    std::vector<TensorDesc> in;
    for (ValueId v : n.inputs) in.push_back(g.value(v).desc);
    try {
      max_workspace = std::max(max_workspace,
                               ops.get(n.op).cost(*n.typed, in, g.value(n.output).desc).workspace_bytes);
    } catch (const UserError& e) {
      throw UserError("graph '" + g.name + "': node '" + n.name + "' (" + n.op + "): " + e.what());
    }
  }
  checked_add(total, max_workspace, "graph '" + g.name + "'",
              "workspace_bytes (the largest, plus every value of the step)");
}

}  // namespace remat
