// sgd: the SGD optimizer update with momentum, Nesterov and L2 weight decay, PyTorch semantics
// (torch.optim.SGD, dampening 0), and the learning-rate schedule of ops/lr_schedule.h. Writes
// the parameter and its momentum buffer in place (Note [in-place updates]).
#include <string>
#include <vector>

#include "ops/lr_schedule.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"
#include "runtime/core/check.h"

namespace remat {
namespace {

struct SgdAttrs : OpAttrs {
  LrSchedule schedule;
  double momentum = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

OpAttrsPtr sgd_parse(AttrReader& r) {
  auto a = std::make_shared<SgdAttrs>();
  a->schedule = parse_lr_schedule(r, 0.01);
  a->momentum = r.get_double("momentum", 0.0, 0.0, 1.0);
  a->weight_decay = r.get_double("weight_decay", 0.0, 0.0, 1e6);
  a->nesterov = r.get_bool("nesterov", false);
  if (a->nesterov && a->momentum <= 0) r.fail("nesterov", "Nesterov momentum needs momentum > 0");
  r.finish("sgd");
  return a;
}

// data inputs [param, grad (, momentum buffer)] -> the param's descriptor.
TensorDesc sgd_infer(const OpAttrs&, const std::vector<TensorDesc>& in) {
  for (size_t i = 1; i < in.size(); ++i)
    if (!(in[i] == in[0]))
      REMAT_USER_ERROR("sgd: input " << i << " " << shape_str(in[i].shape)
                                     << " does not match the parameter " << shape_str(in[0].shape));
  if (in.at(0).dtype != DType::F32) REMAT_USER_ERROR("sgd expects f32 parameters");
  return in[0];
}

OpCost sgd_cost(const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
  OpCost c;
  c.flops = 5.0 * static_cast<double>(out.numel());
  for (const auto& d : in) c.bytes_moved += d.bytes();
  c.bytes_moved += out.bytes() + (in.size() > 2 ? in[2].bytes() : 0);  // param (+ buffer) written
  return c;
}

// p, buf: updated in place; g = grad + wd * p; buf = momentum * buf + g;
// p -= lr * (nesterov ? g + momentum * buf : buf). Without momentum: p -= lr * g.
void sgd_update(const float* p_in, float* p_out, const float* grad, float* buf, int64_t n,
                const SgdAttrs& a, int64_t step) {
  const float lr = static_cast<float>(lr_at(a.schedule, step)), mu = static_cast<float>(a.momentum);
  const float wd = static_cast<float>(a.weight_decay);
  for (int64_t i = 0; i < n; ++i) {
    const float p = p_in[i];
    const float g = grad[i] + wd * p;
    float step = g;
    if (buf) {
      buf[i] = mu * buf[i] + g;
      step = a.nesterov ? g + mu * buf[i] : buf[i];
    }
    p_out[i] = p - lr * step;
  }
}

// inputs [param, grad (, momentum)] -> output = param (same memory).
void sgd_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<SgdAttrs>(*ctx.node);
  const size_t want = a.momentum > 0 ? 3 : 2;
  REMAT_CHECK(ctx.inputs.size() == want, "sgd node '" << ctx.node->name << "' has "
                                                      << ctx.inputs.size() << " inputs, not "
                                                      << want);
  sgd_update(ctx.inputs[0].f32(), ctx.output.f32(), ctx.inputs[1].f32(),
             want == 3 ? ctx.inputs[2].f32() : nullptr, ctx.output.numel(), a, ctx.step);
}

#ifdef REMAT_HAVE_CUDA
// inputs [param, grad (, momentum)] -> output = param, updated in place on the device.
void sgd_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<SgdAttrs>(*ctx.node);
  const size_t want = a.momentum > 0 ? 3 : 2;
  REMAT_CHECK(ctx.inputs.size() == want, "sgd node '" << ctx.node->name << "' has "
                                                      << ctx.inputs.size() << " inputs, not "
                                                      << want);
  REMAT_CHECK(ctx.output.data == ctx.inputs[0].data,
              "sgd node '" << ctx.node->name << "': output must be the parameter (in place)");
  // Qualified: the host sgd_update above would hide the kernel launcher.
  remat::sgd_update(ctx.output.f32(), ctx.inputs[1].f32(),
                    want == 3 ? ctx.inputs[2].f32() : nullptr, ctx.output.numel(),
                    static_cast<float>(lr_at(a.schedule, ctx.step)), static_cast<float>(a.momentum),
                    static_cast<float>(a.weight_decay), a.nesterov, cuda_stream(ctx));
}
#endif

}  // namespace

void register_sgd_ops(OpRegistry& r) {
  OpDef op;
  op.name = "sgd";
  op.summary = "SGD optimizer (lr, momentum, weight_decay, nesterov), PyTorch semantics";
  op.kind = NodeKind::Update;
  op.min_inputs = 2;
  op.max_inputs = 3;
  op.parse = sgd_parse;
  op.infer = sgd_infer;
  op.cost = sgd_cost;
  op.cpu = sgd_cpu;
#ifdef REMAT_HAVE_CUDA
  op.cuda = sgd_cuda;
#endif
  op.optimizer_state = [](const OpAttrs& at) -> std::vector<std::string> {
    if (static_cast<const SgdAttrs&>(at).momentum > 0) return {"momentum"};
    return {};
  };
  op.optimizer_clip_norm = [](const OpAttrs& at) {
    return static_cast<const SgdAttrs&>(at).schedule.clip_norm;
  };
  r.add(std::move(op));
}

}  // namespace remat
