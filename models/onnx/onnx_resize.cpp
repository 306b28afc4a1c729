// Resize of images [N, C, H, W] and signals [N, C, L] (F.interpolate, nn.Upsample): upsample
// where its kernel computes ONNX's result, linear maps otherwise.
//
// Note [resize as linear maps]
// ONNX's Resize is separable and linear: along each resized axis, output position x is a fixed
// combination of at most 4 input positions, the weights depending on the positions alone. Where
// the factor is an integer and the rule is upsample's (nearest as PyTorch's or at half-pixel
// centres, linear at half-pixel centres), the layer is `upsample`. Every other Resize of opsets
// 13 to 17 (fractional or downsampling factors, align_corners, asymmetric, cubic, any
// nearest_mode, exclude_outside) is, per axis, a constant matrix M [out, in] built as ONNX's
// reference builds its weights: x_original from the coordinate rule in double; the taps the n
// nearest positions (n = 2, or 4 for cubic), from ceil(x_original) - n / 2 on, so that the
// ratio x_original - (ceil(x_original) - 1) lies in (0, 1]; the coefficients of that ratio
// (nearest's 0/1 by nearest_mode, linear's 1 - r and r, the cubic of cubic_coeff_a); a tap
// outside the axis reads its nearest edge (ONNX's edge padding), or with exclude_outside
// weighs 0 and the others are renormalized. M applies as `dense` with learned: false (a
// buffer, never trained) over the last axis: W's map, a transpose, H's map and a transpose back,
// or H first where that moves fewer values; an axis whose map is the identity is skipped. Each
// output is then a sum of products of a weight and an input (M's zeros add exactly nothing),
// ONNX's result within rounding, and the gradient is dense's M^T dy, PyTorch's interpolation
// backward with the same weights. It costs 2 in out FLOPs per row where upsample's kernel
// costs a few per output, and holds each map (out in floats) as a buffer of the layer.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "models/onnx/onnx_translator.h"

namespace remat {
namespace onnx_detail {

namespace {

constexpr int64_t kMaxMapEntries = int64_t{1} << 24;  // 64 MB of FP32 weights per axis
constexpr int64_t kMaxAxis = int64_t{1} << 24;        // positions along a resized axis

struct ResizeRule {
  std::string mode;     // nearest, linear, cubic
  std::string coord;    // coordinate_transformation_mode
  std::string nearest;  // nearest_mode
  double cubic_a = -0.75;
  bool exclude_outside = false;
};

ResizeRule read_rule(Translator& t) {
  ResizeRule r;
  r.mode = t.attr_string("mode", "nearest");
  r.coord = t.attr_string("coordinate_transformation_mode", "half_pixel");
  r.nearest = t.attr_string("nearest_mode", "round_prefer_floor");
  r.cubic_a = t.attr_float("cubic_coeff_a", -0.75);
  r.exclude_outside = t.attr_int("exclude_outside", 0) != 0;
  if (r.mode != "nearest" && r.mode != "linear" && r.mode != "cubic")
    t.fail("mode '" + r.mode + "' is not supported (nearest, linear, cubic)");
  static const char* const kCoords[] = {"half_pixel", "pytorch_half_pixel", "align_corners",
                                        "asymmetric", "tf_half_pixel_for_nn"};
  if (std::find(std::begin(kCoords), std::end(kCoords), r.coord) == std::end(kCoords))
    t.fail("coordinate_transformation_mode '" + r.coord + "' is not supported (half_pixel, "
           "pytorch_half_pixel, align_corners, asymmetric, tf_half_pixel_for_nn)");
  static const char* const kNearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                         "ceil"};
  if (r.mode == "nearest" &&
      std::find(std::begin(kNearest), std::end(kNearest), r.nearest) == std::end(kNearest))
    t.fail("nearest_mode '" + r.nearest + "' is not supported (round_prefer_floor, "
           "round_prefer_ceil, floor, ceil)");
  return r;
}

// upsample computes this rule at an integer factor: nearest takes row floor(out / f) (at
// half-pixel centres either round_prefer rule, as no position ties there), linear interpolates
// at half-pixel centres (PyTorch's align_corners=False).
bool is_upsample_rule(const ResizeRule& r) {
  const bool half_pixel = r.coord == "half_pixel" || r.coord == "pytorch_half_pixel";
  if (r.mode == "linear") return half_pixel;
  if (r.mode != "nearest") return false;
  return (half_pixel && r.nearest.rfind("round_prefer_", 0) == 0) ||
         ((r.coord == "asymmetric" || r.coord == "tf_half_pixel_for_nn") && r.nearest == "floor");
}

// One resized axis: its input and output lengths, ONNX's scale and length_resized (the output
// length given as `sizes`, else in scale: with `scales` ONNX's reference takes the real number,
// 2.4 for 0.6 of 4, where the output has floor(2.4) positions).
struct AxisResize {
  int64_t in = 1, out = 1;
  double scale = 1, resized = 1;
  bool identity = false;  // its map is the identity (set by resize)
};

// x_original of output position x along the axis.
double source_coord(const ResizeRule& r, double x, const AxisResize& a) {
  const double scale = a.scale, resized = a.resized;
  const int64_t in = a.in;
  if (r.coord == "align_corners")
    return resized == 1 ? 0.0 : x * static_cast<double>(in - 1) / (resized - 1);
  if (r.coord == "asymmetric") return x / scale;
  if (r.coord == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  if (r.coord == "pytorch_half_pixel" && resized == 1) return -0.5;
  return (x + 0.5) / scale - 0.5;  // half_pixel, pytorch_half_pixel
}

// The taps' coefficients at ratio r in (0, 1] past the tap before x_original.
std::vector<double> coefficients(const ResizeRule& rule, double r) {
  if (rule.mode == "linear") return {1 - r, r};
  if (rule.mode == "nearest") {
    if (r == 1 || rule.nearest == "ceil") return {0, 1};
    if (rule.nearest == "floor") return {1, 0};
    const bool up = rule.nearest == "round_prefer_ceil" ? r >= 0.5 : r > 0.5;
    return {up ? 0.0 : 1.0, up ? 1.0 : 0.0};
  }
  const double a = rule.cubic_a, s = r + 1, q = 1 - r, p = q + 1;
  return {((a * s - 5 * a) * s + 8 * a) * s - 4 * a, ((a + 2) * r - (a + 3)) * r * r + 1,
          ((a + 2) * q - (a + 3)) * q * q + 1, ((a * p - 5 * a) * p + 8 * a) * p - 4 * a};
}

// Output position o's taps: (input position, coefficient) pairs, each position once.
std::vector<std::pair<int64_t, double>> row_taps(const ResizeRule& rule, const AxisResize& a,
                                                 int64_t o) {
  const int64_t in = a.in;
  const double x = source_coord(rule, static_cast<double>(o), a);
  const double before = std::ceil(x) - 1;  // the tap whose ratio is in (0, 1]
  std::vector<double> c = coefficients(rule, x - before);
  const int64_t n = static_cast<int64_t>(c.size());
  const int64_t first = static_cast<int64_t>(before) - (n / 2 - 1);
  if (rule.exclude_outside) {
    double sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      if (first + k < 0 || first + k >= in) c[static_cast<size_t>(k)] = 0;
      sum += c[static_cast<size_t>(k)];
    }
    for (double& v : c) v /= sum;
  }
  std::vector<std::pair<int64_t, double>> taps;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = std::clamp<int64_t>(first + k, 0, in - 1);  // edge padding
    if (!taps.empty() && taps.back().first == i)
      taps.back().second += c[static_cast<size_t>(k)];
    else
      taps.emplace_back(i, c[static_cast<size_t>(k)]);
  }
  return taps;
}

// M [out, in], row-major: output position o = sum over i of M[o, i] input i.
std::vector<float> axis_map(const ResizeRule& rule, const AxisResize& a) {
  std::vector<float> m(static_cast<size_t>(a.in * a.out), 0.0f);
  for (int64_t o = 0; o < a.out; ++o)
    for (const auto& [i, c] : row_taps(rule, a, o))
      m[static_cast<size_t>(o * a.in + i)] = static_cast<float>(c);
  return m;
}

bool is_identity(const ResizeRule& rule, const AxisResize& a) {
  if (a.in != a.out) return false;
  for (int64_t o = 0; o < a.out; ++o)
    for (const auto& [i, c] : row_taps(rule, a, o))
      if (static_cast<float>(c) != (i == o ? 1.0f : 0.0f)) return false;
  return true;
}

// The resized axes (H and W; a signal's L as W of H = 1) from `sizes` or `scales`; the batch
// and channels must stay.
std::vector<AxisResize> read_axes(Translator& t, const Shape& x, bool signal) {
  const size_t rank = signal ? 3 : 4;
  if (x[1] > kMaxAxis || x[2] > kMaxAxis)
    t.fail("an input axis of more than 2^24 positions (" + shape_str(x) + ")");
  std::vector<AxisResize> axes(2);
  axes[0].in = axes[0].out = x[1];
  axes[1].in = x[2];
  if (t.has(3)) {
    const OnnxConst& sizes = t.konst(3);
    const bool batch = sizes.i.size() == rank &&
                       (sizes.i[0] == SymInt{1, 0} ||
                        (t.static_batch() && sizes.i[0] == SymInt{0, *t.static_batch()}));
    if (sizes.is_float || !batch || !(sizes.i[1] == SymInt{0, x[0]}) ||
        !sizes.i[2].is_const() || !sizes.i[rank - 1].is_const())
      t.fail(signal ? "sizes must be [N, C, L'] with the batch and channels unchanged"
                    : "sizes must be [N, C, H', W'] with the batch and channels unchanged");
    if (!signal) axes[0].out = sizes.i[2].c;
    axes[1].out = sizes.i[rank - 1].c;
    for (AxisResize& a : axes) {
      if (a.out < 1 || a.out > kMaxAxis)
        t.fail("sizes must be 1 to 2^24, got " + std::to_string(a.out));
      a.scale = static_cast<double>(a.out) / static_cast<double>(a.in);
      a.resized = static_cast<double>(a.out);
    }
    return axes;
  }
  if (!t.has(2)) t.fail("neither scales nor sizes is given");
  const OnnxConst& scales = t.konst(2);
  if (!scales.is_float || scales.f.size() != rank || scales.f[0] != 1 || scales.f[1] != 1)
    t.fail(signal ? "scales must be [1, 1, f]" : "scales must be [1, 1, fh, fw]");
  for (size_t k = signal ? 1 : 0; k < 2; ++k) {
    const double s = scales.f[rank - 2 + k];
    const double out = std::floor(s * static_cast<double>(axes[k].in));
    if (!(s > 0) || !(out >= 1) || out > double(kMaxAxis))
      t.fail("scale " + std::to_string(s) + " of an axis of " + std::to_string(axes[k].in) +
             " gives no output length from 1 to 2^24");
    axes[k].scale = s;
    axes[k].resized = s * static_cast<double>(axes[k].in);
    axes[k].out = static_cast<int64_t>(out);
  }
  return axes;
}

// x (a per-sample shape ending in `in`) through the map of one axis along its last dimension.
DataValue apply_map(Translator& t, const DataValue& x, const ResizeRule& rule,
                    const AxisResize& a, const Shape& sample) {
  if (a.in * a.out > kMaxMapEntries)
    t.fail("a resize from " + std::to_string(a.in) + " to " + std::to_string(a.out) +
           " positions is a map of more than 2^24 weights (Note [resize as linear maps])");
  AttrMap attrs;
  attrs.set("units", a.out);
  attrs.set("learned", false);
  Shape remat = x.remat;
  remat.back() = a.out;
  return t.emit("dense", {x}, attrs, {{"weight", "", {a.out, a.in}, axis_map(rule, a)}},
                sample, remat, x.dtype);
}

// Resize by the axes' maps (Note [resize as linear maps]).
void resize_by_maps(Translator& t, const Spatial& in, const ResizeRule& rule,
                    const std::vector<AxisResize>& axes) {
  const AxisResize &h = axes[0], &w = axes[1];
  const int64_t c = in.x.sample[0];
  const bool do_h = !h.identity, do_w = !w.identity;
  if (in.signal)  // L along the last axis; the value stays remat's [C, 1, L]
    return (void)apply_map(t, in.x, rule, w, {c, w.out});
  // W first moves H W' + H' W' values through transposes; H first H W + W H'.
  const bool h_first = do_h && (!do_w || h.in * w.in + w.in * h.out < h.in * w.out + h.out * w.out);
  DataValue v = in.x;
  if (do_w && !h_first) v = apply_map(t, v, rule, w, {c, h.in, w.out});
  if (do_h) {
    const int64_t width = v.sample[2];
    v = transpose_data(t, v, {0, 1, 3, 2});
    v = apply_map(t, v, rule, h, {c, width, h.out});
    v = transpose_data(t, v, {0, 1, 3, 2});
  }
  if (do_w && h_first) apply_map(t, v, rule, w, {c, h.out, w.out});
}

void resize(Translator& t) {
  const DataValue raw = t.data(0);  // its view comes after the factors: none for a no-op
  const bool signal = raw.sample.size() == 2;
  if (!signal && raw.sample.size() != 3)
    t.fail("expects an image [N, C, H, W] or a signal [N, C, L], got " + shape_str(raw.sample) +
           " per sample");
  const ResizeRule rule = read_rule(t);
  const Shape x = signal ? Shape{raw.sample[0], 1, raw.sample[1]} : raw.sample;
  std::vector<AxisResize> axes = read_axes(t, x, signal);
  bool integer = true, same = true;
  for (AxisResize& a : axes) {
    integer = integer && a.out % a.in == 0 && a.scale == static_cast<double>(a.out / a.in);
    a.identity = is_identity(rule, a);
    same = same && a.identity;
  }
  if (same) return t.alias(0, raw);
  const Spatial in = spatial_input(t);
  if (!integer || !is_upsample_rule(rule)) return resize_by_maps(t, in, rule, axes);
  const int64_t fh = axes[0].out / axes[0].in, fw = axes[1].out / axes[1].in;
  AttrMap a;
  a.set("factor", std::vector<int64_t>{fh, fw});
  a.set("mode", std::string(rule.mode == "linear" ? "bilinear" : "nearest"));
  emit_spatial(t, "upsample", in, a, {}, {x[0], x[1] * fh, x[2] * fw});
}

}  // namespace

std::map<std::string, TranslateFn> with_resize_ops(std::map<std::string, TranslateFn> ops) {
  ops["Resize"] = resize;
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
