// The ONNX ops over data, each translated into one layer of a remat op whose result is the same
// (or into an alias of a value remat already has). Note [ONNX import] in onnx_import.h.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "models/onnx/onnx_translator.h"

namespace remat {
namespace onnx_detail {

double short_float(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.7g", v);
  return std::strtod(buf, nullptr);
}

namespace {

std::vector<int64_t> list(std::initializer_list<int64_t> v) { return v; }

// Input k's dims when it is an initializer (a weight), else an error.
Shape weight_dims(Translator& t, int k, const std::string& what) {
  if (!t.is_initializer(k))
    t.fail(what + " (input " + std::to_string(k) + ") must be an initializer: remat trains "
           "weights it owns, and this one is computed");
  return t.initializer_dims(k);
}

// The data input as an image [C, H, W] per sample, remat's value of the same shape (reshaped
// where remat's drops trailing 1s: a convolution of pooled [C, 1, 1]).
DataValue image_input(Translator& t) {
  const DataValue x = t.data(0).sample.size() == 3 ? as_sample_shape(t, t.data(0)) : t.data(0);
  if (x.sample.size() != 3 || x.remat != x.sample)
    t.fail("expects an image [N, C, H, W], got " + shape_str(x.sample) + " per sample");
  return x;
}

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

Window window(Translator& t, int64_t kh, int64_t kw, int64_t in_h, int64_t in_w, bool ceil) {
  const std::vector<int64_t> s = t.attr_ints("strides", {1, 1}), d = t.attr_ints("dilations", {1, 1}),
                             p = t.attr_ints("pads", {0, 0, 0, 0});
  if (s.size() != 2 || d.size() != 2 || p.size() != 4)
    t.fail("strides, dilations and pads must be for two spatial axes (a 2-D op)");
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
  const DataValue x = image_input(t);
  const Shape wd = weight_dims(t, 1, "the weight");
  if (wd.size() != 4) t.fail("only 2-D convolutions are supported (weight " + shape_str(wd) + ")");
  const int64_t groups = t.attr_int("group", 1), k = wd[0];
  if (groups < 1 || wd[1] * groups != x.sample[0])
    t.fail("weight " + shape_str(wd) + " with group " + std::to_string(groups) +
           " does not fit " + std::to_string(x.sample[0]) + " input channels");
  const std::vector<int64_t> ks = t.attr_ints("kernel_shape", {wd[2], wd[3]});
  if (ks != std::vector<int64_t>{wd[2], wd[3]}) t.fail("kernel_shape disagrees with the weight");
  const Window w = window(t, wd[2], wd[3], x.sample[1], x.sample[2], false);
  AttrMap a;
  a.set("filters", k);
  a.set("kernel", list({w.kh, w.kw}));
  a.set("stride", list({w.sh, w.sw}));
  a.set("padding", list({w.h.begin, w.h.end, w.w.begin, w.w.end}));
  a.set("dilation", list({w.dh, w.dw}));
  a.set("groups", groups);
  a.set("bias", t.has(2));
  std::vector<ParamUse> params = {{"weight", t.node().input(1), wd, {}}};
  if (t.has(2)) {
    weight_dims(t, 2, "the bias");
    params.push_back({"bias", t.node().input(2), {k}, {}});
  }
  const Shape out = {k, w.h.out, w.w.out};
  t.emit("conv2d", {x}, a, params, out, out);
}

void batch_norm(Translator& t) {
  const DataValue x = as_sample_shape(t, t.data(0));
  if (x.remat != x.sample || (x.sample.size() != 3 && x.sample.size() != 1))
    t.fail("expects [N, C, H, W] or [N, C]");
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
  t.emit("batchnorm", {x}, a, params, x.sample, x.remat);
}

void relu(Translator& t) {
  const DataValue x = t.data(0, kSeqFirst);
  t.emit("relu", {x}, {}, {}, x.sample, x.remat);
}

// Clip(0, 6) is relu6 and Clip(0) relu; other bounds have no remat op.
void clip(Translator& t) {
  const DataValue x = t.data(0, kSeqFirst);
  const double lo = t.has(1) ? t.konst(1).scalar(t.where() + ": min") : t.attr_float("min", -INFINITY);
  const double hi = t.has(2) ? t.konst(2).scalar(t.where() + ": max") : t.attr_float("max", INFINITY);
  if (lo == 0 && hi == 6) {
    t.emit("relu6", {x}, {}, {}, x.sample, x.remat);
  } else if (lo == 0 && std::isinf(hi) && hi > 0) {
    t.emit("relu", {x}, {}, {}, x.sample, x.remat);
  } else {
    t.fail("Clip(" + std::to_string(lo) + ", " + std::to_string(hi) +
           ") is not supported (Clip(0, 6) and Clip(0) are: relu6 and relu)");
  }
}

void pool(Translator& t, bool average) {
  const DataValue x = image_input(t);
  const std::vector<int64_t> ks = t.attr_ints("kernel_shape", {});
  if (ks.size() != 2) t.fail("kernel_shape must have two sizes (a 2-D pooling)");
  if (t.attr_ints("dilations", {1, 1}) != std::vector<int64_t>{1, 1})
    t.fail("dilated pooling is not supported");
  if (t.attr_int("storage_order", 0) != 0) t.fail("storage_order 1 is not supported");
  const bool ceil = t.attr_int("ceil_mode", 0) != 0;
  const Window w = window(t, ks[0], ks[1], x.sample[1], x.sample[2], ceil);
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
  const Shape out = {x.sample[0], w.h.out, w.w.out};
  t.emit(average ? "avgpool" : "maxpool", {x}, a, {}, out, out);
}

void max_pool(Translator& t) { pool(t, false); }
void average_pool(Translator& t) { pool(t, true); }

void global_average_pool(Translator& t) {
  const DataValue x = image_input(t);
  t.emit("global_avgpool", {x}, {}, {}, {x.sample[0], 1, 1}, {x.sample[0]});
}

void reduce_mean(Translator& t) {
  const DataValue x = image_input(t);
  std::vector<int64_t> axes = t.has(1) ? t.konst(1).ints(t.where() + ": axes") : t.attr_ints("axes", {});
  for (int64_t& a : axes) a = normalize_axis(a, 4, t.where());
  std::sort(axes.begin(), axes.end());
  if (axes != std::vector<int64_t>{2, 3})
    t.fail("only the mean over H and W (axes 2, 3) is supported");
  const bool keep = t.attr_int("keepdims", 1) != 0;
  t.emit("global_avgpool", {x}, {}, {}, keep ? Shape{x.sample[0], 1, 1} : Shape{x.sample[0]},
         {x.sample[0]});
}

void gemm(Translator& t) {
  const DataValue x = t.data(0);
  if (x.remat.size() != 1) t.fail("expects a flat input [N, F], got " + shape_str(x.remat) + " per sample");
  if (t.attr_float("alpha", 1) != 1 || (t.has(2) && t.attr_float("beta", 1) != 1))
    t.fail("alpha and beta other than 1 are not supported");
  if (t.attr_int("transA", 0) != 0) t.fail("transA is not supported (the batch comes first)");
  const Shape b = weight_dims(t, 1, "the weight");
  const bool trans_b = t.attr_int("transB", 0) != 0;
  if (b.size() != 2) t.fail("the weight must be 2-D, got " + shape_str(b));
  const int64_t in = trans_b ? b[1] : b[0], out = trans_b ? b[0] : b[1];
  if (in != x.remat[0]) t.fail("weight " + shape_str(b) + " does not take " + std::to_string(x.remat[0]) + " inputs");
  std::vector<ParamUse> params = {{"weight", t.node().input(1), {out, in}, {}}};
  if (!trans_b) params[0].values = t.transposed_initializer(1);  // remat keeps [out, in]
  if (t.has(2)) {
    const Shape c = weight_dims(t, 2, "the bias");
    if (shape_numel(c) != out) t.fail("the bias " + shape_str(c) + " is not one per output");
    params.push_back({"bias", t.node().input(2), {out}, {}});
  }
  AttrMap a;
  a.set("units", out);
  a.set("bias", t.has(2));
  t.emit("dense", {x}, a, params, {out}, {out});
}

// MatMul of data by a 2-D weight [in, out]: dense without bias over the last dimension; of data
// by data: remat's matmul (matmul_of_data).
void matmul(Translator& t) {
  if (!t.is_const(1)) return matmul_of_data(t);
  const DataValue x = t.data(0, kSeqFirstRows);
  if (x.remat != x.sample || x.sample.empty()) t.fail("expects data [N, ..., F]");
  const Shape b = weight_dims(t, 1, "the weight");
  if (b.size() != 2 || b[0] != x.sample.back())
    t.fail("a weight " + shape_str(b) + " does not take " + std::to_string(x.sample.back()) + " inputs");
  AttrMap a;
  a.set("units", b[1]);
  a.set("bias", false);
  Shape out = x.sample;
  out.back() = b[1];
  t.emit("dense", {x}, a, {{"weight", t.node().input(1), {b[1], b[0]}, t.transposed_initializer(1)}},
         out, out);
}

std::vector<DataValue> data_inputs(Translator& t, unsigned takes = kBatchFirst) {
  std::vector<DataValue> in;
  for (int k = 0; k < t.inputs(); ++k) {
    if (t.is_module_tensor(k)) fail_module_tensor(t, k);
    if (t.is_const(k))
      t.fail("input " + std::to_string(k) + " is a constant; only data from the step is supported here");
    in.push_back(t.data(k, takes));
  }
  return in;
}

void add(Translator& t) {
  const std::vector<DataValue> in = data_inputs(t, kSeqFirst);
  for (const DataValue& v : in)
    if (v.sample != in[0].sample || v.remat != in[0].remat)
      t.fail("inputs " + shape_str(in[0].sample) + " and " + shape_str(v.sample) +
             " per sample: broadcasting is not supported");
  if (in.size() == 1) return t.alias(0, in[0]);
  t.emit("add", in, {}, {}, in[0].sample, in[0].remat);
}

void concat(Translator& t) {
  const std::vector<DataValue> in = data_inputs(t);
  const int64_t axis = normalize_axis(t.attr_int("axis", 1),
                                      static_cast<int64_t>(in[0].sample.size()) + 1, t.where());
  if (axis != 1) t.fail("only Concat along axis 1 (channels or features) is supported");
  Shape out = in[0].sample;
  out[0] = 0;
  for (const DataValue& v : in) {
    if (v.remat != v.sample || v.sample.size() != in[0].sample.size())
      t.fail("inputs of different ranks");
    out[0] += v.sample[0];
  }
  if (in.size() == 1) return t.alias(0, in[0]);
  t.emit("concat", in, {}, {}, out, out);
}

void dropout(Translator& t) {
  const DataValue x = t.data(0, kFolds | kSeqFirst);
  const double rate = t.has(1) ? t.konst(1).scalar(t.where() + ": ratio") : t.attr_float("ratio", 0.5);
  t.require_unused_outputs(1);
  if (rate <= 0) return t.alias(0, x);
  AttrMap a;
  a.set("rate", short_float(rate));
  t.emit("dropout", {x}, a, {}, x.sample, x.remat);
}

void identity(Translator& t) { t.alias(0, t.data(0, kFolds | kSeqFirst)); }

// Gather(W, ids) of token ids from a table W [V, C]: an embedding.
void gather(Translator& t) {
  if (!t.is_initializer(0) || t.is_const(1))
    t.fail("only an embedding (a table initializer indexed by the token ids) gathers data");
  const DataValue ids = t.data(1, kSeqFirst);  // [T, N] ids: [T, N, C] rows
  if (ids.dtype != DType::I32 || ids.layer != kModelInputName)
    t.fail("only the model's token ids index an embedding");
  if (t.attr_int("axis", 0) != 0) t.fail("an embedding gathers rows (axis 0)");
  const Shape w = t.initializer_dims(0);
  if (w.size() != 2) t.fail("the table " + shape_str(w) + " is not [vocab, C]");
  AttrMap a;
  a.set("vocab", w[0]);
  a.set("dim", w[1]);
  Shape out = ids.sample;
  out.push_back(w[1]);
  t.emit("embedding", {ids}, a, {{"weight", t.node().input(0), w, {}}}, out, out);
}

void pad(Translator& t) {
  const DataValue x = image_input(t);
  if (t.attr_string("mode", "constant") != "constant") t.fail("only constant padding is supported");
  if (t.has(2) && t.konst(2).scalar(t.where() + ": constant_value") != 0)
    t.fail("only padding with zeros is supported");
  if (t.has(3)) t.fail("the axes input is not supported");
  const std::vector<int64_t> p = t.has(1) ? t.konst(1).ints(t.where() + ": pads") : t.attr_ints("pads", {});
  if (p.size() != 8) t.fail("pads must have 8 values for [N, C, H, W]");
  if (p[0] || p[1] || p[4] || p[5]) t.fail("only H and W may be padded");
  const int64_t top = p[2], left = p[3], bottom = p[6], right = p[7];
  const Shape out = {x.sample[0], x.sample[1] + top + bottom, x.sample[2] + left + right};
  if (out[1] < 1 || out[2] < 1) t.fail("the result would be empty");
  AttrMap a;
  if (top >= 0 && left >= 0 && bottom >= 0 && right >= 0) {
    a.set("padding", list({top, bottom, left, right}));
    t.emit("zeropad", {x}, a, {}, out, out);
  } else if (top <= 0 && left <= 0 && bottom <= 0 && right <= 0) {
    a.set("cropping", list({-top, -bottom, -left, -right}));
    t.emit("crop", {x}, a, {}, out, out);
  } else {
    t.fail("pads that add on one side and remove on another are not supported");
  }
}

// Resize of an image by integer factors, where ONNX's coordinate rule gives upsample's result:
// nearest takes input row floor(out / f) (half_pixel or pytorch_half_pixel with either
// round_prefer rule: no ties at integer f; asymmetric or tf_half_pixel_for_nn with floor), linear
// interpolates at half-pixel centres (half_pixel, pytorch_half_pixel: PyTorch's
// align_corners=False). The factors come from `scales` [1, 1, fh, fw] or `sizes` [N, C, H fh, W fw].
void resize(Translator& t) {
  const DataValue x = image_input(t);
  const std::string mode = t.attr_string("mode", "nearest");
  const std::string coord = t.attr_string("coordinate_transformation_mode", "half_pixel");
  const std::string nearest = t.attr_string("nearest_mode", "round_prefer_floor");
  const bool half_pixel = coord == "half_pixel" || coord == "pytorch_half_pixel";
  bool same = false;
  if (mode == "nearest")
    same = (half_pixel && nearest.rfind("round_prefer_", 0) == 0) ||
           ((coord == "asymmetric" || coord == "tf_half_pixel_for_nn") && nearest == "floor");
  else if (mode == "linear")
    same = half_pixel;
  if (!same)
    t.fail("mode '" + mode + "' with coordinate_transformation_mode '" + coord + "'" +
           (mode == "nearest" ? " and nearest_mode '" + nearest + "'" : "") +
           " is not supported (nearest as PyTorch's or at half-pixel centres, linear at half-pixel "
           "centres)");
  int64_t fh = 0, fw = 0;
  if (t.has(3)) {
    const OnnxConst& sizes = t.konst(3);
    const bool batch = sizes.i.size() == 4 && (sizes.i[0] == SymInt{1, 0} ||
                                                (t.static_batch() && sizes.i[0] == SymInt{0, *t.static_batch()}));
    if (sizes.is_float || !batch ||
        !(sizes.i[1] == SymInt{0, x.sample[0]}) || !sizes.i[2].is_const() || !sizes.i[3].is_const())
      t.fail("sizes must be [N, C, H', W'] with the batch and channels unchanged");
    const int64_t h = sizes.i[2].c, w = sizes.i[3].c;
    if (h < 1 || w < 1 || h % x.sample[1] != 0 || w % x.sample[2] != 0)
      t.fail("sizes " + std::to_string(h) + " x " + std::to_string(w) + " are not integer multiples of " +
             std::to_string(x.sample[1]) + " x " + std::to_string(x.sample[2]));
    fh = h / x.sample[1], fw = w / x.sample[2];
  } else if (t.has(2)) {
    const OnnxConst& scales = t.konst(2);
    if (!scales.is_float || scales.f.size() != 4 || scales.f[0] != 1 || scales.f[1] != 1)
      t.fail("scales must be [1, 1, fh, fw]");
    for (double f : {scales.f[2], scales.f[3]})
      if (f < 1 || f != std::floor(f) || f > (1 << 16))
        t.fail("only integer scales of at least 1 are supported, got " + std::to_string(f));
    fh = static_cast<int64_t>(scales.f[2]), fw = static_cast<int64_t>(scales.f[3]);
  } else {
    t.fail("neither scales nor sizes is given");
  }
  if (fh == 1 && fw == 1) return t.alias(0, x);
  AttrMap a;
  a.set("factor", list({fh, fw}));
  a.set("mode", std::string(mode == "linear" ? "bilinear" : "nearest"));
  const Shape out = {x.sample[0], x.sample[1] * fh, x.sample[2] * fw};
  t.emit("upsample", {x}, a, {}, out, out);
}

void softmax(Translator& t) {
  const DataValue x = t.data(0, kFolds | kSeqFirstRows);
  const int64_t rank = onnx_rank(x);
  if (normalize_axis(t.attr_int("axis", -1), rank, t.where()) != rank - 1 || x.remat != x.sample)
    t.fail("only the softmax over the last axis is supported");
  t.emit("softmax", {x}, {}, {}, x.sample, x.remat);
}

}  // namespace

const std::map<std::string, TranslateFn>& layer_ops() {
  static const std::map<std::string, TranslateFn> ops = [] {
    std::map<std::string, TranslateFn> m = {
        {"Conv", conv},
        {"BatchNormalization", batch_norm},
        {"Relu", relu},
        {"Clip", clip},
        {"MaxPool", max_pool},
        {"AveragePool", average_pool},
        {"GlobalAveragePool", global_average_pool},
        {"ReduceMean", reduce_mean},
        {"Gemm", gemm},
        {"MatMul", matmul},
        {"Add", add},
        {"Sum", add},
        {"Concat", concat},
        {"Dropout", dropout},
        {"Identity", identity},
        {"Gather", gather},
        {"Pad", pad},
        {"Resize", resize},
        {"Softmax", softmax},
    };
    // Each wraps what the ones before it left: a later one's translator runs first and hands
    // the forms it does not take on (scalar constants, then tensor constants, then data).
    for (auto with : {with_shape_ops, with_activation_ops, with_broadcast_ops, with_conv_transpose,
                      with_token_ops, with_constant_ops, with_scalar_ops, with_einsum,
                      with_norm_ops, with_depth_ops})
      m = with(std::move(m));
    return m;
  }();
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
