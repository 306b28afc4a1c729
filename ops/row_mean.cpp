// row_mean [x]: the mean of each row of x after its first `axes` axes (default 2), y = x's first
// `axes` axes: [N, T, D] -> [N, T] (torch.mean(x, -1): RMSNorm's mean of squares, a written-out
// layer norm's mean), summed in double and rounded once, as global_avgpool. With `keep_last`
// m > 0 the mean runs over the axes between the first `axes` and the last m, which y keeps
// (Note [kept axes] in ops/data_format.h): [N, C, H, W] -> [N, H, W] over the channels (axes 1,
// keep_last 2: CBAM's channel mean), [N, T, D] -> [N, D] over the tokens. Its gradient
// row_mean_grad [dy] gives every value averaged into y[r] dy[r] / count (in FP32, as PyTorch's),
// the averaged axes' shape in `reduced`. The CUDA path is global_avgpool's kernels with the
// rows as its planes (kernels/reduce.cu: a warp per NCHW plane, double sums in another order;
// kept last axes: its NHWC form, pixel = the kept last axes' size; the gradient one FP32
// division per value).
#include <algorithm>
#include <string>
#include <vector>

#include "ops/cpu_storage.h"
#include "ops/data_format.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

struct RowMeanAttrs : OpAttrs {
  int64_t axes = 2;       // the leading axes kept
  int64_t keep_last = 0;  // the trailing axes kept
  Shape reduced;          // row_mean_grad: the shape of the averaged axes
};

OpAttrsPtr row_mean_parse(AttrReader& r, const std::string& name, bool grad) {
  auto a = std::make_shared<RowMeanAttrs>();
  a->axes = r.get_int("axes", 2, 1, 7);
  a->keep_last = r.get_int("keep_last", 0, 0, 6);
  if (grad) {
    if (!r.has("reduced")) r.fail("reduced", "is required");
    a->reduced = r.get_int_list("reduced", {1, 2, 3, 4, 5, 6}, {}, 1, int64_t{1} << 40);
  }
  r.finish(name);
  return a;
}

const RowMeanAttrs& attrs(const OpAttrs& a) { return static_cast<const RowMeanAttrs&>(a); }

// x (the forward's input, the gradient's output) as planes of the values each mean averages:
// rows of contiguous values, or with kept last axes values `last` apart (Note [kept axes]).
ImageDims planes_of(const ExecContext& ctx, const Shape& x) {
  const RowMeanAttrs& a = attrs_of<RowMeanAttrs>(*ctx.node);
  return kept_axes_dims(x, a.axes, a.keep_last);
}

TensorDesc row_mean_infer(const OpAttrs& a, const std::vector<TensorDesc>& in) {
  require_float("row_mean", in);
  const Shape& x = in.at(0).shape;
  if (static_cast<int64_t>(x.size()) <= attrs(a).axes + attrs(a).keep_last)
    REMAT_USER_ERROR("row_mean expects x of rank above axes + keep_last = "
                     << attrs(a).axes + attrs(a).keep_last << ", got " << shape_str(x));
  return TensorDesc{kept_axes_shape(x, attrs(a).axes, attrs(a).keep_last), in[0].dtype};
}

void row_mean_cpu(const ExecContext& ctx) {
  const ImageDims d = planes_of(ctx, ctx.inputs[0].shape());
  const float* x = ctx.inputs[0].f32();
  for (int64_t q = 0; q < d.planes(); ++q) {
    double s = 0;
    for (int64_t i = 0; i < d.plane(); ++i) s += x[d.plane_start(q) + i * d.pixel_stride()];
    ctx.output.f32()[q] = static_cast<float>(s / static_cast<double>(d.plane()));
  }
}

void row_mean_grad_cpu(const ExecContext& ctx) {
  const ImageDims d = planes_of(ctx, ctx.output.shape());
  for (int64_t q = 0; q < d.planes(); ++q) {
    const float g = ctx.inputs[0].f32()[q] / static_cast<float>(d.plane());
    for (int64_t i = 0; i < d.plane(); ++i)
      ctx.output.f32()[d.plane_start(q) + i * d.pixel_stride()] = g;
  }
}

#ifdef REMAT_HAVE_CUDA
void row_mean_cuda(const ExecContext& ctx) {
  const ImageDims d = planes_of(ctx, ctx.inputs[0].shape());
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    global_avgpool_forward(storage<T>(ctx.output), storage<T>(ctx.inputs[0]), d.planes(),
                           d.plane(), d.pixel_stride(), cuda_stream(ctx));
  });
}

void row_mean_grad_cuda(const ExecContext& ctx) {
  const ImageDims d = planes_of(ctx, ctx.output.shape());
  with_storage(ctx.output.desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    global_avgpool_backward(storage<T>(ctx.output), storage<T>(ctx.inputs[0]), d.planes(),
                            d.plane(), d.pixel_stride(), cuda_stream(ctx));
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
  f.summary = "mean of each row of x after its first axes (2; keep_last): [N, T, D] -> [N, T]";
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
    typed->reduced = Shape(x.shape.begin() + typed->axes, x.shape.end() - typed->keep_last);
    AttrMap m = fwd.attrs;
    m.set("reduced", std::vector<int64_t>(typed->reduced.begin(), typed->reduced.end()));
    return {g.emit("grad", "row_mean_grad", {dy}, x, m, typed)};
  };
  with_bf16_per_sample(f, 1).bf16_cuda_native = true;
  return f;
}

OpDef make_grad() {
  OpDef f;
  f.name = "row_mean_grad";
  f.summary = "row_mean's input gradient [dy] -> dy / count over what each mean averaged (reduced)";
  f.user_visible = false;
  f.kind = NodeKind::Backward;
  f.parse = [](AttrReader& r) { return row_mean_parse(r, "row_mean_grad", true); };
  f.infer = [](const OpAttrs& a, const std::vector<TensorDesc>& in) {
    require_float("row_mean_grad", in);
    Shape x = in.at(0).shape;
    if (static_cast<int64_t>(x.size()) != attrs(a).axes + attrs(a).keep_last)
      REMAT_USER_ERROR("row_mean_grad expects dy of rank axes + keep_last = "
                       << attrs(a).axes + attrs(a).keep_last << ", got " << shape_str(x));
    x.insert(x.begin() + attrs(a).axes, attrs(a).reduced.begin(), attrs(a).reduced.end());
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
