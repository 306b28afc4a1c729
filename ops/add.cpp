// add: elementwise sum of 2+ inputs of one shape (residual connections). Its gradient is dy
// for every input, so it emits no backward node.
#include <algorithm>

#include "ops/cpu_storage.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

TensorDesc add_infer(const OpAttrs&, const std::vector<TensorDesc>& in) {
  if (in.size() < 2) REMAT_USER_ERROR("add expects at least 2 inputs, got " << in.size());
  require_float("add", in);
  for (size_t i = 1; i < in.size(); ++i)
    if (!(in[i] == in[0]))
      REMAT_USER_ERROR("add expects inputs of one shape, got " << shape_str(in[0].shape)
                       << " (input 0) and " << shape_str(in[i].shape) << " (input " << i << ")");
  return in[0];
}

// y = x0 + x1 + ... summed left to right (a fixed order: recomputation is bit-identical).
void add_cpu(const ExecContext& ctx) {
  const int64_t n = ctx.output.numel();
  float* y = ctx.output.f32();
  const float* x0 = ctx.inputs[0].f32();
  std::copy(x0, x0 + n, y);
  for (size_t k = 1; k < ctx.inputs.size(); ++k) {
    const float* x = ctx.inputs[k].f32();
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
  }
}

#ifdef REMAT_HAVE_CUDA
// F32 or bf16 (bf16_cuda_native: the bf16 launcher sums in FP32 and rounds once).
void add_cuda(const ExecContext& ctx) {
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    std::vector<const T*> in;
    for (const TensorView& x : ctx.inputs) in.push_back(storage<T>(x));
    add_forward(storage<T>(ctx.output), in.data(), static_cast<int>(in.size()),
                ctx.output.numel(), cuda_stream(ctx));
  });
}
#endif

}  // namespace

void register_add_ops(OpRegistry& r) {
  OpDef op;
  op.name = "add";
  op.summary = "elementwise sum of 2+ inputs of one shape";
  op.min_inputs = 2;
  op.max_inputs = -1;
  op.parse = [](AttrReader& rd) { return parse_no_attrs(rd, "add"); };
  op.infer = add_infer;
  op.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, static_cast<double>(in.size() - 1));
  };
  op.cpu = add_cpu;
#ifdef REMAT_HAVE_CUDA
  op.cuda = add_cuda;
#endif
  with_bf16_per_sample(op, -1).bf16_cuda_native = true;
  op.layout_agnostic = true;
  op.gradient = [](GradEmitter&, const Node& fwd, ValueId dy) {
    return std::vector<ValueId>(fwd.inputs.size(), dy);
  };
  r.add(std::move(op));
}

}  // namespace remat
