// The ONNX ops folded at import (Note [ONNX constant folding] in onnx_const.h): each runs when
// every input is a constant, except Shape, whose input is data with a known shape.
#include <onnx/onnx_pb.h>

#include "models/onnx/onnx_translator.h"

namespace remat {
namespace onnx_detail {

namespace {

void constant(Translator& t) {
  const std::string what = t.where();
  if (const auto* a = t.attr("value")) {
    t.set_const(0, const_from_proto(a->t(), what + ": attribute 'value'"));
  } else if (const auto* f = t.attr("value_float")) {
    t.set_const(0, const_floats({f->f()}, {}));
  } else if (const auto* fs = t.attr("value_floats")) {
    t.set_const(0, const_floats({fs->floats().begin(), fs->floats().end()},
                                {static_cast<int64_t>(fs->floats_size())}));
  } else if (const auto* i = t.attr("value_int")) {
    t.set_const(0, const_ints({{0, i->i()}}, {}));
  } else if (const auto* is = t.attr("value_ints")) {
    std::vector<SymInt> v;
    for (int64_t x : is->ints()) v.push_back({0, x});
    t.set_const(0, const_ints(v, {static_cast<int64_t>(v.size())}));
  } else {
    t.fail("a Constant needs value, value_float(s) or value_int(s) (sparse and string values are "
           "not supported)");
  }
}

void shape(Translator& t) {
  const std::vector<SymInt> dims = t.onnx_shape(0);
  const int64_t rank = static_cast<int64_t>(dims.size());
  int64_t start = t.attr_int("start", 0), end = t.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::min(std::max<int64_t>(start, 0), rank);
  end = std::min(std::max<int64_t>(end, start), rank);
  t.set_const(0, const_ints({dims.begin() + start, dims.begin() + end}, {end - start}));
}

void binary(Translator& t) {
  t.set_const(0, fold_binary(t.node().op_type(), t.konst(0), t.konst(1), t.where()));
}

void unary(Translator& t) { t.set_const(0, fold_unary(t.node().op_type(), t.konst(0), t.where())); }

// Axes from the attribute (older opsets) or input 1 (opset 13 on).
std::vector<int64_t> axes_of(Translator& t, int input) {
  if (t.has(input)) return t.konst(input).ints(t.where() + ": axes");
  return t.attr_ints("axes", {});
}

void unsqueeze(Translator& t) { t.set_const(0, fold_unsqueeze(t.konst(0), axes_of(t, 1), t.where())); }
void squeeze(Translator& t) { t.set_const(0, fold_squeeze(t.konst(0), axes_of(t, 1), t.where())); }

void concat(Translator& t) {
  std::vector<const OnnxConst*> in;
  for (int k = 0; k < t.inputs(); ++k) in.push_back(&t.konst(k));
  if (!t.has_attr("axis")) t.fail("attribute 'axis' is required");
  t.set_const(0, fold_concat(in, t.attr_int("axis", 0), t.where()));
}

void gather(Translator& t) {
  t.set_const(0, fold_gather(t.konst(0), t.konst(1), t.attr_int("axis", 0), t.where()));
}

void cast(Translator& t) {
  t.set_const(0, fold_cast(t.konst(0), static_cast<int>(t.attr_int("to", 0)), t.where()));
}

void where(Translator& t) {
  t.set_const(0, fold_where(t.konst(0), t.konst(1), t.konst(2), t.where()));
}

void reshape(Translator& t) {
  t.set_const(0, fold_reshape(t.konst(0), t.konst(1).ints(t.where() + ": shape"), t.where()));
}

void slice(Translator& t) {
  const std::string w = t.where();
  auto ints = [&](int k) {
    return t.has(k) ? t.konst(k).ints(w) : std::vector<int64_t>{};
  };
  const std::vector<int64_t> starts = ints(1), ends = ints(2), axes = ints(3), steps = ints(4);
  if (starts.size() != ends.size() || (!axes.empty() && axes.size() != starts.size()) ||
      (!steps.empty() && steps.size() != starts.size()))
    t.fail("starts, ends, axes and steps must have one length");
  t.set_const(0, fold_slice(t.konst(0), starts, ends, axes, steps, w));
}

void range(Translator& t) { t.set_const(0, fold_range(t.konst(0), t.konst(1), t.konst(2), t.where())); }

void transpose(Translator& t) {
  t.set_const(0, fold_transpose(t.konst(0), t.attr_ints("perm", {}), t.where()));
}

void constant_of_shape(Translator& t) {
  OnnxConst value = const_floats({0.0}, {1});
  if (const auto* a = t.attr("value")) value = const_from_proto(a->t(), t.where() + ": value");
  t.set_const(0, fold_constant_of_shape(t.konst(0), value, t.where()));
}

void expand(Translator& t) {
  const OnnxConst& a = t.konst(0);
  const Shape out = broadcast_shapes(a.shape, t.konst(1).ints(t.where() + ": shape"), t.where());
  std::vector<SymInt> dims;
  for (int64_t d : out) dims.push_back({0, d});
  const OnnxConst zero = a.is_float ? const_floats({0.0}, {1}) : const_ints({{0, 0}}, {1});
  const OnnxConst zeros = fold_constant_of_shape(
      const_ints(dims, {static_cast<int64_t>(dims.size())}), zero, t.where());
  t.set_const(0, fold_binary("Add", a, zeros, t.where()));
}

// Trilu: the upper (or lower) triangle of the last two dimensions from diagonal k, zeros
// elsewhere.
void trilu(Translator& t) {
  OnnxConst a = t.konst(0);
  const int64_t k = t.has(1) ? t.konst(1).ints(t.where() + ": k").at(0) : 0;
  const bool upper = t.attr_int("upper", 1) != 0;
  if (a.shape.size() < 2) t.fail("Trilu needs 2 or more dimensions");
  const int64_t rows = a.shape[a.shape.size() - 2], cols = a.shape.back();
  for (int64_t e = 0; e < a.numel(); ++e) {
    const int64_t i = (e / cols) % rows, j = e % cols;
    if (upper ? j - i >= k : j - i <= k) continue;
    if (a.is_float) a.f[static_cast<size_t>(e)] = 0;
    else a.i[static_cast<size_t>(e)] = SymInt{0, 0};
  }
  t.set_const(0, std::move(a));
}

void scatter_nd(Translator& t) {
  if (t.attr_string("reduction", "none") != "none") t.fail("only reduction 'none' is supported");
  t.set_const(0, fold_scatter_nd(t.konst(0), t.konst(1), t.konst(2), t.where()));
}

void size(Translator& t) { t.set_const(0, const_ints({{0, t.konst(0).numel()}}, {})); }

void identity(Translator& t) { t.set_const(0, t.konst(0)); }

}  // namespace

const std::map<std::string, TranslateFn>& fold_ops() {
  static const std::map<std::string, TranslateFn> ops = [] {
    std::map<std::string, TranslateFn> m = {
        {"Constant", constant}, {"Shape", shape},         {"Unsqueeze", unsqueeze},
        {"Squeeze", squeeze},   {"Concat", concat},       {"Gather", gather},
        {"Cast", cast},         {"Where", where},         {"Reshape", reshape},
        {"Slice", slice},       {"Range", range},         {"Transpose", transpose},
        {"Size", size},         {"ConstantOfShape", constant_of_shape},
        {"Expand", expand},     {"Identity", identity},       {"Trilu", trilu},
        {"ScatterND", scatter_nd}};
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "And",
                           "Or", "Max", "Min", "Mod"})
      m[op] = binary;
    for (const char* op : {"Neg", "Sqrt", "Abs", "Not", "Reciprocal", "Floor", "Ceil", "Exp", "Log"})
      m[op] = unary;
    return m;
  }();
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
