// gelu: the tanh approximation GPT-2 uses (torch.nn.GELU(approximate='tanh')), elementwise:
//   y = 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3),
// and gelu_grad [dy, x] -> dy * (0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) du/dx),
// du/dx = sqrt(2 / pi) (1 + 3 * 0.044715 x^2). Both evaluate in double and round once; the
// CUDA kernels use the same expressions (kernels/gelu.cu).
#include <cmath>
#include <vector>

#include "ops/cpu_storage.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;

void gelu_cpu(const ExecContext& ctx) {
  const float* x = ctx.inputs[0].f32();
  float* y = ctx.output.f32();
  for (int64_t i = 0; i < ctx.output.numel(); ++i) {
    const double v = x[i];
    const double t = std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
    y[i] = static_cast<float>(0.5 * v * (1.0 + t));
  }
}

// inputs [dy, x] -> dx.
void gelu_grad_cpu(const ExecContext& ctx) {
  const float* dy = ctx.inputs[0].f32();
  const float* x = ctx.inputs[1].f32();
  float* dx = ctx.output.f32();
  for (int64_t i = 0; i < ctx.output.numel(); ++i) {
    const double v = x[i];
    const double t = std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
    const double du = kSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * v * v);
    dx[i] = static_cast<float>(dy[i] * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du));
  }
}

#ifdef REMAT_HAVE_CUDA
// F32 or BF16 data, all of one dtype (bf16-native: Note [bf16 launchers] in kernels/kernels.h).
void gelu_cuda(const ExecContext& ctx) {
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    gelu_forward(storage<T>(ctx.output), storage<T>(ctx.inputs[0]), ctx.output.numel(),
                 cuda_stream(ctx));
  });
}
void gelu_grad_cuda(const ExecContext& ctx) {
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    gelu_backward(storage<T>(ctx.output), storage<T>(ctx.inputs[0]), storage<T>(ctx.inputs[1]),
                  ctx.output.numel(), cuda_stream(ctx));
  });
}
#endif

}  // namespace

void register_gelu_ops(OpRegistry& r) {
  OpDef f;
  f.name = "gelu";
  f.summary = "GELU, tanh approximation (GPT-2), elementwise";
  f.parse = [](AttrReader& rd) { return parse_no_attrs(rd, "gelu"); };
  f.infer = [](const OpAttrs&, const std::vector<TensorDesc>& in) {
    require_float("gelu", in);
    return in.at(0);
  };
  f.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, 10);
  };
  f.cpu = gelu_cpu;
#ifdef REMAT_HAVE_CUDA
  f.cuda = gelu_cuda;
#endif
  // The gradient reads the input x (not the output): the solver may free y and keep x.
  f.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) -> std::vector<ValueId> {
    const ValueId x = fwd.inputs.at(0);
    const TensorDesc d = g.graph().value(x).desc;
    AttrMap m;
    m.origin = fwd.attrs.origin;
    return {g.emit("grad", "gelu_grad", {dy, x}, d, m, std::make_shared<EmptyAttrs>())};
  };
  with_bf16_per_sample(f, 1).bf16_cuda_native = true;
  f.layout_agnostic = true;
  r.add(std::move(f));

  OpDef gd;
  gd.name = "gelu_grad";
  gd.summary = "GELU gradient [dy, x]";
  gd.user_visible = false;
  gd.min_inputs = gd.max_inputs = 2;
  gd.parse = [](AttrReader& rd) { return parse_no_attrs(rd, "gelu_grad"); };
  gd.infer = [](const OpAttrs&, const std::vector<TensorDesc>& in) { return in.at(1); };
  gd.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, 16);
  };
  gd.cpu = gelu_grad_cpu;
#ifdef REMAT_HAVE_CUDA
  gd.cuda = gelu_grad_cuda;
#endif
  with_bf16_per_sample(gd, 2).bf16_cuda_native = true;
  r.add(std::move(gd));
}

}  // namespace remat
