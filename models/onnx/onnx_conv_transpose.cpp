// ConvTranspose (2-D; 1-D of a signal [N, C, L], Note [signals]) as remat's conv2d_transpose (Note
// [transposed convolution] in ops/conv2d_transpose.cpp): the weight [C_in, C_out / group, kH, kW]
// is remat's as stored ([C_in, C_out / group, k] of a signal: [.., 1, k]); pads, auto_pad,
// output_padding and output_shape become the op's padding and output_padding.
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

// The node's window attributes for two spatial axes: a 1-D op's (a signal's) with H's before
// them (stride 1, dilation 1, no padding, output size 1).
struct TransposeAttrs {
  std::vector<int64_t> pads, out_pad, out_shape, strides, dilations;
};

TransposeAttrs transpose_attrs(Translator& t, bool signal) {
  const size_t n = signal ? 1 : 2;
  TransposeAttrs a{t.attr_ints("pads", std::vector<int64_t>(2 * n, 0)),
                   t.attr_ints("output_padding", std::vector<int64_t>(n, 0)),
                   t.attr_ints("output_shape", {}),
                   t.attr_ints("strides", std::vector<int64_t>(n, 1)),
                   t.attr_ints("dilations", std::vector<int64_t>(n, 1))};
  if (a.pads.size() != 2 * n || a.out_pad.size() != n ||
      (!a.out_shape.empty() && a.out_shape.size() != n) || a.strides.size() != n ||
      a.dilations.size() != n)
    t.fail(signal ? "pads, output_padding, output_shape, strides and dilations must be for the "
                    "one spatial axis of [N, C, L]"
                  : "pads, output_padding, output_shape, strides and dilations must be for the "
                    "two spatial axes");
  if (signal) {
    a.pads = {0, a.pads[0], 0, a.pads[1]};
    a.out_pad.insert(a.out_pad.begin(), 0);
    if (!a.out_shape.empty()) a.out_shape.insert(a.out_shape.begin(), 1);
    a.strides.insert(a.strides.begin(), 1);
    a.dilations.insert(a.dilations.begin(), 1);
  }
  return a;
}

TransposeAxis transpose_axis(Translator& t, const TransposeAttrs& at, int axis, int64_t in,
                             int64_t k, int64_t s, int64_t d) {
  const std::string auto_pad = t.attr_string("auto_pad", "NOTSET");
  const std::vector<int64_t>& out_shape = at.out_shape;
  TransposeAxis a{at.pads[static_cast<size_t>(axis)], at.pads[static_cast<size_t>(axis) + 2],
                  at.out_pad[static_cast<size_t>(axis)]};
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
  const Spatial in = spatial_input(t);
  const DataValue& x = in.x;
  if (!t.is_initializer(1)) t.fail("the weight (input 1) must be an initializer");
  const Shape given = t.initializer_dims(1);
  if (given.size() != (in.signal ? 3u : 4u))
    t.fail(std::string("only ") + (in.signal ? "1-D transposed convolutions of [N, C, L]" :
                                               "2-D transposed convolutions of [N, C, H, W]") +
           " are supported (weight " + shape_str(given) + ")");
  const Shape wd = in.signal ? Shape{given[0], given[1], 1, given[2]} : given;
  const int64_t groups = t.attr_int("group", 1);
  if (groups < 1 || wd[0] != x.sample[0])
    t.fail("weight " + shape_str(given) + " does not fit " + std::to_string(x.sample[0]) +
           " input channels");
  const int64_t filters = wd[1] * groups;
  const Shape kernel(given.begin() + 2, given.end());
  if (t.attr_ints("kernel_shape", kernel) != kernel)
    t.fail("kernel_shape disagrees with the weight");
  const TransposeAttrs at = transpose_attrs(t, in.signal);
  const std::vector<int64_t>& s = at.strides;
  const std::vector<int64_t>& d = at.dilations;
  const TransposeAxis h = transpose_axis(t, at, 0, x.sample[1], wd[2], s[0], d[0]);
  const TransposeAxis w = transpose_axis(t, at, 1, x.sample[2], wd[3], s[1], d[1]);
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
  auto size = [](int64_t n, int64_t k, int64_t st, int64_t dl, const TransposeAxis& ax) {
    return st * (n - 1) + ax.output_padding + (k - 1) * dl + 1 - ax.begin - ax.end;
  };
  emit_spatial(t, "conv2d_transpose", in, a, params,
               {filters, size(x.sample[1], wd[2], s[0], d[0], h),
                size(x.sample[2], wd[3], s[1], d[1], w)});
}

}  // namespace

std::map<std::string, TranslateFn> with_conv_transpose(std::map<std::string, TranslateFn> ops) {
  ops["ConvTranspose"] = conv_transpose;
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
