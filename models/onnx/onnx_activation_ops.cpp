// The ONNX activations past Relu and Clip (Sigmoid, Tanh, HardSigmoid, HardSwish, LeakyRelu;
// Sqrt and Pow by a scalar constant of data), each one layer of remat's op of the same curve
// (ops/activation_curves.cpp), and the two Muls
// of an image by a per-channel factor: squeeze-and-excitation's scale s [N, C, 1, 1] that the
// step computes (MobileNetV3, RegNetY, EfficientNet, LR-ASPP), one channel_scale layer, and a
// learned layer scale w [C, 1, 1] (ConvNeXt), one depthwise 1 x 1 conv2d without a bias: the
// same single product per value, its weight gradient the per-channel sum of x dy.
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
  const DataValue x = t.data(0);
  t.emit(op, {x}, std::move(a), {}, x.sample, x.remat);
}

void sigmoid(Translator& t) { curve(t, "sigmoid"); }
void tanh_op(Translator& t) { curve(t, "tanh"); }
void hard_swish(Translator& t) { curve(t, "hardswish"); }

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
  if (e == 1.0) return t.alias(0, t.data(0));
  if (e == 0.5) return curve(t, "sqrt");
  AttrMap a;
  a.set("exponent", e);
  curve(t, "pow", a);
}

bool is_channel_scale(const DataValue& s) {
  return s.sample.size() == 3 && s.sample[1] == 1 && s.sample[2] == 1;
}

// x * w (either order): x an image [C, H, W] per sample, w a parameter [C, 1, 1] (or [1, C,
// 1, 1]): conv2d with groups C, a 1 x 1 kernel and no bias, its weight [C, 1, 1, 1] the
// initializer's values.
void layer_scale(Translator& t, int w) {
  const DataValue x = as_sample_shape(t, t.data(1 - w));
  Shape wd = t.initializer_dims(w);
  while (wd.size() > 3 && wd.front() == 1) wd.erase(wd.begin());
  if (x.sample.size() != 3 || x.remat != x.sample || x.transposed ||
      wd != Shape{x.sample[0], 1, 1})
    t.fail("a product with a parameter " + shape_str(t.initializer_dims(w)) + ": only an image "
           "[N, C, H, W] times a per-channel parameter [C, 1, 1] (a layer scale) is supported, "
           "not " + shape_str(x.sample) + " per sample");
  const int64_t c = x.sample[0];
  AttrMap a;
  a.set("filters", c);
  a.set("kernel", int64_t{1});
  a.set("groups", c);
  a.set("bias", false);
  t.emit("conv2d", {x}, a, {{"weight", t.node().input(w), {c, 1, 1, 1}, {}}}, x.sample, x.sample);
}

// x * s (either order): x an image [C, H, W] per sample, s [C, 1, 1].
void mul(Translator& t) {
  const char* supported =
      "only an image [N, C, H, W] times a scale [N, C, 1, 1] that the step computes "
      "(squeeze-and-excitation) or a parameter [C, 1, 1] (a layer scale) is supported";
  for (int w : {0, 1})
    if (t.is_initializer(w) && !t.is_const(1 - w)) return layer_scale(t, w);
  if (t.is_const(0) || t.is_const(1))
    t.fail(std::string("a product with a constant: ") + supported);
  const bool scale_first = is_channel_scale(t.data(0)) && !is_channel_scale(t.data(1));
  const DataValue x = as_sample_shape(t, t.data(scale_first ? 1 : 0));
  const DataValue s = t.data(scale_first ? 0 : 1);
  if (x.sample.size() != 3 || x.remat != x.sample || !is_channel_scale(s) ||
      s.sample[0] != x.sample[0] || x.transposed || s.transposed)
    t.fail("inputs " + shape_str(t.data(0).sample) + " and " + shape_str(t.data(1).sample) +
           " per sample: " + supported);
  DataValue flat = s;
  if (s.remat != Shape{s.sample[0]}) {  // a convolution's [C, 1, 1]: remat's scale is [N, C]
    AttrMap a;
    a.set("shape", std::vector<int64_t>{s.sample[0]});
    flat = t.emit("reshape", {s}, a, {}, s.sample, Shape{s.sample[0]}, s.dtype);
  }
  t.emit("channel_scale", {x, flat}, {}, {}, x.sample, x.sample);
}

}  // namespace

std::map<std::string, TranslateFn> with_activation_ops(std::map<std::string, TranslateFn> ops) {
  ops["Sigmoid"] = sigmoid;
  ops["Tanh"] = tanh_op;
  ops["HardSigmoid"] = hard_sigmoid;
  ops["HardSwish"] = hard_swish;
  ops["LeakyRelu"] = leaky_relu;
  ops["Sqrt"] = sqrt_op;
  ops["Pow"] = pow_op;
  ops["Mul"] = mul;
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
