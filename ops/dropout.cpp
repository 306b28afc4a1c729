// dropout: zeroes each element with probability `rate` and scales the rest by 1 / (1 - rate).
// The mask is a pure function of (node seed, step, element index) (kernels/rng.h), so a
// recomputation, the backward op dropout_grad and the CUDA kernel (kernels/dropout.cu) all see
// the same mask.
#include <cstring>
#include <string>
#include <vector>

#include "kernels/rng.h"
#include "ops/cpu_storage.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"
#include "runtime/core/check.h"

namespace remat {
namespace {

struct DropoutAttrs : OpAttrs {
  double rate = 0.5;  // probability of dropping an element, in [0, 1)
};

OpAttrsPtr dropout_parse(AttrReader& r, const std::string& op_name) {
  auto a = std::make_shared<DropoutAttrs>();
  a->rate = r.get_double("rate", 0.5, 0.0, 1.0);
  if (a->rate >= 1.0) r.fail("rate", "must be less than 1 (in [0, 1))");
  r.finish(op_name);
  return a;
}

TensorDesc dropout_infer(const OpAttrs&, const std::vector<TensorDesc>& in) {
  require_float("dropout", in);
  return in[0];
}

OpCost dropout_cost(const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
  return elementwise_cost(in, out, 10.0);  // hash + compare + scale
}

// y[e] = u(seed, step, first + e) >= rate ? x[e] / (1 - rate) : 0. Forward and backward both
// apply it: dropout_grad is the same map applied to dy. `first` is the global index of element 0
// (data parallel: the masks of a rank's samples are those of the global batch).
void dropout_apply(const float* x, float* y, int64_t n, float rate, uint64_t seed, uint64_t step,
                   uint64_t first) {
  if (rate == 0.0f) {
    if (y != x) std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const float scale = 1.0f / (1.0f - rate);
  for (int64_t e = 0; e < n; ++e)
    y[e] = rng_uniform(seed, step, first + static_cast<uint64_t>(e)) >= rate ? x[e] * scale : 0.0f;
}

// Global index of the first element: ctx.batch_offset samples of this tensor's size before it.
uint64_t first_element(const ExecContext& ctx) {
  const int64_t n = ctx.output.dim(0);
  return static_cast<uint64_t>(ctx.batch_offset * (n > 0 ? ctx.output.numel() / n : 0));
}

// inputs [x] -> y like x (forward), or [dy] -> dx like dy (dropout_grad, same node seed).
void dropout_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<DropoutAttrs>(*ctx.node);
  dropout_apply(ctx.inputs[0].f32(), ctx.output.f32(), ctx.output.numel(),
                static_cast<float>(a.rate), ctx.node->seed, static_cast<uint64_t>(ctx.step),
                first_element(ctx));
}

#ifdef REMAT_HAVE_CUDA
// The same map as dropout_cpu (forward on x, backward on dy); rate is rounded to float the same
// way so the kept/dropped test agrees with the CPU element for element. F32 or bf16
// (bf16_cuda_native): the whole tensor in one launch, element indices from first_element as
// the CPU's per-sample staging numbers them.
void dropout_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<DropoutAttrs>(*ctx.node);
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    dropout_forward(storage<T>(ctx.output), storage<T>(ctx.inputs[0]), ctx.output.numel(),
                    static_cast<float>(a.rate), ctx.node->seed, step_source(ctx),
                    first_element(ctx), cuda_stream(ctx));
  });
}
#endif

OpDef dropout_op(const std::string& name, const std::string& summary, bool visible) {
  OpDef op;
  op.name = name;
  op.summary = summary;
  op.user_visible = visible;
  op.kind = visible ? NodeKind::Forward : NodeKind::Backward;
  op.parse = [name](AttrReader& rd) { return dropout_parse(rd, name); };
  op.infer = dropout_infer;
  op.cost = dropout_cost;
  op.cpu = dropout_cpu;
#ifdef REMAT_HAVE_CUDA
  op.cuda = dropout_cuda;
#endif
  with_bf16_per_sample(op, 1).bf16_cuda_native = true;
  return op;
}

}  // namespace

void register_dropout_ops(OpRegistry& r) {
  OpDef d =
      dropout_op("dropout", "seeded dropout (rate in [0, 1)), replayable under recompute", true);
  d.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) -> std::vector<ValueId> {
    return {g.emit("grad", "dropout_grad", {dy}, g.graph().value(fwd.inputs.at(0)).desc)};
  };
  d.layout_agnostic = true;  // the mask follows the element index, in either layout
  r.add(std::move(d));
  r.add(
      dropout_op("dropout_grad", "dropout input gradient [dy]: the forward mask replayed", false));
}

}  // namespace remat
