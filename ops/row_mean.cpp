// row_mean [x]: the mean of each row of x after its first `axes` axes (default 2), y = x's first
// `axes` axes: [N, T, D] -> [N, T] (torch.mean(x, -1): RMSNorm's mean of squares, a written-out
// layer norm's mean), summed in double and rounded once, as global_avgpool. Its gradient
// row_mean_grad [dy] gives every value of row r dy[r] / row (in FP32, as PyTorch's), the row's
// trailing shape in `trailing`. The CUDA path is global_avgpool's kernels with the rows as its
// planes (kernels/reduce.cu: a warp per plane, double sums in another order; the gradient one
// FP32 division per value).
#include <algorithm>
#include <string>
#include <vector>

#include "ops/cpu_storage.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

struct RowMeanAttrs : OpAttrs {
  int64_t axes = 2;  // the leading axes kept
  Shape trailing;    // row_mean_grad: the shape of a row (x's axes after `axes`)
};

OpAttrsPtr row_mean_parse(AttrReader& r, const std::string& name, bool grad) {
  auto a = std::make_shared<RowMeanAttrs>();
  a->axes = r.get_int("axes", 2, 1, 7);
  if (grad) {
    if (!r.has("trailing")) r.fail("trailing", "is required");
    a->trailing = r.get_int_list("trailing", {1, 2, 3, 4, 5, 6}, {}, 1, int64_t{1} << 40);
  }
  r.finish(name);
  return a;
}

const RowMeanAttrs& attrs(const OpAttrs& a) { return static_cast<const RowMeanAttrs&>(a); }

// [planes, row] of x (the forward's input, the gradient's output).
struct Rows {
  int64_t planes = 1, row = 1;
};
Rows rows_of(const Shape& x, int64_t axes) {
  Rows r;
  for (size_t d = 0; d < x.size(); ++d)
    (static_cast<int64_t>(d) < axes ? r.planes : r.row) *= x[d];
  return r;
}

TensorDesc row_mean_infer(const OpAttrs& a, const std::vector<TensorDesc>& in) {
  require_float("row_mean", in);
  const Shape& x = in.at(0).shape;
  if (static_cast<int64_t>(x.size()) <= attrs(a).axes)
    REMAT_USER_ERROR("row_mean expects x of rank above axes " << attrs(a).axes << ", got "
                                                              << shape_str(x));
  return TensorDesc{Shape(x.begin(), x.begin() + attrs(a).axes), in[0].dtype};
}

void row_mean_cpu(const ExecContext& ctx) {
  const Rows r = rows_of(ctx.inputs[0].shape(), attrs_of<RowMeanAttrs>(*ctx.node).axes);
  const float* x = ctx.inputs[0].f32();
  for (int64_t p = 0; p < r.planes; ++p) {
    double s = 0;
    for (int64_t i = 0; i < r.row; ++i) s += x[p * r.row + i];
    ctx.output.f32()[p] = static_cast<float>(s / static_cast<double>(r.row));
  }
}

void row_mean_grad_cpu(const ExecContext& ctx) {
  const Rows r = rows_of(ctx.output.shape(), attrs_of<RowMeanAttrs>(*ctx.node).axes);
  for (int64_t p = 0; p < r.planes; ++p) {
    const float g = ctx.inputs[0].f32()[p] / static_cast<float>(r.row);
    for (int64_t i = 0; i < r.row; ++i) ctx.output.f32()[p * r.row + i] = g;
  }
}

#ifdef REMAT_HAVE_CUDA
void row_mean_cuda(const ExecContext& ctx) {
  const Rows r = rows_of(ctx.inputs[0].shape(), attrs_of<RowMeanAttrs>(*ctx.node).axes);
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    global_avgpool_forward(storage<T>(ctx.output), storage<T>(ctx.inputs[0]), r.planes, r.row, 1,
                           cuda_stream(ctx));
  });
}

void row_mean_grad_cuda(const ExecContext& ctx) {
  const Rows r = rows_of(ctx.output.shape(), attrs_of<RowMeanAttrs>(*ctx.node).axes);
  with_storage(ctx.output.desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    global_avgpool_backward(storage<T>(ctx.output), storage<T>(ctx.inputs[0]), r.planes, r.row,
                            1, cuda_stream(ctx));
  });
}
#endif

// One add (forward) or one store (gradient) per value of x.
OpCost row_cost(const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
  OpCost c;
  c.flops = static_cast<double>(std::max(in.at(0).numel(), out.numel()));
  c.bytes_moved = io_bytes(in, out);
  return c;
}

OpDef make_forward() {
  OpDef f;
  f.name = "row_mean";
  f.summary = "mean of each row of x after its first axes (default 2): [N, T, D] -> [N, T]";
  f.parse = [](AttrReader& r) { return row_mean_parse(r, "row_mean", false); };
  f.infer = row_mean_infer;
  f.cost = row_cost;
  f.cpu = row_mean_cpu;
#ifdef REMAT_HAVE_CUDA
  f.cuda = row_mean_cuda;
#endif
  f.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) -> std::vector<ValueId> {
    const TensorDesc x = g.graph().value(fwd.inputs.at(0)).desc;  // a copy: emit grows the graph
    auto typed = std::make_shared<RowMeanAttrs>(attrs(*fwd.typed));
    typed->trailing = Shape(x.shape.begin() + typed->axes, x.shape.end());
    AttrMap m = fwd.attrs;
    m.set("trailing", std::vector<int64_t>(typed->trailing.begin(), typed->trailing.end()));
    return {g.emit("grad", "row_mean_grad", {dy}, x, m, typed)};
  };
  with_bf16_per_sample(f, 1).bf16_cuda_native = true;
  return f;
}

OpDef make_grad() {
  OpDef f;
  f.name = "row_mean_grad";
  f.summary = "row_mean's input gradient [dy] -> dy / row over each row (trailing)";
  f.user_visible = false;
  f.kind = NodeKind::Backward;
  f.parse = [](AttrReader& r) { return row_mean_parse(r, "row_mean_grad", true); };
  f.infer = [](const OpAttrs& a, const std::vector<TensorDesc>& in) {
    require_float("row_mean_grad", in);
    Shape x = in.at(0).shape;
    if (static_cast<int64_t>(x.size()) != attrs(a).axes)
      REMAT_USER_ERROR("row_mean_grad expects dy of rank " << attrs(a).axes << ", got "
                                                           << shape_str(x));
    x.insert(x.end(), attrs(a).trailing.begin(), attrs(a).trailing.end());
    return checked_desc(x, in[0].dtype, "row_mean_grad");
  };
  f.cost = row_cost;
  f.cpu = row_mean_grad_cpu;
#ifdef REMAT_HAVE_CUDA
  f.cuda = row_mean_grad_cuda;
#endif
  with_bf16_per_sample(f, 1).bf16_cuda_native = true;
  return f;
}

}  // namespace

void register_row_mean_ops(OpRegistry& r) {
  r.add(make_forward());
  r.add(make_grad());
}

}  // namespace remat
