// Arithmetic of data and a scalar constant: x * c, x / c, x + c, x - c, c - x (either order
// where the op commutes) and -x, each one affine layer (y = scale x + shift, in double and
// rounded once: kernels/curve_math.h). x / c is x (1 / c): the same float as PyTorch's quotient
// but where the double product lands within 2^-52 of a rounding boundary (exact for powers of
// two). c / x is x's reciprocal (pow -1), then that affine scale; Reciprocal is c = 1. The
// constant is a Constant node, a folded value or an initializer the exporter made
// ("onnx::..."); a scalar parameter of the module (a learned temperature), or a value folded
// from one (its exp), is not a constant, and stays an error naming the node. Anything else goes
// to the op's other translator.
#include <onnx/onnx_pb.h>

#include <string>

#include "models/onnx/onnx_translator.h"

namespace remat {
namespace onnx_detail {

namespace {

// Input k is a constant of one value that is not a module's parameter.
bool is_scalar(Translator& t, int k) {
  if (!t.has(k) || !t.is_const(k) || t.is_module_tensor(k)) return false;
  return shape_numel(t.konst(k).shape) == 1;
}

// scale x + shift for the data input `x`; the constant's rank may not exceed the data's.
void affine(Translator& t, int x, int c, double scale, double shift) {
  const DataValue& v = t.data(x, kFolds | kSeqFirst);
  if (c >= 0 && static_cast<int64_t>(t.konst(c).shape.size()) > onnx_rank(v))
    t.fail("a constant of shape " + shape_str(t.konst(c).shape) + " would broadcast " +
           shape_str(v.sample) + " per sample to a higher rank");
  if (v.transposed) t.fail("arithmetic on transposed heads is not supported");
  AttrMap a;
  a.set("scale", scale);
  a.set("shift", shift);
  t.emit("affine", {v}, a, {}, v.sample, v.remat, v.dtype);
}

// c / x (input x data): x's reciprocal, times c unless c is 1 (in double, rounded once:
// within an ulp of PyTorch's c / x).
void reciprocal(Translator& t, int x, double c) {
  const DataValue& v = t.data(x, kFolds | kSeqFirst);
  if (v.transposed) t.fail("arithmetic on transposed heads is not supported");
  const DataValue r = emit_reciprocal(t, v);
  if (c == 1.0) return;
  AttrMap a;
  a.set("scale", c);
  a.set("shift", 0.0);
  t.emit("affine", {r}, a, {}, r.sample, r.remat, r.dtype);
}

double value(Translator& t, int k) { return t.konst(k).scalar(t.where() + ": the constant"); }

// The data input and the scalar of a two-input node, or false.
bool data_and_scalar(Translator& t, int* x, int* c) {
  if (t.inputs() != 2) return false;
  for (int k : {0, 1})
    if (is_scalar(t, k) && !t.is_const(1 - k)) {
      *c = k;
      *x = 1 - k;
      return true;
    }
  return false;
}

TranslateFn scalar_or(const std::string& op, const TranslateFn& other) {
  return [op, other](Translator& t) {
    int x = 0, c = 0;
    if (!data_and_scalar(t, &x, &c)) {
      if (other) return other(t);
      t.fail("only " + op + " of data and a scalar constant is supported");
    }
    const double v = value(t, c);
    if (op == "Mul") return affine(t, x, c, v, 0.0);
    if (op == "Add") return affine(t, x, c, 1.0, v);
    if (op == "Sub") return x == 0 ? affine(t, x, c, 1.0, -v) : affine(t, x, c, -1.0, v);
    if (x == 1) return reciprocal(t, 1, v);
    if (v == 0.0) t.fail("a division by zero");
    affine(t, x, c, 1.0 / v, 0.0);  // Div
  };
}

}  // namespace

const DataValue& emit_reciprocal(Translator& t, const DataValue& x) {
  AttrMap a;
  a.set("exponent", -1.0);
  return t.emit("pow", {x}, a, {}, x.sample, x.remat, x.dtype);
}

const DataValue& emit_negation(Translator& t, const DataValue& x) {
  AttrMap a;
  a.set("scale", -1.0);
  a.set("shift", 0.0);
  return t.emit("affine", {x}, a, {}, x.sample, x.remat, x.dtype);
}

std::map<std::string, TranslateFn> with_scalar_ops(std::map<std::string, TranslateFn> ops) {
  for (const char* op : {"Mul", "Add", "Sub", "Div"}) {
    auto it = ops.find(op);
    ops[op] = scalar_or(op, it == ops.end() ? TranslateFn() : it->second);
  }
  ops["Neg"] = [](Translator& t) { affine(t, 0, -1, -1.0, 0.0); };
  ops["Reciprocal"] = [](Translator& t) { reciprocal(t, 0, 1.0); };
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
