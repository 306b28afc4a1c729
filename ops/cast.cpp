// cast: a float tensor in another float dtype (`to: f32 | bf16`). F32 -> BF16 rounds to nearest
// even, BF16 -> F32 is exact, a cast to its own dtype copies. The graph builder inserts casts
// where a bf16 model's dtypes change (Note [bf16 autocast] in models/build.cpp): before conv2d,
// dense and matmul on F32 data, and where a BF16 branch meets an F32 one. Its gradient is the
// cast back. Both kernels handle bf16 themselves (Note [bf16 execution]).
#include <algorithm>
#include <cstring>
#include <memory>

#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"
#include "runtime/core/bf16.h"

namespace remat {
namespace {

struct CastAttrs : OpAttrs {
  DType to = DType::F32;
};

OpAttrsPtr cast_parse(AttrReader& r) {
  auto a = std::make_shared<CastAttrs>();
  if (!r.has("to")) r.fail("to", "is required (f32 or bf16)");
  a->to = dtype_from_name(r.get_choice("to", "f32", {"f32", "bf16"}));
  r.finish("cast");
  return a;
}

TensorDesc cast_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  require_float("cast", in);
  return TensorDesc{in.at(0).shape, static_cast<const CastAttrs&>(at).to};
}

void cast_cpu(const ExecContext& ctx) {
  const TensorView &x = ctx.inputs[0], &y = ctx.output;
  const int64_t n = y.numel();
  if (x.desc->dtype == y.desc->dtype)
    std::memcpy(y.data, x.data, static_cast<size_t>(y.desc->bytes()));
  else if (y.desc->dtype == DType::BF16)
    bf16_narrow(x.f32(), y.bf16(), n);
  else
    bf16_widen(x.bf16(), y.f32(), n);
}

#ifdef REMAT_HAVE_CUDA
void cast_cuda(const ExecContext& ctx) {
  const TensorView &x = ctx.inputs[0], &y = ctx.output;
  const int64_t n = y.numel();
  if (x.desc->dtype == y.desc->dtype)
    REMAT_CUDA_CHECK(cudaMemcpyAsync(y.data, x.data, static_cast<size_t>(y.desc->bytes()),
                                     cudaMemcpyDeviceToDevice, cuda_stream(ctx)));
  else if (y.desc->dtype == DType::BF16)
    bf16_narrow(y.bf16(), x.f32(), n, cuda_stream(ctx));
  else
    bf16_widen(y.f32(), x.bf16(), n, cuda_stream(ctx));
}
#endif

}  // namespace

void register_cast_ops(OpRegistry& r) {
  OpDef op;
  op.name = "cast";
  op.summary = "the input in another float dtype (to: f32 | bf16; round to nearest even)";
  op.parse = cast_parse;
  op.infer = cast_infer;
  op.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, 1);
  };
  op.cpu = cast_cpu;
#ifdef REMAT_HAVE_CUDA
  op.cuda = cast_cuda;
#endif
  op.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) -> std::vector<ValueId> {
    const TensorDesc x = g.graph().value(fwd.inputs.at(0)).desc;  // a copy: emit grows the graph
    AttrMap m;
    m.origin = fwd.attrs.origin;
    m.set("to", std::string(dtype_name(x.dtype)));
    AttrReader rd(m);
    OpAttrsPtr typed = cast_parse(rd);
    return {g.emit("grad", "cast", {dy}, x, m, typed)};
  };
  with_bf16(op).bf16_cpu_native = true;
  op.bf16_cuda_native = true;
  op.layout_agnostic = true;
  r.add(std::move(op));
}

}  // namespace remat
