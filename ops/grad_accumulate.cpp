// grad_accumulate: adds one micro-batch's parameter gradient into the persistent gradient
// (Note [gradient accumulation] in runtime/graph/accumulate.h). Input: the micro-batch gradient,
// an activation; output: the parameter's gradient, written in place. Micro-batch 0 of a step
// copies, the next ones add, and the last one adds and multiplies by 1 / micro_batches, so the
// optimizer sees the mean over the step's samples, as one batch micro_batches times larger.
#include <algorithm>

#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

TensorDesc accumulate_infer(const OpAttrs&, const std::vector<TensorDesc>& in) {
  if (require_float("grad_accumulate", in) != DType::F32)
    REMAT_USER_ERROR("grad_accumulate expects an f32 parameter gradient");
  return in.at(0);
}

// The factor the last micro-batch applies (1: none).
float accumulate_scale(const ExecContext& ctx) {
  REMAT_CHECK(ctx.micro_batches >= 1 && ctx.micro_batch >= 0 && ctx.micro_batch < ctx.micro_batches,
              "grad_accumulate: micro-batch " << ctx.micro_batch << " of " << ctx.micro_batches);
  return ctx.micro_batch + 1 == ctx.micro_batches && ctx.micro_batches > 1
             ? static_cast<float>(1.0 / ctx.micro_batches)
             : 1.0f;
}

void accumulate_cpu(const ExecContext& ctx) {
  const float scale = accumulate_scale(ctx);
  const float* g = ctx.inputs[0].f32();
  float* acc = ctx.output.f32();
  const int64_t n = ctx.output.numel();
  if (ctx.micro_batch == 0) {  // never also the last: a step of one micro-batch has scale 1
    std::copy(g, g + n, acc);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float sum = acc[i] + g[i];
    acc[i] = scale == 1.0f ? sum : sum * scale;
  }
}

#ifdef REMAT_HAVE_CUDA
void accumulate_cuda(const ExecContext& ctx) {
  const float scale = accumulate_scale(ctx);
  const int64_t n = ctx.output.numel();
  if (ctx.micro_batch == 0) {
    copy_forward(ctx.output.f32(), ctx.inputs[0].f32(), n, cuda_stream(ctx));
    return;
  }
  grad_accumulate(ctx.output.f32(), ctx.inputs[0].f32(), n, scale, cuda_stream(ctx));
}
#endif

OpCost accumulate_cost(const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
  OpCost c = elementwise_cost(in, out, 2);
  c.bytes_moved = checked_add(c.bytes_moved, out.bytes(), "", "bytes_moved");  // reads acc too
  return c;
}

}  // namespace

void register_grad_accumulate_ops(OpRegistry& r) {
  OpDef a;
  a.name = "grad_accumulate";
  a.summary = "adds a micro-batch's parameter gradient into the persistent gradient";
  a.user_visible = false;
  a.kind = NodeKind::Backward;
  a.parse = [](AttrReader& rd) { return parse_no_attrs(rd, "grad_accumulate"); };
  a.infer = accumulate_infer;
  a.cost = accumulate_cost;
  a.cpu = accumulate_cpu;
#ifdef REMAT_HAVE_CUDA
  a.cuda = accumulate_cuda;
#endif
  r.add(std::move(a));
}

}  // namespace remat
