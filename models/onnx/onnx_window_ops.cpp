// The ONNX ops over the spatial axes of an image [N, C, H, W], or of a signal [N, C, L] (Note
// [signals]): Conv, MaxPool, AveragePool, GlobalAveragePool, BatchNormalization and Pad, each
// one layer of remat's 2-D op (Pad of zeros everywhere: none).
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <string>
#include <vector>

#include "models/onnx/onnx_translator.h"

namespace remat {
namespace onnx_detail {

// Note [signals]
// nn.Conv1d, nn.MaxPool1d, nn.AvgPool1d, nn.AdaptiveAvgPool1d(1) and nn.BatchNorm1d of a signal
// [N, C, L] run as remat's 2-D ops on [N, C, 1, L], the same floats in the same order: the op's
// window gains an H axis of kernel 1, stride 1, dilation 1 and no padding (a Conv1d weight
// [C', C / g, k] is the conv2d weight [C', C / g, 1, k], which `export` writes back as the file
// holds it). The result is the signal [C', L'] of ONNX, held as remat's [C', 1, L'] (DataValue's
// `remat`), so a chain of 1-D ops runs without copies; any other op reads it through
// as_sample_shape, a reshape to [C', L'], and a signal that remat holds as [C, L] (the model's
// input, a linear layer's result) becomes [C, 1, L] by a reshape where a 1-D op reads it.

namespace {

std::vector<int64_t> list(std::initializer_list<int64_t> v) { return v; }

// One spatial axis of a window op: explicit pads or auto_pad, and the output size.
struct Axis {
  int64_t begin = 0, end = 0, out = 0;
};

Axis window_axis(Translator& t, int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe,
                 bool ceil) {
  const std::string auto_pad = t.attr_string("auto_pad", "NOTSET");
  const int64_t span = (k - 1) * d + 1;
  Axis a{pb, pe, 0};
  if (auto_pad == "VALID") {
    a.begin = a.end = 0;
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    const int64_t total = std::max<int64_t>(((in + s - 1) / s - 1) * s + span - in, 0);
    a.begin = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    a.end = total - a.begin;
  } else if (auto_pad != "NOTSET") {
    t.fail("auto_pad '" + auto_pad + "' is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER");
  }
  const int64_t room = in + a.begin + a.end - span;
  if (room < 0) t.fail("the window is larger than the padded input");
  a.out = (ceil ? (room + s - 1) / s : room / s) + 1;
  // PyTorch's (and ONNX's) rule: the last window starts inside the input or its left padding.
  if (ceil && (a.out - 1) * s >= in + a.begin) --a.out;
  return a;
}

struct Window {
  int64_t kh, kw, sh, sw, dh, dw;
  Axis h, w;
};

// The window of a 2-D op, or of a 1-D op over W (`signal`: its attributes are for one axis, H's
// are kernel 1, stride 1, dilation 1, no padding).
Window window(Translator& t, int64_t kh, int64_t kw, int64_t in_h, int64_t in_w, bool ceil,
              bool signal) {
  std::vector<int64_t> s = t.attr_ints("strides", signal ? list({1}) : list({1, 1})),
                       d = t.attr_ints("dilations", signal ? list({1}) : list({1, 1})),
                       p = t.attr_ints("pads", signal ? list({0, 0}) : list({0, 0, 0, 0}));
  const size_t axes = signal ? 1 : 2;
  if (s.size() != axes || d.size() != axes || p.size() != 2 * axes)
    t.fail(signal ? "strides, dilations and pads must be for one spatial axis (a 1-D op)"
                  : "strides, dilations and pads must be for two spatial axes (a 2-D op)");
  if (signal) s = {1, s[0]}, d = {1, d[0]}, p = {0, p[0], 0, p[1]};
  constexpr int64_t kMax = int64_t{1} << 20;  // as remat's window ops read them
  for (int64_t v : s)
    if (v < 1 || v > kMax) t.fail("strides must be 1 to 2^20");
  for (int64_t v : d)
    if (v < 1 || v > kMax) t.fail("dilations must be 1 to 2^20");
  for (int64_t v : p)
    if (v < 0 || v > kMax) t.fail("pads must be 0 to 2^20");
  if (kh < 1 || kw < 1 || kh > kMax || kw > kMax) t.fail("the window must be 1 to 2^20 wide");
  Window w{kh, kw, s[0], s[1], d[0], d[1], {}, {}};
  w.h = window_axis(t, in_h, kh, s[0], d[0], p[0], p[2], ceil);
  w.w = window_axis(t, in_w, kw, s[1], d[1], p[1], p[3], ceil);
  return w;
}

void conv(Translator& t) {
  const Spatial in = spatial_input(t);
  const DataValue& x = in.x;
  const Shape wd = weight_dims(t, 1, "the weight");
  if (wd.size() != (in.signal ? 3u : 4u))
    t.fail("a weight " + shape_str(wd) + " of data " +
           (in.signal ? "[N, C, L]: only 1-D" : "[N, C, H, W]: only 2-D") +
           " convolutions of such data are supported");
  const Shape w4 = in.signal ? Shape{wd[0], wd[1], 1, wd[2]} : wd;  // Note [signals]
  const int64_t groups = t.attr_int("group", 1), k = wd[0];
  if (groups < 1 || wd[1] * groups != x.sample[0])
    t.fail("weight " + shape_str(wd) + " with group " + std::to_string(groups) +
           " does not fit " + std::to_string(x.sample[0]) + " input channels");
  const std::vector<int64_t> ks = t.attr_ints("kernel_shape", Shape(wd.begin() + 2, wd.end()));
  if (ks != Shape(wd.begin() + 2, wd.end())) t.fail("kernel_shape disagrees with the weight");
  const Window w = window(t, w4[2], w4[3], x.sample[1], x.sample[2], false, in.signal);
  AttrMap a;
  a.set("filters", k);
  a.set("kernel", list({w.kh, w.kw}));
  a.set("stride", list({w.sh, w.sw}));
  a.set("padding", list({w.h.begin, w.h.end, w.w.begin, w.w.end}));
  a.set("dilation", list({w.dh, w.dw}));
  a.set("groups", groups);
  a.set("bias", t.has(2));
  std::vector<ParamUse> params = {{"weight", t.node().input(1), w4, {}}};
  if (t.has(2)) {
    weight_dims(t, 2, "the bias");
    params.push_back({"bias", t.node().input(2), {k}, {}});
  }
  emit_spatial(t, "conv2d", in, a, params, {k, w.h.out, w.w.out});
}

void batch_norm(Translator& t) {
  const bool flat = t.data(0).sample.size() == 1;  // [N, C]: nn.BatchNorm1d of features
  const Spatial in = flat ? Spatial{as_sample_shape(t, t.data(0)), false} : spatial_input(t);
  const DataValue& x = in.x;
  if (x.remat != x.sample && !in.signal) t.fail("expects [N, C, H, W], [N, C, L] or [N, C]");
  const int64_t c = x.sample[0];
  const char* names[4] = {"weight", "bias", "running_mean", "running_var"};
  std::vector<ParamUse> params;
  for (int k = 1; k <= 4; ++k) {
    weight_dims(t, k, std::string("the ") + names[k - 1]);
    params.push_back({names[k - 1], t.node().input(k), {c}, {}});
  }
  t.require_unused_outputs(1);
  AttrMap a;
  a.set("eps", short_float(t.attr_float("epsilon", 1e-5)));
  a.set("momentum", short_float(1.0 - t.attr_float("momentum", 0.9)));  // ONNX keeps 1 - torch's
  a.set("mode", std::string("train"));  // evaluation reads the running statistics either way
  emit_spatial(t, "batchnorm", in, a, params, x.sample);
}

void pool(Translator& t, bool average) {
  const Spatial in = spatial_input(t);
  const DataValue& x = in.x;
  std::vector<int64_t> ks = t.attr_ints("kernel_shape", {});
  if (ks.size() != (in.signal ? 1u : 2u))
    t.fail(in.signal ? "kernel_shape must have one size (a 1-D pooling of [N, C, L])"
                     : "kernel_shape must have two sizes (a 2-D pooling)");
  if (in.signal) ks = {1, ks[0]};
  const std::vector<int64_t> ones(in.signal ? 1 : 2, 1);
  if (t.attr_ints("dilations", ones) != ones) t.fail("dilated pooling is not supported");
  if (t.attr_int("storage_order", 0) != 0) t.fail("storage_order 1 is not supported");
  const bool ceil = t.attr_int("ceil_mode", 0) != 0;
  const Window w = window(t, ks[0], ks[1], x.sample[1], x.sample[2], ceil, in.signal);
  // remat's windows use floor: ceil mode is floor over extra rows and columns at the end, which
  // a max ignores; an average would count them.
  const int64_t extra_h = (w.h.out - 1) * w.sh + w.kh - (x.sample[1] + w.h.begin + w.h.end);
  const int64_t extra_w = (w.w.out - 1) * w.sw + w.kw - (x.sample[2] + w.w.begin + w.w.end);
  if (average && (extra_h > 0 || extra_w > 0))
    t.fail("ceil_mode with windows past the padded input is not supported for averages");
  const int64_t pads[4] = {w.h.begin, w.h.end + std::max<int64_t>(extra_h, 0), w.w.begin,
                           w.w.end + std::max<int64_t>(extra_w, 0)};
  for (int k = 0; k < 4; ++k)
    if (pads[k] > (k < 2 ? w.kh : w.kw) / 2)
      t.fail("padding " + std::to_string(pads[k]) + " is more than half the window");
  AttrMap a;
  a.set("kernel", list({w.kh, w.kw}));
  a.set("stride", list({w.sh, w.sw}));
  a.set("padding", list({pads[0], pads[1], pads[2], pads[3]}));
  if (average) a.set("count_include_pad", t.attr_int("count_include_pad", 0) != 0);
  t.require_unused_outputs(1);
  emit_spatial(t, average ? "avgpool" : "maxpool", in, a, {}, {x.sample[0], w.h.out, w.w.out});
}

void max_pool(Translator& t) { pool(t, false); }
void average_pool(Translator& t) { pool(t, true); }

void global_average_pool(Translator& t) {
  const Spatial in = spatial_input(t);
  const int64_t c = in.x.sample[0];
  t.emit("global_avgpool", {in.x}, {}, {}, in.signal ? Shape{c, 1} : Shape{c, 1, 1}, {c});
}

// Pad with zeros (negative pads crop) of H and W, or of a signal's L.
void pad(Translator& t) {
  if (t.attr_string("mode", "constant") != "constant") t.fail("only constant padding is supported");
  if (t.has(2) && t.konst(2).scalar(t.where() + ": constant_value") != 0)
    t.fail("only padding with zeros is supported");
  if (t.has(3)) t.fail("the axes input is not supported");
  const std::vector<int64_t> p =
      t.has(1) ? t.konst(1).ints(t.where() + ": pads") : t.attr_ints("pads", {});
  if (std::all_of(p.begin(), p.end(), [](int64_t v) { return v == 0; }) && !p.empty())
    return t.alias(0, t.data(0));
  const Spatial in = spatial_input(t);
  const DataValue& x = in.x;
  int64_t top = 0, left = 0, bottom = 0, right = 0;
  if (in.signal) {
    if (p.size() != 6) t.fail("pads must have 6 values for [N, C, L]");
    if (p[0] || p[1] || p[3] || p[4]) t.fail("only L may be padded");
    left = p[2], right = p[5];
  } else {
    if (p.size() != 8) t.fail("pads must have 8 values for [N, C, H, W]");
    if (p[0] || p[1] || p[4] || p[5]) t.fail("only H and W may be padded");
    top = p[2], left = p[3], bottom = p[6], right = p[7];
  }
  const Shape out = {x.sample[0], x.sample[1] + top + bottom, x.sample[2] + left + right};
  if (out[1] < 1 || out[2] < 1) t.fail("the result would be empty");
  AttrMap a;
  if (top >= 0 && left >= 0 && bottom >= 0 && right >= 0) {
    a.set("padding", list({top, bottom, left, right}));
    emit_spatial(t, "zeropad", in, a, {}, out);
  } else if (top <= 0 && left <= 0 && bottom <= 0 && right <= 0) {
    a.set("cropping", list({-top, -bottom, -left, -right}));
    emit_spatial(t, "crop", in, a, {}, out);
  } else {
    t.fail("pads that add on one side and remove on another are not supported");
  }
}

}  // namespace

Spatial spatial_input(Translator& t) {
  const DataValue& in = t.data(0);
  if (in.sample.size() != 2) return {image_input(t), false};
  const Shape image = {in.sample[0], 1, in.sample[1]};
  DataValue v = in;
  if (in.remat != image) {
    if (in.remat != in.sample || in.transposed)
      t.fail("a signal [N, C, L] that remat holds as " + shape_str(in.remat) +
             " is not supported here");
    AttrMap a;
    a.set("shape", std::vector<int64_t>(image.begin(), image.end()));
    v = t.emit("reshape", {in}, a, {}, in.sample, image, in.dtype);
  }
  v.sample = image;
  return {v, true};
}

void emit_spatial(Translator& t, const std::string& op, const Spatial& in, AttrMap attrs,
                  std::vector<ParamUse> params, const Shape& out) {
  const Shape sample = in.signal ? Shape{out[0], out[2]} : out;
  t.emit(op, {in.x}, std::move(attrs), std::move(params), sample, out);
}

DataValue image_input(Translator& t) {
  const DataValue x = t.data(0).sample.size() == 3 ? as_sample_shape(t, t.data(0)) : t.data(0);
  if (x.sample.size() != 3 || x.remat != x.sample)
    t.fail("expects an image [N, C, H, W], got " + shape_str(x.sample) + " per sample");
  return x;
}

std::map<std::string, TranslateFn> with_window_ops(std::map<std::string, TranslateFn> ops) {
  ops["Conv"] = conv;
  ops["BatchNormalization"] = batch_norm;
  ops["MaxPool"] = max_pool;
  ops["AveragePool"] = average_pool;
  ops["GlobalAveragePool"] = global_average_pool;
  ops["Pad"] = pad;
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
