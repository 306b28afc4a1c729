// ConvTranspose (2-D) as remat's conv2d_transpose (Note [transposed convolution] in
// ops/conv2d_transpose.cpp): the weight [C_in, C_out / group, kH, kW] is remat's as stored;
// pads, auto_pad, output_padding and output_shape become the op's padding and output_padding.
#include <onnx/onnx_pb.h>

#include "models/onnx/onnx_translator.h"

namespace remat {
namespace onnx_detail {

namespace {

// One spatial axis: the pads at its start and end and the output padding, from ONNX's
// attributes as its ConvTranspose spec defines them.
struct TransposeAxis {
  int64_t begin = 0, end = 0, output_padding = 0;
};

TransposeAxis transpose_axis(Translator& t, int axis, int64_t in, int64_t k, int64_t s, int64_t d) {
  const std::string auto_pad = t.attr_string("auto_pad", "NOTSET");
  const std::vector<int64_t> pads = t.attr_ints("pads", {0, 0, 0, 0});
  const std::vector<int64_t> out_pad = t.attr_ints("output_padding", {0, 0});
  const std::vector<int64_t> out_shape = t.attr_ints("output_shape", {});
  if (pads.size() != 4 || out_pad.size() != 2 || (!out_shape.empty() && out_shape.size() != 2))
    t.fail("pads, output_padding and output_shape must be for the two spatial axes");
  TransposeAxis a{pads[static_cast<size_t>(axis)], pads[static_cast<size_t>(axis) + 2],
                  out_pad[static_cast<size_t>(axis)]};
  const int64_t full = s * (in - 1) + a.output_padding + (k - 1) * d + 1;
  int64_t target = -1;  // an output size the pads must give
  if (!out_shape.empty()) target = out_shape[static_cast<size_t>(axis)];
  else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") target = in * s;
  else if (auto_pad != "NOTSET" && auto_pad != "VALID")
    t.fail("unknown auto_pad '" + auto_pad + "'");
  if (auto_pad == "VALID") a.begin = a.end = 0;
  if (target >= 0) {
    const int64_t total = full - target;
    const bool upper = auto_pad == "SAME_UPPER";  // ONNX: the extra pad at the end
    a.begin = total < 0 ? 0 : upper ? total / 2 : total - total / 2;
    a.end = total < 0 ? 0 : total - a.begin;
    if (total < 0) a.output_padding -= total;  // rows past the last input's reach: zeros + bias
  }
  if (a.begin < 0 || a.end < 0) t.fail("negative pads are not supported");
  if (a.output_padding >= s)
    t.fail("an output_padding of " + std::to_string(a.output_padding) + " is not below the stride " +
           std::to_string(s) + " (remat's conv2d_transpose needs it below the stride)");
  return a;
}

void conv_transpose(Translator& t) {
  const DataValue x = as_sample_shape(t, t.data(0));
  if (x.sample.size() != 3 || x.remat != x.sample)
    t.fail("expects an image [N, C, H, W], got " + shape_str(x.sample) + " per sample");
  if (!t.is_initializer(1)) t.fail("the weight (input 1) must be an initializer");
  const Shape wd = t.initializer_dims(1);
  if (wd.size() != 4)
    t.fail("only 2-D transposed convolutions are supported (weight " + shape_str(wd) + ")");
  const int64_t groups = t.attr_int("group", 1);
  if (groups < 1 || wd[0] != x.sample[0])
    t.fail("weight " + shape_str(wd) + " does not fit " + std::to_string(x.sample[0]) +
           " input channels");
  const int64_t filters = wd[1] * groups;
  if (t.attr_ints("kernel_shape", {wd[2], wd[3]}) != std::vector<int64_t>{wd[2], wd[3]})
    t.fail("kernel_shape disagrees with the weight");
  const std::vector<int64_t> s = t.attr_ints("strides", {1, 1});
  const std::vector<int64_t> d = t.attr_ints("dilations", {1, 1});
  if (s.size() != 2 || d.size() != 2) t.fail("strides and dilations must be for two axes");
  const TransposeAxis h = transpose_axis(t, 0, x.sample[1], wd[2], s[0], d[0]);
  const TransposeAxis w = transpose_axis(t, 1, x.sample[2], wd[3], s[1], d[1]);
  AttrMap a;
  a.set("filters", filters);
  a.set("kernel", std::vector<int64_t>{wd[2], wd[3]});
  a.set("stride", s);
  a.set("padding", std::vector<int64_t>{h.begin, h.end, w.begin, w.end});
  a.set("dilation", d);
  a.set("output_padding", std::vector<int64_t>{h.output_padding, w.output_padding});
  a.set("groups", groups);
  a.set("bias", t.has(2));
  std::vector<ParamUse> params = {{"weight", t.node().input(1), wd, {}}};
  if (t.has(2)) {
    if (!t.is_initializer(2)) t.fail("the bias (input 2) must be an initializer");
    params.push_back({"bias", t.node().input(2), {filters}, {}});
  }
  auto size = [](int64_t in, int64_t k, int64_t st, int64_t dl, const TransposeAxis& ax) {
    return st * (in - 1) + ax.output_padding + (k - 1) * dl + 1 - ax.begin - ax.end;
  };
  const Shape out = {filters, size(x.sample[1], wd[2], s[0], d[0], h),
                     size(x.sample[2], wd[3], s[1], d[1], w)};
  t.emit("conv2d_transpose", {x}, a, params, out, out);
}

}  // namespace

std::map<std::string, TranslateFn> with_conv_transpose(std::map<std::string, TranslateFn> ops) {
  ops["ConvTranspose"] = conv_transpose;
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
