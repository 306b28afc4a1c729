// The ONNX ops over data, each translated into one layer of a remat op whose result is the same
// (or into an alias of a value remat already has). Note [ONNX import] in onnx_import.h.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "models/onnx/onnx_translator.h"

namespace remat {
namespace onnx_detail {

double short_float(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.7g", v);
  return std::strtod(buf, nullptr);
}

Shape weight_dims(Translator& t, int k, const std::string& what) {
  if (!t.is_initializer(k))
    t.fail(what + " (input " + std::to_string(k) + ") must be an initializer: remat trains "
           "weights it owns, and this one is computed");
  return t.initializer_dims(k);
}

namespace {

void relu(Translator& t) {
  const DataValue x = t.data(0, kSeqFirst);
  t.emit("relu", {x}, {}, {}, x.sample, x.remat);
}

// Clip(0, 6) is relu6 and Clip(0) relu; other bounds have no remat op.
void clip(Translator& t) {
  const DataValue x = t.data(0, kSeqFirst);
  const double lo = t.has(1) ? t.konst(1).scalar(t.where() + ": min") : t.attr_float("min", -INFINITY);
  const double hi = t.has(2) ? t.konst(2).scalar(t.where() + ": max") : t.attr_float("max", INFINITY);
  if (lo == 0 && hi == 6) {
    t.emit("relu6", {x}, {}, {}, x.sample, x.remat);
  } else if (lo == 0 && std::isinf(hi) && hi > 0) {
    t.emit("relu", {x}, {}, {}, x.sample, x.remat);
  } else {
    t.fail("Clip(" + std::to_string(lo) + ", " + std::to_string(hi) +
           ") is not supported (Clip(0, 6) and Clip(0) are: relu6 and relu)");
  }
}

void reduce_mean(Translator& t) {
  const DataValue x = image_input(t);
  std::vector<int64_t> axes = t.has(1) ? t.konst(1).ints(t.where() + ": axes") : t.attr_ints("axes", {});
  for (int64_t& a : axes) a = normalize_axis(a, 4, t.where());
  std::sort(axes.begin(), axes.end());
  if (axes != std::vector<int64_t>{2, 3})
    t.fail("only the mean over H and W (axes 2, 3) is supported");
  const bool keep = t.attr_int("keepdims", 1) != 0;
  t.emit("global_avgpool", {x}, {}, {}, keep ? Shape{x.sample[0], 1, 1} : Shape{x.sample[0]},
         {x.sample[0]});
}

void gemm(Translator& t) {
  const DataValue x = t.data(0);
  if (x.remat.size() != 1) t.fail("expects a flat input [N, F], got " + shape_str(x.remat) + " per sample");
  if (t.attr_float("alpha", 1) != 1 || (t.has(2) && t.attr_float("beta", 1) != 1))
    t.fail("alpha and beta other than 1 are not supported");
  if (t.attr_int("transA", 0) != 0) t.fail("transA is not supported (the batch comes first)");
  const Shape b = weight_dims(t, 1, "the weight");
  const bool trans_b = t.attr_int("transB", 0) != 0;
  if (b.size() != 2) t.fail("the weight must be 2-D, got " + shape_str(b));
  const int64_t in = trans_b ? b[1] : b[0], out = trans_b ? b[0] : b[1];
  if (in != x.remat[0]) t.fail("weight " + shape_str(b) + " does not take " + std::to_string(x.remat[0]) + " inputs");
  std::vector<ParamUse> params = {{"weight", t.node().input(1), {out, in}, {}}};
  if (!trans_b) params[0].values = t.transposed_initializer(1);  // remat keeps [out, in]
  if (t.has(2)) {
    const Shape c = weight_dims(t, 2, "the bias");
    if (shape_numel(c) != out) t.fail("the bias " + shape_str(c) + " is not one per output");
    params.push_back({"bias", t.node().input(2), {out}, {}});
  }
  AttrMap a;
  a.set("units", out);
  a.set("bias", t.has(2));
  t.emit("dense", {x}, a, params, {out}, {out});
}

// MatMul of data by a 2-D weight [in, out]: dense without bias over the last dimension; of data
// by data: remat's matmul (matmul_of_data).
void matmul(Translator& t) {
  if (!t.is_const(1)) return matmul_of_data(t);
  const DataValue x = t.data(0, kSeqFirstRows);
  if (x.remat != x.sample || x.sample.empty()) t.fail("expects data [N, ..., F]");
  const Shape b = weight_dims(t, 1, "the weight");
  if (b.size() != 2 || b[0] != x.sample.back())
    t.fail("a weight " + shape_str(b) + " does not take " + std::to_string(x.sample.back()) + " inputs");
  AttrMap a;
  a.set("units", b[1]);
  a.set("bias", false);
  Shape out = x.sample;
  out.back() = b[1];
  t.emit("dense", {x}, a, {{"weight", t.node().input(1), {b[1], b[0]}, t.transposed_initializer(1)}},
         out, out);
}

std::vector<DataValue> data_inputs(Translator& t, unsigned takes = kBatchFirst) {
  std::vector<DataValue> in;
  for (int k = 0; k < t.inputs(); ++k) {
    if (t.is_module_tensor(k)) fail_module_tensor(t, k);
    if (t.is_const(k))
      t.fail("input " + std::to_string(k) + " is a constant; only data from the step is supported here");
    in.push_back(t.data(k, takes));
  }
  return in;
}

void add(Translator& t) {
  std::vector<DataValue> in = data_inputs(t, kSeqFirst);
  // One value as ONNX has it, one as remat holds it with 1s (a signal's [C, 1, L]): both as ONNX.
  const bool mixed = std::any_of(in.begin(), in.end(), [&](const DataValue& v) {
    return v.sample == in[0].sample && v.remat != in[0].remat;
  });
  if (mixed)
    for (DataValue& u : in) u = as_sample_shape(t, u);
  for (const DataValue& v : in)
    if (v.sample != in[0].sample || v.remat != in[0].remat)
      t.fail("inputs " + shape_str(in[0].sample) + " and " + shape_str(v.sample) +
             " per sample: broadcasting is not supported");
  if (in.size() == 1) return t.alias(0, in[0]);
  t.emit("add", in, {}, {}, in[0].sample, in[0].remat);
}

// Whether remat holds v, a signal [C, L], as the image [C, 1, L] (Note [signals]).
bool signal_view(const DataValue& v) {
  return v.sample.size() == 2 && v.remat == Shape{v.sample[0], 1, v.sample[1]};
}

// Concat along an axis after the channels (torch.cat(dim=2), dim=-1): each input as ONNX has
// it, joined by concat with that axis.
void concat_along(Translator& t, std::vector<DataValue> in, int64_t axis) {
  for (DataValue& v : in) v = as_sample_shape(t, v);
  const size_t k = static_cast<size_t>(axis - 1);  // in the per-sample shape
  Shape out = in[0].sample;
  out[k] = 0;
  for (const DataValue& v : in) {
    bool same = v.sample.size() == out.size();
    for (size_t d = 0; same && d < out.size(); ++d) same = d == k || v.sample[d] == out[d];
    if (!same)
      t.fail("inputs " + shape_str(in[0].sample) + " and " + shape_str(v.sample) +
             " per sample differ beyond axis " + std::to_string(axis));
    out[k] += v.sample[k];
  }
  if (in.size() == 1) return t.alias(0, in[0]);
  AttrMap a;
  a.set("axis", axis);
  t.emit("concat", in, a, {}, out, out);
}

void concat(Translator& t) {
  std::vector<DataValue> in = data_inputs(t);
  const int64_t axis = normalize_axis(t.attr_int("axis", 1),
                                      static_cast<int64_t>(in[0].sample.size()) + 1, t.where());
  if (axis != 1) return concat_along(t, in, axis);
  // Signals that remat holds as [C, 1, L] join along C as they are; otherwise each as ONNX has it.
  const bool views = std::all_of(in.begin(), in.end(), signal_view);
  if (!views)
    for (DataValue& v : in) v = as_sample_shape(t, v);
  Shape out = in[0].sample, held = in[0].remat;
  out[0] = held[0] = 0;
  for (const DataValue& v : in) {
    if (v.remat != v.sample && !views) t.fail("an input that remat holds as " + shape_str(v.remat));
    if (v.sample.size() != in[0].sample.size() ||
        !std::equal(v.sample.begin() + 1, v.sample.end(), in[0].sample.begin() + 1))
      t.fail("inputs " + shape_str(in[0].sample) + " and " + shape_str(v.sample) +
             " per sample differ beyond axis 1");
    out[0] += v.sample[0];
    held[0] += v.sample[0];
  }
  if (in.size() == 1) return t.alias(0, in[0]);
  t.emit("concat", in, {}, {}, out, held);
}

void dropout(Translator& t) {
  const DataValue x = t.data(0, kFolds | kSeqFirst);
  const double rate = t.has(1) ? t.konst(1).scalar(t.where() + ": ratio") : t.attr_float("ratio", 0.5);
  t.require_unused_outputs(1);
  if (rate <= 0) return t.alias(0, x);
  AttrMap a;
  a.set("rate", short_float(rate));
  t.emit("dropout", {x}, a, {}, x.sample, x.remat);
}

void identity(Translator& t) { t.alias(0, t.data(0, kFolds | kSeqFirst)); }

// Gather(W, ids) of token ids from a table W [V, C]: an embedding.
void gather(Translator& t) {
  if (!t.is_initializer(0) || t.is_const(1))
    t.fail("only an embedding (a table initializer indexed by the token ids) gathers data");
  const DataValue ids = t.data(1, kSeqFirst);  // [T, N] ids: [T, N, C] rows
  if (ids.dtype != DType::I32 || ids.layer != kModelInputName)
    t.fail("only the model's token ids index an embedding");
  if (t.attr_int("axis", 0) != 0) t.fail("an embedding gathers rows (axis 0)");
  const Shape w = t.initializer_dims(0);
  if (w.size() != 2) t.fail("the table " + shape_str(w) + " is not [vocab, C]");
  AttrMap a;
  a.set("vocab", w[0]);
  a.set("dim", w[1]);
  Shape out = ids.sample;
  out.push_back(w[1]);
  t.emit("embedding", {ids}, a, {{"weight", t.node().input(0), w, {}}}, out, out);
}

void softmax(Translator& t) {
  const DataValue x = t.data(0, kFolds | kSeqFirstRows);
  const int64_t rank = onnx_rank(x);
  if (normalize_axis(t.attr_int("axis", -1), rank, t.where()) != rank - 1 || x.remat != x.sample)
    t.fail("only the softmax over the last axis is supported");
  t.emit("softmax", {x}, {}, {}, x.sample, x.remat);
}

// Note [log-softmax output]
// Classifiers written for F.nll_loss end in F.log_softmax(x, dim=1) (PyTorch's MNIST example),
// and their export's output is LogSoftmax(x). remat's loss is the softmax cross-entropy of the
// model's output, and log_softmax(log_softmax(x)) = log_softmax(x): the cross-entropy of x is
// nll_loss of log_softmax(x), the same loss and gradients, the same predictions (argmax). So a
// LogSoftmax over the loss's class axis that is the graph's output is an alias of its input
// (remat's output is then x, the logits); anywhere else it is an error naming the node.
void log_softmax(Translator& t) {
  const DataValue x = t.data(0);
  const int64_t rank = onnx_rank(x);
  const int64_t axis = normalize_axis(t.attr_int("axis", -1), rank, t.where());
  if (!t.is_graph_output(0))
    t.fail("a LogSoftmax is supported only as the model's output (read by the loss: Note "
           "[log-softmax output])");
  const int64_t classes = rank == 2 || rank == 4 ? 1 : rank == 3 && t.tokens_input() ? 2 : -1;
  if (axis != classes)
    t.fail("a LogSoftmax over axis " + std::to_string(axis) + " of the output " +
           shape_str(x.sample) + " per sample: only over the classes the loss reads (axis 1 of "
           "[N, K] and [N, K, H, W], axis 2 of [N, T, V]) is supported");
  t.alias(0, x);
}

}  // namespace

const std::map<std::string, TranslateFn>& layer_ops() {
  static const std::map<std::string, TranslateFn> ops = [] {
    std::map<std::string, TranslateFn> m = {
        {"Relu", relu},
        {"Clip", clip},
        {"ReduceMean", reduce_mean},
        {"Gemm", gemm},
        {"MatMul", matmul},
        {"Add", add},
        {"Sum", add},
        {"Concat", concat},
        {"Dropout", dropout},
        {"Identity", identity},
        {"Gather", gather},
        {"Softmax", softmax},
        {"LogSoftmax", log_softmax},
    };
    // Each wraps what the ones before it left: a later one's translator runs first and hands
    // the forms it does not take on (scalar constants, then tensor constants, then data).
    for (auto with : {with_shape_ops, with_activation_ops, with_broadcast_ops, with_conv_transpose,
                      with_token_ops, with_constant_ops, with_scalar_ops, with_einsum,
                      with_norm_ops, with_depth_ops, with_window_ops, with_resize_ops})
      m = with(std::move(m));
    return m;
  }();
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
