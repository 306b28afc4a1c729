// add_constant [x, table]: x plus a table broadcast over x's leading axes,
// y[o, k] = x[o, k] + table[k] for x viewed as [outer, inner], inner = the table's size and
// `shape` = the table's shape = x's trailing axes (numpy broadcasting of a table with ones in
// front of it). The table's own trailing 1s broadcast too: a table [C, 1, 1] adds table[c] to
// every value of channel c of an image [N, C, H, W] (x as [outer, K, P], y[o, k, p] = x[o, k, p]
// + table[k]). `learned: false` (the default): the table is a buffer, part of the model's
// state, saved in checkpoints, never trained; an imported ONNX model's tensor constants arrive
// this way (Note [tensor constants] in models/onnx/onnx_constant_ops.cpp: a sinusoidal
// encoding, an additive attention mask of 0 and -inf, a per-channel shift). `learned: true`: a
// trained bias (ResMLP's affine shift; a module's per-channel [C, 1, 1] bias of an image), its
// gradient add_constant_grad_table [dy], the sum of dy over what each entry broadcasts to. Both
// start at zeros in YAML. Backward: dx = dy (no node). The CUDA path is position_embedding's
// kernel (out (n, inner) = inp + table (inner), exact), or with the table's trailing 1s the
// convolution bias kernel over a copy of x (bias_act_forward, exact); the table's gradient
// bias_grad_reduce's column or plane sums.
#include <string>
#include <vector>

#include "ops/cpu_storage.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

struct AddConstantAttrs : OpAttrs {
  Shape shape;           // the table's shape: x's trailing axes, or 1s where it broadcasts
  bool learned = false;  // a trained bias rather than a constant buffer
};

OpAttrsPtr add_constant_parse(AttrReader& r, const std::string& name) {
  auto a = std::make_shared<AddConstantAttrs>();
  if (!r.has("shape")) r.fail("shape", "is required");
  a->shape = r.get_int_list("shape", {1, 2, 3, 4, 5, 6, 7}, {}, 1, int64_t{1} << 40);
  a->learned = r.get_bool("learned", false);
  r.finish(name);
  return a;
}

const AddConstantAttrs& attrs(const OpAttrs& a) { return static_cast<const AddConstantAttrs&>(a); }

// x as [outer, inner, spread]: the table's entries (its shape less its trailing 1s) and what each
// one broadcasts to (x's axes under those 1s).
struct Spread {
  int64_t outer = 1, inner = 1, spread = 1;
};
size_t trailing_ones(const Shape& table) {
  size_t ones = 0;
  while (ones < table.size() && table[table.size() - 1 - ones] == 1) ++ones;
  return ones;
}

Spread spread_of(const Shape& table, const Shape& x) {
  const size_t ones = trailing_ones(table);
  Spread s;
  for (size_t d = 0; d < x.size(); ++d)
    (d + table.size() < x.size() ? s.outer : d + ones < x.size() ? s.inner : s.spread) *= x[d];
  return s;
}

TensorDesc add_constant_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const AddConstantAttrs& a = attrs(at);
  require_float("add_constant", in, 1);
  const Shape& x = in.at(0).shape;
  const size_t k = a.shape.size();
  bool ok = x.size() > k;  // the batch axis is never the table's
  for (size_t d = 0; ok && d + trailing_ones(a.shape) < k; ++d)
    ok = x[x.size() - k + d] == a.shape[d];
  if (!ok)
    REMAT_USER_ERROR("add_constant: a table " << shape_str(a.shape)
                                              << " is not the trailing axes of " << shape_str(x)
                                              << " after its batch axis (up to 1s at its end)");
  return in[0];
}

std::vector<ParamSpec> add_constant_params(const OpAttrs& at, const std::vector<TensorDesc>&) {
  ParamSpec t;
  t.suffix = attrs(at).learned ? "bias" : "table";
  t.desc = checked_desc(attrs(at).shape, DType::F32, "add_constant table");
  t.kind = attrs(at).learned ? ValueKind::Param : ValueKind::Buffer;
  t.constant = !attrs(at).learned;
  t.init = InitKind::Zeros;
  t.role = ParamRole::Bias;
  return {t};
}

Spread spread_of(const ExecContext& ctx) {
  return spread_of(attrs_of<AddConstantAttrs>(*ctx.node).shape, ctx.inputs[0].shape());
}

void add_constant_cpu(const ExecContext& ctx) {
  const Spread s = spread_of(ctx);
  const float* x = ctx.inputs[0].f32();
  const float* t = ctx.inputs[1].f32();
  float* y = ctx.output.f32();
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t k = 0; k < s.inner; ++k)
      for (int64_t p = 0; p < s.spread; ++p) {
        const int64_t i = (o * s.inner + k) * s.spread + p;
        y[i] = x[i] + t[k];
      }
}

// [dy] -> dtable[k] = sum over o and p of dy[o, k, p], in double, o then p in order.
void add_constant_grad_cpu(const ExecContext& ctx) {
  const Spread s = spread_of(ctx);
  const float* dy = ctx.inputs[0].f32();
  for (int64_t k = 0; k < s.inner; ++k) {
    double sum = 0;
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t p = 0; p < s.spread; ++p) sum += dy[(o * s.inner + k) * s.spread + p];
    ctx.output.f32()[k] = static_cast<float>(sum);
  }
}

#ifdef REMAT_HAVE_CUDA
// x and y are F32 or BF16 (the sum in FP32, rounded once); the table is F32.
void add_constant_cuda(const ExecContext& ctx) {
  const Spread s = spread_of(ctx);
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    T* y = storage<T>(ctx.output);
    if (s.spread == 1)
      return position_embedding_forward(y, storage<T>(ctx.inputs[0]), ctx.inputs[1].f32(),
                                        s.outer, s.inner, cuda_stream(ctx));
    copy_forward(y, storage<T>(ctx.inputs[0]), ctx.output.numel(), cuda_stream(ctx));
    bias_act_forward(y, ctx.inputs[1].f32(), s.outer, s.inner, s.spread, KernelActivation::None,
                     cuda_stream(ctx));
  });
}

// The sums of dy viewed as [outer, inner, spread] over outer and spread (bias_grad_reduce: with
// spread 1 up to 64 rows in order, like the CPU; more in fixed row slices, with a workspace; a
// convolution bias's plane sums otherwise); dy F32 or BF16.
int64_t add_constant_grad_workspace(const ExecContext& ctx) {
  const Spread s = spread_of(ctx);
  return bias_grad_workspace_bytes(s.outer, s.inner, s.spread);
}

void add_constant_grad_cuda(const ExecContext& ctx) {
  const Spread s = spread_of(ctx);
  REMAT_CHECK(ctx.workspace_bytes >= add_constant_grad_workspace(ctx),
              "node '" << ctx.node->name << "': add_constant_grad_table workspace too small");
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    bias_grad_reduce(ctx.output.f32(), storage<T>(ctx.inputs[0]), s.outer, s.inner, s.spread,
                     ctx.workspace, cuda_stream(ctx));
  });
}
#endif

OpDef make_grad() {
  OpDef g;
  g.name = "add_constant_grad_table";
  g.summary = "add_constant's learned table gradient [dy] -> the sum over the leading axes";
  g.user_visible = false;
  g.parse = [](AttrReader& r) { return add_constant_parse(r, "add_constant_grad_table"); };
  g.infer = [](const OpAttrs& at, const std::vector<TensorDesc>& in) {
    require_float("add_constant_grad_table", in);
    add_constant_infer(at, in);  // dy has x's shape
    return TensorDesc{attrs(at).shape, DType::F32};
  };
  g.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    OpCost c;
    c.flops = static_cast<double>(in.at(0).numel());  // a sum per value
    c.bytes_moved = io_bytes(in, out);
    return c;
  };
  g.cpu = add_constant_grad_cpu;
#ifdef REMAT_HAVE_CUDA
  g.cuda = add_constant_grad_cuda;
  g.cuda_workspace = add_constant_grad_workspace;
#endif
  with_bf16(g).bf16_cuda_native = true;
  return g;
}

}  // namespace

void register_add_constant_ops(OpRegistry& r) {
  OpDef f;
  f.name = "add_constant";
  f.summary = "x + a table over its trailing axes (shape): a constant buffer, or learned";
  f.parse = [](AttrReader& r) { return add_constant_parse(r, "add_constant"); };
  f.infer = add_constant_infer;
  f.params = add_constant_params;
  f.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, 1);
  };
  f.cpu = add_constant_cpu;
#ifdef REMAT_HAVE_CUDA
  f.cuda = add_constant_cuda;
#endif
  f.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) -> std::vector<ValueId> {
    if (!attrs(*fwd.typed).learned) return {dy, kNoValue};
    const TensorDesc t = g.graph().value(fwd.inputs.at(1)).desc;  // a copy: emit grows the graph
    return {dy, g.emit("grad_table", "add_constant_grad_table", {dy}, t)};
  };
  with_bf16_per_sample(f, 1).bf16_cuda_native = true;
  r.add(std::move(f));
  r.add(make_grad());
}

}  // namespace remat
