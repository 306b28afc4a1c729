// concat: joins 2+ inputs along axis 1 (channels of [N, C, H, W], or features of [N, F]), along
// the last axis of channels-last [N, H, W, C] (data_format, Note [channels-last layout] in
// models/channels_last.cpp), or with `axis` along any axis after the batch of any rank (the
// gradient of a split, Note [split gradients] in runtime/graph/autodiff.cpp); its gradient
// emits one concat_slice [dy] per input, with that input's {offset, channels}. channel_slice
// is the same copy as a layer (ONNX's Slice of channels, torch.chunk; with `axis`, of any axis
// after the batch: qkv[i] of Swin's [N, nW, T, 3, H, D]), whose gradient channel_slice_grad
// puts dy at its channels of zeros. The kernels see any of these as rows of channels of
// `inner` elements: [N, C, inner], [N H W, C, 1] channels-last, or [the axes before `axis`, C,
// the axes after].
#include <algorithm>
#include <memory>

#include "ops/concat.h"
#include "ops/cpu_storage.h"
#include "ops/data_format.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

struct ConcatAttrs : OpAttrs {
  bool channels_last = false;  // 4-D inputs [N, H, W, C]: join along the last axis
  int64_t axis = 1;            // the joined axis (after the batch; channels_last: the last)
};

struct ConcatSliceAttrs : OpAttrs {
  int64_t offset = 0;    // first channel of the slice in dy
  int64_t channels = 0;  // channels in the slice
  bool channels_last = false;
  int64_t axis = 1;  // the sliced axis (channel_slice's `axis`; channels_last: the last)
};

OpAttrsPtr concat_parse(AttrReader& r) {
  auto a = std::make_shared<ConcatAttrs>();
  a->channels_last = read_channels_last(r);
  a->axis = r.get_int("axis", 1, 1, 16);
  if (a->channels_last && a->axis != 1)
    r.fail("axis", "concat: an axis with channels-last data is not supported");
  r.finish("concat");
  return a;
}

OpAttrsPtr slice_parse(AttrReader& r, const char* op) {
  auto a = std::make_shared<ConcatSliceAttrs>();
  a->offset = r.require_int("offset", 0, int64_t{1} << 40);
  a->channels = r.require_int("channels", 1, int64_t{1} << 40);
  a->channels_last = read_channels_last(r);
  a->axis = r.get_int("axis", 1, 1, 16);
  if (a->channels_last && a->axis != 1)
    r.fail("axis", std::string(op) + ": an axis with channels-last data is not supported");
  r.finish(op);
  return a;
}

// channel_slice_grad: dy's channels placed at [offset, offset + dy's channels) of `total`.
struct ChannelPadAttrs : OpAttrs {
  int64_t offset = 0;
  int64_t total = 0;
  bool channels_last = false;
  int64_t axis = 1;
};

OpAttrsPtr channel_pad_parse(AttrReader& r) {
  auto a = std::make_shared<ChannelPadAttrs>();
  a->offset = r.require_int("offset", 0, int64_t{1} << 40);
  a->total = r.require_int("total", 1, int64_t{1} << 40);
  a->channels_last = read_channels_last(r);
  a->axis = r.get_int("axis", 1, 1, 16);
  r.finish("channel_slice_grad");
  return a;
}

// The channel axis of a shape: `axis` (1 unless a slice names another), or the last one of a
// channels-last 4-D tensor.
size_t channel_axis(const Shape& s, bool channels_last, int64_t axis = 1) {
  return channels_last && s.size() == 4 ? 3 : static_cast<size_t>(axis);
}

// A tensor as rows of channels of `inner` elements each.
struct Rows {
  int64_t n, c, inner;
};
Rows rows_of(const Shape& s, bool channels_last, int64_t axis = 1) {
  const size_t a = channel_axis(s, channels_last, axis);
  int64_t n = 1, inner = 1;  // rows: the axes before the channels; elements per channel: after
  for (size_t i = 0; i < a; ++i) n *= s[i];
  for (size_t i = a + 1; i < s.size(); ++i) inner *= s[i];
  return {n, s[a], inner};
}

TensorDesc concat_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const ConcatAttrs&>(at);
  if (in.size() < 2) REMAT_USER_ERROR("concat expects at least 2 inputs, got " << in.size());
  const DType t = require_float("concat", in);
  const Shape& s0 = in[0].shape;
  if (a.axis == 1 && (s0.size() < 2 || s0.size() > 4))  // as channel_slice, which it joins
    REMAT_USER_ERROR("concat expects [N, C, H, W], [N, T, C] (rows along T) or [N, F] inputs, "
                     "got " << shape_str(s0));
  if (a.axis >= static_cast<int64_t>(s0.size()))
    REMAT_USER_ERROR("concat: axis " << a.axis << " of " << shape_str(s0)
                                     << ", which has no such axis");
  const size_t axis = channel_axis(s0, a.channels_last, a.axis);
  Shape out = s0;
  for (size_t i = 1; i < in.size(); ++i) {
    const Shape& s = in[i].shape;
    bool ok = s.size() == s0.size();
    for (size_t d = 0; ok && d < s.size(); ++d) ok = d == axis || s[d] == s0[d];
    if (!ok)
      REMAT_USER_ERROR("concat inputs must match in every dimension but "
                       << axis << ", got " << shape_str(s0) << " (input 0) and "
                       << shape_str(s) << " (input " << i << ")");
    out[axis] += s[axis];
  }
  return TensorDesc{out, t};
}

// y[n, off_i : off_i + C_i] = x_i[n] for each input i (rows of the output's channels).
void concat_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<ConcatAttrs>(*ctx.node);
  const Rows o = rows_of(ctx.output.shape(), a.channels_last, a.axis);
  const int64_t out_image = o.c * o.inner;
  float* y = ctx.output.f32();
  int64_t off = 0;
  for (const TensorView& x : ctx.inputs) {
    const int64_t chunk = rows_of(x.shape(), a.channels_last, a.axis).c * o.inner;
    for (int64_t i = 0; i < o.n; ++i)
      std::copy(x.f32() + i * chunk, x.f32() + (i + 1) * chunk, y + i * out_image + off);
    off += chunk;
  }
}

TensorDesc slice_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const ConcatSliceAttrs&>(at);
  const DType t = require_float("channel_slice", in);
  Shape s = in.at(0).shape;
  if (a.axis == 1 && (s.size() < 2 || s.size() > 4))
    REMAT_USER_ERROR("channel_slice expects [N, C, H, W], [N, T, C] (rows along T) or [N, F], got "
                     << shape_str(s));
  if (a.axis >= static_cast<int64_t>(s.size()))
    REMAT_USER_ERROR("channel_slice: axis " << a.axis << " of " << shape_str(s)
                                            << " (the axes after the batch are 1 .. "
                                            << s.size() - 1 << ")");
  const size_t axis = channel_axis(s, a.channels_last, a.axis);
  if (a.offset + a.channels > s[axis])
    REMAT_USER_ERROR("channel_slice: channels [" << a.offset << ", " << a.offset + a.channels
                                                 << ") are outside the input's " << s[axis]);
  s[axis] = a.channels;
  return TensorDesc{s, t};
}

TensorDesc channel_pad_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const ChannelPadAttrs&>(at);
  Shape s = in.at(0).shape;
  const size_t axis = channel_axis(s, a.channels_last, a.axis);
  REMAT_CHECK(s.size() > axis && a.offset + s[axis] <= a.total,
              "channel_slice_grad: " << shape_str(s) << " at " << a.offset << " of " << a.total);
  s[axis] = a.total;
  return TensorDesc{s, in[0].dtype};
}

// dx[n] = dy[n, offset : offset + channels] (rows of dy's channels).
void concat_slice_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<ConcatSliceAttrs>(*ctx.node);
  const TensorView& dy = ctx.inputs[0];
  const Rows r = rows_of(dy.shape(), a.channels_last, a.axis);
  const int64_t in_image = r.c * r.inner, chunk = a.channels * r.inner;
  for (int64_t i = 0; i < r.n; ++i) {
    const float* src = dy.f32() + i * in_image + a.offset * r.inner;
    std::copy(src, src + chunk, ctx.output.f32() + i * chunk);
  }
}

// dx = zeros; dx[n, offset : offset + channels] = dy[n] (rows of dx's channels).
void channel_pad_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<ChannelPadAttrs>(*ctx.node);
  const TensorView& dy = ctx.inputs[0];
  const Rows r = rows_of(ctx.output.shape(), a.channels_last, a.axis);
  const int64_t chunk = rows_of(dy.shape(), a.channels_last, a.axis).c * r.inner;
  float* dx = ctx.output.f32();
  std::fill(dx, dx + ctx.output.numel(), 0.0f);
  for (int64_t i = 0; i < r.n; ++i)
    std::copy(dy.f32() + i * chunk, dy.f32() + (i + 1) * chunk,
              dx + i * r.c * r.inner + a.offset * r.inner);
}

#ifdef REMAT_HAVE_CUDA
// Copies of F32 or bf16 values (bf16_cuda_native).
void concat_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<ConcatAttrs>(*ctx.node);
  const Rows o = rows_of(ctx.output.shape(), a.channels_last, a.axis);
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    int64_t off = 0;
    for (const TensorView& x : ctx.inputs) {
      const int64_t c = rows_of(x.shape(), a.channels_last, a.axis).c;
      concat_forward(storage<T>(ctx.output), storage<T>(x), o.n, c, o.c, off, o.inner,
                     cuda_stream(ctx));
      off += c;
    }
  });
}

void concat_slice_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<ConcatSliceAttrs>(*ctx.node);
  const TensorView& dy = ctx.inputs[0];
  const Rows r = rows_of(dy.shape(), a.channels_last, a.axis);
  with_storage(dy.desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    concat_slice_forward(storage<T>(ctx.output), storage<T>(dy), r.n, r.c, a.offset, a.channels,
                         r.inner, cuda_stream(ctx));
  });
}

// Zeros, then concat's copy of dy into its channels.
void channel_pad_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<ChannelPadAttrs>(*ctx.node);
  const TensorView& dy = ctx.inputs[0];
  const Rows r = rows_of(ctx.output.shape(), a.channels_last, a.axis);
  REMAT_CUDA_CHECK(cudaMemsetAsync(ctx.output.data, 0, static_cast<size_t>(ctx.output.desc->bytes()),
                                   cuda_stream(ctx)));
  with_storage(dy.desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    concat_forward(storage<T>(ctx.output), storage<T>(dy), r.n,
                   rows_of(dy.shape(), a.channels_last, a.axis).c,
                   r.c, a.offset, r.inner, cuda_stream(ctx));
  });
}
#endif

std::vector<ValueId> channel_slice_gradient(GradEmitter& g, const Node& fwd, ValueId dy) {
  const auto& a = attrs_of<ConcatSliceAttrs>(fwd);
  const TensorDesc x = g.graph().value(fwd.inputs.at(0)).desc;
  auto typed = std::make_shared<ChannelPadAttrs>();
  typed->offset = a.offset;
  typed->total = x.shape.at(channel_axis(x.shape, a.channels_last, a.axis));
  typed->channels_last = a.channels_last;
  typed->axis = a.axis;
  AttrMap m;
  m.origin = fwd.attrs.origin;
  m.set("offset", typed->offset);
  m.set("total", typed->total);
  if (a.axis != 1) m.set("axis", a.axis);
  if (a.channels_last) m.set("data_format", std::string("channels_last"));
  return {g.emit("grad", "channel_slice_grad", {dy}, x, m, typed)};
}

std::vector<ValueId> concat_gradient(GradEmitter& g, const Node& fwd, ValueId dy) {
  const std::vector<ValueId> in = fwd.inputs;  // a copy: emit() grows the graph
  const std::string origin = fwd.attrs.origin;
  const auto& a = attrs_of<ConcatAttrs>(fwd);
  const bool last = a.channels_last;
  const int64_t axis = a.axis;
  std::vector<TensorDesc> descs;
  for (ValueId v : in) descs.push_back(g.graph().value(v).desc);
  std::vector<ValueId> out;
  int64_t off = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    out.push_back(emit_concat_slice(g, "grad_" + std::to_string(i), dy, off, descs[i], origin,
                                    last, axis));
    off += descs[i].shape[channel_axis(descs[i].shape, last, axis)];
  }
  return out;
}

OpCost slice_cost(const OpAttrs&, const std::vector<TensorDesc>&, const TensorDesc& out) {
  OpCost c;
  c.bytes_moved = 2 * out.bytes();  // reads only the slice
  return c;
}

}  // namespace

ValueId emit_concat_slice(GradEmitter& g, const std::string& suffix, ValueId from, int64_t offset,
                          const TensorDesc& out, const std::string& origin, bool channels_last,
                          int64_t axis) {
  auto a = std::make_shared<ConcatSliceAttrs>();
  a->offset = offset;
  a->channels = out.shape.at(channel_axis(out.shape, channels_last, axis));
  a->channels_last = channels_last;
  a->axis = axis;
  AttrMap m;
  m.origin = origin;
  m.set("offset", a->offset);
  m.set("channels", a->channels);
  if (axis != 1) m.set("axis", axis);
  if (channels_last) m.set("data_format", std::string("channels_last"));
  return g.emit(suffix, "concat_slice", {from}, out, m, a);
}

void register_concat_ops(OpRegistry& r) {
  OpDef op;
  op.name = "concat";
  op.summary = "joins 2+ inputs along channels (axis 1) or `axis`";
  op.min_inputs = 2;
  op.max_inputs = -1;
  op.parse = concat_parse;
  op.channels_last = [](const OpAttrs& at, const std::vector<TensorDesc>& in) {
    return in.at(0).shape.size() == 4 && static_cast<const ConcatAttrs&>(at).axis == 1;
  };
  op.infer = concat_infer;
  op.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, 0);
  };
  op.cpu = concat_cpu;
#ifdef REMAT_HAVE_CUDA
  op.cuda = concat_cuda;
#endif
  op.gradient = concat_gradient;
  with_bf16_per_sample(op, -1).bf16_cuda_native = true;
  r.add(std::move(op));

  OpDef s;
  s.name = "concat_slice";
  s.summary = "channels [offset, offset + channels) of dy (concat's gradient)";
  s.user_visible = false;
  s.parse = [](AttrReader& rd) { return slice_parse(rd, "concat_slice"); };
  s.infer = slice_infer;
  s.cost = slice_cost;
  s.cpu = concat_slice_cpu;
#ifdef REMAT_HAVE_CUDA
  s.cuda = concat_slice_cuda;
#endif
  with_bf16_per_sample(s, 1).bf16_cuda_native = true;
  r.add(std::move(s));

  OpDef c;
  c.name = "channel_slice";
  c.summary = "channels [offset, offset + channels) of the input";
  c.parse = [](AttrReader& rd) { return slice_parse(rd, "channel_slice"); };
  c.infer = slice_infer;
  c.cost = slice_cost;
  c.channels_last = [](const OpAttrs& at, const std::vector<TensorDesc>& in) {
    // A slice of the channels only: one along another axis stays channels-first.
    return in.at(0).shape.size() == 4 && static_cast<const ConcatSliceAttrs&>(at).axis == 1;
  };
  c.cpu = concat_slice_cpu;
#ifdef REMAT_HAVE_CUDA
  c.cuda = concat_slice_cuda;
#endif
  c.gradient = channel_slice_gradient;
  with_bf16_per_sample(c, 1).bf16_cuda_native = true;
  r.add(std::move(c));

  OpDef p;
  p.name = "channel_slice_grad";
  p.summary = "dy at channels [offset, offset + dy's channels) of `total`, zeros elsewhere";
  p.user_visible = false;
  p.parse = channel_pad_parse;
  p.infer = channel_pad_infer;
  p.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    OpCost k;
    k.bytes_moved = in.at(0).bytes() + out.bytes();  // reads dy, writes every channel
    return k;
  };
  p.cpu = channel_pad_cpu;
#ifdef REMAT_HAVE_CUDA
  p.cuda = channel_pad_cuda;
#endif
  with_bf16_per_sample(p, 1).bf16_cuda_native = true;
  r.add(std::move(p));
}

}  // namespace remat
