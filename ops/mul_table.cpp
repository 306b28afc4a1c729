// mul_table [x, table]: x times a table broadcast over x's leading axes, y[o, k] = x[o, k] *
// table[k] for x viewed as [outer, inner], inner = the table's size and `shape` = the table's
// shape = x's trailing axes (numpy broadcasting of a table with ones in front of it); one FP32
// product per value. `learned: false` (the default): the table is a buffer (saved in
// checkpoints, never trained): an imported ONNX model's tensor constant a value is multiplied or
// divided by, or the 1/0 mask of Where with a finite fill (Note [tensor constants] in
// models/onnx/onnx_constant_ops.cpp). `learned: true`: the table is a trained weight (a layer
// scale over the last axis, RMSNorm's weight); its gradient is mul_table_grad_weight [dy, x],
// the sum over the leading axes of dy x (in double, rows in order, rounded once). Both start at
// ones in YAML. dx = mul_table_grad_x [dy, table] = dy table.
// The CUDA path is channel_scale's kernels with the table's entries as its planes, `pixel` the
// table's size (kernels/channel_scale.cu: out (planes, hw) = x s[p], one FP32 product; the plane
// sums one thread per entry over the rows in order), bf16-native with the table in FP32.
#include <string>
#include <vector>

#include "ops/cpu_storage.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

struct MulTableAttrs : OpAttrs {
  Shape shape;           // the table's shape: x's trailing axes
  bool learned = false;  // a trained weight rather than a constant buffer
};

OpAttrsPtr mul_table_parse(AttrReader& r, const std::string& name) {
  auto a = std::make_shared<MulTableAttrs>();
  if (!r.has("shape")) r.fail("shape", "is required");
  a->shape = r.get_int_list("shape", {1, 2, 3, 4, 5, 6, 7}, {}, 1, int64_t{1} << 40);
  a->learned = r.get_bool("learned", false);
  r.finish(name);
  return a;
}

const MulTableAttrs& attrs(const OpAttrs& a) { return static_cast<const MulTableAttrs&>(a); }

// x's shape ends with the table's, after a batch axis the table never spans.
void check_trailing(const std::string& op, const Shape& table, const Shape& x) {
  const size_t k = table.size();
  bool ok = x.size() > k;
  for (size_t d = 0; ok && d < k; ++d) ok = x[x.size() - k + d] == table[d];
  if (!ok)
    REMAT_USER_ERROR(op << ": a table " << shape_str(table) << " is not the trailing axes of "
                        << shape_str(x) << " after its batch axis");
}

TensorDesc mul_table_infer(const OpAttrs& a, const std::vector<TensorDesc>& in) {
  require_float("mul_table", in, 1);
  check_trailing("mul_table", attrs(a).shape, in.at(0).shape);
  return in[0];
}

std::vector<ParamSpec> mul_table_params(const OpAttrs& at, const std::vector<TensorDesc>&) {
  const MulTableAttrs& a = attrs(at);
  ParamSpec t;
  t.suffix = a.learned ? "weight" : "table";
  t.desc = checked_desc(a.shape, DType::F32, "mul_table table");
  t.kind = a.learned ? ValueKind::Param : ValueKind::Buffer;
  t.constant = !a.learned;
  t.init = InitKind::Ones;
  t.role = ParamRole::Norm;  // a per-feature scale, as a norm's weight
  return {t};
}

// y = x table over [outer, inner]: the forward on [x, table] and dx on [dy, table].
void mul_table_cpu(const ExecContext& ctx) {
  const int64_t inner = ctx.inputs[1].numel(), outer = ctx.inputs[0].numel() / inner;
  const float* x = ctx.inputs[0].f32();
  const float* t = ctx.inputs[1].f32();
  float* y = ctx.output.f32();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < inner; ++k) y[o * inner + k] = x[o * inner + k] * t[k];
}

// [dy, x] -> dtable[k] = sum over o of dy[o, k] x[o, k], in double, o in order.
void mul_table_grad_weight_cpu(const ExecContext& ctx) {
  const int64_t inner = ctx.output.numel(), outer = ctx.inputs[0].numel() / inner;
  const float* dy = ctx.inputs[0].f32();
  const float* x = ctx.inputs[1].f32();
  float* dt = ctx.output.f32();
  for (int64_t k = 0; k < inner; ++k) {
    double s = 0;
    for (int64_t o = 0; o < outer; ++o)
      s += static_cast<double>(dy[o * inner + k]) * static_cast<double>(x[o * inner + k]);
    dt[k] = static_cast<float>(s);
  }
}

#ifdef REMAT_HAVE_CUDA
// x, dy and y F32 or BF16 (bf16-native: the product in FP32, rounded once); the table and its
// gradient F32. The table's entries are channel_scale's planes, x's rows its pixels: element
// o inner + k is plane k's pixel o.
void mul_table_cuda(const ExecContext& ctx) {
  const int64_t inner = ctx.inputs[1].numel(), outer = ctx.inputs[0].numel() / inner;
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    channel_scale_forward(storage<T>(ctx.output), storage<T>(ctx.inputs[0]), ctx.inputs[1].f32(),
                          inner, outer, inner, cuda_stream(ctx));
  });
}

void mul_table_grad_weight_cuda(const ExecContext& ctx) {
  const int64_t inner = ctx.output.numel(), outer = ctx.inputs[0].numel() / inner;
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    channel_scale_backward(ctx.output.f32(), storage<T>(ctx.inputs[0]), storage<T>(ctx.inputs[1]),
                           inner, outer, inner, cuda_stream(ctx));
  });
}
#endif

OpCost product_cost(const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
  return elementwise_cost(in, out, 1);
}

OpDef make_forward() {
  OpDef f;
  f.name = "mul_table";
  f.summary = "x times a table over its trailing axes (shape): a constant buffer, or learned";
  f.parse = [](AttrReader& r) { return mul_table_parse(r, "mul_table"); };
  f.infer = mul_table_infer;
  f.params = mul_table_params;
  f.cost = product_cost;
  f.cpu = mul_table_cpu;
#ifdef REMAT_HAVE_CUDA
  f.cuda = mul_table_cuda;
#endif
  f.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) -> std::vector<ValueId> {
    const TensorDesc x = g.graph().value(fwd.inputs.at(0)).desc;  // copies: emit grows the graph
    const TensorDesc t = g.graph().value(fwd.inputs.at(1)).desc;
    const ValueId dx = g.emit("grad_x", "mul_table_grad_x", {dy, fwd.inputs[1]}, x);
    if (!attrs(*fwd.typed).learned) return {dx, kNoValue};
    return {dx, g.emit("grad_weight", "mul_table_grad_weight", {dy, fwd.inputs[0]}, t)};
  };
  with_bf16_per_sample(f, 1).bf16_cuda_native = true;
  return f;
}

// dx = dy table: the forward's kernel on [dy, table].
OpDef make_grad_x() {
  OpDef f;
  f.name = "mul_table_grad_x";
  f.summary = "mul_table's input gradient [dy, table] -> dy table";
  f.user_visible = false;
  f.min_inputs = f.max_inputs = 2;
  f.parse = [](AttrReader& r) { return mul_table_parse(r, "mul_table_grad_x"); };
  f.infer = [](const OpAttrs& a, const std::vector<TensorDesc>& in) {
    require_float("mul_table_grad_x", in, 1);
    check_trailing("mul_table_grad_x", attrs(a).shape, in.at(0).shape);
    if (in.at(1).shape != attrs(a).shape || in[1].dtype != DType::F32)
      REMAT_USER_ERROR("mul_table_grad_x expects an f32 table "
                       << shape_str(attrs(a).shape) << ", got " << shape_str(in[1].shape));
    return in[0];
  };
  f.cost = product_cost;
  f.cpu = mul_table_cpu;
#ifdef REMAT_HAVE_CUDA
  f.cuda = mul_table_cuda;
#endif
  with_bf16_per_sample(f, 1).bf16_cuda_native = true;
  return f;
}

OpDef make_grad_weight() {
  OpDef f;
  f.name = "mul_table_grad_weight";
  f.summary = "mul_table's weight gradient [dy, x] -> sum over the leading axes of dy x";
  f.user_visible = false;
  f.min_inputs = f.max_inputs = 2;
  f.parse = [](AttrReader& r) { return mul_table_parse(r, "mul_table_grad_weight"); };
  f.infer = [](const OpAttrs& a, const std::vector<TensorDesc>& in) {
    require_float("mul_table_grad_weight", in);
    check_trailing("mul_table_grad_weight", attrs(a).shape, in.at(1).shape);
    if (in[0].shape != in[1].shape)
      REMAT_USER_ERROR("mul_table_grad_weight expects dy and x of one shape, got "
                       << shape_str(in[0].shape) << " and " << shape_str(in[1].shape));
    return TensorDesc{attrs(a).shape, DType::F32};
  };
  f.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    OpCost c;
    c.flops = 2.0 * static_cast<double>(in.at(0).numel());  // a product and a sum per value
    c.bytes_moved = io_bytes(in, out);
    return c;
  };
  f.cpu = mul_table_grad_weight_cpu;
#ifdef REMAT_HAVE_CUDA
  f.cuda = mul_table_grad_weight_cuda;
#endif
  with_bf16(f).bf16_cuda_native = true;
  return f;
}

}  // namespace

void register_mul_table_ops(OpRegistry& r) {
  r.add(make_forward());
  r.add(make_grad_x());
  r.add(make_grad_weight());
}

}  // namespace remat
