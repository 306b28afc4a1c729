// channel_shift [x, s]: x plus s over each row after x's first `axes` axes (default 2), s those
// first axes: [N, C, H, W] + s [N, C] (x + s[:, :, None, None]), [N, T, D] + s [N, T] (x -
// x.mean(-1, keepdim=True) as x + (-mean)); with `keep_last` m > 0, s also spans x's last m axes
// and broadcasts over those between (Note [kept axes] in ops/data_format.h): adaLN's shift
// x + s[:, None, :] of tokens [N, T, D] by s [N, D] (axes 1, keep_last 1). The sum in FP32,
// rounded once. Gradients: dx = dy (no node), ds = channel_shift_grad [dy], the sum of dy over
// what each value of s broadcasts to (in double, in order, rounded once).
// The CUDA path is the bias kernels with the rows as channels of one sample: bias_act_forward
// over a copy of x (a bf16 s widened into the workspace first: the bias is FP32), and
// bias_grad_reduce (FP32 sums, narrowed into a bf16 s's gradient through the workspace); with
// kept last axes, position_embedding's kernel and bias_grad_reduce's column sums once per row of
// the leading axes (x [lead, mid, last]: lead launches of each).
#include <string>
#include <vector>

#include "ops/cpu_storage.h"
#include "ops/data_format.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

struct ChannelShiftAttrs : OpAttrs {
  int64_t axes = 2;       // the leading axes of x that s spans
  int64_t keep_last = 0;  // the trailing axes of x that s spans
};

OpAttrsPtr channel_shift_parse(AttrReader& r, const std::string& name) {
  auto a = std::make_shared<ChannelShiftAttrs>();
  a->axes = r.get_int("axes", 2, 1, 7);
  a->keep_last = r.get_int("keep_last", 0, 0, 6);
  r.finish(name);
  return a;
}

const ChannelShiftAttrs& attrs(const OpAttrs& a) {
  return static_cast<const ChannelShiftAttrs&>(a);
}

// s's shape for x (x's first `axes` and last `keep_last` axes), or an error naming `op`.
Shape shift_shape(const std::string& op, const ChannelShiftAttrs& a, const Shape& x) {
  if (static_cast<int64_t>(x.size()) <= a.axes + a.keep_last)
    REMAT_USER_ERROR(op << " expects x of rank above axes + keep_last = " << a.axes + a.keep_last
                        << ", got " << shape_str(x));
  return kept_axes_shape(x, a.axes, a.keep_last);
}

// x as [lead, mid, last] (Note [kept axes]): s is [lead, last].
struct Rows {
  int64_t lead = 0, mid = 0, last = 0;
};
Rows rows_of(const ExecContext& ctx, const Shape& x) {
  const ChannelShiftAttrs& a = attrs_of<ChannelShiftAttrs>(*ctx.node);
  const ImageDims d = kept_axes_dims(x, a.axes, a.keep_last);
  return Rows{d.n, d.w, d.c};
}

void channel_shift_cpu(const ExecContext& ctx) {
  const Rows r = rows_of(ctx, ctx.inputs[0].shape());
  const float* x = ctx.inputs[0].f32();
  const float* s = ctx.inputs[1].f32();
  float* y = ctx.output.f32();
  for (int64_t p = 0; p < r.lead; ++p)
    for (int64_t i = 0; i < r.mid; ++i)
      for (int64_t j = 0; j < r.last; ++j) {
        const int64_t k = (p * r.mid + i) * r.last + j;
        y[k] = x[k] + s[p * r.last + j];
      }
}

// [dy] -> ds: the values of dy each value of s broadcast to, summed in double, in order.
void channel_shift_grad_cpu(const ExecContext& ctx) {
  const Rows r = rows_of(ctx, ctx.inputs[0].shape());
  const float* dy = ctx.inputs[0].f32();
  for (int64_t p = 0; p < r.lead; ++p)
    for (int64_t j = 0; j < r.last; ++j) {
      double sum = 0;
      for (int64_t i = 0; i < r.mid; ++i) sum += dy[(p * r.mid + i) * r.last + j];
      ctx.output.f32()[p * r.last + j] = static_cast<float>(sum);
    }
}

#ifdef REMAT_HAVE_CUDA
// A bf16 s's FP32 copy (or a bf16 gradient's FP32 sums) at the start of the workspace.
int64_t staged_bytes(DType t, int64_t rows) {
  return t == DType::BF16 ? alloc_bytes(rows * int64_t{4}) : 0;
}

int64_t channel_shift_workspace(const ExecContext& ctx) {
  return staged_bytes(ctx.inputs.at(1).desc->dtype, ctx.inputs[1].numel());
}

// x + s: with s over whole rows (last 1) the bias kernel over a copy of x, its rows the
// channels; with kept last axes position_embedding's kernel per leading row p, adding s[p] to
// each of x[p]'s mid rows.
void channel_shift_cuda(const ExecContext& ctx) {
  const Rows r = rows_of(ctx, ctx.inputs[0].shape());
  cudaStream_t stream = cuda_stream(ctx);
  const float* bias = ctx.inputs[1].desc->dtype == DType::BF16
                          ? static_cast<const float*>(ctx.workspace)
                          : ctx.inputs[1].f32();
  if (ctx.inputs[1].desc->dtype == DType::BF16)
    bf16_widen(static_cast<float*>(ctx.workspace), ctx.inputs[1].bf16(), r.lead * r.last, stream);
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    T* y = storage<T>(ctx.output);
    const T* x = storage<T>(ctx.inputs[0]);
    if (r.last == 1) {
      copy_forward(y, x, ctx.output.numel(), stream);
      return bias_act_forward(y, bias, 1, r.lead, r.mid, KernelActivation::None, stream);
    }
    for (int64_t p = 0; p < r.lead; ++p)
      position_embedding_forward(y + p * r.mid * r.last, x + p * r.mid * r.last,
                                 bias + p * r.last, r.mid, r.last, stream);
  });
}

int64_t channel_shift_grad_workspace(const ExecContext& ctx) {
  const Rows r = rows_of(ctx, ctx.inputs.at(0).shape());
  return staged_bytes(ctx.output.desc->dtype, r.lead * r.last) +
         (r.last == 1 ? bias_grad_workspace_bytes(1, r.lead, r.mid)
                      : bias_grad_workspace_bytes(r.mid, r.last, 1));
}

// ds: with s over whole rows, bias_grad_reduce's plane sums of one sample of lead channels;
// with kept last axes its column sums of each [mid, last] block of dy.
void channel_shift_grad_cuda(const ExecContext& ctx) {
  const Rows r = rows_of(ctx, ctx.inputs[0].shape());
  REMAT_CHECK(ctx.workspace_bytes >= channel_shift_grad_workspace(ctx),
              "node '" << ctx.node->name << "': channel_shift_grad workspace too small");
  cudaStream_t stream = cuda_stream(ctx);
  const bool narrow = ctx.output.desc->dtype == DType::BF16;
  const int64_t staged = staged_bytes(ctx.output.desc->dtype, r.lead * r.last);
  float* sums = narrow ? static_cast<float*>(ctx.workspace) : ctx.output.f32();
  void* reduce_ws = static_cast<char*>(ctx.workspace) + staged;
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* dy = storage<T>(ctx.inputs[0]);
    if (r.last == 1) return bias_grad_reduce(sums, dy, 1, r.lead, r.mid, reduce_ws, stream);
    for (int64_t p = 0; p < r.lead; ++p)
      bias_grad_reduce(sums + p * r.last, dy + p * r.mid * r.last, r.mid, r.last, 1, reduce_ws,
                       stream);
  });
  if (narrow) bf16_narrow(ctx.output.bf16(), sums, r.lead * r.last, stream);
}
#endif

OpDef make_forward() {
  OpDef op;
  op.name = "channel_shift";
  op.summary =
      "[x, s]: x plus s over each row after x's first axes (2; keep_last): [N, T, D] + [N, T]";
  op.min_inputs = op.max_inputs = 2;
  op.parse = [](AttrReader& r) { return channel_shift_parse(r, "channel_shift"); };
  op.infer = [](const OpAttrs& a, const std::vector<TensorDesc>& in) {
    require_float("channel_shift", in);
    const Shape s = shift_shape("channel_shift", attrs(a), in.at(0).shape);
    if (in.at(1).shape != s)
      REMAT_USER_ERROR("channel_shift expects a shift " << shape_str(s) << " for x "
                       << shape_str(in[0].shape) << ", got " << shape_str(in[1].shape));
    return in[0];
  };
  op.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, 1);
  };
  op.cpu = channel_shift_cpu;
#ifdef REMAT_HAVE_CUDA
  op.cuda = channel_shift_cuda;
  op.cuda_workspace = channel_shift_workspace;
#endif
  with_bf16_per_sample(op, -1).bf16_cuda_native = true;
  op.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) {
    const TensorDesc s = g.graph().value(fwd.inputs[1]).desc;  // a copy: emit grows the graph
    return std::vector<ValueId>{dy, g.emit("grad_shift", "channel_shift_grad", {dy}, s)};
  };
  return op;
}

OpDef make_grad() {
  OpDef op;
  op.name = "channel_shift_grad";
  op.summary = "channel_shift's shift gradient [dy] -> s's shape: the sum of each row of dy";
  op.user_visible = false;
  op.parse = [](AttrReader& r) { return channel_shift_parse(r, "channel_shift_grad"); };
  op.infer = [](const OpAttrs& a, const std::vector<TensorDesc>& in) {
    require_float("channel_shift_grad", in);
    return TensorDesc{shift_shape("channel_shift_grad", attrs(a), in.at(0).shape), in[0].dtype};
  };
  op.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    OpCost c;
    c.flops = static_cast<double>(in.at(0).numel());  // a sum per value
    c.bytes_moved = io_bytes(in, out);
    return c;
  };
  op.cpu = channel_shift_grad_cpu;
#ifdef REMAT_HAVE_CUDA
  op.cuda = channel_shift_grad_cuda;
  op.cuda_workspace = channel_shift_grad_workspace;
#endif
  with_bf16_per_sample(op, -1).bf16_cuda_native = true;
  return op;
}

}  // namespace

void register_channel_shift_ops(OpRegistry& r) {
  r.add(make_forward());
  r.add(make_grad());
}

}  // namespace remat
