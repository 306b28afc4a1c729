// layernorm: layer normalization over the last `axes` dimensions (torch.nn.LayerNorm; 1 by
// default): for each row x of C values (the product of those dimensions), y = (x - mean) /
// sqrt(var + eps) * weight + bias (biased variance; affine: true gives the weight and bias, of
// the normalized dimensions' shape). With affine: false over the spatial axes of [N, C, H, W]
// it is instance normalization (an ONNX import's InstanceNormalization); with `groups` G > 1 each
// row is one G-th of the normalized values, in order (over [C, H, W], C / G channels: the
// normalization of nn.GroupNorm, whose per-channel affine follows as its own layers). Backward
// ops layernorm_grad_input [dy, x (, weight)], layernorm_grad_weight [dy, x] and
// layernorm_grad_bias [dy]; they recompute the row statistics from x rather than saving them, so
// the solver sees no extra values.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/cpu_storage.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

struct LayerNormAttrs : OpAttrs {
  double eps = 1e-5;
  bool affine = true;
  int64_t axes = 1;    // the trailing dimensions each row spans
  int64_t groups = 1;  // rows per span of those dimensions (affine: false)
};

OpAttrsPtr layernorm_parse(AttrReader& r, const std::string& op_name) {
  auto a = std::make_shared<LayerNormAttrs>();
  a->eps = r.get_double("eps", 1e-5, 0.0, 1.0);
  a->affine = r.get_bool("affine", true);
  a->axes = r.get_int("axes", 1, 1, 8);
  a->groups = r.get_int("groups", 1, 1, int64_t{1} << 24);
  if (a->groups > 1 && a->affine) r.fail("groups", "needs affine: false (one weight per value)");
  r.finish(op_name);
  return a;
}

// The normalized dimensions of x (its last `axes`): the weight's shape.
Shape row_shape(const OpAttrs& at, const Shape& x) {
  const auto axes = static_cast<size_t>(static_cast<const LayerNormAttrs&>(at).axes);
  return Shape(x.end() - static_cast<std::ptrdiff_t>(std::min(axes, x.size())), x.end());
}

// x as a matrix: rows of `cols` values each.
struct RowsCols {
  int64_t rows, cols;
};
RowsCols rows_cols(const OpAttrs& at, const Shape& x) {
  const int64_t cols =
      shape_numel(row_shape(at, x)) / static_cast<const LayerNormAttrs&>(at).groups;
  return {shape_numel(x) / cols, cols};
}
RowsCols rows_cols(const ExecContext& ctx, int k) {
  return rows_cols(*ctx.node->typed, ctx.inputs[k].shape());
}

TensorDesc layernorm_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  require_float("layernorm", in, 1);
  const Shape& x = in.at(0).shape;
  const int64_t axes = static_cast<const LayerNormAttrs&>(at).axes;
  if (static_cast<int64_t>(x.size()) <= axes)
    REMAT_USER_ERROR("layernorm over the last " << axes << " dimension(s) needs an input of rank "
                     << axes + 1 << " or more (the batch first), got " << shape_str(x));
  if (shape_numel(row_shape(at, x)) < 1)
    REMAT_USER_ERROR("layernorm needs non-empty normalized dimensions, got " << shape_str(x));
  const int64_t groups = static_cast<const LayerNormAttrs&>(at).groups;
  const Shape row = row_shape(at, x);
  if (row[0] % groups != 0)
    REMAT_USER_ERROR("layernorm with groups " << groups << " needs the first normalized "
                     "dimension divisible by it, got " << shape_str(x));
  return in[0];
}

std::vector<ParamSpec> layernorm_params(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  if (!static_cast<const LayerNormAttrs&>(at).affine) return {};
  ParamSpec w;
  w.suffix = "weight";
  w.desc = TensorDesc{row_shape(at, in.at(0).shape), DType::F32};
  w.init = InitKind::Ones;
  w.role = ParamRole::Norm;
  ParamSpec b = w;
  b.suffix = "bias";
  b.init = InitKind::Zeros;
  return {w, b};
}

// Mean and 1 / sqrt(biased variance + eps) of one row, in double (two passes). T: the row's
// storage (ops/cpu_storage.h); every kernel below reads and writes bf16 itself, with the F32
// kernel's arithmetic (Note [bf16 execution]).
template <typename T>
void row_stats(const T* x, int64_t c, double eps, double* mean, double* rstd) {
  double s = 0;
  for (int64_t j = 0; j < c; ++j) s += load(x, j);
  const double m = s / static_cast<double>(c);
  double v = 0;
  for (int64_t j = 0; j < c; ++j) v += (load(x, j) - m) * (load(x, j) - m);
  *mean = m;
  *rstd = 1.0 / std::sqrt(v / static_cast<double>(c) + eps);
}

// inputs [x, (weight, bias)] -> y like x.
template <typename T>
void layernorm_cpu_t(const ExecContext& ctx) {
  const auto& a = attrs_of<LayerNormAttrs>(*ctx.node);
  const auto [rows, c] = rows_cols(ctx, 0);
  const float* w = a.affine ? ctx.inputs[1].f32() : nullptr;
  const float* b = a.affine ? ctx.inputs[2].f32() : nullptr;
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = storage<T>(ctx.inputs[0]) + r * c;
    T* y = storage<T>(ctx.output) + r * c;
    double mean = 0, rstd = 0;
    row_stats(x, c, a.eps, &mean, &rstd);
    for (int64_t j = 0; j < c; ++j) {
      const double xhat = (load(x, j) - mean) * rstd;
      store(y, j, static_cast<float>(w ? xhat * w[j] + b[j] : xhat));
    }
  }
}

// inputs [dy, x, (weight)] -> dx: with g = dy * weight and xhat the normalized x,
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
template <typename T>
void layernorm_grad_input_cpu_t(const ExecContext& ctx) {
  const auto& a = attrs_of<LayerNormAttrs>(*ctx.node);
  const auto [rows, c] = rows_cols(ctx, 0);
  const float* w = a.affine ? ctx.inputs[2].f32() : nullptr;
  for (int64_t r = 0; r < rows; ++r) {
    const T* dy = storage<T>(ctx.inputs[0]) + r * c;
    const T* x = storage<T>(ctx.inputs[1]) + r * c;
    T* dx = storage<T>(ctx.output) + r * c;
    double mean = 0, rstd = 0;
    row_stats(x, c, a.eps, &mean, &rstd);
    double sum_g = 0, sum_gx = 0;
    for (int64_t j = 0; j < c; ++j) {
      const double g = w ? static_cast<double>(load(dy, j)) * w[j] : load(dy, j);
      sum_g += g;
      sum_gx += g * (load(x, j) - mean) * rstd;
    }
    const double mg = sum_g / static_cast<double>(c), mgx = sum_gx / static_cast<double>(c);
    for (int64_t j = 0; j < c; ++j) {
      const double g = w ? static_cast<double>(load(dy, j)) * w[j] : load(dy, j);
      store(dx, j, static_cast<float>(rstd * (g - mg - (load(x, j) - mean) * rstd * mgx)));
    }
  }
}

// inputs [dy, x] -> dweight [C] = sum over rows of dy * xhat (double, rows in order).
template <typename T>
void layernorm_grad_weight_cpu_t(const ExecContext& ctx) {
  const auto& a = attrs_of<LayerNormAttrs>(*ctx.node);
  const auto [rows, c] = rows_cols(ctx, 0);
  std::vector<double> acc(static_cast<size_t>(c), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const T* dy = storage<T>(ctx.inputs[0]) + r * c;
    const T* x = storage<T>(ctx.inputs[1]) + r * c;
    double mean = 0, rstd = 0;
    row_stats(x, c, a.eps, &mean, &rstd);
    for (int64_t j = 0; j < c; ++j)
      acc[static_cast<size_t>(j)] += load(dy, j) * ((load(x, j) - mean) * rstd);
  }
  for (int64_t j = 0; j < c; ++j) ctx.output.f32()[j] = static_cast<float>(acc[static_cast<size_t>(j)]);
}

// inputs [dy] -> dbias [C] = sum over rows of dy (double, rows in order).
template <typename T>
void layernorm_grad_bias_cpu_t(const ExecContext& ctx) {
  const auto [rows, c] = rows_cols(ctx, 0);
  const T* dy = storage<T>(ctx.inputs[0]);
  for (int64_t j = 0; j < c; ++j) {
    double s = 0;
    for (int64_t r = 0; r < rows; ++r) s += load(dy, r * c + j);
    ctx.output.f32()[j] = static_cast<float>(s);
  }
}

void layernorm_cpu(const ExecContext& ctx) {
  with_storage(ctx.inputs[0].desc->dtype, [&](auto t) { layernorm_cpu_t<decltype(t)>(ctx); });
}
void layernorm_grad_input_cpu(const ExecContext& ctx) {
  with_storage(ctx.inputs[0].desc->dtype,
               [&](auto t) { layernorm_grad_input_cpu_t<decltype(t)>(ctx); });
}
void layernorm_grad_weight_cpu(const ExecContext& ctx) {
  with_storage(ctx.inputs[0].desc->dtype,
               [&](auto t) { layernorm_grad_weight_cpu_t<decltype(t)>(ctx); });
}
void layernorm_grad_bias_cpu(const ExecContext& ctx) {
  with_storage(ctx.inputs[0].desc->dtype,
               [&](auto t) { layernorm_grad_bias_cpu_t<decltype(t)>(ctx); });
}

#ifdef REMAT_HAVE_CUDA
// The CUDA paths are bf16-native (Note [bf16 launchers] in kernels/kernels.h): x, y, dy and dx
// are F32 or BF16, all of one dtype; the weight, the bias and their gradients are F32.
void layernorm_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<LayerNormAttrs>(*ctx.node);
  const RowsCols m = rows_cols(ctx, 0);
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    layernorm_forward(storage<T>(ctx.output), storage<T>(ctx.inputs[0]),
                      a.affine ? ctx.inputs[1].f32() : nullptr,
                      a.affine ? ctx.inputs[2].f32() : nullptr, m.rows, m.cols, a.eps,
                      cuda_stream(ctx));
  });
}

void layernorm_grad_input_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<LayerNormAttrs>(*ctx.node);
  const RowsCols m = rows_cols(ctx, 0);
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    layernorm_backward_input(storage<T>(ctx.output), storage<T>(ctx.inputs[0]),
                             storage<T>(ctx.inputs[1]), a.affine ? ctx.inputs[2].f32() : nullptr,
                             m.rows, m.cols, a.eps, cuda_stream(ctx));
  });
}

int64_t layernorm_grad_weight_cuda_workspace(const ExecContext& ctx) {
  const RowsCols m = rows_cols(ctx, 0);
  return layernorm_grad_weight_workspace_bytes(m.rows, m.cols);
}

void layernorm_grad_weight_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<LayerNormAttrs>(*ctx.node);
  const RowsCols m = rows_cols(ctx, 0);
  REMAT_CHECK(ctx.workspace_bytes >= layernorm_grad_weight_cuda_workspace(ctx),
              "node '" << ctx.node->name << "': layernorm_grad_weight workspace too small");
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    layernorm_grad_weight(ctx.output.f32(), storage<T>(ctx.inputs[0]), storage<T>(ctx.inputs[1]),
                          m.rows, m.cols, a.eps, ctx.workspace, cuda_stream(ctx));
  });
}

int64_t layernorm_grad_bias_cuda_workspace(const ExecContext& ctx) {
  const RowsCols m = rows_cols(ctx, 0);
  return column_sum_workspace_bytes(m.rows, m.cols);
}

void layernorm_grad_bias_cuda(const ExecContext& ctx) {
  const RowsCols m = rows_cols(ctx, 0);
  REMAT_CHECK(ctx.workspace_bytes >= layernorm_grad_bias_cuda_workspace(ctx),
              "node '" << ctx.node->name << "': layernorm_grad_bias workspace too small");
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    column_sum(ctx.output.f32(), storage<T>(ctx.inputs[0]), m.rows, m.cols, ctx.workspace,
               cuda_stream(ctx));
  });
}
#endif

std::vector<ValueId> layernorm_gradient(GradEmitter& g, const Node& fwd, ValueId dy) {
  const bool affine = static_cast<const LayerNormAttrs&>(*fwd.typed).affine;
  const std::vector<ValueId> in = fwd.inputs;  // copies: emit grows the graph
  std::vector<TensorDesc> descs;
  for (ValueId v : in) descs.push_back(g.graph().value(v).desc);
  std::vector<ValueId> out(in.size(), kNoValue);
  std::vector<ValueId> gi_inputs = {dy, in[0]};
  if (affine) gi_inputs.push_back(in[1]);
  out[0] = g.emit("grad_input", "layernorm_grad_input", gi_inputs, descs[0]);
  if (affine) {
    out[1] = g.emit("grad_weight", "layernorm_grad_weight", {dy, in[0]}, descs[1]);
    out[2] = g.emit("grad_bias", "layernorm_grad_bias", {dy}, descs[2]);
  }
  return out;
}

OpDef layernorm_backward_op(const std::string& name, const std::string& summary, int inputs) {
  OpDef op;
  op.name = name;
  op.summary = summary;
  op.user_visible = false;
  op.min_inputs = inputs;
  op.max_inputs = inputs;
  op.parse = [name](AttrReader& r) { return layernorm_parse(r, name); };
  return op;
}

}  // namespace

void register_layernorm_ops(OpRegistry& r) {
  OpDef f;
  f.name = "layernorm";
  f.summary = "layer normalization over the last dimensions (eps, affine, axes)";
  f.parse = [](AttrReader& rd) { return layernorm_parse(rd, "layernorm"); };
  f.infer = layernorm_infer;
  f.params = layernorm_params;
  f.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, 8);  // two passes for the statistics, normalize, affine
  };
  f.cpu = layernorm_cpu;
#ifdef REMAT_HAVE_CUDA
  f.cuda = layernorm_cuda;
#endif
  f.gradient = layernorm_gradient;
  with_bf16_per_sample(f, 1).bf16_cuda_native = f.bf16_cpu_native = true;
  r.add(std::move(f));

  OpDef gi = layernorm_backward_op("layernorm_grad_input", "layernorm input gradient [dy, x (, weight)]", 2);
  gi.max_inputs = 3;
  gi.infer = [](const OpAttrs&, const std::vector<TensorDesc>& in) { return in.at(1); };
  gi.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, 14);
  };
  gi.cpu = layernorm_grad_input_cpu;
#ifdef REMAT_HAVE_CUDA
  gi.cuda = layernorm_grad_input_cuda;
#endif
  with_bf16_per_sample(gi, 2).bf16_cuda_native = gi.bf16_cpu_native = true;
  r.add(std::move(gi));

  auto column_grad = [](const OpAttrs& at, const std::vector<TensorDesc>& in) {
    return TensorDesc{row_shape(at, in.at(0).shape), DType::F32};
  };
  OpDef gw = layernorm_backward_op("layernorm_grad_weight", "layernorm weight gradient [dy, x]", 2);
  gw.infer = column_grad;
  gw.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, 8.0 * static_cast<double>(in.at(0).numel()) / out.numel());
  };
  gw.cpu = layernorm_grad_weight_cpu;
#ifdef REMAT_HAVE_CUDA
  gw.cuda = layernorm_grad_weight_cuda;
  gw.cuda_workspace = layernorm_grad_weight_cuda_workspace;
#endif
  with_bf16(gw).bf16_cuda_native = gw.bf16_cpu_native = true;
  r.add(std::move(gw));

  OpDef gb = layernorm_backward_op("layernorm_grad_bias", "layernorm bias gradient [dy]", 1);
  gb.infer = column_grad;
  gb.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, static_cast<double>(in.at(0).numel()) / out.numel());
  };
  gb.cpu = layernorm_grad_bias_cpu;
#ifdef REMAT_HAVE_CUDA
  gb.cuda = layernorm_grad_bias_cuda;
  gb.cuda_workspace = layernorm_grad_bias_cuda_workspace;
#endif
  with_bf16(gb).bf16_cuda_native = gb.bf16_cpu_native = true;
  r.add(std::move(gb));
}

}  // namespace remat
