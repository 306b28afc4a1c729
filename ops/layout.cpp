// The batched transposes of data: per sample, [rows, cols] -> [cols, rows], exact in any dtype,
// each one's gradient the transpose back; the solver plans their outputs like any activation.
// - layout: an image tensor stored the other way (`to: channels_last` [N, C, H, W] ->
//   [N, H, W, C], `to: channels_first` back). The graph builder inserts it where a channels-last
//   model's layout changes (Note [channels-last layout] in models/channels_last.cpp): after the
//   input batch, before an op that has no channels-last form, before the loss.
// - transpose (perm): a layer's permutation of its input that keeps the batch first and swaps
//   two adjacent blocks of per-sample dimensions (Note [block swaps] in ops/block_swap.h):
//   PyTorch's x.permute(0, 2, 3, 1) of an image (ConvNeXt's blocks, Swin's stages) and back,
//   x.transpose(1, 2) of tokens, window partitions. Its output is data, not an image in another
//   layout: a channels-last model converts its input to channels-first first.
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "ops/block_swap.h"
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

// Per sample, [rows, cols] -> [cols, rows] of `inner`-element vectors: NCHW -> NHWC is rows = C,
// cols = H * W, inner = 1.
struct Transpose {
  int64_t batch, rows, cols, inner = 1;
};
Transpose transpose_of(const ExecContext& ctx) {
  const Shape& s = ctx.inputs.at(0).shape();
  if (attrs_of<LayoutAttrs>(*ctx.node).to_channels_last) return {s[0], s[1], s[2] * s[3]};
  return {s[0], s[1] * s[2], s[3]};
}

template <typename T>
void transpose_cpu(T* dst, const T* src, const Transpose& t) {
  const int64_t e = t.inner, image = t.rows * t.cols * e;
  for (int64_t n = 0; n < t.batch; ++n) {
    const T* a = src + n * image;
    T* b = dst + n * image;
    for (int64_t r = 0; r < t.rows; ++r)
      for (int64_t c = 0; c < t.cols; ++c)
        for (int64_t i = 0; i < e; ++i) b[(c * t.rows + r) * e + i] = a[(r * t.cols + c) * e + i];
  }
}

void run_transpose_cpu(const ExecContext& ctx, const Transpose& t) {
  if (ctx.output.desc->dtype == DType::BF16)
    transpose_cpu(ctx.output.bf16(), ctx.inputs[0].bf16(), t);
  else
    transpose_cpu(ctx.output.f32(), ctx.inputs[0].f32(), t);
}

void layout_cpu(const ExecContext& ctx) { run_transpose_cpu(ctx, transpose_of(ctx)); }

#ifdef REMAT_HAVE_CUDA
template <typename T>
void transpose_on(T* dst, const T* src, int64_t batch, int64_t rows, int64_t cols,
                  cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>)
    transpose_batched(dst, src, batch, rows, cols, false, stream);
  else
    transpose_batched(dst, src, batch, rows, cols, stream);
}

// Vectors of inner > 1 elements take two batched transposes through the node's workspace:
// [rows, cols inner] -> [cols, inner, rows], then each [inner, rows] -> [rows, inner].
template <typename T>
void transpose_cuda(T* dst, const T* src, const Transpose& t, const ExecContext& ctx) {
  if (t.inner == 1) return transpose_on(dst, src, t.batch, t.rows, t.cols, cuda_stream(ctx));
  T* mid = static_cast<T*>(ctx.workspace);
  transpose_on(mid, src, t.batch, t.rows, t.cols * t.inner, cuda_stream(ctx));
  transpose_on(dst, mid, t.batch * t.cols, t.inner, t.rows, cuda_stream(ctx));
}

void run_transpose_cuda(const ExecContext& ctx, const Transpose& t) {
  if (ctx.output.desc->dtype == DType::BF16)
    transpose_cuda(ctx.output.bf16(), ctx.inputs[0].bf16(), t, ctx);
  else
    transpose_cuda(ctx.output.f32(), ctx.inputs[0].f32(), t, ctx);
}

void layout_cuda(const ExecContext& ctx) { run_transpose_cuda(ctx, transpose_of(ctx)); }
#endif

// transpose: a block swap of the per-sample axes (Note [block swaps] in ops/block_swap.h).
struct TransposeAttrs : OpAttrs {
  std::vector<int64_t> perm;
  BlockSwap swap;
};

OpAttrsPtr transpose_parse(AttrReader& r) {
  auto a = std::make_shared<TransposeAttrs>();
  if (!r.has("perm")) r.fail("perm", "is required (e.g. [0, 2, 3, 1])");
  a->perm = r.get_int_list("perm", {3, 4, 5, 6, 7, 8}, {}, 0, 7);
  const std::optional<BlockSwap> swap = block_swap_of(a->perm);
  if (!swap)
    r.fail("perm", "must keep the batch first and swap two adjacent blocks of the other axes "
                   "([0, 2, 1], [0, 2, 3, 1], [0, 3, 1, 2], [0, 1, 3, 2], [0, 1, 3, 2, 4, 5], "
                   "...); got " + shape_str(a->perm));
  a->swap = *swap;
  r.finish("transpose");
  return a;
}

TensorDesc transpose_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const TransposeAttrs&>(at);
  const DType t = require_float("transpose", in);
  const Shape& s = in.at(0).shape;
  if (s.size() != a.perm.size())
    REMAT_USER_ERROR("transpose: perm " << shape_str(a.perm) << " does not permute an input "
                                        << shape_str(s));
  Shape out;
  for (int64_t d : a.perm) out.push_back(s[static_cast<size_t>(d)]);
  return TensorDesc{out, t};
}

Transpose transpose_dims(const ExecContext& ctx) {
  const Shape& s = ctx.inputs.at(0).shape();
  const BlockSwap& w = attrs_of<TransposeAttrs>(*ctx.node).swap;
  Transpose t{s[0], 1, 1, 1};
  for (int64_t d = 1; d < static_cast<int64_t>(s.size()); ++d) {
    const int64_t size = s[static_cast<size_t>(d)];
    if (d <= w.lead)
      t.batch *= size;
    else if (d <= w.lead + w.a)
      t.rows *= size;
    else if (d <= w.lead + w.a + w.b)
      t.cols *= size;
    else
      t.inner *= size;
  }
  return t;
}

void transpose_op_cpu(const ExecContext& ctx) { run_transpose_cpu(ctx, transpose_dims(ctx)); }
#ifdef REMAT_HAVE_CUDA
void transpose_op_cuda(const ExecContext& ctx) { run_transpose_cuda(ctx, transpose_dims(ctx)); }
int64_t transpose_op_cuda_workspace(const ExecContext& ctx) {
  const Transpose t = transpose_dims(ctx);
  return t.inner == 1 ? 0 : ctx.output.desc->bytes();
}
#endif

// The gradient is the swap back.
std::vector<ValueId> transpose_gradient(GradEmitter& g, const Node& fwd, ValueId dy) {
  const TensorDesc x = g.graph().value(fwd.inputs.at(0)).desc;  // a copy: emit grows the graph
  const auto& a = attrs_of<TransposeAttrs>(fwd);
  AttrMap m;
  m.origin = fwd.attrs.origin;
  m.set("perm", block_swap_perm(static_cast<int64_t>(a.perm.size()), inverse(a.swap)));
  AttrReader rd(m);
  OpAttrsPtr typed = transpose_parse(rd);
  return {g.emit("grad", "transpose", {dy}, x, m, typed)};
}

// Both ops move every value once and compute nothing.
OpCost permutation_cost(const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
  return elementwise_cost(in, out, 0);
}

}  // namespace

void register_layout_ops(OpRegistry& r) {
  OpDef op;
  op.name = "layout";
  op.summary = "an image tensor stored channels-last or channels-first (to: channels_last | "
               "channels_first)";
  op.user_visible = false;  // a layer of it would hide the layout from the builder
  op.parse = layout_parse;
  op.infer = layout_infer;
  op.cost = permutation_cost;
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

  OpDef t;
  t.name = "transpose";
  t.summary = "a permutation that swaps two adjacent blocks of per-sample dimensions (perm: "
              "[0, 2, 3, 1], [0, 3, 1, 2], [0, 2, 1], [0, 1, 3, 2, 4, 5], ...)";
  t.parse = transpose_parse;
  t.infer = transpose_infer;
  t.cost = permutation_cost;
  t.cpu = transpose_op_cpu;
#ifdef REMAT_HAVE_CUDA
  t.cuda = transpose_op_cuda;
  t.cuda_workspace = transpose_op_cuda_workspace;
#endif
  t.gradient = transpose_gradient;
  with_bf16(t).bf16_cpu_native = true;
  t.bf16_cuda_native = true;
  r.add(std::move(t));
}

}  // namespace remat
