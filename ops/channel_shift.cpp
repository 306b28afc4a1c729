// channel_shift [x, s]: x plus s over each row after x's first `axes` axes (default 2), s those
// first axes: [N, C, H, W] + s [N, C] (x + s[:, :, None, None]), [N, T, D] + s [N, T] (x -
// x.mean(-1, keepdim=True) as x + (-mean)); the sum in FP32, rounded once. Gradients: dx = dy
// (no node), ds = channel_shift_grad [dy], the sum of dy over each row (in double, rounded once).
// The CUDA path is the bias kernels with the rows as channels of one sample: bias_act_forward
// over a copy of x (a bf16 s widened into the workspace first: the bias is FP32), and
// bias_grad_reduce (FP32 sums, narrowed into a bf16 s's gradient through the workspace).
#include <string>
#include <vector>

#include "ops/cpu_storage.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

struct ChannelShiftAttrs : OpAttrs {
  int64_t axes = 2;  // the leading axes of x that s spans
};

OpAttrsPtr channel_shift_parse(AttrReader& r, const std::string& name) {
  auto a = std::make_shared<ChannelShiftAttrs>();
  a->axes = r.get_int("axes", 2, 1, 7);
  r.finish(name);
  return a;
}

int64_t axes_of(const OpAttrs& a) { return static_cast<const ChannelShiftAttrs&>(a).axes; }

// s's shape for x (x's first `axes` axes), or an error naming `op`.
Shape shift_shape(const std::string& op, int64_t axes, const Shape& x) {
  if (static_cast<int64_t>(x.size()) <= axes)
    REMAT_USER_ERROR(op << " expects x of rank above axes " << axes << ", got " << shape_str(x));
  return Shape(x.begin(), x.begin() + axes);
}

// [rows, row] of x: s's values and each one's share of x.
struct Rows {
  int64_t rows = 0, row = 0;
};
Rows rows_of(const Shape& s, const Shape& x) {
  Rows r{shape_numel(s), 0};
  r.row = r.rows == 0 ? 0 : shape_numel(x) / r.rows;
  return r;
}

void channel_shift_cpu(const ExecContext& ctx) {
  const Rows r = rows_of(ctx.inputs[1].shape(), ctx.inputs[0].shape());
  const float* x = ctx.inputs[0].f32();
  const float* s = ctx.inputs[1].f32();
  float* y = ctx.output.f32();
  for (int64_t p = 0; p < r.rows; ++p)
    for (int64_t i = 0; i < r.row; ++i) y[p * r.row + i] = x[p * r.row + i] + s[p];
}

// [dy] -> ds: each row of dy summed in double, in order.
void channel_shift_grad_cpu(const ExecContext& ctx) {
  const Rows r = rows_of(ctx.output.shape(), ctx.inputs[0].shape());
  const float* dy = ctx.inputs[0].f32();
  for (int64_t p = 0; p < r.rows; ++p) {
    double sum = 0;
    for (int64_t i = 0; i < r.row; ++i) sum += dy[p * r.row + i];
    ctx.output.f32()[p] = static_cast<float>(sum);
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

void channel_shift_cuda(const ExecContext& ctx) {
  const Rows r = rows_of(ctx.inputs[1].shape(), ctx.inputs[0].shape());
  cudaStream_t stream = cuda_stream(ctx);
  const float* bias = ctx.inputs[1].desc->dtype == DType::BF16
                          ? static_cast<const float*>(ctx.workspace)
                          : ctx.inputs[1].f32();
  if (ctx.inputs[1].desc->dtype == DType::BF16)
    bf16_widen(static_cast<float*>(ctx.workspace), ctx.inputs[1].bf16(), r.rows, stream);
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    copy_forward(storage<T>(ctx.output), storage<T>(ctx.inputs[0]), ctx.output.numel(), stream);
    bias_act_forward(storage<T>(ctx.output), bias, 1, r.rows, r.row, KernelActivation::None,
                     stream);
  });
}

int64_t channel_shift_grad_workspace(const ExecContext& ctx) {
  const Rows r = rows_of(ctx.output.shape(), ctx.inputs.at(0).shape());
  return staged_bytes(ctx.output.desc->dtype, r.rows) +
         bias_grad_workspace_bytes(1, r.rows, r.row);
}

void channel_shift_grad_cuda(const ExecContext& ctx) {
  const Rows r = rows_of(ctx.output.shape(), ctx.inputs[0].shape());
  REMAT_CHECK(ctx.workspace_bytes >= channel_shift_grad_workspace(ctx),
              "node '" << ctx.node->name << "': channel_shift_grad workspace too small");
  cudaStream_t stream = cuda_stream(ctx);
  const bool narrow = ctx.output.desc->dtype == DType::BF16;
  const int64_t staged = staged_bytes(ctx.output.desc->dtype, r.rows);
  float* sums = narrow ? static_cast<float*>(ctx.workspace) : ctx.output.f32();
  void* reduce_ws = static_cast<char*>(ctx.workspace) + staged;
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    bias_grad_reduce(sums, storage<T>(ctx.inputs[0]), 1, r.rows, r.row, reduce_ws, stream);
  });
  if (narrow) bf16_narrow(ctx.output.bf16(), sums, r.rows, stream);
}
#endif

OpDef make_forward() {
  OpDef op;
  op.name = "channel_shift";
  op.summary = "[x, s]: x plus s over each row after x's first axes (2): [N, T, D] + [N, T]";
  op.min_inputs = op.max_inputs = 2;
  op.parse = [](AttrReader& r) { return channel_shift_parse(r, "channel_shift"); };
  op.infer = [](const OpAttrs& a, const std::vector<TensorDesc>& in) {
    require_float("channel_shift", in);
    const Shape s = shift_shape("channel_shift", axes_of(a), in.at(0).shape);
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
    return TensorDesc{shift_shape("channel_shift_grad", axes_of(a), in.at(0).shape), in[0].dtype};
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
