// The normalizations over data's trailing axes: LayerNormalization (from any axis after the
// batch: nn.LayerNorm over [C], or over [C, H, W] of an image) and InstanceNormalization
// (nn.InstanceNorm1d/2d, and nn.GroupNorm as PyTorch exports it), each one layernorm layer over
// the normalized axes (Note [instance normalization]).
#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

#include "models/onnx/onnx_translator.h"

namespace remat {
namespace onnx_detail {

// Note [instance normalization]
// InstanceNormalization(x, scale, B) normalizes each sample's channel, x[n, c, ...], over the
// axes after the channel (biased variance, epsilon inside the root), then scales and shifts it
// per channel. remat's layernorm with `axes` = the rank - 2 and no affine gives those floats
// (the same two-pass statistics in double as any layer norm). The per-channel affine after it:
//  - none where scale and B are the constants 1 and 0: nn.InstanceNorm2d(affine=False);
//  - a depthwise 1 x 1 conv2d with a bias, where scale and B are a module's parameters [C] of an
//    image (nn.InstanceNorm2d(affine=True)): y = scale[c] x + B[c], the parameters keeping their
//    names, trained, and written back [C] by `export`.
// Other constants, or parameters of data that is not an image, are an error naming the node.
// nn.GroupNorm is exported as Reshape(x, [N, G, -1]), an InstanceNormalization with scale 1 and
// bias 0 of [N, G, L], a Reshape back to x's shape, and its own weight and bias [C] as Mul and
// Add of the image by [C, 1, 1] views (Note [parameter views]). The three nodes are one pattern
// (GroupNorm, onnx_patterns.cpp): remat's layernorm over all of x's axes with `groups` G, whose
// rows are the G contiguous runs of C / G channels, the same values in the same order as the
// reshaped [N, G, L], without a copy either way; the Mul and Add are the learned layer scale and
// bias of onnx_broadcast_ops.cpp (a depthwise 1 x 1 conv2d, a learned add_constant).

namespace {

// The ONNX data x's normalized axes from `axis` on (its rank's axes, the batch first): remat's
// per-sample shape's trailing dims.
Shape row_dims(const DataValue& x, int64_t axes) {
  return Shape(x.sample.end() - axes, x.sample.end());
}

// Input k, a weight of the norm, as an initializer of dims `want`, else an error.
void require_weight(Translator& t, int k, const std::string& what, const Shape& want) {
  if (!t.is_initializer(k))
    t.fail(what + " (input " + std::to_string(k) + ") must be an initializer: remat trains "
           "weights it owns, and this one is computed");
  if (t.initializer_dims(k) != want)
    t.fail(what + " must be " + shape_str(want) + " (the normalized dimensions), got " +
           shape_str(t.initializer_dims(k)));
}

void layer_norm(Translator& t) {
  const DataValue x = t.data(0, kSeqFirstRows);
  const int64_t rank = onnx_rank(x);
  const int64_t axis = normalize_axis(t.attr_int("axis", -1), rank, t.where());
  // ONNX's axis 1 of a sequence-first value is the batch (Note [sequence-first values]).
  const int64_t first = x.seq_first ? 2 : 1;
  if (axis < first)
    t.fail("a normalization over axes from " + std::to_string(axis) +
           " would mix the batch's samples; only axes after the batch are supported");
  if (x.remat != x.sample) t.fail("data that remat holds as " + shape_str(x.remat) +
                                  " is not supported, only " + shape_str(x.sample));
  if (!t.has(2)) t.fail("a LayerNormalization without a bias is not supported");
  t.require_unused_outputs(1);
  emit_layernorm(t, x, 1, 2, short_float(t.attr_float("epsilon", 1e-5)), rank - axis);
}

// Whether inputs `first` and first + 1 are the constants 1 and 0 (no affine after the
// normalization).
bool identity_affine(Translator& t, int first = 1) {
  for (int k : {first, first + 1}) {
    if (!t.is_const(k) || t.is_module_tensor(k)) return false;
    const OnnxConst& c = t.konst(k);
    if (!c.is_float) return false;
    for (double v : c.f)
      if (v != (k == first ? 1.0 : 0.0)) return false;
  }
  return true;
}

}  // namespace

void group_norm_pattern(Translator& t) {
  const DataValue x = as_sample_shape(t, t.data(0));
  if (x.remat != x.sample || x.sample.size() < 2)
    t.fail("expects data [N, C, ...], got " + shape_str(x.sample) + " per sample");
  const Shape grouped = reshape_target(t, x.sample, t.konst(1));
  const int64_t c = x.sample[0], g = grouped.empty() ? 0 : grouped[0];
  if (grouped.size() != 2 || g < 1 || c % g != 0)
    t.fail("a Reshape of " + shape_str(x.sample) + " to " + shape_str(grouped) +
           " per sample before an InstanceNormalization is not a grouping of the channels [G, "
           "C / G ...]");
  if (!identity_affine(t, 2))
    t.fail("an InstanceNormalization of grouped channels with a scale and bias other than 1 "
           "and 0 is not supported (nn.GroupNorm exports 1 and 0)");
  if (reshape_target(t, grouped, t.konst(4)) != x.sample)
    t.fail("the normalized groups are not reshaped back to " + shape_str(x.sample));
  AttrMap a;
  a.set("eps", short_float(t.attr_float("epsilon", 1e-5)));
  a.set("axes", static_cast<int64_t>(x.sample.size()));
  a.set("affine", false);
  if (g > 1) a.set("groups", g);
  t.emit("layernorm", {x}, a, {}, x.sample, x.sample);
}

namespace {

void instance_norm(Translator& t) {
  const DataValue x = as_sample_shape(t, t.data(0));
  const int64_t rank = onnx_rank(x);
  if (rank < 3 || x.remat != x.sample)
    t.fail("expects data [N, C, ...] of rank 3 or more, got " + shape_str(x.sample) +
           " per sample");
  const int64_t c = x.sample[0];
  const bool affine = !identity_affine(t);
  if (affine) {
    if (!t.is_module_tensor(1) || !t.is_module_tensor(2))
      t.fail("a scale and bias other than the constants 1 and 0 must both be the module's "
             "parameters [C]");
    if (rank != 4)
      t.fail("a learned scale and bias are supported for an image [N, C, H, W] only, got " +
             shape_str(x.sample) + " per sample");
    require_weight(t, 1, "the scale", {c});
    require_weight(t, 2, "the bias", {c});
  }
  AttrMap a;
  a.set("eps", short_float(t.attr_float("epsilon", 1e-5)));
  a.set("axes", rank - 2);
  a.set("affine", false);
  if (!affine) return (void)t.emit("layernorm", {x}, a, {}, x.sample, x.sample);
  const DataValue y = t.emit("layernorm", {x}, a, {}, x.sample, x.sample);
  AttrMap conv;
  conv.set("filters", c);
  conv.set("kernel", int64_t{1});
  conv.set("groups", c);
  t.emit("conv2d", {y}, conv,
         {{"weight", t.node().input(1), {c, 1, 1, 1}, {}}, {"bias", t.node().input(2), {c}, {}}},
         x.sample, x.sample);
}

}  // namespace

void emit_layernorm(Translator& t, const DataValue& x, int scale, int bias, double eps,
                    int64_t axes) {
  const Shape row = row_dims(x, axes);
  require_weight(t, scale, "the scale", row);
  require_weight(t, bias, "the bias", row);
  AttrMap a;
  a.set("eps", eps);
  if (axes != 1) a.set("axes", axes);
  t.emit("layernorm", {x}, a,
         {{"weight", t.node().input(scale), row, {}}, {"bias", t.node().input(bias), row, {}}},
         x.sample, x.remat);
}

std::map<std::string, TranslateFn> with_norm_ops(std::map<std::string, TranslateFn> ops) {
  ops["LayerNormalization"] = layer_norm;
  ops["InstanceNormalization"] = instance_norm;
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
