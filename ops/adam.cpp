// adam and adamw: the Adam optimizer update with L2 weight decay (torch.optim.Adam) or decoupled
// weight decay (torch.optim.AdamW), bias correction with t = step + 1, the learning-rate
// schedule of ops/lr_schedule.h, and AdamW's per-parameter decay rule. Writes the parameter and
// its two moment buffers in place (Note [in-place updates]).
#include <cmath>
#include <string>
#include <vector>

#include "kernels/adam_step.h"
#include "ops/lr_schedule.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"
#include "runtime/core/check.h"

namespace remat {
namespace {

struct AdamAttrs : OpAttrs {
  LrSchedule schedule;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled = false;      // adamw
  std::string decay = "all";   // adamw: weights | matrices | all (Note [AdamW decay rule])
};

// Note [AdamW decay rule]
// Which parameters AdamW decays, by ParamRole: `weights` (the default) only Weight (dense,
// linear, conv, matmul weights): biases, normalization scales and shifts and embedding tables
// are exempt, as GPT training recipes do; `matrices` adds Embedding (nanoGPT's "every 2-D
// parameter"); `all` decays everything (torch.optim.AdamW with one parameter group). An exempt
// parameter's update node gets weight_decay 0 in its own attrs, so graph files keep the rule.
bool decays(const std::string& rule, ParamRole role) {
  if (rule == "all") return true;
  if (rule == "matrices") return role == ParamRole::Weight || role == ParamRole::Embedding;
  return role == ParamRole::Weight;
}

OpAttrsPtr adam_parse(AttrReader& r, bool decoupled) {
  const char* name = decoupled ? "adamw" : "adam";
  auto a = std::make_shared<AdamAttrs>();
  a->decoupled = decoupled;
  a->schedule = parse_lr_schedule(r, 0.001);
  a->beta1 = r.get_double("beta1", 0.9, 0.0, 1.0);
  if (a->beta1 >= 1) r.fail("beta1", "must be less than 1");
  a->beta2 = r.get_double("beta2", 0.999, 0.0, 1.0);
  if (a->beta2 >= 1) r.fail("beta2", "must be less than 1");
  a->eps = r.get_double("eps", 1e-8, 0.0, 1.0);
  a->weight_decay = r.get_double("weight_decay", decoupled ? 0.01 : 0.0, 0.0, 1e6);
  if (decoupled) a->decay = r.get_choice("decay", "weights", {"weights", "matrices", "all"});
  r.finish(name);
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

// The scalars of step `step` (0-based), computed once in double and rounded to float, as
// PyTorch turns its Python-float hyperparameters into the tensor's type: the moment weights
// 1 - beta are computed in double, never as 1.0f - float(beta) (which differs by ~1e-5 relative
// for beta2 = 0.999).
AdamStep adam_step_scalars(const AdamAttrs& a, int64_t step) {
  const double lr = lr_at(a.schedule, step);
  const double t = static_cast<double>(step + 1);
  AdamStep s;
  s.step_size = static_cast<float>(lr / (1.0 - std::pow(a.beta1, t)));
  s.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(a.beta2, t)));
  s.lerp_weight = static_cast<float>(1.0 - a.beta1);
  s.beta2 = static_cast<float>(a.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - a.beta2);
  s.eps = static_cast<float>(a.eps);
  s.l2 = a.decoupled ? 0.0f : static_cast<float>(a.weight_decay);
  s.decay_factor = a.decoupled ? static_cast<float>(1.0 - lr * a.weight_decay) : 1.0f;
  return s;
}

// torch.lerp(m, g, w) (ATen's formula: the small-weight branch below 0.5).
float lerp(float m, float g, float w) {
  return std::fabs(w) < 0.5f ? m + w * (g - m) : g - (g - m) * (1.0f - w);
}

// PyTorch's order of operations (torch.optim.Adam / AdamW, single-tensor path):
//   p *= decay_factor (AdamW); g = grad + l2 * p (Adam); m = lerp(m, g, 1 - b1);
//   v = b2 v + ((1 - b2) g) g; p -= step_size * (m / (sqrt(v) / bc2_sqrt + eps)).
void adam_update(const float* p_in, float* p_out, const float* grad, float* m, float* v, int64_t n,
                 const AdamStep& s) {
  for (int64_t i = 0; i < n; ++i) {
    const float p = p_in[i] * s.decay_factor;
    const float g = grad[i] + s.l2 * p_in[i];
    m[i] = lerp(m[i], g, s.lerp_weight);
    v[i] = s.beta2 * v[i] + (s.one_minus_beta2 * g) * g;
    const float denom = std::sqrt(v[i]) / s.bc2_sqrt + s.eps;
    p_out[i] = p - s.step_size * (m[i] / denom);
  }
}

// inputs [param, grad, adam_m, adam_v] -> output = param (same memory).
void adam_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<AdamAttrs>(*ctx.node);
  REMAT_CHECK(ctx.inputs.size() == 4,
              "adam node '" << ctx.node->name << "' has " << ctx.inputs.size() << " inputs, not 4");
  adam_update(ctx.inputs[0].f32(), ctx.output.f32(), ctx.inputs[1].f32(), ctx.inputs[2].f32(),
              ctx.inputs[3].f32(), ctx.output.numel(), adam_step_scalars(a, ctx.step));
}

#ifdef REMAT_HAVE_CUDA
// inputs [param, grad, adam_m, adam_v] -> output = param, updated in place on the device with
// the scalars the CPU uses.
void adam_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<AdamAttrs>(*ctx.node);
  REMAT_CHECK(ctx.inputs.size() == 4,
              "adam node '" << ctx.node->name << "' has " << ctx.inputs.size() << " inputs, not 4");
  REMAT_CHECK(ctx.output.data == ctx.inputs[0].data,
              "adam node '" << ctx.node->name << "': output must be the parameter (in place)");
  // Qualified: the host adam_update above would hide the kernel launcher.
  remat::adam_update(ctx.output.f32(), ctx.inputs[1].f32(), ctx.inputs[2].f32(),
                     ctx.inputs[3].f32(), ctx.output.numel(), adam_step_scalars(a, ctx.step),
                     cuda_stream(ctx));
}
#endif

OpDef adam_op(bool decoupled) {
  OpDef op;
  op.name = decoupled ? "adamw" : "adam";
  op.summary = decoupled ? "AdamW: Adam with decoupled weight decay (decay: weights|matrices|all), "
                           "PyTorch semantics"
                         : "Adam optimizer (lr, beta1, beta2, eps, weight_decay), PyTorch semantics";
  op.kind = NodeKind::Update;
  op.min_inputs = 2;
  op.max_inputs = 4;
  op.parse = [decoupled](AttrReader& r) { return adam_parse(r, decoupled); };
  op.infer = adam_infer;
  op.cost = adam_cost;
  op.cpu = adam_cpu;
#ifdef REMAT_HAVE_CUDA
  op.cuda = adam_cuda;
#endif
  op.optimizer_state = [](const OpAttrs&) -> std::vector<std::string> {
    return {"adam_m", "adam_v"};
  };
  op.optimizer_clip_norm = [](const OpAttrs& at) {
    return static_cast<const AdamAttrs&>(at).schedule.clip_norm;
  };
  if (decoupled)
    op.optimizer_param_attrs = [](const OpAttrs& at, const AttrMap& written, const Value& p) {
      const auto& a = static_cast<const AdamAttrs&>(at);
      AttrMap m = written;
      if (a.weight_decay > 0 && !decays(a.decay, p.role)) m.set("weight_decay", 0.0);
      return m;
    };
  return op;
}

}  // namespace

void register_adam_ops(OpRegistry& r) {
  r.add(adam_op(false));
  r.add(adam_op(true));
}

}  // namespace remat
