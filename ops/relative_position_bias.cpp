// relative_position_bias (window): the learned bias of Swin's and MaxViT's window attention,
// added to the scores before the softmax. x [N, .., H, T, T] (heads H, T = Wh Ww tokens of a
// window, any axes between the batch and the heads: windows, grids), a table [R, H] with
// R = (2 Wh - 1)(2 Ww - 1) rows, one per offset between two tokens of a window:
//   y[.., h, i, j] = x[.., h, i, j] + table[index(i, j), h],
//   index(i, j) = (hi - hj + Wh - 1)(2 Ww - 1) + (wi - wj + Ww - 1), token i at (i / Ww, i % Ww)
// (torchvision's relative_position_index, computed rather than stored). Shifted windows (shift
// [sh, sw] not 0, windows [gh, gw]): x [N, .., gh gw, H, T, T] and Swin's mask added after the
// bias, y = (x + table[..]) + mask(w, i, j), two float roundings as PyTorch's two adds, w the
// window (the axis before the heads), the mask 0 or -100 (shifted_window_mask in
// kernels/relative_position_index.h). Gradients: dx = dy (no node);
// relative_position_bias_grad_table [dy] -> [R, H]: first the sum over every leading index of
// dy[.., h, i, j] (double, in order, rounded once: what bias_grad_reduce does on the device),
// then per table entry the sum of those over the (i, j) that read it (double, i and j in order,
// rounded once).
#include <memory>
#include <string>
#include <vector>

#include "kernels/relative_position_index.h"
#include "ops/cpu_storage.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"
#ifdef REMAT_HAVE_CUDA
#include "kernels/relative_position.h"
#endif

namespace remat {
namespace {

struct RelativeBiasAttrs : OpAttrs {
  int64_t wh = 0, ww = 0;
  int64_t sh = 0, sw = 0;  // the windows' shift (Swin's shifted windows; 0: no mask)
  int64_t gh = 1, gw = 1;  // the grid of windows (with a shift)
  double init_std = 0.02;
  bool masked() const { return sh != 0 || sw != 0; }
  int64_t t() const { return wh * ww; }
  int64_t rows() const { return (2 * wh - 1) * (2 * ww - 1); }
};

OpAttrsPtr relative_bias_parse(AttrReader& r, const std::string& op_name) {
  auto a = std::make_shared<RelativeBiasAttrs>();
  if (!r.has("window")) r.fail("window", "is required (the window's size, e.g. 7 or [7, 7])");
  const auto w = r.get_ints("window", 2, {}, 1, 1024);
  a->wh = w[0];
  a->ww = w[1];
  const auto shift = r.get_ints("shift", 2, {0, 0}, 0, 1023);
  a->sh = shift[0];
  a->sw = shift[1];
  if (a->sh >= a->wh || a->sw >= a->ww)
    r.fail("shift", "a shift of [" + std::to_string(a->sh) + ", " + std::to_string(a->sw) +
                        "] is not inside the window [" + std::to_string(a->wh) + ", " +
                        std::to_string(a->ww) + "]");
  if (a->masked() && !r.has("windows"))
    r.fail("windows", "is required with a shift (the grid of windows, e.g. [8, 8])");
  const auto grid = r.get_ints("windows", 2, {1, 1}, 1, 1 << 20);
  a->gh = grid[0];
  a->gw = grid[1];
  a->init_std = r.get_double("init_std", 0.02, 0.0, 100.0);
  r.finish(op_name);
  return a;
}

// The scores' heads H and the product L of their leading dimensions (the batch included).
struct Scores {
  int64_t lead = 1, heads = 0, t = 0;
};
Scores scores_of(const Shape& x) {
  Scores s;
  for (size_t d = 0; d + 3 < x.size(); ++d) s.lead *= x[d];
  s.heads = x[x.size() - 3];
  s.t = x.back();
  return s;
}

TensorDesc relative_bias_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const RelativeBiasAttrs&>(at);
  require_float("relative_position_bias", in, 1);
  const Shape& x = in.at(0).shape;
  if (x.size() < 4 || x[x.size() - 1] != a.t() || x[x.size() - 2] != a.t())
    REMAT_USER_ERROR("relative_position_bias expects scores [N, .., H, T, T] with T = "
                     << a.wh << " x " << a.ww << " = " << a.t() << " tokens, got " << shape_str(x));
  if (a.masked() && (x.size() < 5 || x[x.size() - 4] != a.gh * a.gw))
    REMAT_USER_ERROR("relative_position_bias with a shift expects scores [N, .., windows, H, T, T] "
                     "with " << a.gh << " x " << a.gw << " = " << a.gh * a.gw
                             << " windows, got " << shape_str(x));
  return in[0];
}

std::vector<ParamSpec> relative_bias_params(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const RelativeBiasAttrs&>(at);
  const int64_t heads = in.at(0).shape.at(in[0].shape.size() - 3);
  ParamSpec w;
  w.suffix = "table";
  w.desc = checked_desc({a.rows(), heads}, DType::F32, "relative_position_bias table");
  w.init = a.init_std > 0 ? InitKind::Normal : InitKind::Zeros;
  w.init_std = a.init_std;
  w.fan_in = a.rows();
  w.fan_out = heads;
  w.role = ParamRole::Embedding;
  return {w};
}

int64_t offset_index(const RelativeBiasAttrs& a, int64_t i, int64_t j) {
  return relative_position_index(i, j, a.wh, a.ww);
}

void relative_bias_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<RelativeBiasAttrs>(*ctx.node);
  const Scores s = scores_of(ctx.inputs[0].shape());
  const float* x = ctx.inputs[0].f32();
  const float* table = ctx.inputs[1].f32();
  float* y = ctx.output.f32();
  int64_t e = 0;
  for (int64_t l = 0; l < s.lead; ++l)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < s.t; ++i)
        for (int64_t j = 0; j < s.t; ++j, ++e) {
          y[e] = x[e] + table[offset_index(a, i, j) * s.heads + h];
          if (a.masked())
            y[e] += shifted_window_mask(l % (a.gh * a.gw), i, j, a.gh, a.gw, a.wh, a.ww, a.sh,
                                        a.sw);
        }
}

// [dy] -> [R, H], the two sums of the header.
void relative_bias_grad_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<RelativeBiasAttrs>(*ctx.node);
  const Scores s = scores_of(ctx.inputs[0].shape());
  const float* dy = ctx.inputs[0].f32();
  const int64_t plane = s.heads * s.t * s.t;
  std::vector<float> db(static_cast<size_t>(plane));
  for (int64_t k = 0; k < plane; ++k) {
    double sum = 0;
    for (int64_t l = 0; l < s.lead; ++l) sum += dy[l * plane + k];
    db[static_cast<size_t>(k)] = static_cast<float>(sum);
  }
  std::vector<double> table(static_cast<size_t>(a.rows() * s.heads), 0.0);
  for (int64_t h = 0; h < s.heads; ++h)
    for (int64_t i = 0; i < s.t; ++i)
      for (int64_t j = 0; j < s.t; ++j)
        table[static_cast<size_t>(offset_index(a, i, j) * s.heads + h)] +=
            db[static_cast<size_t>((h * s.t + i) * s.t + j)];
  float* out = ctx.output.f32();
  for (size_t k = 0; k < table.size(); ++k) out[k] = static_cast<float>(table[k]);
}

#ifdef REMAT_HAVE_CUDA
void relative_bias_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<RelativeBiasAttrs>(*ctx.node);
  const Scores s = scores_of(ctx.inputs[0].shape());
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    const RelativeWindows w{a.wh, a.ww, a.gh, a.gw, a.sh, a.sw};
    relative_position_bias_forward(storage<T>(ctx.output), storage<T>(ctx.inputs[0]),
                                   ctx.inputs[1].f32(), s.lead, s.heads, w, cuda_stream(ctx));
  });
}

// The per-(h, i, j) sums (bias_grad_reduce over dy viewed as [L, H T T]) in the workspace's
// front, bias_grad_reduce's own workspace behind them.
int64_t plane_bytes(const Scores& s) { return (s.heads * s.t * s.t * 4 + 255) / 256 * 256; }
int64_t relative_bias_grad_workspace(const ExecContext& ctx) {
  const Scores s = scores_of(ctx.inputs.at(0).shape());
  return plane_bytes(s) + bias_grad_workspace_bytes(s.lead, s.heads * s.t * s.t, 1);
}

void relative_bias_grad_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<RelativeBiasAttrs>(*ctx.node);
  const Scores s = scores_of(ctx.inputs[0].shape());
  REMAT_CHECK(ctx.workspace_bytes >= relative_bias_grad_workspace(ctx),
              "node '" << ctx.node->name
                       << "': relative_position_bias_grad_table workspace too small");
  auto* db = static_cast<float*>(ctx.workspace);
  void* rest = static_cast<char*>(ctx.workspace) + plane_bytes(s);
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    bias_grad_reduce(db, storage<T>(ctx.inputs[0]), s.lead, s.heads * s.t * s.t, 1, rest,
                     cuda_stream(ctx));
  });
  relative_position_bias_table_grad(ctx.output.f32(), db, s.heads, a.wh, a.ww, cuda_stream(ctx));
}
#endif

}  // namespace

void register_relative_position_bias_ops(OpRegistry& r) {
  OpDef f;
  f.name = "relative_position_bias";
  f.summary = "a learned bias per head and token offset added to window attention's scores "
              "[N, .., H, T, T] (window: Wh or [Wh, Ww], T = Wh Ww; shift and windows: Swin's "
              "shifted-window mask too; init_std)";
  f.parse = [](AttrReader& rd) { return relative_bias_parse(rd, "relative_position_bias"); };
  f.infer = relative_bias_infer;
  f.params = relative_bias_params;
  f.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost({in.at(0)}, out, 1);
  };
  f.cpu = relative_bias_cpu;
#ifdef REMAT_HAVE_CUDA
  f.cuda = relative_bias_cuda;
#endif
  f.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) -> std::vector<ValueId> {
    const TensorDesc wd = g.graph().value(fwd.inputs.at(1)).desc;  // a copy: emit grows the graph
    return {dy, g.emit("grad_table", "relative_position_bias_grad_table", {dy}, wd)};
  };
  with_bf16_per_sample(f, 1).bf16_cuda_native = true;
  r.add(std::move(f));

  OpDef gt;
  gt.name = "relative_position_bias_grad_table";
  gt.summary = "relative position table gradient [dy] -> [R, H]";
  gt.user_visible = false;
  gt.parse = [](AttrReader& rd) {
    return relative_bias_parse(rd, "relative_position_bias_grad_table");
  };
  gt.infer = [](const OpAttrs& at, const std::vector<TensorDesc>& in) {
    const auto& a = static_cast<const RelativeBiasAttrs&>(at);
    const Shape& dy = in.at(0).shape;
    REMAT_CHECK(dy.size() >= 4, "relative_position_bias_grad_table expects dy [N, .., H, T, T]");
    return TensorDesc{{a.rows(), dy[dy.size() - 3]}, DType::F32};
  };
  gt.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, static_cast<double>(in.at(0).numel()) / out.numel());
  };
  gt.cpu = relative_bias_grad_cpu;
#ifdef REMAT_HAVE_CUDA
  gt.cuda = relative_bias_grad_cuda;
  gt.cuda_workspace = relative_bias_grad_workspace;
#endif
  with_bf16(gt).bf16_cuda_native = true;
  r.add(std::move(gt));
}

}  // namespace remat
