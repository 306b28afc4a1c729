// Arithmetic of two values of different shapes: Mul, Div, Add and Sub of data by data or by a
// parameter, and ReduceMean of data over its trailing axes. A scale s that the step computes,
// of the data's leading axes followed by 1s (squeeze-and-excitation's [N, C, 1, 1] of
// MobileNetV3, RegNetY, EfficientNet; a norm's [N, T, 1]) or of its own shape (a gate), is one
// channel_scale layer (x / s through s's reciprocal), and a shift of that shape one
// channel_shift layer (x - s through -s); a learned layer scale w [C, 1, 1] of an image
// (ConvNeXt) one depthwise 1 x 1 conv2d without a bias; a parameter of the data's trailing axes
// (a feature scale, RMSNorm's weight) one learned mul_table. Each is a single product or sum per
// value, its scale's or shift's gradient a sum over what it broadcasts. A mean over the
// trailing axes (RMSNorm's mean of squares) is one row_mean layer; over H and W of an image it
// stays global_avgpool (onnx_layer_ops.cpp).
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

// channel_scale's `axes` for x * s: s (per sample) is x's first j axes followed by 1s (j >= 1:
// squeeze-and-excitation's [C, 1, 1] of [C, H, W], RMSNorm's [T, 1] of [T, D]), or x's own
// shape (an elementwise product, a gate); 1 + j counts the batch. 0 when s is neither.
int64_t scale_axes(const DataValue& x, const DataValue& s) {
  if (x.remat != x.sample || x.transposed || s.transposed) return 0;
  if (s.sample.size() != x.sample.size()) return 0;
  if (s.sample == x.sample) return static_cast<int64_t>(x.sample.size()) + 1;
  size_t j = s.sample.size();
  while (j > 0 && s.sample[j - 1] == 1) --j;
  if (j == 0 || !std::equal(s.sample.begin(), s.sample.begin() + j, x.sample.begin())) return 0;
  return static_cast<int64_t>(j) + 1;
}

// Which data input is x, and s its scale-shaped other (scale_axes), with s's axes; x = -1 where
// neither is. `x_first`: only input 0 may be x (a quotient). Probes the inputs as
// as_sample_shape leaves them, without emitting its reshape.
struct Operands {
  int x = -1;
  int64_t axes = 0;
};
Operands operands_of(Translator& t, bool x_first) {
  Operands o;
  for (int k : {0, 1}) {
    if (o.x >= 0 || (x_first && k == 1)) break;
    DataValue probe = t.data(k);
    if (shape_numel(probe.remat) == shape_numel(probe.sample)) probe.remat = probe.sample;
    o.axes = scale_axes(probe, t.data(1 - k));
    if (o.axes > 0) o.x = k;
  }
  return o;
}

// op (channel_scale, channel_shift) of x and s over s's `axes`, s reshaped to its first axes
// where remat holds it in another shape (a convolution's [C, 1, 1]: remat's scale is [N, C]).
void emit_rows(Translator& t, const std::string& op, const DataValue& x, DataValue s,
               int64_t axes) {
  if (x.remat != x.sample)
    t.fail("data of per-sample shape " + shape_str(x.sample) + " that remat holds as " +
           shape_str(x.remat) + " is not supported here");
  const Shape row(s.sample.begin(), s.sample.begin() + (axes - 1));
  if (s.remat != row) {
    AttrMap a;
    a.set("shape", std::vector<int64_t>(row.begin(), row.end()));
    s = t.emit("reshape", {s}, a, {}, s.sample, row, s.dtype);
  }
  AttrMap a;
  if (axes != 2) a.set("axes", axes);
  t.emit(op, {x, s}, a, {}, x.sample, x.sample);
}

[[noreturn]] void fail_shapes(Translator& t, const std::string& supported) {
  t.fail("inputs " + shape_str(t.data(0).sample) + " and " + shape_str(t.data(1).sample) +
         " per sample: " + supported);
}

// x * s or x / s of two data values, one a scale of the other (scale_axes): one channel_scale
// layer; x / s multiplies by s's reciprocal (pow -1, correctly rounded; the product within an
// ulp of PyTorch's quotient).
void data_product(Translator& t, bool divide) {
  const char* supported =
      "only data times a scale of its leading axes followed by 1s (squeeze-and-excitation's "
      "[N, C, 1, 1], a norm's [N, T, 1]) or of its own shape, or a parameter [C, 1, 1] (a layer "
      "scale) or of its trailing axes, is supported";
  if (t.is_const(0) || t.is_const(1))
    t.fail(std::string("a product with a constant: ") + supported);
  const Operands o = operands_of(t, divide);
  if (o.x < 0) fail_shapes(t, supported);
  DataValue s = t.data(1 - o.x);
  if (divide) s = emit_reciprocal(t, s);
  emit_rows(t, "channel_scale", as_sample_shape(t, t.data(o.x)), s, o.axes);
}

void mul(Translator& t) {
  for (int w : {0, 1})
    if (t.is_initializer(w) && !t.is_const(1 - w)) return layer_scale(t, w);
  data_product(t, false);
}

void div(Translator& t) { data_product(t, true); }

// x + s, x - s, s - x of two data values: of one shape, `add` (s negated first for x - s, x for
// s - x, with `affine`); s a scale-shaped value of x (scale_axes: x's leading axes followed by
// 1s), channel_shift. `other` takes what is neither (Add of equal shapes, a parameter).
TranslateFn sum_or(const std::string& op, const TranslateFn& other) {
  return [op, other](Translator& t) {
    if (t.inputs() != 2 || t.is_const(0) || t.is_const(1)) {
      if (other) return other(t);
      for (int k : {0, 1})
        if (t.has(k) && t.is_const(k) && t.is_module_tensor(k)) fail_module_tensor(t, k);
      t.fail("only " + op + " of data and data or a constant is supported");
    }
    const Operands o = operands_of(t, false);
    const bool same = o.x >= 0 && t.data(0).sample == t.data(1).sample;
    if (op == "Add" && (o.x < 0 || same) && other) return other(t);
    if (o.x < 0)
      fail_shapes(t, "only data and data of its shape, or of its leading axes followed by 1s (a "
                     "shift per row, [N, T, 1] of [N, T, D]), are supported");
    DataValue x = as_sample_shape(t, t.data(o.x));
    DataValue s = same ? as_sample_shape(t, t.data(1 - o.x)) : t.data(1 - o.x);
    if (op == "Sub" && o.x == 0) s = emit_negation(t, s);
    if (op == "Sub" && o.x == 1) x = emit_negation(t, x);
    if (same) return (void)t.emit("add", {x, s}, {}, {}, x.sample, x.remat);
    emit_rows(t, "channel_shift", x, s, o.axes);
  };
}

// ReduceMean over x's trailing axes from axis k >= 2 (ONNX's, the batch 0) to its last, the
// image's H and W left to `other`: row_mean with axes k, remat's result x's first k axes.
TranslateFn row_mean_or(const TranslateFn& other) {
  return [other](Translator& t) {
    const DataValue& x = t.data(0, true);
    const int64_t rank = onnx_rank(x);
    std::vector<int64_t> axes =
        t.has(1) ? t.konst(1).ints(t.where() + ": axes") : t.attr_ints("axes", {});
    for (int64_t& a : axes) a = normalize_axis(a, rank, t.where());
    std::sort(axes.begin(), axes.end());
    axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
    const bool image = rank == 4 && axes == std::vector<int64_t>{2, 3};
    bool trailing = !axes.empty() && axes.front() >= 2 && axes.back() == rank - 1 &&
                    axes.back() - axes.front() + 1 == static_cast<int64_t>(axes.size());
    if (image || !trailing) return other(t);
    const DataValue v = as_sample_shape(t, x);
    if (v.remat != v.sample || v.transposed)
      t.fail("a mean over the trailing axes of data remat holds in another layout");
    const int64_t k = axes.front();
    const Shape kept(v.sample.begin(), v.sample.begin() + (k - 1));
    Shape sample = kept;
    if (t.attr_int("keepdims", 1) != 0) sample.resize(v.sample.size(), 1);
    AttrMap a;
    if (k != 2) a.set("axes", k);
    t.emit("row_mean", {v}, a, {}, sample, kept, v.dtype);
  };
}

}  // namespace

void fail_parameter_shape(Translator& t, int w, const DataValue& x, const std::string& what,
                          const std::string& other_form) {
  t.fail(what + " with a parameter " + shape_str(t.initializer_dims(w)) + ": only " + other_form +
         " or a parameter of the data's trailing axes is supported, not " + shape_str(x.sample) +
         " per sample");
}

void emit_learned_table(Translator& t, const std::string& op, const std::string& suffix, int w,
                        const DataValue& x, const std::string& what,
                        const std::string& other_form) {
  Shape wd = t.initializer_dims(w);
  while (wd.size() > 1 && wd.front() == 1) wd.erase(wd.begin());
  const bool trailing = !wd.empty() && wd.size() <= x.sample.size() &&
                        std::equal(wd.begin(), wd.end(), x.sample.end() - wd.size());
  if (!trailing || x.remat != x.sample || x.transposed ||
      t.initializer_dims(w).size() > x.sample.size() + 1)
    fail_parameter_shape(t, w, x, what, other_form);
  AttrMap a;
  a.set("shape", wd);
  a.set("learned", true);
  t.emit(op, {x}, a, {{suffix, t.node().input(w), wd, {}}}, x.sample, x.remat, x.dtype);
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
