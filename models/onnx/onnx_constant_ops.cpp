// Arithmetic of data and a tensor constant: Add and Sub of a constant that broadcasts over the
// data (numpy's rules, the batch axis excluded), and Where of data with a constant mask and
// -inf (an additive attention mask), each an add_constant layer (Note [tensor constants]).
// Scalars went to the affine layers before (onnx_scalar_ops.cpp); data with data goes on to the
// op's other translator.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "models/onnx/onnx_translator.h"

namespace remat {
namespace onnx_detail {

// Note [tensor constants]
// A tensor the exporter computed (a Constant node, a value folded at import, an "onnx::"
// initializer) that meets data in an Add, a Sub or a Where becomes the table of an add_constant
// layer: y = x + table, the table broadcast over the leading axes. So a sinusoidal position
// encoding, a per-channel shift of the input and an attention mask (Where(mask, scores, -inf):
// the table is 0 where the mask keeps a score and -inf where it hides one, and x + -inf = -inf
// for every finite x) import without a new kernel. The table spans the data's trailing axes
// from the constant's first dimension that is not 1; its 1s among them are expanded at import
// (a [C, 1, 1] shift of [C, H, W] data is a [C, H, W] table: memory for exactness of layout).
// It is a buffer of the model: in the plan's constant, saved in checkpoints, never trained,
// and left out by `export`, since PyTorch's state_dict does not hold it. A module's own tensor
// (an initializer under its state_dict name) may be a parameter that trains, which a constant
// table would silently freeze: an error naming the node, as for scalars. Where with a finite
// fill is x's value replaced, not shifted, and stays an error; before a softmax, a fill at or
// below -1e4 gives the same zeros as -inf (masked_softmax in onnx_pattern_ops.cpp).

namespace {

// The largest table a constant expands to (1 GiB of floats): a fuzzed graph can make a sample of
// 2^40 values, and a [C, 1, 1] constant of it would be allocated at import.
constexpr int64_t kMaxTable = int64_t{1} << 28;

// Input k is a tensor the exporter computed, not a module's parameter or a value folded from one.
bool is_graph_constant(Translator& t, int k) {
  return t.is_const(k) && !t.is_module_tensor(k);
}

// Data a table can be added to: remat's value in ONNX's layout, the batch not folded.
DataValue table_data(Translator& t, int k) {
  const DataValue& x = t.data(k);
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

const DataValue& emit_table(Translator& t, const DataValue& x, const Shape& shape,
                            std::vector<float> table) {
  AttrMap a;
  a.set("shape", shape);
  return t.emit("add_constant", {x}, a, {{"table", "", shape, std::move(table)}}, x.sample, x.remat,
                x.dtype);
}

// x + sign c for data input x and constant input c; Sub(c, x) is -x + c.
void add_table(Translator& t, int x_k, int c_k, double sign) {
  DataValue x = table_data(t, x_k);
  const OnnxConst& c = t.konst(c_k);
  if (!c.is_float) t.fail("an integer constant with float data");
  const Shape shape = table_shape(t, x, c.shape);
  std::vector<float> table = expand(c.f, c.shape, shape);
  if (sign < 0 && x_k == 1) {  // c - x
    AttrMap a;
    a.set("scale", -1.0);
    a.set("shift", 0.0);
    x = t.emit("affine", {x}, a, {}, x.sample, x.remat, x.dtype);
  } else if (sign < 0) {
    for (float& v : table) v = -v;
  }
  emit_table(t, x, shape, std::move(table));
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
    if (form == 1) return add_table(t, x, c, op == "Sub" ? -1.0 : 1.0);
    if (other) return other(t);
    if (form == -1) fail_module_tensor(t, c);
    t.fail("only " + op + " of data and a constant is supported");
  };
}

// Where(mask, a, b): one of a, b data, the other -inf, the mask a constant.
void where(Translator& t) {
  if (!t.is_const(0)) t.fail("only a constant mask is supported");
  if (t.is_const(1) == t.is_const(2)) t.fail("only Where of data and -inf is supported");
  const int x_k = t.is_const(1) ? 2 : 1, fill_k = 3 - x_k;
  const OnnxConst& fill = t.konst(fill_k);
  for (double f : values_of(t, fill))
    if (!(f == -std::numeric_limits<double>::infinity()))
      t.fail("only a mask that hides data behind -inf is supported (a fill of " +
             std::to_string(f) + " replaces the value rather than adding to it)");
  emit_additive_mask(t, table_data(t, x_k), t.konst(0), fill.shape, x_k == 1,
                     -std::numeric_limits<double>::infinity());
}

}  // namespace

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
  return emit_table(t, x, shape, expand(m, mask.shape, shape));
}

std::map<std::string, TranslateFn> with_constant_ops(std::map<std::string, TranslateFn> ops) {
  for (const char* op : {"Add", "Sub"}) {
    auto it = ops.find(op);
    ops[op] = constant_or(op, it == ops.end() ? TranslateFn() : it->second);
  }
  ops["Where"] = where;
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
