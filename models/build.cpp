// Forward-graph builder: runs each layer's op parse/infer/params and reports op errors at the
// layer's YAML position. See build.h for the graph it produces.
#include "models/build.h"

#include <algorithm>
#include <map>
#include <optional>

#include "models/batchnorm_relu_fusion.h"
#include "models/build_checks.h"
#include "models/channels_last.h"
#include "models/onnx/onnx_config.h"
#include "models/size_attrs.h"
#include "runtime/core/check.h"
#include "runtime/graph/init.h"  // mix64

namespace remat {

using build_detail::check_all_used;
using build_detail::check_forward_op;
using build_detail::check_loss_shape;
using build_detail::check_optimizer;
using build_detail::check_shared_suffixes;
using build_detail::get_op;
using build_detail::layer_ctx;
using build_detail::rethrow_at;
using build_detail::shared_param;

namespace {

// Note [bf16 autocast]
// The dtype each layer runs in, as PyTorch's torch.autocast(dtype=torch.bfloat16) decides it:
// in a bf16 model, conv2d, dense/linear and matmul (OpDef::autocast_bf16) take BF16 inputs, so
// an F32 input (the image batch, a layer norm of the F32 residual stream) is cast down first;
// every other op runs in the dtype of its inputs and stores its output in it (relu, batch norm,
// pooling, softmax and dropout after a convolution or a matmul stay BF16; embeddings and the
// residual stream they start stay F32), and where BF16 and F32 inputs meet (a BF16 branch added
// to the F32 residual) the BF16 ones are cast up, as PyTorch's type promotion does. Ops without
// a bf16 path get F32 inputs. A layer's `precision` key forces its dtype either way (a bf16
// layer whose op has no bf16 path is an error). Casts are nodes: the solver plans their
// outputs like any activation, and may keep or recompute them.
std::optional<DType> layer_run_dtype(const LayerConfig& l, const OpDef& op, DType model,
                                     const std::vector<TensorDesc>& data) {
  if (l.precision) {
    if (*l.precision == DType::BF16 && !op.bf16)
      REMAT_USER_ERROR(layer_ctx(l.precision_where, l.name)
                       << "field 'precision': op '" << op.name << "' has no bf16 path");
    return *l.precision;
  }
  if (model == DType::BF16 && op.autocast_bf16) return DType::BF16;
  bool any_bf16 = false, any_f32 = false;
  for (const TensorDesc& d : data) {
    any_bf16 |= d.dtype == DType::BF16;
    any_f32 |= d.dtype == DType::F32;
  }
  if (any_bf16 && (any_f32 || !op.bf16)) return DType::F32;
  return std::nullopt;  // as the inputs are
}

// Value `v` in dtype `t`: v itself, or the output of a cast node "<v>.to_<t>" made once and
// shared by every layer that needs it (`casts`).
ValueId cast_value(Graph& g, const OpRegistry& ops, ValueId v, DType t, uint64_t model_seed,
                   const std::string& origin, std::map<std::pair<ValueId, DType>, ValueId>& casts) {
  const TensorDesc from = g.value(v).desc;
  if (from.dtype == t || !dtype_is_float(from.dtype)) return v;
  auto it = casts.find({v, t});
  if (it != casts.end()) return it->second;
  const OpDef& cast = ops.get("cast");
  Node n;
  n.name = g.value(v).name + ".to_" + dtype_name(t);
  REMAT_CHECK(g.find_value(n.name) == kNoValue, "cast value '" << n.name << "' exists already");
  n.op = cast.name;
  n.kind = NodeKind::Forward;
  n.attrs.origin = origin;
  n.attrs.set("to", std::string(dtype_name(t)));
  AttrReader r(n.attrs);
  n.typed = cast.parse(r);
  n.inputs = {v};
  n.seed = node_seed(model_seed, n.name);
  const ValueId out = g.node(g.add_node(std::move(n), TensorDesc{from.shape, t})).output;
  casts[{v, t}] = out;
  return out;
}

}  // namespace

uint64_t node_seed(uint64_t model_seed, const std::string& node_name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a 64
  for (unsigned char c : node_name) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return mix64(mix64(model_seed) ^ h);
}

Shape parse_input_size(const std::string& text, const std::string& what) {
  Shape s;
  std::string cur;
  auto flush = [&] {
    bool digits = !cur.empty() && cur.size() <= 9;
    for (char c : cur) digits = digits && c >= '0' && c <= '9';
    if (!digits || std::stoll(cur) <= 0)
      REMAT_USER_ERROR(what << ": expected positive integers CxHxW, F or TxF (e.g. 3x32x32), "
                               "got '" << text << "'");
    s.push_back(std::stoll(cur));
    cur.clear();
  };
  for (char c : text) {
    if (c == 'x' || c == 'X' || c == ',') flush();
    else cur += c;
  }
  flush();
  if (s.size() > 3)
    REMAT_USER_ERROR(what << ": expected 1 to 3 sizes: CxHxW (an image, e.g. 3x32x32), F "
                             "(features) or TxF, got '" << text << "'");
  return s;
}

TensorDesc labels_desc_for(const std::string& loss, const TensorDesc& last_output) {
  const Shape& s = last_output.shape;
  REMAT_CHECK(!s.empty(), "labels_desc_for: empty output shape");
  if (loss == "token_xent" && s.size() == 3) return {{s[0], s[1]}, DType::I32};
  if (loss == "softmax_xent_pixel" && s.size() == 4) return {{s[0], s[2], s[3]}, DType::I32};
  return {{s[0]}, DType::I32};
}

namespace {

// What add_layer needs besides the layer: the graph so far, the outputs by layer name, and the
// casts and layouts placed so far (Note [bf16 autocast], Note [channels-last layout]).
struct LayerContext {
  Graph& g;
  const OpRegistry& ops;
  const ModelConfig& cfg;
  DType model_precision;
  std::map<std::string, ValueId>& by_name;
  std::map<std::pair<ValueId, DType>, ValueId>& casts;
  ChannelsLastPlacer& layouts;
};

// Adds layer `l`'s node (its inputs cast and laid out as its op runs them, its parameters) and
// returns its output.
ValueId add_layer(LayerContext& c, const LayerConfig& l, const BnReluFusion& fusion) {
  Graph& g = c.g;
  const std::string prefix = layer_ctx(l.where, l.name);
  const OpDef& op = get_op(c.ops, l.op, layer_ctx(l.op_where, l.name));
  check_forward_op(op, layer_ctx(l.op_where, l.name));
  const int count = static_cast<int>(l.inputs.size());
  if (count < op.min_inputs || (op.max_inputs >= 0 && count > op.max_inputs)) {
    std::string range = op.min_inputs == op.max_inputs ? std::to_string(op.min_inputs)
                        : op.max_inputs < 0 ? "at least " + std::to_string(op.min_inputs)
                                            : std::to_string(op.min_inputs) + " to " +
                                                  std::to_string(op.max_inputs);
    REMAT_USER_ERROR(layer_ctx(l.inputs_where, l.name)
                     << "field 'inputs': op '" << op.name << "' takes " << range << " input"
                     << (range == "1" ? "" : "s") << ", got " << count);
  }
  Node node;
  node.name = l.name;
  node.op = l.op;
  node.kind = NodeKind::Forward;
  node.attrs = l.attrs;
  if (auto act = fusion.activation.find(l.name); act != fusion.activation.end())
    node.attrs.set("activation", act->second);
  node.seed = node_seed(c.cfg.seed, l.name);
  resolve_size_attrs(l, node.attrs, g, c.layouts, c.by_name);  // Note [size-relative attributes]
  try {
    AttrReader r(node.attrs);
    node.typed = op.parse(r);
  } catch (const UserError& e) {
    rethrow_at(e, c.cfg.source, prefix);
  }
  REMAT_CHECK(node.typed, "op '" << op.name << "' parse returned no attributes");
  std::vector<TensorDesc> data;
  for (const auto& name : l.inputs) {
    auto it = c.by_name.find(name);
    REMAT_CHECK(it != c.by_name.end(), "layer '" << l.name << "' input '" << name << "' unbuilt");
    node.inputs.push_back(it->second);
    data.push_back(g.value(it->second).desc);
  }
  if (const std::optional<DType> run = layer_run_dtype(l, op, c.model_precision, data)) {
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      node.inputs[k] = cast_value(g, c.ops, node.inputs[k], *run, c.cfg.seed,
                                  l.where + ": layer '" + l.name + "'", c.casts);
      data[k] = g.value(node.inputs[k]).desc;
    }
  }
  try {
    c.layouts.place(node, op, data, l.where + ": layer '" + l.name + "'");
  } catch (const UserError& e) {
    rethrow_at(e, c.cfg.source, prefix);
  }
  TensorDesc out;
  std::vector<ParamSpec> params;
  try {
    out = op.infer(*node.typed, data);
    checked_tensor_bytes(out, "", "output " + shape_str(out.shape));
    if (op.params) params = op.params(*node.typed, data);
  } catch (const UserError& e) {
    std::string inputs;
    for (size_t k = 0; k < data.size(); ++k)
      inputs += (k ? ", " : "") + l.inputs[k] + " " + shape_str(data[k].shape);
    throw UserError(prefix + e.what() + " (inputs: " + inputs + ")");
  }
  check_shared_suffixes(l, op, params);
  for (const ParamSpec& p : params) {
    auto shared = l.shared.find(p.suffix);
    if (shared != l.shared.end()) {
      node.inputs.push_back(shared_param(g, l, p, shared->second));
      continue;
    }
    Value pv = param_value(l.name, p);
    if (auto named = l.param_names.find(p.suffix); named != l.param_names.end()) {
      pv.name = named->second;  // an imported model's own name (Note [ONNX import])
      if (g.find_value(pv.name) != kNoValue)
        REMAT_USER_ERROR(layer_ctx(l.where, l.name)
                         << "parameter '" << pv.name << "' is also another value's name");
    }
    node.inputs.push_back(g.add_value(pv));
  }
  return g.node(g.add_node(std::move(node), out)).output;
}

// The loss node on the last layer's output (channels first) and the labels.
void add_loss(Graph& g, const OpRegistry& ops, const ModelConfig& cfg, ValueId last_value) {
  const TensorDesc last_out = g.value(last_value).desc;
  const std::string loss_prefix = cfg.where_loss + ": loss: ";
  const OpDef& loss_op = get_op(ops, cfg.loss, loss_prefix);
  if (loss_op.kind != NodeKind::Loss)
    REMAT_USER_ERROR(loss_prefix << "op '" << cfg.loss << "' is not a loss");
  Node loss;
  loss.name = "loss";
  loss.op = cfg.loss;
  loss.kind = NodeKind::Loss;
  loss.attrs = cfg.loss_attrs;
  loss.seed = node_seed(cfg.seed, "loss");
  loss.inputs = {last_value, g.label};
  TensorDesc loss_out;
  try {
    AttrReader r(loss.attrs);
    loss.typed = loss_op.parse(r);
    loss_out = loss_op.infer(*loss.typed, {last_out, g.value(g.label).desc});
  } catch (const UserError& e) {
    rethrow_at(e, cfg.source, loss_prefix);
  }
  NodeId loss_node = g.add_node(std::move(loss), loss_out);
  g.loss = g.node(loss_node).output;
}

// The model's input batch: [N, T] token ids, or floats [N, ...] (images [N, C, H, W], features
// [N, F], sequences [N, T, F]) of dtype `image_input`.
Value input_value(const ModelConfig& cfg, const BuildOptions& opt, DType image_input, int64_t n,
                  int64_t t) {
  Value in;
  in.name = kModelInputName;
  in.kind = ValueKind::Input;
  if (cfg.tokens()) {
    if (opt.input)
      REMAT_USER_ERROR("model '" << cfg.name << "' is a token model (" << cfg.where_sequence
                                 << "): set its sequence length, not an image size");
    if (t < 1) REMAT_USER_ERROR("sequence length must be at least 1, got " << t);
    in.desc = {{n, t}, DType::I32};
  } else {
    if (opt.sequence)
      REMAT_USER_ERROR("model '" << cfg.name << "' is an image model (" << cfg.where_input
                                 << "): a sequence length applies to token models only");
    const Shape sample = opt.input ? *opt.input : cfg.input;
    if (sample.empty() || sample.size() > 3 ||
        std::any_of(sample.begin(), sample.end(), [](int64_t d) { return d < 1; }))
      REMAT_USER_ERROR("input size must be 1 to 3 positive sizes ([C, H, W], [F] or [T, F]), got "
                       << shape_str(sample));
    Shape shape = {n};
    shape.insert(shape.end(), sample.begin(), sample.end());
    in.desc = {shape, image_input};
  }
  return in;
}

// The forward graph with an image batch of dtype `image_input` (token ids are I32 whatever it
// is), with `fusion`'s pairs fused.
Graph build_graph(const ModelConfig& cfg, const OpRegistry& ops, const BuildOptions& opt,
                  DType image_input, const BnReluFusion& fusion) {
  REMAT_CHECK(!cfg.layers.empty(), "model '" << cfg.name << "' has no layers");
  const int64_t n = opt.batch ? *opt.batch : cfg.batch;
  if (n < 1) REMAT_USER_ERROR("batch size must be at least 1, got " << n);
  const int64_t t = opt.sequence ? *opt.sequence : cfg.sequence;
  const Value in = input_value(cfg, opt, image_input, n, t);
  check_all_used(cfg);

  Graph g;
  g.name = cfg.name;
  g.batch = n;
  checked_tensor_bytes(in.desc,
                       (cfg.tokens() ? cfg.where_sequence : cfg.where_input) + ": model: input batch " +
                           shape_str(in.desc.shape),
                       "input");
  g.input = g.add_value(in);
  Value lab;
  lab.name = "labels";
  lab.kind = ValueKind::Label;
  lab.desc = {{n}, DType::I32};  // final shape set once the last layer's output is known
  g.label = g.add_value(lab);

  std::map<std::string, ValueId> by_name = {{kModelInputName, g.input}};
  std::map<std::pair<ValueId, DType>, ValueId> casts;  // Note [bf16 autocast]
  ChannelsLastPlacer layouts(g, ops, cfg.seed, cfg.channels_last);  // Note [channels-last layout]
  LayerContext c{g, ops, cfg, opt.precision ? *opt.precision : cfg.precision, by_name, casts,
                 layouts};
  for (const LayerConfig& l : cfg.layers) {
    if (auto into = fusion.fused_into.find(l.name); into != fusion.fused_into.end()) {
      by_name[l.name] = by_name.at(into->second);  // Note [batchnorm + relu fusion]
      continue;
    }
    by_name[l.name] = add_layer(c, l, fusion);
    layouts.record(by_name[l.name]);
  }

  const LayerConfig& last = cfg.layers.back();
  const ValueId last_value = layouts.channels_first(by_name.at(last.name), last.where + ": loss");
  const TensorDesc last_out = g.value(last_value).desc;
  check_loss_shape(cfg, last, last_out, n, t);
  g.values[static_cast<size_t>(g.label)].desc = labels_desc_for(cfg.loss, last_out);
  add_loss(g, ops, cfg, last_value);

  check_optimizer(cfg, ops);
  g.validate();
  return g;
}

}  // namespace

// Note [bf16 input batch]
// In a bf16 model the image batch usually reaches the network only through the cast node
// "input.to_bf16" (Note [bf16 autocast]: the first layer is a convolution). Then the batch is
// built as BF16 instead: the data source rounds each pixel once on the host, to nearest even as
// the cast does (make_data_source), the cast node disappears, and every layer reads the same
// bits it read through the cast. What that saves: the F32 batch in the plan's constant (4 bytes
// a pixel) and the cast's output (2), against 2 bytes a pixel of BF16 batch; and the first
// convolution is again the graph's first node, as in fp32, which the checkpoint rules treat
// alike in both precisions. Where some layer reads the batch in F32 (a pooling or batch norm
// first, a layer with `precision: fp32`), the batch stays F32 and the cast stays a node.
Graph build_forward_graph(const ModelConfig& cfg, const OpRegistry& ops,
                          const BuildOptions& opt) {
  // An imported model at another size is imported again there: its shape arithmetic was folded
  // at the config's size (Note [ONNX constant folding] in models/onnx/onnx_const.h).
  if (cfg.onnx && ((opt.input && !cfg.tokens() && *opt.input != cfg.input) ||
                   (opt.sequence && cfg.tokens() && *opt.sequence != cfg.sequence))) {
    ModelConfig sized = cfg;
    onnx_apply(sized, OnnxOptions{opt.input, opt.sequence, {}});
    return build_forward_graph(sized, ops, opt);
  }
  Graph g = build_graph(cfg, ops, opt, DType::F32, {});
  const BnReluFusion fusion = cfg.fuse_batchnorm_relu ? bn_relu_pairs(g) : BnReluFusion{};
  DType batch = DType::F32;
  if (g.value(g.input).desc.dtype == DType::F32) {  // not token ids
    // The builder's cast (cast_value), not a `cast` layer of the config.
    const std::string cast_name = g.value(g.input).name + ".to_" + dtype_name(DType::BF16);
    const std::vector<NodeId> readers = g.users()[static_cast<size_t>(g.input)];
    if (readers.size() == 1 && g.node(readers[0]).name == cast_name) batch = DType::BF16;
  }
  if (batch == DType::F32 && fusion.fused_into.empty()) return g;
  return build_graph(cfg, ops, opt, batch, fusion);
}

}  // namespace remat
