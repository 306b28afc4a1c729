// Note [channels-last layout]
// cuDNN's tensor-core convolutions read and write NHWC; on NCHW tensors they pay for layout
// changes inside (PyTorch trains CNNs in bf16 with channels_last for that reason). A model with
// `layout: channels_last` stores its 4-D activations NHWC wherever the ops between allow it,
// and that is a property of the graph, so the solver plans it: while building the forward
// graph, layer by layer,
// - an op with a channels-last form for this node (OpDef::channels_last: conv2d, batchnorm,
//   maxpool, avgpool, global_avgpool, concat, zeropad, crop, upsample, channel_scale) gets its 4-D inputs
//   NHWC and the attribute data_format: channels_last (its backward ops share the forward
//   node's attributes, so they run channels-last too); its 4-D output is NHWC;
// - an elementwise op (OpDef::layout_agnostic: relu, relu6, add, dropout, gelu, cast, sigmoid,
//   tanh, hardsigmoid, hardswish, leaky_relu, gelu_erf, silu, affine) whose
//   float inputs are all 4-D and NHWC keeps them so; its output is NHWC (a dropout mask follows
//   the element index, so it is another draw of the same distribution than channels-first's);
// - every other op (flatten, dense over a 4-D input's last axis, the losses) gets NCHW inputs.
// Where the layout changes, a `layout` node converts (ops/layout.cpp), named
// "<value>.to_nhwc" / "<value>.to_nchw", made once per value and shared; converting a
// conversion back returns its source. These nodes are activations like any other: the solver
// keeps or recomputes them, and their time and bytes are in the cost table. Parameters keep
// their layouts (the convolution weight stays KCRS, PyTorch's, in checkpoints), so a
// channels-last model's checkpoints are interchangeable with the channels-first model's. The
// loss sees NCHW values; channels-last values have physical shapes [N, H, W, C] in plans, cost
// tables and traces.
#include "models/channels_last.h"

#include "models/build.h"
#include "runtime/core/check.h"

namespace remat {
namespace {

bool is_image(const TensorDesc& d) { return d.shape.size() == 4 && dtype_is_float(d.dtype); }

Shape channels_first_shape(const Shape& s) { return {s[0], s[3], s[1], s[2]}; }

}  // namespace

ValueId ChannelsLastPlacer::convert(ValueId v, bool to_last, const std::string& where) {
  auto it = made_.find({v, to_last});
  if (it != made_.end()) return it->second;
  const Value& from = g_.value(v);
  const OpDef& op = ops_.get("layout");
  Node n;
  n.name = from.name + (to_last ? ".to_nhwc" : ".to_nchw");
  REMAT_CHECK(g_.find_value(n.name) == kNoValue, "layout value '" << n.name << "' exists already");
  n.op = op.name;
  n.kind = NodeKind::Forward;
  n.attrs.origin = where;
  n.attrs.set("to", std::string(to_last ? "channels_last" : "channels_first"));
  AttrReader r(n.attrs);
  n.typed = op.parse(r);
  n.inputs = {v};
  n.seed = node_seed(seed_, n.name);
  const TensorDesc out = op.infer(*n.typed, {from.desc});
  const ValueId made = g_.node(g_.add_node(std::move(n), out)).output;
  made_[{v, to_last}] = made;
  made_[{made, !to_last}] = v;
  if (to_last) last_.insert(made);
  return made;
}

ValueId ChannelsLastPlacer::channels_first(ValueId v, const std::string& where) {
  return last_.count(v) ? convert(v, false, where) : v;
}

void ChannelsLastPlacer::place(Node& node, const OpDef& op, std::vector<TensorDesc>& data,
                               const std::string& where) {
  if (node.attrs.has("data_format"))
    REMAT_USER_ERROR(where << "field 'data_format': the graph builder sets it; choose the "
                              "layout for the whole model with the top-level `layout:` key");
  pending_ = false;
  if (!on_) return;
  // A cast the builder made of an NHWC value (Note [bf16 autocast]) keeps its layout.
  for (ValueId v : node.inputs) {
    const NodeId p = g_.value(v).producer;
    if (p >= 0 && g_.node(p).op == "cast" && last_.count(g_.node(p).inputs.at(0))) last_.insert(v);
  }
  auto refresh = [&] {
    for (size_t k = 0; k < node.inputs.size(); ++k) data[k] = g_.value(node.inputs[k]).desc;
  };
  if (op.channels_last) {
    std::vector<TensorDesc> nchw = data;
    for (size_t k = 0; k < nchw.size(); ++k)
      if (last_.count(node.inputs[k])) nchw[k].shape = channels_first_shape(nchw[k].shape);
    bool any_image = false;
    for (const TensorDesc& d : nchw) any_image |= is_image(d);
    if (any_image && op.channels_last(*node.typed, nchw)) {
      for (size_t k = 0; k < node.inputs.size(); ++k)
        if (is_image(data[k]) && !last_.count(node.inputs[k]))
          node.inputs[k] = convert(node.inputs[k], true, where);
      refresh();
      node.attrs.set("data_format", std::string("channels_last"));
      AttrReader r(node.attrs);
      node.typed = op.parse(r);
      pending_ = true;
      return;
    }
  } else if (op.layout_agnostic) {
    bool all_last = !node.inputs.empty();
    for (size_t k = 0; k < node.inputs.size(); ++k)
      all_last = all_last && (!dtype_is_float(data[k].dtype) ||
                              (is_image(data[k]) && last_.count(node.inputs[k]) > 0));
    if (all_last) {
      pending_ = true;
      return;
    }
  }
  for (ValueId& v : node.inputs) v = channels_first(v, where);
  refresh();
}

void ChannelsLastPlacer::record(ValueId out) {
  if (pending_ && is_image(g_.value(out).desc)) last_.insert(out);
  pending_ = false;
}

}  // namespace remat
