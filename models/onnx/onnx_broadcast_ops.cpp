// Arithmetic of two values of different shapes: Mul, Div, Add and Sub of data by data or by a
// parameter, and ReduceMean of data over a run of its axes. A scale s that the step computes,
// equal to the data on its first and last axes and 1 between (Note [kept axes] in
// ops/data_format.h: squeeze-and-excitation's [N, C, 1, 1] of MobileNetV3, RegNetY and
// EfficientNet; a norm's [N, T, 1]; adaLN's and FiLM's [N, 1, D] of tokens [N, T, D]) or of its
// own shape (a gate), is one channel_scale layer (x / s through s's reciprocal), and a shift of
// that shape one channel_shift layer (x - s through -s); a learned layer scale w [C, 1, 1] of an
// image (ConvNeXt) one depthwise 1 x 1 conv2d without a bias; a parameter of the data's trailing
// axes (a feature scale, RMSNorm's weight) one learned mul_table, and added or subtracted (also
// one ending in 1s: a bias [C, 1, 1] of an image) one learned add_constant. Each is a single
// product or sum per value, its scale's or shift's gradient a sum over what it broadcasts. A
// mean over the trailing axes (RMSNorm's mean of squares) or over middle axes (CBAM's mean over
// channels) is one row_mean layer; over H and W of an image it stays global_avgpool
// (onnx_layer_ops.cpp).
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <string>
#include <vector>

#include "models/onnx/onnx_translator.h"

namespace remat {
namespace onnx_detail {

namespace {

// x * w (either order), w a parameter: an image [C, H, W] per sample times w [C, 1, 1] (or [1,
// C, 1, 1], a ConvNeXt layer scale) is conv2d with groups C, a 1 x 1 kernel and no bias, its
// weight [C, 1, 1, 1] the initializer's values; otherwise w (its leading 1s dropped) must be
// x's trailing axes (a layer scale over the features, RMSNorm's weight): a learned mul_table.
void layer_scale(Translator& t, int w) {
  const DataValue x = as_sample_shape(t, t.data(1 - w));
  Shape wd = t.initializer_dims(w);
  while (wd.size() > 1 && wd.front() == 1) wd.erase(wd.begin());
  const bool plain = x.remat == x.sample && !x.transposed;
  if (plain && x.sample.size() == 3 && wd == Shape{x.sample[0], 1, 1}) {
    const int64_t c = x.sample[0];
    AttrMap a;
    a.set("filters", c);
    a.set("kernel", int64_t{1});
    a.set("groups", c);
    a.set("bias", false);
    return (void)t.emit("conv2d", {x}, a, {{"weight", t.node().input(w), {c, 1, 1, 1}, {}}},
                        x.sample, x.sample);
  }
  emit_learned_table(t, "mul_table", "weight", w, x, "a product",
                     "an image [N, C, H, W] times a per-channel parameter [C, 1, 1] (a layer "
                     "scale)");
}

// How s broadcasts over x (both per sample, of one rank): s equals x on x's first j and last m
// axes and is 1 between them (Note [kept axes] in ops/data_format.h): squeeze-and-excitation's
// [C, 1, 1] of [C, H, W] and RMSNorm's [T, 1] of [T, D] (m = 0, j >= 1), adaLN's and FiLM's
// [1, D] of tokens [T, D] (j = 0, m = 1), or x's own shape (an elementwise product, a gate).
// `axes` = 1 + j counts the batch; 0 when s is none of these.
struct Kept {
  int64_t axes = 0, keep_last = 0;
};
Kept kept_axes(const DataValue& x, const DataValue& s) {
  // Of two sequence-first values the per-sample axes are [T, ...] as ever (Note
  // [sequence-first values]); one of each order is neither.
  if (x.remat != x.sample || x.transposed || s.transposed || x.seq_first != s.seq_first) return {};
  const Shape& xs = x.sample;
  const Shape& ss = s.sample;
  if (ss.size() != xs.size()) return {};
  const size_t r = xs.size();
  if (ss == xs) return {static_cast<int64_t>(r) + 1, 0};
  size_t j = 0, m = 0;
  while (j < r && ss[j] == xs[j]) ++j;
  while (m < r - j && ss[r - 1 - m] == xs[r - 1 - m]) ++m;
  for (size_t k = j; k < r - m; ++k)
    if (ss[k] != 1) return {};
  if (j == 0 && m == 0) return {};  // a scalar per sample: remat holds no such value
  return {static_cast<int64_t>(j) + 1, static_cast<int64_t>(m)};
}

// Which data input is x, and s its broadcast other (kept_axes), with s's axes; x = -1 where
// neither is. `x_first`: only input 0 may be x (a quotient). Probes the inputs as
// as_sample_shape leaves them, without emitting its reshape.
struct Operands {
  int x = -1;
  Kept kept;
};
Operands operands_of(Translator& t, bool x_first) {
  Operands o;
  for (int k : {0, 1}) {
    if (o.x >= 0 || (x_first && k == 1)) break;
    DataValue probe = t.data(k, kSeqFirst);
    if (shape_numel(probe.remat) == shape_numel(probe.sample)) probe.remat = probe.sample;
    o.kept = kept_axes(probe, t.data(1 - k, kSeqFirst));
    if (o.kept.axes > 0) o.x = k;
  }
  return o;
}

// op (channel_scale, channel_shift) of x and s over s's kept axes, s reshaped to them where
// remat holds it in another shape (a convolution's [C, 1, 1]: remat's scale is [N, C]; adaLN's
// [1, D]: [N, D]).
void emit_rows(Translator& t, const std::string& op, const DataValue& x, DataValue s,
               const Kept& kept) {
  if (x.remat != x.sample)
    t.fail("data of per-sample shape " + shape_str(x.sample) + " that remat holds as " +
           shape_str(x.remat) + " is not supported here");
  Shape row(s.sample.begin(), s.sample.begin() + (kept.axes - 1));
  row.insert(row.end(), s.sample.end() - kept.keep_last, s.sample.end());
  if (s.remat != row) {
    AttrMap a;
    a.set("shape", std::vector<int64_t>(row.begin(), row.end()));
    s = t.emit("reshape", {s}, a, {}, s.sample, row, s.dtype);
  }
  AttrMap a;
  if (kept.axes != 2) a.set("axes", kept.axes);
  if (kept.keep_last != 0) a.set("keep_last", kept.keep_last);
  t.emit(op, {x, s}, a, {}, x.sample, x.sample);
}

[[noreturn]] void fail_shapes(Translator& t, const std::string& supported) {
  t.fail("inputs " + shape_str(t.data(0, kSeqFirst).sample) + " and " +
         shape_str(t.data(1, kSeqFirst).sample) +
         " per sample: " + supported);
}

// x * s or x / s of two data values, one a scale of the other (kept_axes): one channel_scale
// layer; x / s multiplies by s's reciprocal (pow -1, correctly rounded; the product within an
// ulp of PyTorch's quotient).
void data_product(Translator& t, bool divide) {
  const char* supported =
      "only data times a scale equal to it on its first and last axes and 1 between "
      "(squeeze-and-excitation's [N, C, 1, 1], a norm's [N, T, 1], adaLN's [N, 1, D]) or of its "
      "own shape, or a parameter [C, 1, 1] (a layer scale) or of its trailing axes, is supported";
  if (t.is_const(0) || t.is_const(1))
    t.fail(std::string("a product with a constant: ") + supported);
  const Operands o = operands_of(t, divide);
  if (o.x < 0) fail_shapes(t, supported);
  DataValue s = t.data(1 - o.x, kSeqFirst);
  if (divide) s = emit_reciprocal(t, s);
  emit_rows(t, "channel_scale", as_sample_shape(t, t.data(o.x, kSeqFirst)), s, o.kept);
}

void mul(Translator& t) {
  for (int w : {0, 1})
    if (t.is_initializer(w) && !t.is_const(1 - w)) return layer_scale(t, w);
  data_product(t, false);
}

void div(Translator& t) { data_product(t, true); }

// x - w and w - x of data x and a parameter w that add_constant learns (its dims x's trailing
// axes, or ending in 1s that broadcast): -x + w, then negated for x - w (two `affine` layers
// around the sum, each exact).
void learned_difference(Translator& t, int w) {
  const DataValue x = as_sample_shape(t, t.data(1 - w));  // copies: emit grows the values
  const DataValue negated = emit_negation(t, x);
  const DataValue y = emit_learned_table(t, "add_constant", "bias", w, negated, "a difference",
                                         "data of a parameter's shape");
  if (w == 1) emit_negation(t, y);
}

// x + s, x - s, s - x of two data values: of one shape, `add` (s negated first for x - s, x for
// s - x, with `affine`); s a scale-shaped value of x (kept_axes: x's first and last axes, 1s
// between), channel_shift. `other` takes what is neither (Add of equal shapes, a parameter).
TranslateFn sum_or(const std::string& op, const TranslateFn& other) {
  return [op, other](Translator& t) {
    for (int w : {0, 1})
      if (op == "Sub" && t.inputs() == 2 && t.is_initializer(w) && !t.is_const(1 - w))
        return learned_difference(t, w);
    if (t.inputs() != 2 || t.is_const(0) || t.is_const(1)) {
      if (other) return other(t);
      for (int k : {0, 1})
        if (t.has(k) && t.is_const(k) && t.is_module_tensor(k)) fail_module_tensor(t, k);
      t.fail("only " + op + " of data and data or a constant is supported");
    }
    const Operands o = operands_of(t, false);
    const bool same = o.x >= 0 && t.data(0, kSeqFirst).sample == t.data(1, kSeqFirst).sample;
    if (op == "Add" && (o.x < 0 || same) && other) return other(t);
    if (o.x < 0)
      fail_shapes(t, "only data and data of its shape, or equal to it on its first and last axes "
                     "and 1 between (a shift per row, [N, T, 1] of [N, T, D]; adaLN's [N, 1, D]), "
                     "are supported");
    DataValue x = as_sample_shape(t, t.data(o.x, kSeqFirst));
    const DataValue& other = t.data(1 - o.x, kSeqFirst);
    DataValue s = same ? as_sample_shape(t, other) : other;
    if (op == "Sub" && o.x == 0) s = emit_negation(t, s);
    if (op == "Sub" && o.x == 1) x = emit_negation(t, x);
    if (same) return (void)t.emit("add", {x, s}, {}, {}, x.sample, x.remat);
    emit_rows(t, "channel_shift", x, s, o.kept);
  };
}

// ReduceMean over a run of x's axes from axis k to axis e (ONNX's, the batch 0), the image's H
// and W left to `other`: row_mean with axes k and keep_last rank - 1 - e (Note [kept axes]),
// remat's result x's other axes. A run to the last axis starts at k >= 2 (RMSNorm's mean of
// squares), one before it at k >= 1 (CBAM's mean over an image's channels, a mean over tokens).
TranslateFn row_mean_or(const TranslateFn& other) {
  return [other](Translator& t) {
    const DataValue& x = t.data(0, kFolds | kSeqFirst);
    const int64_t rank = onnx_rank(x);
    std::vector<int64_t> axes =
        t.has(1) ? t.konst(1).ints(t.where() + ": axes") : t.attr_ints("axes", {});
    for (int64_t& a : axes) {
      a = normalize_axis(a, rank, t.where());
      if (x.seq_first && a < 2) {  // ONNX's [T, N, ...] (Note [sequence-first values])
        if (a == 1) t.fail("a mean over the batch (axis 1 of sequence-first data)");
        a = 1;
      }
    }
    std::sort(axes.begin(), axes.end());
    axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
    const bool image = rank == 4 && axes == std::vector<int64_t>{2, 3};
    const bool run = !axes.empty() &&
                     axes.back() - axes.front() + 1 == static_cast<int64_t>(axes.size());
    const int64_t k = run ? axes.front() : 0, keep_last = run ? rank - 1 - axes.back() : 0;
    if (image || !run || k < (keep_last == 0 ? 2 : 1)) return other(t);
    const DataValue v = as_sample_shape(t, x);
    if (v.remat != v.sample || v.transposed)
      t.fail("a mean over axes of data remat holds in another layout");
    Shape kept(v.sample.begin(), v.sample.begin() + (k - 1));
    kept.insert(kept.end(), v.sample.end() - keep_last, v.sample.end());
    Shape sample = v.sample;
    for (int64_t a = k; a <= axes.back(); ++a) sample[static_cast<size_t>(a - 1)] = 1;
    if (t.attr_int("keepdims", 1) == 0) sample = kept;
    AttrMap a;
    if (k != 2) a.set("axes", k);
    if (keep_last != 0) a.set("keep_last", keep_last);
    t.emit("row_mean", {v}, a, {}, sample, kept, v.dtype);
    if (x.seq_first && k == 1 && t.attr_int("keepdims", 1) == 0)
      t.mark_seq_first(0, false);  // T averaged away: [N, ...]
  };
}

}  // namespace

void fail_parameter_shape(Translator& t, int w, const DataValue& x, const std::string& what,
                          const std::string& other_form) {
  t.fail(what + " with a parameter " + shape_str(t.initializer_dims(w)) + ": only " + other_form +
         " or a parameter of the data's trailing axes is supported, not " + shape_str(x.sample) +
         " per sample");
}

const DataValue& emit_learned_table(Translator& t, const std::string& op,
                                    const std::string& suffix, int w, const DataValue& x,
                                    const std::string& what, const std::string& other_form) {
  Shape wd = t.initializer_dims(w);
  if (x.seq_first) wd = batch_first_dims(t, wd, onnx_rank(x));
  while (wd.size() > 1 && wd.front() == 1) wd.erase(wd.begin());
  // add_constant's table may end in 1s that broadcast (a bias [C, 1, 1] of an image).
  size_t ones = 0;
  while (op == "add_constant" && ones < wd.size() && wd[wd.size() - 1 - ones] == 1) ++ones;
  const bool trailing = !wd.empty() && wd.size() <= x.sample.size() &&
                        std::equal(wd.begin(), wd.end() - ones, x.sample.end() - wd.size());
  if (!trailing || x.remat != x.sample || x.transposed ||
      t.initializer_dims(w).size() > x.sample.size() + 1)
    fail_parameter_shape(t, w, x, what, other_form);
  AttrMap a;
  a.set("shape", wd);
  a.set("learned", true);
  return t.emit(op, {x}, a, {{suffix, t.node().input(w), wd, {}}}, x.sample, x.remat, x.dtype);
}

std::map<std::string, TranslateFn> with_broadcast_ops(std::map<std::string, TranslateFn> ops) {
  ops["Mul"] = mul;
  ops["Div"] = div;
  ops["ReduceMean"] = row_mean_or(ops.at("ReduceMean"));
  ops["Add"] = sum_or("Add", ops.at("Add"));
  auto sub = ops.find("Sub");
  ops["Sub"] = sum_or("Sub", sub == ops.end() ? TranslateFn() : sub->second);
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
