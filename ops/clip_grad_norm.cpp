// clip_grad_norm: global-norm gradient clipping over every parameter gradient, in place, as
// torch.nn.utils.clip_grad_norm_ (Note [gradient clipping] in runtime/graph/autodiff.cpp; autodiff
// emits the node when the optimizer has clip_norm). An Update op: it writes persistent values
// only, its output is its first gradient, and its state buffer keeps [norm, scale, scratch].
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

// Floats of the state buffer: norm, scale, and the device path's partial sums (kernels.h).
constexpr int64_t kClipStateFloats = 2 + 2 * (256 + 1);
#ifdef REMAT_HAVE_CUDA
static_assert(kClipStateFloats == kGradClipStateFloats, "clip state layout differs from kernels/");
#endif

struct ClipAttrs : OpAttrs {
  double max_norm = 1.0;
};

OpAttrsPtr clip_parse(AttrReader& r) {
  auto a = std::make_shared<ClipAttrs>();
  a->max_norm = r.get_double("max_norm", 1.0, 1e-12, 1e12);
  r.finish("clip_grad_norm");
  return a;
}

// data inputs: the gradients (any shapes, f32) -> the first gradient's descriptor (in place).
TensorDesc clip_infer(const OpAttrs&, const std::vector<TensorDesc>& in) {
  if (require_float("clip_grad_norm", in) != DType::F32)
    REMAT_USER_ERROR("clip_grad_norm expects the f32 parameter gradients");
  return in.at(0);
}

std::vector<ParamSpec> clip_params(const OpAttrs&, const std::vector<TensorDesc>&) {
  ParamSpec s;
  s.suffix = "state";
  s.desc = TensorDesc{{kClipStateFloats}, DType::F32};
  s.kind = ValueKind::Buffer;
  s.init = InitKind::Zeros;
  return {s};
}

OpCost clip_cost(const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc&) {
  OpCost c;
  for (size_t i = 0; i + 1 < in.size(); ++i) {
    c.flops += 3.0 * static_cast<double>(in[i].numel());  // square, add, scale
    c.bytes_moved += 3 * in[i].bytes();                     // read twice, write once
  }
  return c;
}

// inputs [grad_0 .. grad_{k-1}, state] -> grads scaled in place; state[0] = norm, [1] = scale.
// The norm sums squares in double, tensors in order, elements in order.
void clip_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<ClipAttrs>(*ctx.node);
  const size_t k = ctx.inputs.size() - 1;
  double total = 0;
  for (size_t t = 0; t < k; ++t) {
    const float* g = ctx.inputs[t].f32();
    for (int64_t i = 0; i < ctx.inputs[t].numel(); ++i)
      total += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  }
  const double norm = std::sqrt(total);
  const double scale = std::min(1.0, a.max_norm / (norm + 1e-6));
  const float s = static_cast<float>(scale);
  for (size_t t = 0; t < k; ++t) {
    float* g = ctx.inputs[t].f32();
    for (int64_t i = 0; i < ctx.inputs[t].numel(); ++i) g[i] *= s;
  }
  float* state = ctx.inputs[k].f32();
  state[0] = static_cast<float>(norm);
  state[1] = s;
}

#ifdef REMAT_HAVE_CUDA
void clip_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<ClipAttrs>(*ctx.node);
  const size_t k = ctx.inputs.size() - 1;
  std::vector<float*> grads;
  std::vector<int64_t> sizes;
  for (size_t t = 0; t < k; ++t) {
    grads.push_back(ctx.inputs[t].f32());
    sizes.push_back(ctx.inputs[t].numel());
  }
  clip_grad_norm(grads.data(), sizes.data(), static_cast<int>(k), a.max_norm,
                 ctx.inputs[k].f32(), cuda_stream(ctx));
}
#endif

}  // namespace

void register_clip_grad_norm_ops(OpRegistry& r) {
  OpDef op;
  op.name = "clip_grad_norm";
  op.summary = "global-norm gradient clipping of every parameter gradient (max_norm), in place";
  op.user_visible = false;
  op.kind = NodeKind::Update;
  op.min_inputs = 1;
  op.max_inputs = -1;
  op.parse = clip_parse;
  op.infer = clip_infer;
  op.params = clip_params;
  op.cost = clip_cost;
  op.cpu = clip_cpu;
#ifdef REMAT_HAVE_CUDA
  op.cuda = clip_cuda;
#endif
  r.add(std::move(op));
}

}  // namespace remat
