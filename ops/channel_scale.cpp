// channel_scale [x, s]: x [N, C, H, W] times s [N, C], each H x W plane by its own scale (the
// squeeze-and-excitation gate of MobileNetV3, RegNetY and EfficientNet: x * sigmoid(fc(pool(x))),
// PyTorch's x * s[:, :, None, None]); channels-last too. With `axes` k (default 2), x of rank
// k or more and s its first k axes: each row of x's remaining axes times its own scale (x * r
// for r = rsqrt(mean(x^2, -1, keepdim)) of RMSNorm: x [N, T, D], s [N, T], k = 2); with k the
// rank, an elementwise product of two values of one shape (a gate). With `keep_last` m > 0, s
// also spans x's last m axes and broadcasts over those between (Note [kept axes] in
// ops/data_format.h): adaLN's and FiLM's x * s[:, None, :] of tokens [N, T, D], s [N, D]
// (axes 1, keep_last 1). Gradients: dx = channel_scale(dy, s), ds = channel_scale_grad [dy, x],
// the sum over each plane of dy * x (in double, rounded once).
#include "ops/cpu_storage.h"
#include "ops/data_format.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

struct ChannelScaleAttrs : OpAttrs {
  bool channels_last = false;  // data_format (Note [channels-last layout])
  int64_t axes = 2;            // the leading axes of x that s spans
  int64_t keep_last = 0;       // the trailing axes of x that s spans
};

OpAttrsPtr channel_scale_parse(AttrReader& r, const std::string& name) {
  auto a = std::make_shared<ChannelScaleAttrs>();
  a->channels_last = read_channels_last(r);
  a->axes = r.get_int("axes", 2, 1, 7);
  a->keep_last = r.get_int("keep_last", 0, 0, 6);
  if (a->channels_last && a->axes != 2) r.fail("axes", "must be 2 for a channels-last image");
  if (a->channels_last && a->keep_last != 0)
    r.fail("keep_last", "must be 0 for a channels-last image");
  r.finish(name);
  return a;
}

// x's planes: an image's H x W planes when channels-last, else the values of x that share a
// scale (Note [kept axes]).
ImageDims planes_of(const ChannelScaleAttrs& a, const Shape& x) {
  if (a.channels_last) return image_dims(x, true);
  return kept_axes_dims(x, a.axes, a.keep_last);
}

ImageDims dims_of(const ExecContext& c, int input) {
  return planes_of(attrs_of<ChannelScaleAttrs>(*c.node), c.inputs[input].desc->shape);
}

// s's shape for x: x's first `axes` axes ([N, C] of an image) and its last `keep_last`.
Shape scale_shape(const std::string& name, const ChannelScaleAttrs& a, const TensorDesc& x) {
  if (x.shape.size() != 4 && a.channels_last)
    REMAT_USER_ERROR(name << " expects an image [N, H, W, C], got " << shape_str(x.shape));
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank < a.axes)
    REMAT_USER_ERROR(name << " expects x of rank at least axes " << a.axes << ", got "
                          << shape_str(x.shape));
  if (a.keep_last > 0 && rank <= a.axes + a.keep_last)
    REMAT_USER_ERROR(name << " expects x of rank above axes + keep_last = "
                          << a.axes + a.keep_last << ", got " << shape_str(x.shape));
  if (a.channels_last) return Shape{x.shape[0], x.shape[3]};
  return kept_axes_shape(x.shape, a.axes, a.keep_last);
}

void channel_scale_cpu(const ExecContext& c) {
  const ImageDims d = dims_of(c, 0);
  const float* x = c.inputs[0].f32();
  const float* s = c.inputs[1].f32();
  float* y = c.output.f32();
  for (int64_t q = 0; q < d.planes(); ++q) {
    const int64_t start = d.plane_start(q), step = d.pixel_stride();
    for (int64_t i = 0; i < d.plane(); ++i) y[start + i * step] = x[start + i * step] * s[q];
  }
}

// [dy, x] -> ds [N, C].
void channel_scale_grad_cpu(const ExecContext& c) {
  const ImageDims d = dims_of(c, 1);
  const float* dy = c.inputs[0].f32();
  const float* x = c.inputs[1].f32();
  float* ds = c.output.f32();
  for (int64_t q = 0; q < d.planes(); ++q) {
    const int64_t start = d.plane_start(q), step = d.pixel_stride();
    double sum = 0.0;
    for (int64_t i = 0; i < d.plane(); ++i)
      sum += static_cast<double>(dy[start + i * step]) * static_cast<double>(x[start + i * step]);
    ds[q] = static_cast<float>(sum);
  }
}

#ifdef REMAT_HAVE_CUDA
void channel_scale_cuda(const ExecContext& c) {
  const ImageDims d = dims_of(c, 0);
  with_storage(c.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    channel_scale_forward(storage<T>(c.output), storage<T>(c.inputs[0]), storage<T>(c.inputs[1]),
                          d.planes(), d.plane(), d.pixel_stride(), cuda_stream(c));
  });
}
void channel_scale_grad_cuda(const ExecContext& c) {
  const ImageDims d = dims_of(c, 1);
  with_storage(c.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    channel_scale_backward(storage<T>(c.output), storage<T>(c.inputs[0]),
                           storage<T>(c.inputs[1]), d.planes(), d.plane(), d.pixel_stride(),
                           cuda_stream(c));
  });
}
#endif

OpDef make_forward() {
  OpDef op;
  op.name = "channel_scale";
  op.summary =
      "[x, s]: x [N, C, H, W] times s [N, C] per H x W plane (squeeze-excitation; axes, keep_last)";
  op.min_inputs = op.max_inputs = 2;
  op.parse = [](AttrReader& r) { return channel_scale_parse(r, "channel_scale"); };
  op.infer = [](const OpAttrs& a, const std::vector<TensorDesc>& in) {
    require_float("channel_scale", in);
    const Shape s =
        scale_shape("channel_scale", static_cast<const ChannelScaleAttrs&>(a), in.at(0));
    if (in.at(1).shape != s)
      REMAT_USER_ERROR("channel_scale expects a scale " << shape_str(s) << " for x "
                       << shape_str(in[0].shape) << ", got " << shape_str(in[1].shape));
    return in[0];
  };
  op.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, 1);
  };
  op.cpu = channel_scale_cpu;
#ifdef REMAT_HAVE_CUDA
  op.cuda = channel_scale_cuda;
#endif
  op.channels_last = [](const OpAttrs& a, const std::vector<TensorDesc>& in) {
    const auto& c = static_cast<const ChannelScaleAttrs&>(a);
    return c.axes == 2 && c.keep_last == 0 && in.at(0).shape.size() == 4;
  };
  with_bf16_per_sample(op, -1).bf16_cuda_native = true;
  op.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) {
    const TensorDesc x = g.graph().value(fwd.inputs[0]).desc;  // copies: emit grows the graph
    const TensorDesc s = g.graph().value(fwd.inputs[1]).desc;
    const ValueId dx = g.emit("grad_x", "channel_scale", {dy, fwd.inputs[1]}, x);
    const ValueId ds = g.emit("grad_scale", "channel_scale_grad", {dy, fwd.inputs[0]}, s);
    return std::vector<ValueId>{dx, ds};
  };
  return op;
}

OpDef make_grad() {
  OpDef op;
  op.name = "channel_scale_grad";
  op.summary = "channel_scale's scale gradient [dy, x] -> s's shape: sum over each plane of dy x";
  op.user_visible = false;
  op.min_inputs = op.max_inputs = 2;
  op.parse = [](AttrReader& r) { return channel_scale_parse(r, "channel_scale_grad"); };
  op.infer = [](const OpAttrs& a, const std::vector<TensorDesc>& in) {
    require_float("channel_scale_grad", in);
    const Shape s =
        scale_shape("channel_scale_grad", static_cast<const ChannelScaleAttrs&>(a), in.at(1));
    if (!(in.at(0) == in[1]))
      REMAT_USER_ERROR("channel_scale_grad expects dy and x of one shape, got "
                       << shape_str(in[0].shape) << " and " << shape_str(in[1].shape));
    return TensorDesc{s, in[1].dtype};
  };
  op.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    OpCost c;
    c.flops = 2.0 * static_cast<double>(in.at(0).numel());  // a product and a sum per value
    c.bytes_moved = io_bytes(in, out);
    return c;
  };
  op.cpu = channel_scale_grad_cpu;
#ifdef REMAT_HAVE_CUDA
  op.cuda = channel_scale_grad_cuda;
#endif
  with_bf16_per_sample(op, -1).bf16_cuda_native = true;
  return op;
}

}  // namespace

void register_channel_scale_ops(OpRegistry& r) {
  r.add(make_forward());
  r.add(make_grad());
}

}  // namespace remat
