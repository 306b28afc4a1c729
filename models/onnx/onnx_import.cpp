// onnx_import: the input at the asked size, the walk over the live nodes, the output.
#include "models/onnx/onnx_import.h"

#include "models/onnx/onnx_translator.h"
#include "runtime/core/check.h"

namespace remat {
namespace onnx_detail {

namespace {

std::string dim_str(const onnx::TensorShapeProto::Dimension& d) {
  if (d.has_dim_value()) return std::to_string(d.dim_value());
  return d.has_dim_param() && !d.dim_param().empty() ? "'" + d.dim_param() + "'" : "?";
}

}  // namespace

void Translator::set_input(const OnnxOptions& sizes) {
  std::vector<const onnx::ValueInfoProto*> inputs;
  for (const auto& i : g_.input())
    if (!initializers_.count(i.name())) inputs.push_back(&i);
  if (inputs.size() != 1) {
    std::string names;
    for (const auto* i : inputs) names += (names.empty() ? "" : ", ") + i->name();
    REMAT_USER_ERROR(src_.path << ": the graph has " << inputs.size() << " inputs (" << names
                               << "); remat imports models of one input (the batch)");
  }
  const onnx::ValueInfoProto& in = *inputs[0];
  input_name_ = in.name();
  const std::string what = src_.path + ": input '" + in.name() + "'";
  if (!in.type().has_tensor_type() || !in.type().tensor_type().has_shape())
    REMAT_USER_ERROR(what << ": not a tensor of known rank");
  const auto& tt = in.type().tensor_type();
  const int elem = tt.elem_type();
  const auto& dims = tt.shape().dim();
  const bool ints = elem == onnx::TensorProto::INT64 || elem == onnx::TensorProto::INT32;
  if (ints && dims.size() == 2) {
    out_->tokens = true;
  } else if (elem != onnx::TensorProto::FLOAT || dims.size() < 2 || dims.size() > 4) {
    REMAT_USER_ERROR(what << ": " << onnx::TensorProto::DataType_Name(
                                         static_cast<onnx::TensorProto::DataType>(elem))
                          << " of rank " << dims.size()
                          << "; remat imports float inputs [N, C, H, W], [N, F] or [N, T, F] "
                             "and integer token ids [N, T]");
  }
  if (!out_->tokens && sizes.input && static_cast<int>(sizes.input->size()) != dims.size() - 1)
    REMAT_USER_ERROR(what << ": the input size " << shape_str(*sizes.input) << " has "
                          << sizes.input->size() << " dimension(s); the input has "
                          << dims.size() - 1 << " per sample");
  // Token ids [T, N]: a fixed first axis and an open second (Note [sequence-first values]).
  const auto fixed = [&](int k) { return dims[k].has_dim_value() && dims[k].dim_value() > 0; };
  const bool seq_first = out_->tokens && fixed(0) && !fixed(1);
  const int batch_axis = seq_first ? 1 : 0;
  if (fixed(batch_axis)) out_->static_batch = dims[batch_axis].dim_value();
  Shape sample;
  for (int k = 0; k < dims.size(); ++k) {
    if (k == batch_axis) continue;
    std::optional<int64_t> asked;
    if (out_->tokens && sizes.sequence) asked = *sizes.sequence;
    if (!out_->tokens && sizes.input) asked = (*sizes.input)[static_cast<size_t>(k - 1)];
    if (!asked && dims[k].has_dim_value() && dims[k].dim_value() > 0) asked = dims[k].dim_value();
    if (asked && (*asked < 1 || *asked > (int64_t{1} << 24)))
      REMAT_USER_ERROR(what << ": axis " << k << " of size " << *asked << " (1 to 2^24 are read)");
    if (!asked)
      REMAT_USER_ERROR(what << " has a dynamic axis " << k << " ("
                                 << dim_str(dims[k]) << ") left open: give the "
                                 << (out_->tokens ? "sequence length (--seq T, or `sequence: T` "
                                                    "in the config)"
                                                  : "input size (--input CxHxW, F or TxF, or "
                                                    "`input: [...]` in the config)"));
    sample.push_back(*asked);
  }
  if (sample[0] * (sample.size() > 1 ? sample[1] : 1) * (sample.size() > 2 ? sample[2] : 1) >
      (int64_t{1} << 40))
    REMAT_USER_ERROR(what << ": a sample of " << shape_str(sample) << " is too large");
  if (out_->tokens) out_->sequence = sample[0];
  else out_->input = sample;
  data_[in.name()] = DataValue{kModelInputName, sample, sample,
                               out_->tokens ? DType::I32 : DType::F32};
  data_[in.name()].seq_first = seq_first;
}

void Translator::translate(const onnx::NodeProto& n) {
  node_ = &n;
  if (n.domain() == "remat") {  // a group of the pattern pass (Note [ONNX patterns])
    pattern_ops().at(n.op_type())(*this);
    return;
  }
  if (!n.domain().empty() && n.domain() != "ai.onnx")
    fail("ops of domain '" + n.domain() + "' are not supported (the default ONNX domain is)");
  bool all_const = true;
  for (int k = 0; k < n.input_size(); ++k) all_const = all_const && (!has(k) || is_const(k));
  const auto fold = fold_ops().find(n.op_type());
  if (fold != fold_ops().end() && (all_const || n.op_type() == "Shape")) {
    bool of_module = false;  // a value computed from a module's tensor (not its shape)
    for (int k = 0; k < n.input_size() && n.op_type() != "Shape" && n.op_type() != "Size"; ++k)
      of_module = of_module || is_module_tensor(k);
    fold->second(*this);
    for (int o = 0; o < n.output_size() && of_module; ++o) module_values_.insert(n.output(o));
    if (of_module) note_parameter_view();
    ++out_->folded_nodes;
    return;
  }
  const auto layer = layer_ops().find(n.op_type());
  if (layer != layer_ops().end()) {
    layer->second(*this);
    return;
  }
  if (fold != fold_ops().end())
    fail("folds only over constants, and an input here is computed by the step (a shape that "
         "depends on the data)");
  fail("unsupported op (supported: " + onnx_supported_ops() + ")");
}

void Translator::finish_output() {
  if (g_.output_size() != 1) {
    std::string names;
    for (const auto& o : g_.output()) names += (names.empty() ? "" : ", ") + o.name();
    REMAT_USER_ERROR(src_.path << ": the graph has " << g_.output_size() << " outputs (" << names
                               << "); remat trains models of one output (the logits)");
  }
  const std::string& name = g_.output(0).name();
  auto it = data_.find(name);
  if (it == data_.end())
    REMAT_USER_ERROR(src_.path << ": output '" << name << "' is a constant, not computed from "
                                  "the input");
  const DataValue& v = it->second;
  if (v.layer == kModelInputName || out_->layers.empty())
    REMAT_USER_ERROR(src_.path << ": output '" << name << "' is the input itself: no layer to train");
  if (v.layer != out_->layers.back().name)
    REMAT_FAIL("onnx import: output '" << name << "' is layer '" << v.layer
                                       << "', not the last layer built");
  if (v.fold > 1)
    REMAT_USER_ERROR(src_.path << ": output '" << name << "' holds " << v.fold
                               << " windows per sample folded into the batch; remat's loss "
                                  "reads one row per sample");
  if (v.remat != v.sample)
    REMAT_USER_ERROR(src_.path << ": output '" << name << "' is " << shape_str(v.sample)
                               << " per sample; remat's loss reads [K], [K, H, W] or [T, V]");
  out_->output = v.sample;
}

void Translator::run(const OnnxOptions& sizes) {
  out_->onnx_nodes = g_.node_size();
  for (const std::string& b : sizes.buffers) {  // Note [module buffers]
    auto it = initializers_.find(b);
    if (it == initializers_.end())
      REMAT_USER_ERROR(src_.path << ": buffer '" << b << "' is not an initializer of the file");
    const onnx::TensorProto& t = *it->second;
    out_->buffers[b] = {Shape(t.dims().begin(), t.dims().end()),
                        floats_from_proto(t, src_.path + ": initializer '" + b + "'")};
  }
  buffers_ = sizes.buffers;
  set_input(sizes);
  const std::vector<bool> live = live_nodes();
  for (size_t k = 0; k < nodes_.size(); ++k)
    if (live[k]) translate(nodes_[k]);
    else ++out_->folded_nodes;  // dead: nothing the output needs
  finish_output();
}

}  // namespace onnx_detail

OnnxImport onnx_import(const OnnxSource& src, const OnnxOptions& sizes) {
  OnnxImport out;
  onnx_detail::Translator t(src, &out);
  t.run(sizes);
  return out;
}

std::string onnx_supported_ops() {
  std::string s;
  std::set<std::string> all;
  for (const auto& kv : onnx_detail::layer_ops()) all.insert(kv.first);
  for (const auto& kv : onnx_detail::fold_ops()) all.insert(kv.first + (onnx_detail::layer_ops().count(kv.first) ? "" : "*"));
  for (const auto& n : all) s += (s.empty() ? "" : ", ") + n;
  return s + "; * over constants only; and the transformer patterns of docs/guide/onnx.md";
}

}  // namespace remat
