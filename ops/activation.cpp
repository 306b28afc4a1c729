// relu and relu6 (user ops) and their gradients relu_grad / relu6_grad [dy, y], which read the
// forward OUTPUT y (so the input need not be kept). CPU loops live in fused_activation.h,
// shared with conv2d/dense's fused activation.
#include "ops/cpu_storage.h"
#include "ops/fused_activation.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

TensorDesc infer_unary(const std::string& name, const std::vector<TensorDesc>& in) {
  require_float(name, in);
  return in.at(0);
}

// relu_grad / relu6_grad: [dy, y] -> dx with y's shape.
TensorDesc infer_act_grad(const std::string& name, const std::vector<TensorDesc>& in) {
  require_float(name, in);
  if (!(in.at(0) == in.at(1)))
    REMAT_USER_ERROR(name << " expects dy and y of one shape, got " << shape_str(in[0].shape)
                          << " and " << shape_str(in[1].shape));
  return in[0];
}

void relu_cpu(const ExecContext& c) {
  relu_forward_cpu(c.inputs[0].f32(), c.output.f32(), c.output.numel());
}
void relu6_cpu(const ExecContext& c) {
  relu6_forward_cpu(c.inputs[0].f32(), c.output.f32(), c.output.numel());
}
void relu_grad_kernel_cpu(const ExecContext& c) {
  relu_grad_cpu(c.inputs[0].f32(), c.inputs[1].f32(), c.output.f32(), c.output.numel());
}
void relu6_grad_kernel_cpu(const ExecContext& c) {
  relu6_grad_cpu(c.inputs[0].f32(), c.inputs[1].f32(), c.output.f32(), c.output.numel());
}

#ifdef REMAT_HAVE_CUDA
// The launchers' F32 or bf16 overload, for the dtype the data share (bf16_cuda_native).
void relu_cuda(const ExecContext& c) {
  with_storage(c.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    relu_forward(storage<T>(c.output), storage<T>(c.inputs[0]), c.output.numel(),
                 cuda_stream(c));
  });
}
void relu6_cuda(const ExecContext& c) {
  with_storage(c.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    relu6_forward(storage<T>(c.output), storage<T>(c.inputs[0]), c.output.numel(),
                  cuda_stream(c));
  });
}
// inputs [dy, y] -> dx.
void relu_grad_cuda(const ExecContext& c) {
  with_storage(c.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    relu_backward(storage<T>(c.output), storage<T>(c.inputs[0]), storage<T>(c.inputs[1]),
                  c.output.numel(), cuda_stream(c));
  });
}
void relu6_grad_cuda(const ExecContext& c) {
  with_storage(c.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    relu6_backward(storage<T>(c.output), storage<T>(c.inputs[0]), storage<T>(c.inputs[1]),
                   c.output.numel(), cuda_stream(c));
  });
}
#endif

OpDef make_activation(const std::string& name, const std::string& grad_op, KernelFn cpu,
                      KernelFn cuda, const std::string& summary) {
  OpDef op;
  op.name = name;
  op.summary = summary;
  op.parse = [name](AttrReader& r) { return parse_no_attrs(r, name); };
  op.infer = [name](const OpAttrs&, const std::vector<TensorDesc>& in) {
    return infer_unary(name, in);
  };
  op.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, 1);
  };
  op.cpu = std::move(cpu);
  op.cuda = std::move(cuda);
  with_bf16_per_sample(op, 1).bf16_cuda_native = true;
  op.layout_agnostic = true;
  op.gradient = [grad_op](GradEmitter& g, const Node& fwd, ValueId dy) {
    const TensorDesc x = g.graph().value(fwd.inputs[0]).desc;  // a copy: emit grows the graph
    return std::vector<ValueId>{g.emit("grad", grad_op, {dy, fwd.output}, x)};
  };
  return op;
}

OpDef make_activation_grad(const std::string& name, KernelFn cpu, KernelFn cuda,
                           const std::string& summary) {
  OpDef op;
  op.name = name;
  op.summary = summary;
  op.user_visible = false;
  op.min_inputs = op.max_inputs = 2;
  op.parse = [name](AttrReader& r) { return parse_no_attrs(r, name); };
  op.infer = [name](const OpAttrs&, const std::vector<TensorDesc>& in) {
    return infer_act_grad(name, in);
  };
  op.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, 1);
  };
  op.cpu = std::move(cpu);
  op.cuda = std::move(cuda);
  with_bf16_per_sample(op, 2).bf16_cuda_native = true;
  return op;
}

}  // namespace

void register_activation_ops(OpRegistry& r) {
#ifdef REMAT_HAVE_CUDA
  const KernelFn cuda[4] = {relu_cuda, relu6_cuda, relu_grad_cuda, relu6_grad_cuda};
#else
  const KernelFn cuda[4] = {};
#endif
  r.add(make_activation("relu", "relu_grad", relu_cpu, cuda[0], "y = max(0, x)"));
  r.add(make_activation("relu6", "relu6_grad", relu6_cpu, cuda[1], "y = min(max(0, x), 6)"));
  r.add(make_activation_grad("relu_grad", relu_grad_kernel_cpu, cuda[2], "dx = dy * (y > 0)"));
  r.add(make_activation_grad("relu6_grad", relu6_grad_kernel_cpu, cuda[3],
                             "dx = dy * (0 < y < 6)"));
}

}  // namespace remat
