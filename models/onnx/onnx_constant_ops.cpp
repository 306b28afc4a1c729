// Arithmetic of data and a tensor constant: Add, Sub, Mul and Div of a constant that broadcasts
// over the data (numpy's rules, the batch axis excluded), either side, and Where of data with a
// constant mask and a constant fill, each an add_constant or mul_table layer (Note [tensor
// constants]). Scalars went to the affine layers before (onnx_scalar_ops.cpp); data with data
// and a module's own tensors go on to the op's other translator.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "models/onnx/onnx_translator.h"

namespace remat {
namespace onnx_detail {

// Note [tensor constants]
// A tensor the exporter computed (a Constant node, a value folded at import, an "onnx::"
// initializer) that meets data in an Add, Sub, Mul, Div or Where becomes the table of an
// add_constant layer (y = x + table) or a mul_table layer (y = x table), the table broadcast
// over the leading axes. So a sinusoidal position encoding, a per-channel shift or scale of the
// input and an attention mask (Where(mask, scores, -inf): the table is 0 where the mask keeps a
// score and -inf where it hides one, and x + -inf = -inf for every finite x) import without a
// new kernel. x - c adds -c (exact); c - x negates x first; x / c multiplies by 1 / c (within an
// ulp of PyTorch's quotient, exact for powers of two); c / x takes x's reciprocal first (pow -1,
// FP32's correctly rounded 1 / x). Where with any other fill f is y = x m + f (1 - m), m the 0/1
// mask: exact for finite x (a hidden inf or NaN gives NaN, not f). The table spans the data's
// trailing axes from the constant's first dimension that is not 1; its 1s among them are
// expanded at import (a [C, 1, 1] shift of [C, H, W] data is a [C, H, W] table: memory for
// exactness of layout). It is a buffer of the model: in the plan's constant, saved in
// checkpoints, never trained, and left out by `export`, since PyTorch's state_dict does not
// hold it. A module's own tensor (an initializer under its state_dict name) may be a parameter
// that trains, which a constant table would silently freeze: it goes on to the other
// translators (a learned scale, onnx_broadcast_ops.cpp) or is an error naming the node, as
// for scalars. Before a softmax, a fill at or below -1e4 gives the same zeros as -inf
// (masked_softmax in onnx_pattern_ops.cpp).

namespace {

// The largest table a constant expands to (1 GiB of floats): a fuzzed graph can make a sample of
// 2^40 values, and a [C, 1, 1] constant of it would be allocated at import.
constexpr int64_t kMaxTable = int64_t{1} << 28;

// Input k is a tensor the exporter computed, not a module's parameter or a value folded from one.
bool is_graph_constant(Translator& t, int k) {
  return t.is_const(k) && !t.is_module_tensor(k);
}

// Data a table can be added to: remat's value in ONNX's layout, the batch not folded;
// sequence-first where `takes` says (batch_first_dims then turns the table).
DataValue table_data(Translator& t, int k, unsigned takes = kBatchFirst) {
  const DataValue& x = t.data(k, takes);
  if (x.remat != x.sample || x.transposed || x.sample.empty())
    t.fail("a constant added to data of per-sample shape " + shape_str(x.sample) +
           " that remat holds in another layout is not supported");
  return x;
}

// The trailing axes of x (per sample) that a constant of ONNX shape `cs` spans, or an error
// when it does not broadcast to x within x's shape.
Shape table_shape(Translator& t, const DataValue& x, const Shape& cs) {
  const Shape& s = x.sample;
  const std::string what = "a constant of shape " + shape_str(cs) + " with data [N, " +
                           shape_str(s).substr(1);
  if (cs.size() > s.size() + 1) t.fail(what + " broadcasts to a higher rank");
  if (cs.size() == s.size() + 1 && cs[0] != 1) t.fail(what + " varies along the batch axis");
  size_t lead = 0;
  while (lead + 1 < cs.size() && cs[lead] == 1) ++lead;
  const size_t k = std::max<size_t>(cs.size() - lead, 1);
  const Shape shape(s.end() - static_cast<std::ptrdiff_t>(std::min(k, s.size())), s.end());
  for (size_t d = 0; d < cs.size() - lead && d < shape.size(); ++d) {
    const int64_t c = cs[lead + d];
    if (c != 1 && c != shape[shape.size() - (cs.size() - lead) + d])
      t.fail(what + " does not broadcast to the data");
  }
  int64_t values = 1;  // its 1s expand: a table as large as a sample, at most (no overflow)
  for (int64_t d : shape) {
    if (d > 0 && values > kMaxTable / d)
      t.fail(what + " expands to a table of more than " + std::to_string(kMaxTable) +
             " values (" + shape_str(shape) + ")");
    values *= d;
  }
  return shape;
}

// `v` (of ONNX shape cs, right-aligned to `shape`) expanded over its 1s to `shape`.
std::vector<float> expand(const std::vector<double>& v, const Shape& cs, const Shape& shape) {
  const size_t r = shape.size();
  Shape src(r, 1);  // cs right-aligned, leading 1s dropped
  for (size_t d = 0; d < r && d < cs.size(); ++d) src[r - 1 - d] = cs[cs.size() - 1 - d];
  std::vector<int64_t> stride(r, 0);
  for (int64_t d = static_cast<int64_t>(r) - 1, s = 1; d >= 0; --d) {
    stride[static_cast<size_t>(d)] = src[static_cast<size_t>(d)] == 1 ? 0 : s;
    s *= src[static_cast<size_t>(d)];
  }
  std::vector<float> out(static_cast<size_t>(shape_numel(shape)));
  for (size_t e = 0; e < out.size(); ++e) {
    int64_t rest = static_cast<int64_t>(e), at = 0;
    for (int64_t d = static_cast<int64_t>(r) - 1; d >= 0; --d) {
      const int64_t n = shape[static_cast<size_t>(d)];
      at += (rest % n) * stride[static_cast<size_t>(d)];
      rest /= n;
    }
    out[e] = static_cast<float>(v[static_cast<size_t>(at)]);
  }
  return out;
}

std::vector<double> values_of(Translator& t, const OnnxConst& c) {
  if (c.is_float) return c.f;
  std::vector<double> v;
  for (int64_t i : c.ints(t.where() + ": the constant")) v.push_back(static_cast<double>(i));
  return v;
}

const DataValue& emit_table(Translator& t, const std::string& op, const DataValue& x,
                            const Shape& shape, std::vector<float> table) {
  AttrMap a;
  a.set("shape", shape);
  return t.emit(op, {x}, a, {{"table", "", shape, std::move(table)}}, x.sample, x.remat, x.dtype);
}

// x op c for data input x and constant input c, `op` Add, Sub, Mul or Div: an add_constant or
// mul_table layer. c - x negates x first (affine), c / x takes its reciprocal (pow -1), and
// x / c multiplies by 1 / c (1 / c rounded to FP32, then one FP32 product: within an ulp of
// PyTorch's quotient, exact for powers of two).
void table_op(Translator& t, const std::string& op, int x_k, int c_k) {
  DataValue x = table_data(t, x_k, kSeqFirst);
  const OnnxConst& c = t.konst(c_k);
  if (!c.is_float) t.fail("an integer constant with float data");
  const Shape cs = x.seq_first ? batch_first_dims(t, c.shape, onnx_rank(x)) : c.shape;
  const Shape shape = table_shape(t, x, cs);
  std::vector<double> v = c.f;
  const bool additive = op == "Add" || op == "Sub";
  if (op == "Sub" && x_k == 1) x = emit_negation(t, x);  // c - x
  if (op == "Sub" && x_k == 0)
    for (double& e : v) e = -e;
  if (op == "Div" && x_k == 1) x = emit_reciprocal(t, x);  // c / x
  if (op == "Div" && x_k == 0)
    for (double& e : v) {
      if (e == 0) t.fail("a division by zero (the constant holds a 0)");
      e = 1.0 / e;
    }
  emit_table(t, additive ? "add_constant" : "mul_table", x, shape, expand(v, cs, shape));
}

// The data input and the constant of a two-input node: 1 for a constant the export computed,
// -1 for a module's tensor (which only a pattern's translator takes: a ViT's position table),
// 0 for neither.
int data_and_constant(Translator& t, int* x, int* c) {
  if (t.inputs() != 2) return 0;
  for (int k : {0, 1})
    if (t.is_const(k) && !t.is_const(1 - k)) {
      *c = k;
      *x = 1 - k;
      return is_graph_constant(t, k) ? 1 : -1;
    }
  return 0;
}

TranslateFn constant_or(const std::string& op, const TranslateFn& other) {
  return [op, other](Translator& t) {
    int x = 0, c = 0;
    const int form = data_and_constant(t, &x, &c);
    if (form == 1) return table_op(t, op, x, c);
    if (other) return other(t);
    if (form == -1) fail_module_tensor(t, c);
    t.fail("only " + op + " of data and a constant is supported");
  };
}

// Where(mask, a, b): one of a, b data, the other a constant fill, the mask a constant. A fill of
// -inf is added (Note [tensor constants]); any other fill f makes y = x m + f (1 - m), m 1 where
// x is kept: a mul_table of the 0/1 mask, then an add_constant of the fill where x is hidden
// (left out when every fill is 0). Exact for finite x; a hidden inf or NaN becomes NaN, not f.
void where(Translator& t) {
  if (!t.is_const(0)) t.fail("only a constant mask is supported");
  if (t.is_const(1) == t.is_const(2)) t.fail("only Where of data and a constant is supported");
  const int x_k = t.is_const(1) ? 2 : 1, fill_k = 3 - x_k;
  if (t.is_module_tensor(fill_k)) fail_module_tensor(t, fill_k);
  const OnnxConst& fill = t.konst(fill_k);
  const std::vector<double> f = values_of(t, fill);
  const double inf = std::numeric_limits<double>::infinity();
  const bool keep_where_true = x_k == 1;
  const DataValue x = table_data(t, x_k);
  if (std::all_of(f.begin(), f.end(), [&](double v) { return v == -inf; }))
    return (void)emit_additive_mask(t, x, t.konst(0), fill.shape, keep_where_true, -inf);
  const OnnxConst& mask = t.konst(0);
  Shape shape = table_shape(t, x, mask.shape);
  const Shape fill_shape = table_shape(t, x, fill.shape);
  if (fill_shape.size() > shape.size()) shape = fill_shape;  // both trail x: the longer spans both
  std::vector<double> m = values_of(t, mask);
  for (double& v : m) v = (v != 0) == keep_where_true ? 1.0 : 0.0;
  const std::vector<float> keep = expand(m, mask.shape, shape);
  const std::vector<float> fills = expand(f, fill.shape, shape);
  std::vector<float> hidden(keep.size(), 0.0f);
  for (size_t e = 0; e < keep.size(); ++e)
    if (keep[e] == 0.0f) hidden[e] = fills[e];
  const DataValue kept = emit_table(t, "mul_table", x, shape, keep);  // a copy: emit grows
  if (std::any_of(hidden.begin(), hidden.end(), [](float v) { return v != 0.0f; }))
    emit_table(t, "add_constant", kept, shape, std::move(hidden));
}

}  // namespace

Shape batch_first_dims(Translator& t, const Shape& cs, int64_t rank) {
  const int64_t r = static_cast<int64_t>(cs.size());
  if (r < rank - 1 || r > rank) return cs;
  Shape dims(static_cast<size_t>(rank - r), 1);
  dims.insert(dims.end(), cs.begin(), cs.end());
  if (dims[1] != 1)
    t.fail("a tensor of shape " + shape_str(cs) + " varies along the batch axis (axis 1 of "
           "sequence-first data)");
  dims.erase(dims.begin() + 1);
  dims.insert(dims.begin(), 1);
  return dims;
}

void fail_module_tensor(Translator& t, int k) {
  t.fail("a tensor of the module ('" + t.node().input(k) + "', " + shape_str(t.konst(k).shape) +
         ") with data: only a constant the export computed is supported here (a parameter "
         "would be frozen)");
}

const DataValue& emit_additive_mask(Translator& t, const DataValue& x, const OnnxConst& mask,
                                    const Shape& fill_shape, bool keep_where_true, double fill) {
  const Shape shape = table_shape(t, x, mask.shape);
  table_shape(t, x, fill_shape);  // the fill may not widen the result either
  std::vector<double> m = values_of(t, mask);
  for (double& v : m) v = (v != 0) == keep_where_true ? 0.0 : fill;
  return emit_table(t, "add_constant", x, shape, expand(m, mask.shape, shape));
}

std::map<std::string, TranslateFn> with_constant_ops(std::map<std::string, TranslateFn> ops) {
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    auto it = ops.find(op);
    ops[op] = constant_or(op, it == ops.end() ? TranslateFn() : it->second);
  }
  ops["Where"] = where;
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
