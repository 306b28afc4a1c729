// layout: an image tensor stored the other way (`to: channels_last` [N, C, H, W] -> [N, H, W, C],
// `to: channels_first` back). The graph builder inserts it where a channels-last model's layout
// changes (Note [channels-last layout] in models/channels_last.cpp): after the input batch,
// before an op that has no channels-last form, before the loss. A permutation: exact in any
// dtype, its gradient the permutation back. The solver plans its output like any activation.
#include <memory>

#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

struct LayoutAttrs : OpAttrs {
  bool to_channels_last = true;
};

OpAttrsPtr layout_parse(AttrReader& r) {
  auto a = std::make_shared<LayoutAttrs>();
  if (!r.has("to")) r.fail("to", "is required (channels_last or channels_first)");
  a->to_channels_last =
      r.get_choice("to", "channels_last", {"channels_last", "channels_first"}) == "channels_last";
  r.finish("layout");
  return a;
}

TensorDesc layout_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const DType t = require_float("layout", in);
  const Shape& s = in.at(0).shape;
  if (s.size() != 4)
    REMAT_USER_ERROR("layout expects a 4-D image tensor, got " << shape_str(s));
  if (static_cast<const LayoutAttrs&>(at).to_channels_last)
    return TensorDesc{{s[0], s[2], s[3], s[1]}, t};
  return TensorDesc{{s[0], s[3], s[1], s[2]}, t};
}

// Per sample, [rows, cols] -> [cols, rows]: NCHW -> NHWC is rows = C, cols = H * W.
struct Transpose {
  int64_t batch, rows, cols;
};
Transpose transpose_of(const ExecContext& ctx) {
  const Shape& s = ctx.inputs.at(0).shape();
  if (attrs_of<LayoutAttrs>(*ctx.node).to_channels_last) return {s[0], s[1], s[2] * s[3]};
  return {s[0], s[1] * s[2], s[3]};
}

template <typename T>
void transpose_cpu(T* dst, const T* src, const Transpose& t) {
  const int64_t image = t.rows * t.cols;
  for (int64_t n = 0; n < t.batch; ++n) {
    const T* a = src + n * image;
    T* b = dst + n * image;
    for (int64_t r = 0; r < t.rows; ++r)
      for (int64_t c = 0; c < t.cols; ++c) b[c * t.rows + r] = a[r * t.cols + c];
  }
}

void layout_cpu(const ExecContext& ctx) {
  const Transpose t = transpose_of(ctx);
  if (ctx.output.desc->dtype == DType::BF16)
    transpose_cpu(ctx.output.bf16(), ctx.inputs[0].bf16(), t);
  else
    transpose_cpu(ctx.output.f32(), ctx.inputs[0].f32(), t);
}

#ifdef REMAT_HAVE_CUDA
void layout_cuda(const ExecContext& ctx) {
  const Transpose t = transpose_of(ctx);
  if (ctx.output.desc->dtype == DType::BF16)
    transpose_batched(ctx.output.bf16(), ctx.inputs[0].bf16(), t.batch, t.rows, t.cols,
                      cuda_stream(ctx));
  else
    transpose_batched(ctx.output.f32(), ctx.inputs[0].f32(), t.batch, t.rows, t.cols, false,
                      cuda_stream(ctx));
}
#endif

}  // namespace

void register_layout_ops(OpRegistry& r) {
  OpDef op;
  op.name = "layout";
  op.summary = "an image tensor stored channels-last or channels-first (to: channels_last | "
               "channels_first)";
  op.user_visible = false;  // a layer of it would hide the layout from the builder
  op.parse = layout_parse;
  op.infer = layout_infer;
  op.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, 0);
  };
  op.cpu = layout_cpu;
#ifdef REMAT_HAVE_CUDA
  op.cuda = layout_cuda;
#endif
  op.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) -> std::vector<ValueId> {
    const TensorDesc x = g.graph().value(fwd.inputs.at(0)).desc;  // a copy: emit grows the graph
    AttrMap m;
    m.origin = fwd.attrs.origin;
    m.set("to", std::string(attrs_of<LayoutAttrs>(fwd).to_channels_last ? "channels_first"
                                                                         : "channels_last"));
    AttrReader rd(m);
    OpAttrsPtr typed = layout_parse(rd);
    return {g.emit("grad", "layout", {dy}, x, m, typed)};
  };
  with_bf16(op).bf16_cpu_native = true;
  op.bf16_cuda_native = true;
  r.add(std::move(op));
}

}  // namespace remat
