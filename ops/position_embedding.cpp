// position_embedding: learned position embedding added to token features, as GPT-2's wpe:
// y[n, t, :] = x[n, t, :] + weight[t, :] for x [N, T, C] and a table weight [max_len, C]
// (T <= max_len; the table's size does not depend on T, so a model trained at one length runs
// at any shorter one). Backward: dx = dy (no node), and position_embedding_grad_weight [dy] ->
// [max_len, C] with dW[t] = sum over n of dy[n, t] (in n order) for t < T and 0 beyond.
#include <algorithm>
#include <string>
#include <vector>

#include "ops/cpu_storage.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

struct PositionAttrs : OpAttrs {
  int64_t max_len = 0;
  double init_std = 0.02;
};

// Shared with the gradient op (it reads the forward node's attrs).
OpAttrsPtr position_parse(AttrReader& r, const std::string& op_name) {
  auto a = std::make_shared<PositionAttrs>();
  a->max_len = r.require_int("max_len", 1, int64_t{1} << 24);
  a->init_std = r.get_double("init_std", 0.02, 1e-12, 100.0);
  r.finish(op_name);
  return a;
}

TensorDesc position_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const PositionAttrs&>(at);
  require_float("position_embedding", in, 1);
  const Shape& x = in.at(0).shape;
  if (x.size() != 3)
    REMAT_USER_ERROR("position_embedding expects [N, T, C], got " << shape_str(x));
  if (x[1] > a.max_len)
    REMAT_USER_ERROR("position_embedding: sequence length T = " << x[1] << " exceeds max_len "
                                                                << a.max_len);
  return in[0];
}

std::vector<ParamSpec> position_params(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const PositionAttrs&>(at);
  const int64_t c = in.at(0).shape.at(2);
  ParamSpec w;
  w.suffix = "weight";
  w.desc = checked_desc({a.max_len, c}, DType::F32, "position_embedding weight");
  w.init = InitKind::Normal;
  w.init_std = a.init_std;
  w.fan_in = a.max_len;
  w.fan_out = c;
  w.role = ParamRole::Embedding;
  return {w};
}

// inputs [x [N, T, C], weight [max_len, C]] -> x + weight[0:T] broadcast over N.
void position_cpu(const ExecContext& ctx) {
  const int64_t n = ctx.inputs[0].dim(0), inner = ctx.inputs[0].dim(1) * ctx.inputs[0].dim(2);
  const float* x = ctx.inputs[0].f32();
  const float* w = ctx.inputs[1].f32();
  float* y = ctx.output.f32();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < inner; ++k) y[i * inner + k] = x[i * inner + k] + w[k];
}

// inputs [dy [N, T, C]] -> [max_len, C]: rows t < T sum dy over n (double, n in order).
void position_grad_cpu(const ExecContext& ctx) {
  const int64_t n = ctx.inputs[0].dim(0), inner = ctx.inputs[0].dim(1) * ctx.inputs[0].dim(2);
  const float* dy = ctx.inputs[0].f32();
  float* dw = ctx.output.f32();
  for (int64_t k = 0; k < inner; ++k) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += dy[i * inner + k];
    dw[k] = static_cast<float>(s);
  }
  std::fill(dw + inner, dw + ctx.output.numel(), 0.0f);
}

#ifdef REMAT_HAVE_CUDA
// x and y are F32 or BF16 (bf16-native: Note [bf16 launchers] in kernels/kernels.h); the
// table and its gradient are F32.
void position_cuda(const ExecContext& ctx) {
  const int64_t n = ctx.inputs[0].dim(0), inner = ctx.inputs[0].dim(1) * ctx.inputs[0].dim(2);
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    position_embedding_forward(storage<T>(ctx.output), storage<T>(ctx.inputs[0]),
                               ctx.inputs[1].f32(), n, inner, cuda_stream(ctx));
  });
}

// The column sums of dy viewed as [N, T * C] (bias_grad_reduce, plane 1: up to 64 samples n in
// order, like the CPU; more in fixed row slices, with a workspace), then zeros for the rows past T.
int64_t position_grad_workspace(const ExecContext& ctx) {
  const int64_t n = ctx.inputs.at(0).dim(0), inner = ctx.inputs[0].dim(1) * ctx.inputs[0].dim(2);
  return bias_grad_workspace_bytes(n, inner, 1);
}

void position_grad_cuda(const ExecContext& ctx) {
  const int64_t n = ctx.inputs[0].dim(0), inner = ctx.inputs[0].dim(1) * ctx.inputs[0].dim(2);
  REMAT_CHECK(ctx.workspace_bytes >= position_grad_workspace(ctx),
              "node '" << ctx.node->name << "': position_embedding_grad_weight workspace too small");
  float* dw = ctx.output.f32();
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    bias_grad_reduce(dw, storage<T>(ctx.inputs[0]), n, inner, 1, ctx.workspace, cuda_stream(ctx));
  });
  if (ctx.output.numel() > inner) fill(dw + inner, 0.0f, ctx.output.numel() - inner, cuda_stream(ctx));
}
#endif

}  // namespace

void register_position_embedding_ops(OpRegistry& r) {
  OpDef f;
  f.name = "position_embedding";
  f.summary = "learned position embedding added to [N, T, C] (max_len, init_std)";
  f.parse = [](AttrReader& rd) { return position_parse(rd, "position_embedding"); };
  f.infer = position_infer;
  f.params = position_params;
  f.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost({in.at(0), out}, out, 1);
  };
  f.cpu = position_cpu;
#ifdef REMAT_HAVE_CUDA
  f.cuda = position_cuda;
#endif
  f.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) -> std::vector<ValueId> {
    const TensorDesc wd = g.graph().value(fwd.inputs.at(1)).desc;  // a copy: emit grows the graph
    return {dy, g.emit("grad_weight", "position_embedding_grad_weight", {dy}, wd)};
  };
  with_bf16_per_sample(f, 1).bf16_cuda_native = true;
  r.add(std::move(f));

  OpDef gw;
  gw.name = "position_embedding_grad_weight";
  gw.summary = "position table gradient [dy] -> [max_len, C]";
  gw.user_visible = false;
  gw.parse = [](AttrReader& rd) { return position_parse(rd, "position_embedding_grad_weight"); };
  gw.infer = [](const OpAttrs& at, const std::vector<TensorDesc>& in) {
    const auto& a = static_cast<const PositionAttrs&>(at);
    REMAT_CHECK(in.at(0).shape.size() == 3, "position_embedding_grad_weight expects dy [N, T, C]");
    return TensorDesc{{a.max_len, in[0].shape[2]}, DType::F32};
  };
  gw.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, static_cast<double>(in.at(0).numel()) / out.numel());
  };
  gw.cpu = position_grad_cpu;
#ifdef REMAT_HAVE_CUDA
  gw.cuda = position_grad_cuda;
  gw.cuda_workspace = position_grad_workspace;
#endif
  with_bf16(gw).bf16_cuda_native = true;
  r.add(std::move(gw));
}

}  // namespace remat
