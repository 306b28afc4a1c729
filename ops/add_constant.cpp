// add_constant [x, table]: x plus a constant table broadcast over x's leading axes,
// y[o, k] = x[o, k] + table[k] for x viewed as [outer, inner], inner = the table's size and
// `shape` = the table's shape = x's trailing axes (numpy broadcasting of a table with ones in
// front of it). The table is a buffer: part of the model's state, saved in checkpoints, never
// trained. An imported ONNX model's tensor constants arrive this way (Note [tensor constants]
// in models/onnx/onnx_constant_ops.cpp: a sinusoidal encoding, an additive attention mask of 0
// and -inf, a per-channel shift); in YAML the table starts at zeros. Backward: dx = dy (no node).
// The CUDA path is position_embedding's kernel (out (n, inner) = inp + table (inner), exact).
#include <string>
#include <vector>

#include "ops/cpu_storage.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

struct AddConstantAttrs : OpAttrs {
  Shape shape;  // the table's shape: x's trailing axes
};

OpAttrsPtr add_constant_parse(AttrReader& r) {
  auto a = std::make_shared<AddConstantAttrs>();
  if (!r.has("shape")) r.fail("shape", "is required");
  a->shape = r.get_int_list("shape", {1, 2, 3, 4, 5, 6, 7}, {}, 1, int64_t{1} << 40);
  r.finish("add_constant");
  return a;
}

TensorDesc add_constant_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const AddConstantAttrs&>(at);
  require_float("add_constant", in, 1);
  const Shape& x = in.at(0).shape;
  const size_t k = a.shape.size();
  bool ok = x.size() > k;  // the batch axis is never the table's
  for (size_t d = 0; ok && d < k; ++d) ok = x[x.size() - k + d] == a.shape[d];
  if (!ok)
    REMAT_USER_ERROR("add_constant: a table " << shape_str(a.shape)
                                              << " is not the trailing axes of " << shape_str(x)
                                              << " after its batch axis");
  return in[0];
}

std::vector<ParamSpec> add_constant_params(const OpAttrs& at, const std::vector<TensorDesc>&) {
  ParamSpec t;
  t.suffix = "table";
  t.desc = checked_desc(static_cast<const AddConstantAttrs&>(at).shape, DType::F32,
                        "add_constant table");
  t.kind = ValueKind::Buffer;
  t.init = InitKind::Zeros;
  return {t};
}

void add_constant_cpu(const ExecContext& ctx) {
  const int64_t inner = ctx.inputs[1].numel(), outer = ctx.inputs[0].numel() / inner;
  const float* x = ctx.inputs[0].f32();
  const float* t = ctx.inputs[1].f32();
  float* y = ctx.output.f32();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < inner; ++k) y[o * inner + k] = x[o * inner + k] + t[k];
}

#ifdef REMAT_HAVE_CUDA
// x and y are F32 or BF16 (the sum in FP32, rounded once); the table is F32.
void add_constant_cuda(const ExecContext& ctx) {
  const int64_t inner = ctx.inputs[1].numel(), outer = ctx.inputs[0].numel() / inner;
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    position_embedding_forward(storage<T>(ctx.output), storage<T>(ctx.inputs[0]),
                               ctx.inputs[1].f32(), outer, inner, cuda_stream(ctx));
  });
}
#endif

}  // namespace

void register_add_constant_ops(OpRegistry& r) {
  OpDef f;
  f.name = "add_constant";
  f.summary = "x + a constant table (a buffer) broadcast over the leading axes (shape)";
  f.parse = add_constant_parse;
  f.infer = add_constant_infer;
  f.params = add_constant_params;
  f.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, 1);
  };
  f.cpu = add_constant_cpu;
#ifdef REMAT_HAVE_CUDA
  f.cuda = add_constant_cuda;
#endif
  f.gradient = [](GradEmitter&, const Node&, ValueId dy) -> std::vector<ValueId> {
    return {dy, kNoValue};
  };
  with_bf16_per_sample(f, 1).bf16_cuda_native = true;
  r.add(std::move(f));
}

}  // namespace remat
