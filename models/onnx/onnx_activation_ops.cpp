// The ONNX activations past Relu and Clip (Sigmoid, Tanh, HardSigmoid, HardSwish, LeakyRelu, Erf
// outside the exact GELU's nodes; Sqrt and Pow by a scalar constant of data), each one layer of
// remat's op of the same curve (ops/activation_curves.cpp).
#include <onnx/onnx_pb.h>

#include "models/onnx/onnx_translator.h"

namespace remat {
namespace onnx_detail {

namespace {

// short_float, and PyTorch's hard sigmoid slope 1/6 as the exact 1/6.
double as_written(double v) {
  return static_cast<float>(v) == static_cast<float>(1.0 / 6.0) ? 1.0 / 6.0 : short_float(v);
}

void curve(Translator& t, const std::string& op, AttrMap a = {}) {
  const DataValue x = t.data(0, kSeqFirst);
  t.emit(op, {x}, std::move(a), {}, x.sample, x.remat);
}

void sigmoid(Translator& t) { curve(t, "sigmoid"); }
void tanh_op(Translator& t) { curve(t, "tanh"); }
void hard_swish(Translator& t) { curve(t, "hardswish"); }
void erf_op(Translator& t) { curve(t, "erf"); }

// ONNX's defaults are alpha 0.2, beta 0.5; PyTorch exports F.hardsigmoid as alpha 1/6.
void hard_sigmoid(Translator& t) {
  AttrMap a;
  a.set("alpha", as_written(t.attr_float("alpha", 0.2)));
  a.set("beta", as_written(t.attr_float("beta", 0.5)));
  curve(t, "hardsigmoid", a);
}

void leaky_relu(Translator& t) {
  const double alpha = as_written(t.attr_float("alpha", 0.01));
  if (alpha < 0)
    t.fail("a negative alpha is not supported (leaky_relu's gradient reads its output)");
  if (alpha == 0) return curve(t, "relu");
  AttrMap a;
  a.set("alpha", alpha);
  curve(t, "leaky_relu", a);
}

void sqrt_op(Translator& t) { curve(t, "sqrt"); }

// Pow(x, e), e a scalar constant the exporter wrote (a module's parameter would be frozen):
// pow with that exponent; sqrt for 1/2 (PyTorch's x ** 0.5 is its sqrt), x itself for 1.
void pow_op(Translator& t) {
  if (!t.is_const(1) || t.is_module_tensor(1))
    t.fail("the exponent must be a constant (not data, not a module's parameter)");
  if (shape_numel(t.konst(1).shape) != 1)
    t.fail("only a scalar exponent is supported, not " + shape_str(t.konst(1).shape));
  const double e = t.konst(1).scalar(t.where() + ": the exponent");
  if (e == 1.0) return t.alias(0, t.data(0, kSeqFirst));
  if (e == 0.5) return curve(t, "sqrt");
  AttrMap a;
  a.set("exponent", e);
  curve(t, "pow", a);
}

}  // namespace

std::map<std::string, TranslateFn> with_activation_ops(std::map<std::string, TranslateFn> ops) {
  ops["Sigmoid"] = sigmoid;
  ops["Tanh"] = tanh_op;
  ops["HardSigmoid"] = hard_sigmoid;
  ops["HardSwish"] = hard_swish;
  ops["LeakyRelu"] = leaky_relu;
  ops["Erf"] = erf_op;
  ops["Sqrt"] = sqrt_op;
  ops["Pow"] = pow_op;
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
