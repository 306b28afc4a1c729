// adam: the Adam optimizer update, PyTorch semantics (torch.optim.Adam, L2 weight decay added to
// the gradient, bias correction with t = step + 1). Writes the parameter and its two moment
// buffers in place (Note [in-place updates]).
#include <cmath>
#include <string>
#include <vector>

#include "ops/op_cuda.h"
#include "ops/registry.h"
#include "runtime/check.h"

namespace remat {
namespace {

struct AdamAttrs : OpAttrs {
  double lr = 0.001;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
};

OpAttrsPtr adam_parse(AttrReader& r) {
  auto a = std::make_shared<AdamAttrs>();
  a->lr = r.get_double("lr", 0.001, 0.0, 1e6);
  a->beta1 = r.get_double("beta1", 0.9, 0.0, 1.0);
  if (a->beta1 >= 1) r.fail("beta1", "must be less than 1");
  a->beta2 = r.get_double("beta2", 0.999, 0.0, 1.0);
  if (a->beta2 >= 1) r.fail("beta2", "must be less than 1");
  a->eps = r.get_double("eps", 1e-8, 0.0, 1.0);
  a->weight_decay = r.get_double("weight_decay", 0.0, 0.0, 1e6);
  r.finish("adam");
  return a;
}

// data inputs [param, grad (, m, v)] -> the param's descriptor.
TensorDesc adam_infer(const OpAttrs&, const std::vector<TensorDesc>& in) {
  for (size_t i = 1; i < in.size(); ++i)
    if (!(in[i] == in[0]))
      REMAT_USER_ERROR("adam: input " << i << " " << shape_str(in[i].shape)
                                      << " does not match the parameter "
                                      << shape_str(in[0].shape));
  if (in.at(0).dtype != DType::F32) REMAT_USER_ERROR("adam expects f32 parameters");
  return in[0];
}

OpCost adam_cost(const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
  OpCost c;
  c.flops = 12.0 * static_cast<double>(out.numel());
  for (const auto& d : in) c.bytes_moved += d.bytes();
  c.bytes_moved += 3 * out.bytes();  // param, m, v written
  return c;
}

// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)
// with g = grad + wd * p and bc_i = 1 - beta_i^t (the order of operations of torch.optim.Adam).
void adam_update(const float* p_in, float* p_out, const float* grad, float* m, float* v, int64_t n,
                 const AdamAttrs& a, int64_t t) {
  const float b1 = static_cast<float>(a.beta1), b2 = static_cast<float>(a.beta2);
  const float wd = static_cast<float>(a.weight_decay), eps = static_cast<float>(a.eps);
  const double bc1 = 1.0 - std::pow(a.beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(a.beta2, static_cast<double>(t));
  const float step_size = static_cast<float>(a.lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  for (int64_t i = 0; i < n; ++i) {
    const float p = p_in[i];
    const float g = grad[i] + wd * p;
    m[i] = b1 * m[i] + (1.0f - b1) * g;
    v[i] = b2 * v[i] + (1.0f - b2) * g * g;
    const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
    p_out[i] = p - step_size * (m[i] / denom);
  }
}

// inputs [param, grad, adam_m, adam_v] -> output = param (same memory).
void adam_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<AdamAttrs>(*ctx.node);
  REMAT_CHECK(ctx.inputs.size() == 4,
              "adam node '" << ctx.node->name << "' has " << ctx.inputs.size() << " inputs, not 4");
  adam_update(ctx.inputs[0].f32(), ctx.output.f32(), ctx.inputs[1].f32(), ctx.inputs[2].f32(),
              ctx.inputs[3].f32(), ctx.output.numel(), a, ctx.step + 1);
}

#ifdef REMAT_HAVE_CUDA
// inputs [param, grad, adam_m, adam_v] -> output = param, updated in place on the device. The
// step scalars are computed on the host exactly as adam_update does.
void adam_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<AdamAttrs>(*ctx.node);
  REMAT_CHECK(ctx.inputs.size() == 4,
              "adam node '" << ctx.node->name << "' has " << ctx.inputs.size() << " inputs, not 4");
  REMAT_CHECK(ctx.output.data == ctx.inputs[0].data,
              "adam node '" << ctx.node->name << "': output must be the parameter (in place)");
  const double t = static_cast<double>(ctx.step + 1);
  const double bc1 = 1.0 - std::pow(a.beta1, t);
  const double bc2 = 1.0 - std::pow(a.beta2, t);
  AdamStep s;
  s.step_size = static_cast<float>(a.lr / bc1);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  s.beta1 = static_cast<float>(a.beta1);
  s.beta2 = static_cast<float>(a.beta2);
  s.eps = static_cast<float>(a.eps);
  s.weight_decay = static_cast<float>(a.weight_decay);
  // Qualified: the host adam_update above would hide the kernel launcher.
  remat::adam_update(ctx.output.f32(), ctx.inputs[1].f32(), ctx.inputs[2].f32(),
                     ctx.inputs[3].f32(), ctx.output.numel(), s, cuda_stream(ctx));
}
#endif

}  // namespace

void register_adam_ops(OpRegistry& r) {
  OpDef op;
  op.name = "adam";
  op.summary = "Adam optimizer (lr, beta1, beta2, eps, weight_decay), PyTorch semantics";
  op.kind = NodeKind::Update;
  op.min_inputs = 2;
  op.max_inputs = 4;
  op.parse = adam_parse;
  op.infer = adam_infer;
  op.cost = adam_cost;
  op.cpu = adam_cpu;
#ifdef REMAT_HAVE_CUDA
  op.cuda = adam_cuda;
#endif
  op.optimizer_state = [](const OpAttrs&) -> std::vector<std::string> {
    return {"adam_m", "adam_v"};
  };
  r.add(std::move(op));
}

}  // namespace remat
