// The ONNX activations past Relu and Clip (Sigmoid, Tanh, HardSigmoid, HardSwish, LeakyRelu),
// each one layer of remat's op of the same curve (ops/activation_curves.cpp), and the Mul of
// squeeze-and-excitation: an image x [N, C, H, W] times a scale s [N, C, 1, 1] the step
// computes (MobileNetV3, RegNetY, EfficientNet, LR-ASPP), one channel_scale layer.
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

bool is_channel_scale(const DataValue& s) {
  return s.sample.size() == 3 && s.sample[1] == 1 && s.sample[2] == 1;
}

// x * s (either order): x an image [C, H, W] per sample, s [C, 1, 1].
void mul(Translator& t) {
  const char* supported =
      "only an image [N, C, H, W] times a scale [N, C, 1, 1] that the step computes "
      "(squeeze-and-excitation) is supported";
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
  ops["Mul"] = mul;
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
