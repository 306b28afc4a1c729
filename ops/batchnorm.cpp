// batchnorm: per-channel normalisation of [N, C, H, W] (or [N, F]) with a learned scale and
// shift and running statistics, PyTorch conventions; its three backward ops. Backward recomputes
// the batch statistics from x so the forward stays single-output. `scale: false` drops the
// learned scale (Keras's BatchNormalization(scale=False), InceptionV3's): gamma is 1 and the
// node has no weight parameter and no weight gradient.
//
// Note [batchnorm activation]
// `activation: relu|relu6` applies the activation to the normalised value before it is stored
// (ResNet's batch norm + ReLU as one node; the builder fuses the pairs itself under `fuse:
// batchnorm_relu`, Note [batchnorm + relu fusion] in models/batchnorm_relu_fusion.cpp). The result
// is the standalone pair's bit for bit: relu and relu6 commute with rounding to the stored dtype,
// and the gradient is theirs, a relu_grad [dy, y] node on the fused output (emit_activation_grad)
// before the three batch-norm gradients, which read x, not y. What the fusion removes is the
// normalised value before the activation: a value of the plan (transient, since no gradient reads
// it) and, on the GPU, a pass over it.
#include <vector>

#include "ops/batchnorm.h"
#include "ops/batchnorm_cuda.h"
#include "ops/data_format.h"
#include "ops/op_common.h"
#include "ops/registry.h"
#include "runtime/core/check.h"
#ifdef REMAT_HAVE_CUDA
#include "ops/cudnn_util.h"
#endif

namespace remat {
namespace {

OpAttrsPtr bn_parse(AttrReader& r, const std::string& op_name) {
  auto a = std::make_shared<BatchNormAttrs>();
  a->momentum = r.get_double("momentum", 0.1, 0.0, 1.0);
  a->eps = r.get_double("eps", 1e-5, 0.0, 1.0);
  if (a->eps <= 0) r.fail("eps", "must be greater than 0");
  a->train = r.get_choice("mode", "train", {"train", "inference"}) == "train";
  a->scale = r.get_bool("scale", true);
  a->channels_last = read_channels_last(r);
  a->activation = parse_activation(r);
  r.finish(op_name);
  return a;
}

void bn_check_input(const TensorDesc& x, const char* op) {
  if (!dtype_is_float(x.dtype))
    REMAT_USER_ERROR(op << " expects an f32 or bf16 input, got " << dtype_name(x.dtype));
  if (x.shape.size() != 4 && x.shape.size() != 2)
    REMAT_USER_ERROR(op << " expects a [N, C, H, W] or [N, F] input, got " << shape_str(x.shape));
}

TensorDesc bn_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const BatchNormAttrs&>(at);
  const TensorDesc& x = in.at(0);
  bn_check_input(x, "batchnorm");
  if (a.train && bn_dims(x.shape, a.channels_last).per_channel() < 2)
    REMAT_USER_ERROR("batchnorm in train mode needs more than 1 value per channel, got input "
                     << shape_str(x.shape));
  return x;
}

std::vector<ParamSpec> bn_params(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const BatchNormAttrs&>(at);
  TensorDesc c{{bn_dims(in.at(0).shape, a.channels_last).c}, DType::F32};
  std::vector<ParamSpec> out;
  if (a.scale)
    out.push_back({"weight", c, ValueKind::Param, InitKind::Ones, 0, 0});
  out.push_back({"bias", c, ValueKind::Param, InitKind::Zeros, 0, 0});
  out.push_back({"running_mean", c, ValueKind::Buffer, InitKind::Zeros, 0, 0});
  out.push_back({"running_var", c, ValueKind::Buffer, InitKind::Ones, 0, 0});
  return out;
}

OpCost bn_cost_scaled(const std::vector<TensorDesc>& in, const TensorDesc& out, double per_elem) {
  OpCost c;
  c.flops = per_elem * static_cast<double>(in.at(0).numel());
  c.bytes_moved = io_bytes(in, out);
  return c;
}

std::vector<ValueId> bn_gradient(GradEmitter& g, const Node& fwd, ValueId dy_out) {
  const auto& a = attrs_of<BatchNormAttrs>(fwd);
  // The gradient of the normalised value: through the fused activation's node, if any.
  const ValueId dy = emit_activation_grad(g, fwd, dy_out, a.activation);
  const BnSlots at = bn_forward_slots(a.scale);
  const size_t n = a.scale ? 5 : 4;
  REMAT_CHECK(fwd.inputs.size() == n, "batchnorm node '" << fwd.name << "' has "
                                                          << fwd.inputs.size() << " inputs, not "
                                                          << n);
  const ValueId x = fwd.inputs[0], b = fwd.inputs[at.bias];
  const ValueId rm = fwd.inputs[at.mean], rv = fwd.inputs[at.var];
  const Graph& gr = g.graph();
  std::vector<ValueId> gi_in = {dy, x}, gw_in = {dy, x};
  if (a.scale) gi_in.push_back(fwd.inputs[at.weight]);
  if (!a.train) {
    gi_in.insert(gi_in.end(), {rm, rv});
    gw_in.insert(gw_in.end(), {rm, rv});
  }
  const TensorDesc x_desc = gr.value(x).desc, c_desc = gr.value(b).desc;
  std::vector<ValueId> out(n, kNoValue);
  out[0] = g.emit("grad_input", "batchnorm_grad_input", gi_in, x_desc);
  if (a.scale) out[at.weight] = g.emit("grad_weight", "batchnorm_grad_weight", gw_in, c_desc);
  out[at.bias] = g.emit("grad_bias", "batchnorm_grad_bias", {dy}, c_desc);
  return out;
}

// A backward op sharing batchnorm's attributes.
OpDef bn_backward_op(const std::string& name, const std::string& summary, int min_in, int max_in) {
  OpDef op;
  op.name = name;
  op.summary = summary;
  op.user_visible = false;
  op.kind = NodeKind::Backward;
  op.min_inputs = min_in;
  op.max_inputs = max_in;
  op.parse = [name](AttrReader& r) { return bn_parse(r, name); };
  op.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return bn_cost_scaled(in, out, 6.0);
  };
  return op;
}

TensorDesc channel_desc(const OpAttrs& at, const TensorDesc& x) {
  return TensorDesc{{bn_dims(x.shape, static_cast<const BatchNormAttrs&>(at).channels_last).c},
                    DType::F32};
}

#ifdef REMAT_HAVE_CUDA
BnCudaParams bn_cuda_params(const Node& n) {
  const auto& a = attrs_of<BatchNormAttrs>(n);
  BnCudaParams p;
  p.momentum = a.momentum;
  p.eps = a.eps;
  p.train = a.train;
  p.scale = a.scale;
  p.channels_last = a.channels_last;
  p.activation = kernel_activation(a.activation);
  return p;
}

// Attaches a batchnorm kernel (and its workspace query, when it has one): ops/batchnorm_cuda.cpp.
// cuDNN computes the batch statistics inside its calls, so the CUDA path cannot synchronise
// them across ranks (Note [synchronised batch statistics] in ops/batchnorm_cpu.cpp): it
// refuses rather than train each rank on its own statistics.
void set_bn_cuda(OpDef& op, void (*run)(const BnCudaParams&, const ExecContext&),
                 int64_t (*workspace)(const BnCudaParams&, const ExecContext&)) {
  op.cuda = [run](const ExecContext& ctx) {
    const BnCudaParams p = bn_cuda_params(*ctx.node);
    if (ctx.comm && p.train)
      REMAT_USER_ERROR("layer '" << ctx.node->name << "': batchnorm in train mode on CUDA cannot "
                                 << "synchronise its batch statistics across ranks yet (the CPU "
                                 << "path does); train data parallel on the CPU, or set "
                                 << "mode: inference");
    run(p, ctx);
  };
  if (workspace)
    op.cuda_workspace = [workspace](const ExecContext& ctx) {
      return workspace(bn_cuda_params(*ctx.node), ctx);
    };
}
#endif

}  // namespace

void register_batchnorm_ops(OpRegistry& r) {
  OpDef bn;
  bn.name = "batchnorm";
  bn.summary =
      "batch normalisation per channel (momentum, eps, mode train|inference, scale, fused "
      "activation relu|relu6)";
  bn.min_inputs = bn.max_inputs = 1;
  bn.parse = [](AttrReader& rd) { return bn_parse(rd, "batchnorm"); };
  bn.infer = bn_infer;
  bn.params = bn_params;
  bn.cost = [](const OpAttrs& at, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    const bool act = static_cast<const BatchNormAttrs&>(at).activation != Activation::None;
    return bn_cost_scaled(in, out, act ? 8.0 : 7.0);
  };
  bn.cpu = bn_forward_cpu;
  bn.gradient = bn_gradient;
  bn.channels_last = [](const OpAttrs&, const std::vector<TensorDesc>& in) {
    return in.at(0).shape.size() == 4;
  };
#ifdef REMAT_HAVE_CUDA
  set_bn_cuda(bn, batchnorm_forward_cuda, batchnorm_forward_cuda_workspace);
#endif
  with_bf16(bn).bf16_cpu_native = bn.bf16_cuda_native = true;
  r.add(std::move(bn));

  OpDef gi = bn_backward_op("batchnorm_grad_input", "batchnorm input gradient", 2, 5);
  gi.infer = [](const OpAttrs&, const std::vector<TensorDesc>& in) {
    bn_check_input(in.at(1), "batchnorm_grad_input");
    return in.at(1);
  };
  gi.cpu = bn_grad_input_cpu;
#ifdef REMAT_HAVE_CUDA
  set_bn_cuda(gi, batchnorm_grad_input_cuda, batchnorm_grad_input_cuda_workspace);
#endif
  with_bf16(gi).bf16_cpu_native = gi.bf16_cuda_native = true;
  r.add(std::move(gi));

  OpDef gw = bn_backward_op("batchnorm_grad_weight", "batchnorm scale gradient", 2, 4);
  gw.infer = [](const OpAttrs& a, const std::vector<TensorDesc>& in) {
    bn_check_input(in.at(1), "batchnorm_grad_weight");
    return channel_desc(a, in.at(1));
  };
  gw.cpu = bn_grad_weight_cpu;
#ifdef REMAT_HAVE_CUDA
  set_bn_cuda(gw, batchnorm_grad_weight_cuda, batchnorm_grad_weight_cuda_workspace);
#endif
  with_bf16(gw).bf16_cpu_native = gw.bf16_cuda_native = true;
  r.add(std::move(gw));

  OpDef gb = bn_backward_op("batchnorm_grad_bias", "batchnorm shift gradient", 1, 1);
  gb.infer = [](const OpAttrs& a, const std::vector<TensorDesc>& in) {
    bn_check_input(in.at(0), "batchnorm_grad_bias");
    return channel_desc(a, in.at(0));
  };
  gb.cpu = bn_grad_bias_cpu;
#ifdef REMAT_HAVE_CUDA
  gb.cuda = [](const ExecContext& ctx) {
    batchnorm_grad_bias_cuda(bn_cuda_params(*ctx.node), ctx);
  };
  gb.cuda_workspace = [](const ExecContext& ctx) {
    return batchnorm_grad_bias_cuda_workspace(bn_cuda_params(*ctx.node), ctx);
  };
#endif
  with_bf16(gb).bf16_cpu_native = gb.bf16_cuda_native = true;
  r.add(std::move(gb));
}

}  // namespace remat
