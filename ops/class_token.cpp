// class_token [x]: x [N, T, C] -> [N, T + 1, C], row 0 of every sample the learned weight [C]
// (a ViT's class token: torch.cat([class_token.expand(N, -1, -1), x], dim=1)), its other rows
// x's. Gradients: dx = concat_slice of dy's rows 1 .. T, dweight = class_token_grad_weight [dy],
// the sum over n of dy[n, 0, :] (in double, n in order, rounded once).
#include <algorithm>
#include <memory>

#include "ops/concat.h"
#include "ops/cpu_storage.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

struct ClassTokenAttrs : OpAttrs {
  double init_std = 0.0;  // 0: zeros, torchvision's initial class token
};

OpAttrsPtr class_token_parse(AttrReader& r, const std::string& op_name) {
  auto a = std::make_shared<ClassTokenAttrs>();
  a->init_std = r.get_double("init_std", 0.0, 0.0, 100.0);
  r.finish(op_name);
  return a;
}

TensorDesc class_token_infer(const OpAttrs&, const std::vector<TensorDesc>& in) {
  const DType t = require_float("class_token", in, 1);
  const Shape& x = in.at(0).shape;
  if (x.size() != 3) REMAT_USER_ERROR("class_token expects tokens [N, T, C], got " << shape_str(x));
  return TensorDesc{{x[0], x[1] + 1, x[2]}, t};
}

std::vector<ParamSpec> class_token_params(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const ClassTokenAttrs&>(at);
  ParamSpec w;
  w.suffix = "weight";
  w.desc = checked_desc({in.at(0).shape.at(2)}, DType::F32, "class_token weight");
  w.init = a.init_std > 0 ? InitKind::Normal : InitKind::Zeros;
  w.init_std = a.init_std;
  w.fan_in = w.fan_out = in[0].shape[2];
  w.role = ParamRole::Embedding;
  return {w};
}

struct Dims {
  int64_t n, t, c;  // x [n, t, c]
};
Dims dims_of(const Shape& y) { return {y[0], y[1] - 1, y[2]}; }

void class_token_cpu(const ExecContext& ctx) {
  const Dims d = dims_of(ctx.output.shape());
  const float* x = ctx.inputs[0].f32();
  const float* w = ctx.inputs[1].f32();
  float* y = ctx.output.f32();
  for (int64_t s = 0; s < d.n; ++s) {
    float* row = y + s * (d.t + 1) * d.c;
    std::copy(w, w + d.c, row);
    std::copy(x + s * d.t * d.c, x + (s + 1) * d.t * d.c, row + d.c);
  }
}

// [dy [N, T + 1, C]] -> [C].
void class_token_grad_cpu(const ExecContext& ctx) {
  const Dims d = dims_of(ctx.inputs[0].shape());
  const float* dy = ctx.inputs[0].f32();
  float* dw = ctx.output.f32();
  for (int64_t k = 0; k < d.c; ++k) {
    double sum = 0.0;
    for (int64_t s = 0; s < d.n; ++s) sum += dy[s * (d.t + 1) * d.c + k];
    dw[k] = static_cast<float>(sum);
  }
}

#ifdef REMAT_HAVE_CUDA
void class_token_cuda(const ExecContext& ctx) {
  const Dims d = dims_of(ctx.output.shape());
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    class_token_forward(storage<T>(ctx.output), storage<T>(ctx.inputs[0]), ctx.inputs[1].f32(),
                        d.n, d.t, d.c, cuda_stream(ctx));
  });
}

void class_token_grad_cuda(const ExecContext& ctx) {
  const Dims d = dims_of(ctx.inputs[0].shape());
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    class_token_backward(ctx.output.f32(), storage<T>(ctx.inputs[0]), d.n, d.t, d.c,
                         cuda_stream(ctx));
  });
}
#endif

std::vector<ValueId> class_token_gradient(GradEmitter& g, const Node& fwd, ValueId dy) {
  const TensorDesc x = g.graph().value(fwd.inputs.at(0)).desc;  // copies: emit grows the graph
  const TensorDesc w = g.graph().value(fwd.inputs.at(1)).desc;
  const std::string origin = fwd.attrs.origin;
  const ValueId dx = emit_concat_slice(g, "grad_input", dy, 1, x, origin, false);
  return {dx, g.emit("grad_weight", "class_token_grad_weight", {dy}, w)};
}

}  // namespace

void register_class_token_ops(OpRegistry& r) {
  OpDef f;
  f.name = "class_token";
  f.summary = "a learned token [C] before each sample's tokens: [N, T, C] -> [N, T + 1, C] "
              "(init_std; 0: zeros)";
  f.parse = [](AttrReader& rd) { return class_token_parse(rd, "class_token"); };
  f.infer = class_token_infer;
  f.params = class_token_params;
  f.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost({in.at(0)}, out, 0);
  };
  f.cpu = class_token_cpu;
#ifdef REMAT_HAVE_CUDA
  f.cuda = class_token_cuda;
#endif
  f.gradient = class_token_gradient;
  with_bf16_per_sample(f, 1).bf16_cuda_native = true;
  r.add(std::move(f));

  OpDef gw;
  gw.name = "class_token_grad_weight";
  gw.summary = "class token gradient [dy] -> [C]: the sum over n of dy[n, 0, :]";
  gw.user_visible = false;
  gw.parse = [](AttrReader& rd) { return class_token_parse(rd, "class_token_grad_weight"); };
  gw.infer = [](const OpAttrs&, const std::vector<TensorDesc>& in) {
    REMAT_CHECK(in.at(0).shape.size() == 3, "class_token_grad_weight expects dy [N, T + 1, C]");
    return TensorDesc{{in[0].shape[2]}, DType::F32};
  };
  gw.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    OpCost c;
    c.flops = static_cast<double>(in.at(0).shape[0] * out.numel());
    c.bytes_moved = in[0].shape[0] * out.numel() * dtype_size(in[0].dtype) + out.bytes();
    return c;
  };
  gw.cpu = class_token_grad_cpu;
#ifdef REMAT_HAVE_CUDA
  gw.cuda = class_token_grad_cuda;
#endif
  with_bf16(gw).bf16_cuda_native = true;
  r.add(std::move(gw));
}

}  // namespace remat
