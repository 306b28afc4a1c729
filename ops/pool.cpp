// Pooling over [N, C, H, W]: maxpool, avgpool (the divisor counts the padding, or with
// count_include_pad: false only the window's real elements, TensorFlow's rule) and
// global_avgpool ([N, C, H, W] -> [N, C]), with their backward ops. Padding may differ per side
// or be TensorFlow's 'same' (Note [same padding] in ops/padding.h); padding never wins a max.
// In a channels-last model (Note [channels-last layout] in models/channels_last.cpp) the
// tensors may be [N, H, W, C] instead (attribute data_format).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ops/data_format.h"
#include "ops/op_common.h"
#include "ops/padding.h"
#include "ops/pool_cuda.h"
#include "ops/registry.h"
#include "runtime/core/check.h"

namespace remat {
namespace {

// Window geometry. Backward ops that see only dy also carry the input size (in_h, in_w), read
// from the attribute "input_size" their gradient rule adds (floor division loses it).
struct PoolAttrs : OpAttrs {
  int64_t kh = 1, kw = 1, sh = 1, sw = 1;
  PaddingSpec pad;
  bool count_pad = true;  // avgpool: divide by kh * kw (else by the window's real elements)
  int64_t in_h = 0, in_w = 0;
  bool channels_last = false;  // data_format: [N, H, W, C] (Note [channels-last layout])
  Pads pads(int64_t h, int64_t w) const { return padding_resolve(pad, h, w, kh, kw, sh, sw); }
  ImageDims dims(const Shape& s) const { return image_dims(s, channels_last); }
};

constexpr int64_t kMaxDim = int64_t(1) << 20;

std::string hw_str(int64_t h, int64_t w) {
  return h == w ? std::to_string(h) : std::to_string(h) + "x" + std::to_string(w);
}

void read_input_size(AttrReader& r, PoolAttrs* a) {
  if (!r.has("input_size")) r.fail("input_size", "is required");
  auto s = r.get_ints("input_size", 2, {}, 1, kMaxDim);
  a->in_h = s[0];
  a->in_w = s[1];
}

// `average`: the op reads count_include_pad (avgpool and its gradient).
OpAttrsPtr window_parse(AttrReader& r, const std::string& op_name, bool with_input_size,
                        bool average) {
  auto a = std::make_shared<PoolAttrs>();
  if (!r.has("kernel")) r.fail("kernel", "is required");
  auto k = r.get_ints("kernel", 2, {}, 1, kMaxDim);
  auto s = r.get_ints("stride", 2, k, 1, kMaxDim);
  a->pad = padding_parse(r, "padding", kMaxDim, true);
  const PaddingSpec& p = a->pad;  // 'same' pads at most ceil((kernel - 1) / 2) = kernel / 2
  for (int axis = 0; axis < 2; ++axis)
    for (int64_t side : axis == 0 ? std::vector<int64_t>{p.top, p.bottom}
                                  : std::vector<int64_t>{p.left, p.right})
      if (side > k[axis] / 2)
        r.fail("padding", "padding " + std::to_string(side) +
                              " must be at most half the kernel " + std::to_string(k[axis]));
  a->kh = k[0], a->kw = k[1], a->sh = s[0], a->sw = s[1];
  if (average) a->count_pad = r.get_bool("count_include_pad", true);
  if (with_input_size) read_input_size(r, a.get());
  a->channels_last = read_channels_last(r);
  r.finish(op_name);
  return a;
}

OpAttrsPtr global_parse(AttrReader& r, const std::string& op_name, bool with_input_size) {
  auto a = std::make_shared<PoolAttrs>();
  if (with_input_size) read_input_size(r, a.get());
  a->channels_last = read_channels_last(r);
  r.finish(op_name);
  return a;
}

void check_nchw(const TensorDesc& x, const std::string& op) {
  if (!dtype_is_float(x.dtype) || x.shape.size() != 4)
    REMAT_USER_ERROR(op << " expects an f32 or bf16 [N, C, H, W] input, got " << dtype_name(x.dtype) << " "
                        << shape_str(x.shape));
}

TensorDesc window_out(const PoolAttrs& a, const TensorDesc& x, const std::string& op) {
  check_nchw(x, op);
  const ImageDims d = a.dims(x.shape);
  const Pads p = a.pads(d.h, d.w);
  const int64_t h = d.h + p.top + p.bottom, w = d.w + p.left + p.right;
  if (a.kh > h || a.kw > w)
    REMAT_USER_ERROR(op << " kernel " << hw_str(a.kh, a.kw) << " larger than padded input " << h
                        << "x" << w);
  return TensorDesc{
      ImageDims{d.n, d.c, (h - a.kh) / a.sh + 1, (w - a.kw) / a.sw + 1, a.channels_last}.shape(),
      x.dtype};
}

// Input descriptor of a dy-only backward op, checked against dy.
TensorDesc grad_input_desc(const PoolAttrs& a, const TensorDesc& dy, const std::string& op,
                           bool global) {
  const int64_t c = global || !a.channels_last ? dy.shape.at(1) : dy.shape.at(3);
  const TensorDesc x{ImageDims{dy.shape.at(0), c, a.in_h, a.in_w, a.channels_last}.shape(),
                     dy.dtype};
  const TensorDesc expect =
      global ? TensorDesc{{dy.shape[0], c}, dy.dtype} : window_out(a, x, op);
  if (!(expect == dy))
    REMAT_USER_ERROR(op << ": gradient " << shape_str(dy.shape) << " does not match input size "
                        << a.in_h << "x" << a.in_w << " (expected " << shape_str(expect.shape)
                        << ")");
  return x;
}

OpCost simple_cost(const std::vector<TensorDesc>& in, const TensorDesc& out, double flops) {
  OpCost c;
  c.flops = flops;
  c.bytes_moved = io_bytes(in, out);
  return c;
}

// The window of output (oh, ow) clipped to the real input: rows [h0, h1), cols [w0, w1).
struct Window {
  int64_t h0, h1, w0, w1;
};
Window window_at(const PoolAttrs& a, const Pads& p, int64_t oh, int64_t ow, int64_t H,
                 int64_t W) {
  const int64_t hs = oh * a.sh - p.top, ws = ow * a.sw - p.left;
  return {std::max<int64_t>(hs, 0), std::min(hs + a.kh, H), std::max<int64_t>(ws, 0),
          std::min(ws + a.kw, W)};
}

// Pixel index (h * W + w) of the first maximum of the window in row-major scan order.
int64_t window_argmax(const float* plane, int64_t pixel, const Window& win, int64_t W) {
  int64_t best = win.h0 * W + win.w0;
  for (int64_t h = win.h0; h < win.h1; ++h)
    for (int64_t w = win.w0; w < win.w1; ++w)
      if (plane[(h * W + w) * pixel] > plane[best * pixel]) best = h * W + w;
  return best;
}

// inputs [x [N,C,H,W]] -> y [N,C,Ho,Wo] (or both NHWC).
void maxpool_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<PoolAttrs>(*ctx.node);
  const ImageDims x = a.dims(ctx.inputs[0].shape()), y = a.dims(ctx.output.shape());
  const int64_t H = x.h, W = x.w, Ho = y.h, Wo = y.w;
  const Pads pads = a.pads(H, W);
  for (int64_t p = 0; p < x.planes(); ++p) {
    const float* xp = ctx.inputs[0].f32() + x.plane_start(p);
    float* yp = ctx.output.f32() + y.plane_start(p);
    const int64_t xs = x.pixel_stride(), ys = y.pixel_stride();
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow)
        yp[(oh * Wo + ow) * ys] = xp[window_argmax(xp, xs, window_at(a, pads, oh, ow, H, W), W) * xs];
  }
}

// inputs [dy, x, y] -> dx like x; the first maximum of each window (scan order) gets dy.
// y is unused here (cuDNN's pooling backward needs it).
void maxpool_grad_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<PoolAttrs>(*ctx.node);
  const ImageDims x = a.dims(ctx.inputs[1].shape()), dy = a.dims(ctx.inputs[0].shape());
  const int64_t H = x.h, W = x.w, Ho = dy.h, Wo = dy.w;
  const Pads pads = a.pads(H, W);
  std::memset(ctx.output.data, 0, static_cast<size_t>(ctx.output.desc->bytes()));
  for (int64_t p = 0; p < x.planes(); ++p) {
    const float* xp = ctx.inputs[1].f32() + x.plane_start(p);
    const float* dyp = ctx.inputs[0].f32() + dy.plane_start(p);
    float* dxp = ctx.output.f32() + x.plane_start(p);
    const int64_t xs = x.pixel_stride();
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow)
        dxp[window_argmax(xp, xs, window_at(a, pads, oh, ow, H, W), W) * xs] +=
            dyp[(oh * Wo + ow) * dy.pixel_stride()];
  }
}

// 1 / the divisor of a window's average: kh * kw (padding counts), or the window's real
// elements (count_include_pad: false). kernels/pool.cu computes the same float.
float avg_scale(const PoolAttrs& a, const Window& win) {
  const int64_t n = a.count_pad ? a.kh * a.kw : (win.h1 - win.h0) * (win.w1 - win.w0);
  return 1.0f / static_cast<float>(n);
}

// inputs [x] -> y = (sum of the window, row-major) * avg_scale.
void avgpool_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<PoolAttrs>(*ctx.node);
  const ImageDims x = a.dims(ctx.inputs[0].shape()), y = a.dims(ctx.output.shape());
  const int64_t H = x.h, W = x.w, Ho = y.h, Wo = y.w;
  const Pads pads = a.pads(H, W);
  for (int64_t p = 0; p < x.planes(); ++p) {
    const float* xp = ctx.inputs[0].f32() + x.plane_start(p);
    float* yp = ctx.output.f32() + y.plane_start(p);
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        const Window win = window_at(a, pads, oh, ow, H, W);
        float s = 0;
        for (int64_t h = win.h0; h < win.h1; ++h)
          for (int64_t w = win.w0; w < win.w1; ++w) s += xp[(h * W + w) * x.pixel_stride()];
        yp[(oh * Wo + ow) * y.pixel_stride()] = s * avg_scale(a, win);
      }
  }
}

// inputs [dy] -> dx [N,C,in_h,in_w] (or NHWC): each window spreads dy * avg_scale.
void avgpool_grad_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<PoolAttrs>(*ctx.node);
  const ImageDims dx = a.dims(ctx.output.shape()), dy = a.dims(ctx.inputs[0].shape());
  const int64_t H = dx.h, W = dx.w, Ho = dy.h, Wo = dy.w;
  const Pads pads = a.pads(H, W);
  std::memset(ctx.output.data, 0, static_cast<size_t>(ctx.output.desc->bytes()));
  for (int64_t p = 0; p < dx.planes(); ++p) {
    const float* dyp = ctx.inputs[0].f32() + dy.plane_start(p);
    float* dxp = ctx.output.f32() + dx.plane_start(p);
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        const Window win = window_at(a, pads, oh, ow, H, W);
        const float g = dyp[(oh * Wo + ow) * dy.pixel_stride()] * avg_scale(a, win);
        for (int64_t h = win.h0; h < win.h1; ++h)
          for (int64_t w = win.w0; w < win.w1; ++w) dxp[(h * W + w) * dx.pixel_stride()] += g;
      }
  }
}

// inputs [x [N,C,H,W] or [N,H,W,C]] -> y [N,C] (mean over H, W).
void global_avgpool_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<PoolAttrs>(*ctx.node);
  const ImageDims x = a.dims(ctx.inputs[0].shape());
  const int64_t hw = x.plane();
  for (int64_t p = 0; p < x.planes(); ++p) {
    const float* xp = ctx.inputs[0].f32() + x.plane_start(p);
    double s = 0;
    for (int64_t i = 0; i < hw; ++i) s += xp[i * x.pixel_stride()];
    ctx.output.f32()[p] = static_cast<float>(s / static_cast<double>(hw));
  }
}

// inputs [dy [N,C]] -> dx [N,C,in_h,in_w] (or NHWC) = dy / (H * W).
void global_avgpool_grad_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<PoolAttrs>(*ctx.node);
  const ImageDims dx = a.dims(ctx.output.shape());
  const int64_t hw = dx.plane();
  for (int64_t p = 0; p < dx.planes(); ++p) {
    const float g = ctx.inputs[0].f32()[p] / static_cast<float>(hw);
    float* dxp = ctx.output.f32() + dx.plane_start(p);
    for (int64_t i = 0; i < hw; ++i) dxp[i * dx.pixel_stride()] = g;
  }
}

// The forward node's attrs plus "input_size": [H, W] of its input, for dy-only backward ops.
AttrMap with_input_size(const Node& fwd, const TensorDesc& x) {
  const ImageDims d = attrs_of<PoolAttrs>(fwd).dims(x.shape);
  AttrMap m = fwd.attrs;
  m.set("input_size", std::vector<int64_t>{d.h, d.w});
  return m;
}

OpAttrsPtr with_input_size_typed(const Node& fwd, const TensorDesc& x) {
  auto a = std::make_shared<PoolAttrs>(attrs_of<PoolAttrs>(fwd));
  const ImageDims d = a->dims(x.shape);
  a->in_h = d.h;
  a->in_w = d.w;
  return a;
}

OpDef pool_op(const std::string& name, const std::string& summary, bool visible, int n_in) {
  OpDef op;
  op.name = name;
  op.summary = summary;
  op.user_visible = visible;
  op.kind = visible ? NodeKind::Forward : NodeKind::Backward;
  op.min_inputs = op.max_inputs = n_in;
  return op;
}

// kh * kw flops per element of the larger side (pooled output forward, dy backward).
OpCost window_cost(const OpAttrs& at, const std::vector<TensorDesc>& in, const TensorDesc& out) {
  const auto& a = static_cast<const PoolAttrs&>(at);
  const int64_t n = std::max(out.numel(), in.at(0).numel());
  return simple_cost(in, out, static_cast<double>(n * a.kh * a.kw));
}

OpCost plain_cost(const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
  return simple_cost(in, out, static_cast<double>(std::max(out.numel(), in.at(0).numel())));
}

#ifdef REMAT_HAVE_CUDA
// Attaches the CUDA pooling path (ops/pool_cuda.cpp) for a window op; the pads are those of
// the op's input (the forward's x, the backward's dx).
void set_pool_cuda(OpDef& op, bool max, bool backward) {
  op.cuda = [max, backward](const ExecContext& ctx) {
    const auto& a = attrs_of<PoolAttrs>(*ctx.node);
    const TensorView& x = backward ? ctx.output : ctx.inputs.at(0);
    const ImageDims d = a.dims(x.shape());
    const Pads pads = a.pads(d.h, d.w);
    PoolCudaParams p;
    p.kh = a.kh, p.kw = a.kw, p.sh = a.sh, p.sw = a.sw;
    p.top = pads.top, p.bottom = pads.bottom, p.left = pads.left, p.right = pads.right;
    p.count_pad = a.count_pad;
    p.max = max;
    p.channels_last = a.channels_last;
    if (backward) pool_backward_cuda(p, ctx);
    else pool_forward_cuda(p, ctx);
  };
}
#endif

void register_max_pool(OpRegistry& r) {
  OpDef mp = pool_op("maxpool", "max pooling (kernel, stride = kernel, padding: n, [h, w], "
                                "[top, bottom, left, right] or same)", true, 1);
  mp.parse = [](AttrReader& rd) { return window_parse(rd, "maxpool", false, false); };
  mp.infer = [](const OpAttrs& a, const std::vector<TensorDesc>& in) {
    return window_out(static_cast<const PoolAttrs&>(a), in.at(0), "maxpool");
  };
  mp.cost = window_cost;
  mp.cpu = maxpool_cpu;
  mp.channels_last = [](const OpAttrs&, const std::vector<TensorDesc>&) { return true; };
#ifdef REMAT_HAVE_CUDA
  set_pool_cuda(mp, true, false);
#endif
  mp.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) -> std::vector<ValueId> {
    const TensorDesc& x = g.graph().value(fwd.inputs.at(0)).desc;
    return {g.emit("grad", "maxpool_grad", {dy, fwd.inputs.at(0), fwd.output}, x)};
  };
  with_bf16_per_sample(mp, 1).bf16_cuda_native = true;
  r.add(std::move(mp));

  OpDef mg = pool_op("maxpool_grad", "maxpool input gradient [dy, x, y]", false, 3);
  mg.parse = [](AttrReader& rd) { return window_parse(rd, "maxpool_grad", false, false); };
  mg.infer = [](const OpAttrs&, const std::vector<TensorDesc>& in) {
    check_nchw(in.at(1), "maxpool_grad");
    require_float("maxpool_grad", in);
    return in.at(1);
  };
  mg.cost = window_cost;
  mg.cpu = maxpool_grad_cpu;
#ifdef REMAT_HAVE_CUDA
  set_pool_cuda(mg, true, true);
#endif
  with_bf16_per_sample(mg, 3).bf16_cuda_native = true;
  r.add(std::move(mg));
}

void register_avg_pool(OpRegistry& r) {
  OpDef ap =
      pool_op("avgpool", "average pooling (kernel, stride, padding, count_include_pad)", true, 1);
  ap.parse = [](AttrReader& rd) { return window_parse(rd, "avgpool", false, true); };
  ap.infer = [](const OpAttrs& a, const std::vector<TensorDesc>& in) {
    return window_out(static_cast<const PoolAttrs&>(a), in.at(0), "avgpool");
  };
  ap.cost = window_cost;
  ap.cpu = avgpool_cpu;
  ap.channels_last = [](const OpAttrs&, const std::vector<TensorDesc>&) { return true; };
#ifdef REMAT_HAVE_CUDA
  set_pool_cuda(ap, false, false);
#endif
  ap.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) -> std::vector<ValueId> {
    const TensorDesc& x = g.graph().value(fwd.inputs.at(0)).desc;
    return {g.emit("grad", "avgpool_grad", {dy}, x, with_input_size(fwd, x),
                   with_input_size_typed(fwd, x))};
  };
  with_bf16_per_sample(ap, 1).bf16_cuda_native = true;
  r.add(std::move(ap));

  OpDef ag = pool_op("avgpool_grad", "avgpool input gradient [dy]", false, 1);
  ag.parse = [](AttrReader& rd) { return window_parse(rd, "avgpool_grad", true, true); };
  ag.infer = [](const OpAttrs& a, const std::vector<TensorDesc>& in) {
    return grad_input_desc(static_cast<const PoolAttrs&>(a), in.at(0), "avgpool_grad", false);
  };
  ag.cost = window_cost;
  ag.cpu = avgpool_grad_cpu;
#ifdef REMAT_HAVE_CUDA
  set_pool_cuda(ag, false, true);
#endif
  with_bf16_per_sample(ag, 1).bf16_cuda_native = true;
  r.add(std::move(ag));
}

void register_global_pool(OpRegistry& r) {
  OpDef gp = pool_op("global_avgpool", "mean over H, W: [N, C, H, W] -> [N, C]", true, 1);
  gp.parse = [](AttrReader& rd) { return global_parse(rd, "global_avgpool", false); };
  gp.infer = [](const OpAttrs& a, const std::vector<TensorDesc>& in) {
    check_nchw(in.at(0), "global_avgpool");
    const ImageDims d = static_cast<const PoolAttrs&>(a).dims(in[0].shape);
    return TensorDesc{{d.n, d.c}, in[0].dtype};
  };
  gp.cost = plain_cost;
  gp.cpu = global_avgpool_cpu;
  gp.channels_last = [](const OpAttrs&, const std::vector<TensorDesc>&) { return true; };
#ifdef REMAT_HAVE_CUDA
  gp.cuda = [](const ExecContext& ctx) {
    global_avgpool_forward_cuda(ctx, attrs_of<PoolAttrs>(*ctx.node).channels_last);
  };
#endif
  gp.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) -> std::vector<ValueId> {
    const TensorDesc& x = g.graph().value(fwd.inputs.at(0)).desc;
    return {g.emit("grad", "global_avgpool_grad", {dy}, x, with_input_size(fwd, x),
                   with_input_size_typed(fwd, x))};
  };
  with_bf16_per_sample(gp, 1).bf16_cuda_native = true;
  r.add(std::move(gp));

  OpDef gg = pool_op("global_avgpool_grad", "global_avgpool input gradient [dy]", false, 1);
  gg.parse = [](AttrReader& rd) { return global_parse(rd, "global_avgpool_grad", true); };
  gg.infer = [](const OpAttrs& a, const std::vector<TensorDesc>& in) {
    const TensorDesc& dy = in.at(0);
    if (dy.shape.size() != 2)
      REMAT_USER_ERROR("global_avgpool_grad expects a [N, C] gradient, got "
                       << shape_str(dy.shape));
    return grad_input_desc(static_cast<const PoolAttrs&>(a), dy, "global_avgpool_grad", true);
  };
  gg.cost = plain_cost;
  gg.cpu = global_avgpool_grad_cpu;
#ifdef REMAT_HAVE_CUDA
  gg.cuda = [](const ExecContext& ctx) {
    global_avgpool_backward_cuda(ctx, attrs_of<PoolAttrs>(*ctx.node).channels_last);
  };
#endif
  with_bf16_per_sample(gg, 1).bf16_cuda_native = true;
  r.add(std::move(gg));
}

}  // namespace

void register_pool_ops(OpRegistry& r) {
  register_max_pool(r);
  register_avg_pool(r);
  register_global_pool(r);
}

}  // namespace remat
