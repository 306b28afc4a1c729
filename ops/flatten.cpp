// flatten: [N, d1, d2, ...] -> [N, d1 * d2 * ...], a copy (no aliasing: every value owns its
// memory); its gradient flatten_grad [dy] copies back to x's shape, carried in its own attrs.
// reshape (shape: the per-sample dims) is the same copy to any shape of as many values per
// sample (an imported [N, C] read as the [N, C, 1, 1] image it stands for); its gradient is the
// reshape back.
#include <algorithm>
#include <memory>

#include "ops/cpu_storage.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

struct FlattenGradAttrs : OpAttrs {
  Shape dims;  // x's shape without N
};

OpAttrsPtr flatten_grad_parse(AttrReader& r) {
  auto a = std::make_shared<FlattenGradAttrs>();
  int64_t rank = r.require_int("rank", 2, 8);
  if (!r.has("dims")) r.fail("dims", "is required");
  a->dims = r.get_ints("dims", static_cast<size_t>(rank - 1), {}, 1, int64_t{1} << 40);
  r.finish("flatten_grad");
  return a;
}

struct ReshapeAttrs : OpAttrs {
  Shape dims;  // the output's shape without N
};

OpAttrsPtr reshape_parse(AttrReader& r) {
  auto a = std::make_shared<ReshapeAttrs>();
  if (!r.has("shape")) r.fail("shape", "is required");
  a->dims = r.get_int_list("shape", {1, 2, 3, 4, 5, 6, 7}, {}, 1, int64_t{1} << 40);
  r.finish("reshape");
  return a;
}

TensorDesc reshape_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const ReshapeAttrs&>(at);
  const DType t = require_float("reshape", in);
  const Shape& s = in.at(0).shape;
  if (s.size() < 2) REMAT_USER_ERROR("reshape expects an input [N, ...], got " << shape_str(s));
  Shape out{s[0]};
  out.insert(out.end(), a.dims.begin(), a.dims.end());
  if (shape_numel(a.dims) != shape_numel(s) / s[0])
    REMAT_USER_ERROR("reshape: " << shape_str(s) << " holds " << shape_numel(s) / s[0]
                                 << " values per sample, shape " << shape_str(a.dims) << " "
                                 << shape_numel(a.dims));
  return TensorDesc{out, t};
}

std::vector<ValueId> reshape_gradient(GradEmitter& g, const Node& fwd, ValueId dy) {
  const TensorDesc x = g.graph().value(fwd.inputs[0]).desc;  // a copy: emit grows the graph
  AttrMap m;
  m.origin = fwd.attrs.origin;
  m.set("shape", std::vector<int64_t>(x.shape.begin() + 1, x.shape.end()));
  AttrReader rd(m);
  OpAttrsPtr typed = reshape_parse(rd);
  return {g.emit("grad", "reshape", {dy}, x, m, typed)};
}

TensorDesc flatten_infer(const OpAttrs&, const std::vector<TensorDesc>& in) {
  const DType t = require_float("flatten", in);
  const Shape& s = in.at(0).shape;
  if (s.size() < 2) REMAT_USER_ERROR("flatten expects an input of 2 or more dimensions [N, ...], got " << shape_str(s));
  return TensorDesc{{s[0], shape_numel(s) / s[0]}, t};
}

TensorDesc flatten_grad_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const FlattenGradAttrs&>(at);
  const Shape& dy = in.at(0).shape;
  Shape s{dy.at(0)};
  s.insert(s.end(), a.dims.begin(), a.dims.end());
  REMAT_CHECK(dy.size() == 2 && shape_numel(s) == dy[0] * dy[1],
              "flatten_grad: dy " << shape_str(dy) << " does not flatten " << shape_str(s));
  return TensorDesc{s, in[0].dtype};
}

// Both directions are the same contiguous copy.
void copy_cpu(const ExecContext& ctx) {
  const float* x = ctx.inputs[0].f32();
  std::copy(x, x + ctx.output.numel(), ctx.output.f32());
}

#ifdef REMAT_HAVE_CUDA
// F32 or bf16 values, copied as they are (bf16_cuda_native).
void copy_cuda(const ExecContext& ctx) {
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    copy_forward(storage<T>(ctx.output), storage<T>(ctx.inputs[0]), ctx.output.numel(),
                 cuda_stream(ctx));
  });
}
#endif

std::vector<ValueId> flatten_gradient(GradEmitter& g, const Node& fwd, ValueId dy) {
  const TensorDesc x = g.graph().value(fwd.inputs[0]).desc;  // a copy: emit grows the graph
  auto a = std::make_shared<FlattenGradAttrs>();
  a->dims.assign(x.shape.begin() + 1, x.shape.end());
  AttrMap m;
  m.origin = fwd.attrs.origin;
  m.set("rank", static_cast<int64_t>(x.shape.size()));
  m.set("dims", a->dims);
  return {g.emit("grad", "flatten_grad", {dy}, x, m, a)};
}

OpCost copy_cost(const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
  return elementwise_cost(in, out, 0);
}

}  // namespace

void register_flatten_ops(OpRegistry& r) {
  OpDef f;
  f.name = "flatten";
  f.summary = "[N, ...] -> [N, prod(...)] (a copy)";
  f.parse = [](AttrReader& rd) { return parse_no_attrs(rd, "flatten"); };
  f.infer = flatten_infer;
  f.cost = copy_cost;
  f.cpu = copy_cpu;
#ifdef REMAT_HAVE_CUDA
  f.cuda = copy_cuda;
#endif
  f.gradient = flatten_gradient;
  with_bf16_per_sample(f, 1).bf16_cuda_native = true;
  r.add(std::move(f));

  OpDef g;
  g.name = "flatten_grad";
  g.summary = "flatten's gradient: dy copied back to x's shape";
  g.user_visible = false;
  g.parse = flatten_grad_parse;
  g.infer = flatten_grad_infer;
  g.cost = copy_cost;
  g.cpu = copy_cpu;
#ifdef REMAT_HAVE_CUDA
  g.cuda = copy_cuda;
#endif
  with_bf16_per_sample(g, 1).bf16_cuda_native = true;
  r.add(std::move(g));

  OpDef rs;
  rs.name = "reshape";
  rs.summary = "[N, ...] -> [N, shape...] of as many values per sample (a copy)";
  rs.parse = reshape_parse;
  rs.infer = reshape_infer;
  rs.cost = copy_cost;
  rs.cpu = copy_cpu;
#ifdef REMAT_HAVE_CUDA
  rs.cuda = copy_cuda;
#endif
  rs.gradient = reshape_gradient;
  with_bf16_per_sample(rs, 1).bf16_cuda_native = true;
  r.add(std::move(rs));
}

}  // namespace remat
