// The walk of an ONNX graph (Note [ONNX import] in onnx_import.h): the input at the asked size,
// the nodes the output needs in file order, folded or translated, then the output.
#include "models/onnx/onnx_translator.h"

#include <algorithm>

#include "runtime/core/check.h"

namespace remat {
namespace onnx_detail {

namespace {

// The domain "remat" is the pattern pass's own (Note [ONNX patterns]): a file's node of it is
// refused before the pass, so that only the pass's nodes reach pattern_ops.
const onnx::GraphProto& without_remat_domain(const OnnxSource& src) {
  for (const auto& n : src.model->graph().node())
    if (n.domain() == "remat")
      REMAT_USER_ERROR(src.path << ": node '" << n.name() << "' (" << n.op_type()
                                << "): ops of domain 'remat' are not supported (the default "
                                   "ONNX domain is)");
  return src.model->graph();
}

}  // namespace

Translator::Translator(const OnnxSource& src, OnnxImport* out)
    : src_(src), g_(without_remat_domain(src)), nodes_(rewrite_patterns(g_)), out_(out) {
  for (const auto& t : g_.initializer()) initializers_[t.name()] = &t;
}

bool Translator::is_const(int k) const {
  if (!has(k)) return false;
  const std::string& v = node_->input(k);
  return consts_.count(v) || (initializers_.count(v) && !data_.count(v));
}

bool Translator::is_initializer(int k) const {
  if (!has(k)) return false;
  return initializers_.count(node_->input(k)) > 0 || param_views_.count(node_->input(k)) > 0;
}

std::string Translator::initializer_name(int k) const {
  const auto view = param_views_.find(node_->input(k));
  return view == param_views_.end() ? node_->input(k) : view->second;
}

bool Translator::is_module_tensor(int k) const {
  if (!has(k)) return false;
  const std::string& v = node_->input(k);
  return module_values_.count(v) ||
         (is_initializer(k) && v.rfind("onnx::", 0) != 0 && !buffers_.count(v));
}

Shape Translator::initializer_dims(int k) const {
  if (param_views_.count(node_->input(k))) return consts_.at(node_->input(k)).shape;
  const onnx::TensorProto& t = *initializers_.at(node_->input(k));
  return Shape(t.dims().begin(), t.dims().end());
}

namespace {

// `s` without its dimensions of 1: shapes that hold the same values in the same order.
Shape without_ones(const Shape& s) {
  Shape r;
  for (int64_t d : s)
    if (d != 1) r.push_back(d);
  return r;
}

}  // namespace

void Translator::note_parameter_view() {
  static const std::set<std::string> views = {"Unsqueeze", "Squeeze", "Reshape", "Flatten",
                                              "Identity"};
  if (!views.count(node_->op_type()) || node_->output_size() != 1 || !is_initializer(0) ||
      !is_module_tensor(0))
    return;
  const std::string init = initializer_name(0);
  const auto out = consts_.find(node_->output(0));
  const onnx::TensorProto& t = *initializers_.at(init);
  if (out == consts_.end() || !out->second.is_float ||
      without_ones(Shape(t.dims().begin(), t.dims().end())) != without_ones(out->second.shape))
    return;
  param_views_[node_->output(0)] = init;
}

std::vector<float> Translator::transposed_initializer(int k) const {
  const onnx::TensorProto& t = *initializers_.at(initializer_name(k));
  const std::vector<float> v = floats_from_proto(t, src_.path + ": initializer '" + t.name() + "'");
  const Shape dims = initializer_dims(k);
  REMAT_CHECK(dims.size() == 2, "transposed_initializer: not 2-D");
  const int64_t rows = dims[0], cols = dims[1];
  std::vector<float> out(v.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(c * rows + r)] = v[static_cast<size_t>(r * cols + c)];
  return out;
}

const OnnxConst& Translator::konst(int k) {
  if (!has(k)) fail("input " + std::to_string(k) + " is required");
  const std::string& v = node_->input(k);
  auto it = consts_.find(v);
  if (it != consts_.end()) return it->second;
  auto init = initializers_.find(v);
  if (init == initializers_.end())
    fail("input " + std::to_string(k) + " ('" + v + "') must be a constant known at import, "
         "but the step computes it");
  return consts_.emplace(v, const_from_proto(*init->second, src_.path + ": initializer '" + v + "'"))
      .first->second;
}

const DataValue& Translator::data(int k, unsigned takes) const {
  if (!has(k)) fail("input " + std::to_string(k) + " is required");
  auto it = data_.find(node_->input(k));
  if (it == data_.end() && steps_.count(node_->input(k)))  // read_only_as_input0_by said not
    fail("input " + std::to_string(k) + " ('" + node_->input(k) + "') is a recurrent layer's "
         "output, which remat computes per step for the recurrent layers that read it");
  if (it == data_.end())
    fail("input " + std::to_string(k) + " ('" + node_->input(k) +
         "') is a constant where this op needs data the step computes");
  if (!it->second.shape_only.empty())
    fail("input " + std::to_string(k) + " ('" + node_->input(k) +
         "') is inside a multi-head attention, which remat computes as one; only its Shape can "
         "be read");
  const bool rows = it->second.sample.size() >= 2;  // its last axis is not the batch
  if (it->second.seq_first && (takes & kSeqFirstRows) && !(takes & kSeqFirst) && !rows)
    fail("input " + std::to_string(k) + " ('" + node_->input(k) + "') is sequence-first [T, N], "
         "whose last axis is the batch, which this op works along");
  if (it->second.seq_first && !(takes & (kSeqFirst | kSeqFirstRows)))
    fail("input " + std::to_string(k) + " ('" + node_->input(k) + "') is sequence-first ([T, N, "
         "...]: a Transpose moved the batch to axis 1), which this op does not take (linear "
         "layers, layer norms, activations, dropout, softmax over the last axis, scalar "
         "arithmetic, sums and products of two such values, nn.MultiheadAttention and a Transpose "
         "back do; Note [sequence-first values])");
  if (it->second.fold > 1 && !(takes & kFolds))
    fail("input " + std::to_string(k) + " ('" + node_->input(k) + "') holds " +
         std::to_string(it->second.fold) + " windows per sample folded into the batch ([" +
         std::to_string(it->second.fold) + "N, ...]), which this op does not take (a linear layer, "
         "matmul, softmax, dropout, scalar arithmetic, Reshape and Transpose do)");
  return it->second;
}

std::vector<SymInt> Translator::onnx_shape(int k) {
  std::vector<SymInt> dims;
  if (is_const(k)) {
    for (int64_t d : konst(k).shape) dims.push_back({0, d});
    return dims;
  }
  auto it = data_.find(node_->input(k));
  if (it != data_.end() && !it->second.shape_only.empty()) return it->second.shape_only;
  const DataValue& v = data(k, kFolds | kSeqFirst);
  dims.push_back({v.fold, 0});  // the batch N, times the windows folded into it
  for (size_t d = v.fold > 1 ? 1 : 0; d < v.sample.size(); ++d) dims.push_back({0, v.sample[d]});
  if (v.seq_first && dims.size() >= 2) std::swap(dims[0], dims[1]);  // [T, N, ...]
  return dims;
}

const onnx::AttributeProto* Translator::attr(const std::string& name) const {
  for (const auto& a : node_->attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

bool Translator::has_attr(const std::string& name) const { return attr(name) != nullptr; }

int64_t Translator::attr_int(const std::string& name, int64_t def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() != onnx::AttributeProto::INT) fail("attribute '" + name + "' must be an int");
  return a->i();
}

std::vector<int64_t> Translator::attr_ints(const std::string& name,
                                           std::vector<int64_t> def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() != onnx::AttributeProto::INTS) fail("attribute '" + name + "' must be ints");
  return {a->ints().begin(), a->ints().end()};
}

double Translator::attr_float(const std::string& name, double def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() != onnx::AttributeProto::FLOAT) fail("attribute '" + name + "' must be a float");
  return a->f();
}

std::string Translator::attr_string(const std::string& name, const std::string& def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() != onnx::AttributeProto::STRING) fail("attribute '" + name + "' must be a string");
  return a->s();
}

void Translator::set_const(int out, OnnxConst c) {
  if (out < node_->output_size() && !node_->output(out).empty())
    consts_[node_->output(out)] = std::move(c);
}

void Translator::set_data(int out, DataValue v) {
  if (out < node_->output_size() && !node_->output(out).empty())
    data_[node_->output(out)] = std::move(v);
}

void Translator::set_shape_only(int out, std::vector<SymInt> dims) {
  DataValue v;
  v.shape_only = std::move(dims);
  set_data(out, std::move(v));
}

void Translator::mark_transposed(int out) {
  if (out < node_->output_size() && data_.count(node_->output(out))) data_[node_->output(out)].transposed = true;
}

void Translator::mark_seq_first(int out, bool seq_first) {
  if (out < node_->output_size() && data_.count(node_->output(out)))
    data_[node_->output(out)].seq_first = seq_first;
}

bool Translator::used(int out) const {
  return out < node_->output_size() && !node_->output(out).empty() &&
         live_values_.count(node_->output(out)) > 0;
}

bool Translator::read_only_as_input0_by(int out, const std::string& op,
                                        const std::string& op2) const {
  if (out >= node_->output_size() || node_->output(out).empty() || is_graph_output(out))
    return false;
  const std::string& v = node_->output(out);
  bool read = false;
  for (const onnx::NodeProto& n : nodes_)
    for (int k = 0; k < n.input_size(); ++k) {
      if (n.input(k) != v) continue;
      if (k != 0 || n.domain() != "remat" || (n.op_type() != op && n.op_type() != op2))
        return false;
      read = true;
    }
  return read;
}

void Translator::set_steps(int out, const DataValue& joined, std::vector<DataValue> steps) {
  if (out < node_->output_size() && !node_->output(out).empty())
    steps_[node_->output(out)] = {joined, std::move(steps)};
}

const std::pair<DataValue, std::vector<DataValue>>* Translator::steps(int k) const {
  if (!has(k)) return nullptr;
  auto it = steps_.find(node_->input(k));
  return it == steps_.end() ? nullptr : &it->second;
}

bool Translator::is_graph_output(int out) const {
  if (out >= node_->output_size()) return false;
  for (const auto& o : g_.output())
    if (o.name() == node_->output(out)) return true;
  return false;
}

void Translator::require_unused_outputs(int from) {
  for (int k = from; k < node_->output_size(); ++k)
    if (used(k))
      fail("output " + std::to_string(k) + " ('" + node_->output(k) +
           "') is read by the graph; only output 0 is supported");
}

std::string Translator::where() const {
  // A node of the pattern pass (Note [ONNX patterns]) is named after one of the group's nodes.
  static const std::map<std::string, std::string> groups = {
      {"Dense", "MatMul + Add read as one linear layer"},
      {"SplitHeads", "Reshape + Transpose read as a split into heads"},
      {"MergeHeads", "Transpose + Reshape read as a merge of heads"},
      {"ScaledMatMul", "MatMul + Mul read as one scaled product"},
      {"MatMulT", "Transpose + MatMul read as a product of a transposed operand"},
      {"MaskedSoftmax", "Where + Softmax read as a masked softmax"},
      {"PositionEmbedding", "Gather + Add read as a position embedding"},
      {"GeluTanh", "the nodes of GPT-2's gelu"},
      {"LayerNorm", "the nodes of a layer norm"},
      {"ChannelShuffle", "Reshape + Transpose + Reshape read as a channel shuffle"},
      {"GroupNorm", "Reshape + InstanceNormalization + Reshape read as a group norm"},
      {"HardSwish", "HardSigmoid + Mul read as a hard swish"},
      {"GeluErf", "the nodes of the exact (erf) GELU"},
      {"Silu", "Sigmoid + Mul read as a SiLU"},
      {"AttentionShapes", "the shapes inside a multi-head attention"},
      {"MultiheadAttention", "the nodes of nn.MultiheadAttention"},
      {"ClassToken", "Expand + Concat read as a class token"},
      {"Roll", "Slice + Slice + Concat read as a roll"},
      {"PatchMerge", "strided Slices + Concat read as a patch merging"},
      {"Unbind", "Transpose + Gather read as one of qkv[0], qkv[1], ..."},
      {"RelativePositionBias", "Gather + Reshape + Transpose + Add read as a relative position bias"}};
  const bool grouped = node_->domain() == "remat" && groups.count(node_->op_type());
  const std::string name = !node_->name().empty() ? node_->name()
                           : node_->output_size() ? node_->output(0) : node_->op_type();
  return src_.path + ": node '" + name + "' (" + (grouped ? groups.at(node_->op_type()) : node_->op_type()) + ", opset " +
         std::to_string(src_.opset) + ")";
}

void Translator::fail(const std::string& msg) const { REMAT_USER_ERROR(where() << ": " << msg); }

namespace {


std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    out += ok ? c : '_';
  }
  while (!out.empty() && out.front() == '.') out.erase(out.begin());
  return out.empty() ? "node" : out;
}

// "/layer1/layer1.0/relu/Relu" -> "layer1.0.relu.Relu": scope parts without the ones the next
// part repeats (torch writes each module's full path after its parent's).
std::string scope_name(const std::string& node_name) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= node_name.size()) {
    const size_t slash = node_name.find('/', start);
    const std::string p = node_name.substr(start, slash == std::string::npos ? std::string::npos
                                                                             : slash - start);
    if (!p.empty()) parts.push_back(p);
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  std::string out;
  for (size_t k = 0; k < parts.size(); ++k) {
    if (k + 1 < parts.size() && parts[k + 1].rfind(parts[k] + ".", 0) == 0) continue;
    out += (out.empty() ? "" : ".") + parts[k];
  }
  return out;
}

}  // namespace

std::string Translator::layer_name(const std::vector<ParamUse>& params) const {
  std::string base;
  for (const ParamUse& p : params) {
    const std::string tail = "." + p.suffix;
    const std::string& n = p.initializer;
    if (n.size() > tail.size() && n.compare(n.size() - tail.size(), tail.size(), tail) == 0) {
      base = n.substr(0, n.size() - tail.size());
      break;
    }
  }
  if (base.empty())
    base = scope_name(node_->name().empty() ? node_->output(0) : node_->name());
  base = sanitize(base);
  if (base == kModelInputName || base == "labels" || base == "loss") base += "_layer";
  std::string name = base;
  for (int k = 2; layer_names_.count(name); ++k) name = base + "_" + std::to_string(k);
  return name;
}

const DataValue& Translator::emit(const std::string& op, const std::vector<DataValue>& inputs,
                                  AttrMap attrs, std::vector<ParamUse> params, const Shape& sample,
                                  const Shape& remat, DType dtype, int out) {
  LayerConfig l;
  l.name = layer_name(params);
  layer_names_.insert(l.name);
  l.op = op;
  l.where = l.op_where = l.inputs_where = where();
  for (const DataValue& v : inputs) {
    l.inputs.push_back(v.layer);
    l.input_where.push_back(l.where);
  }
  attrs.origin = l.where + ": layer '" + l.name + "'";
  l.attrs = std::move(attrs);
  for (ParamUse& p : params) {
    if (p.initializer.empty()) {  // a constant of the graph (Note [tensor constants])
      const std::string name = l.name + "." + p.suffix;
      if (static_cast<int64_t>(p.values.size()) != shape_numel(p.expect))
        fail("a constant of " + std::to_string(p.values.size()) + " values for " +
             shape_str(p.expect));
      out_->constants.insert(name);
      out_->initial[name] = std::move(p.values);
      continue;
    }
    const auto view = param_views_.find(p.initializer);  // Note [parameter views]
    if (view != param_views_.end()) p.initializer = view->second;
    const onnx::TensorProto& t = *initializers_.at(p.initializer);
    const std::string what = src_.path + ": initializer '" + p.initializer + "'";
    if (param_owner_.count(p.initializer)) {  // read by an earlier layer too: weight tying
      l.shared[p.suffix] = param_owner_.at(p.initializer);
      l.shared_where[p.suffix] = l.where;
      continue;
    }
    const bool relaid = !p.values.empty();  // remat's layout differs (a transposed weight)
    std::vector<float> values = relaid ? std::move(p.values) : floats_from_proto(t, what);
    if (!relaid) {  // the same values in order: dims may differ by 1s ([1, K] for [K])
      const Shape dims(t.dims().begin(), t.dims().end());
      if (without_ones(dims) != without_ones(p.expect))
        fail("initializer '" + p.initializer + "' is " + shape_str(dims) + ", the layer needs " +
             shape_str(p.expect));
      if (dims != p.expect) out_->onnx_dims[p.initializer] = dims;
    }
    if (static_cast<int64_t>(values.size()) != shape_numel(p.expect))
      fail("initializer '" + p.initializer + "' holds " + std::to_string(values.size()) +
           " values, the layer needs " + shape_str(p.expect));
    l.param_names[p.suffix] = p.initializer;
    param_owner_[p.initializer] = p.initializer;
    out_->initial[p.initializer] = std::move(values);
  }
  out_->layers.push_back(std::move(l));
  DataValue v{out_->layers.back().name, sample, remat, dtype};
  for (const DataValue& in : inputs) {
    if (in.fold != inputs[0].fold) fail("inputs folded differently (Note [folded batch])");
    if (in.seq_first != inputs[0].seq_first)
      fail("one input is sequence-first ([T, N, ...]) and another batch-first (Note "
           "[sequence-first values])");
  }
  v.fold = inputs.empty() ? 1 : inputs[0].fold;
  v.seq_first = !inputs.empty() && inputs[0].seq_first;
  set_data(out, std::move(v));
  return data_.at(node_->output(out));
}

std::vector<bool> Translator::live_nodes() {
  std::set<std::string> needed;
  for (const auto& o : g_.output()) needed.insert(o.name());
  std::vector<bool> live(nodes_.size(), false);
  for (size_t k = nodes_.size(); k-- > 0;) {
    const onnx::NodeProto& n = nodes_[k];
    bool any = false;
    for (const auto& o : n.output()) any = any || needed.count(o);
    if (!any) continue;
    live[k] = true;
    for (const auto& i : n.input())
      if (!i.empty()) needed.insert(i);
  }
  live_values_ = std::move(needed);
  return live;
}

}  // namespace onnx_detail
}  // namespace remat
