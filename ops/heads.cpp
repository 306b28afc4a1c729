// The permutations of a 4-D view, out[a, c, b, d] = in[a, b, c, d] (permute_0213), copies that
// are exact on both backends:
//   split_heads (heads H): x [N, T, C] -> [N, H, T, D], D = C / H: y[n, h, t, d] = x[n, t, h D + d]
//   merge_heads:           x [N, H, T, D] -> [N, T, H D]:          y[n, t, h D + d] = x[n, h, t, d]
// (the reshape + transpose around multi-head attention; each is the other's gradient), and
//   channel_shuffle (groups g): x [N, C, H, W] -> [N, C, H, W], output channel j g + i = input
//   channel i C / g + j (ShuffleNet's x.view(N, g, C / g, H, W).transpose(1, 2)): the view
//   [N, g, C / g, H W] permuted ([N H W, g, C / g, 1] channels-last); its gradient is the
//   shuffle with C / g groups.
#include <string>
#include <vector>

#include "ops/cpu_storage.h"
#include "ops/data_format.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

struct SplitAttrs : OpAttrs {
  int64_t heads = 1;
};

OpAttrsPtr split_parse(AttrReader& r) {
  auto a = std::make_shared<SplitAttrs>();
  a->heads = r.require_int("heads", 1, int64_t{1} << 20);
  r.finish("split_heads");
  return a;
}

TensorDesc split_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const int64_t h = static_cast<const SplitAttrs&>(at).heads;
  const DType t = require_float("split_heads", in);
  const Shape& x = in.at(0).shape;
  if (x.size() != 3) REMAT_USER_ERROR("split_heads expects [N, T, C], got " << shape_str(x));
  if (x[2] % h != 0)
    REMAT_USER_ERROR("split_heads: channels C = " << x[2] << " are not divisible by heads " << h);
  return TensorDesc{{x[0], h, x[1], x[2] / h}, t};
}

TensorDesc merge_infer(const OpAttrs&, const std::vector<TensorDesc>& in) {
  const DType t = require_float("merge_heads", in);
  const Shape& x = in.at(0).shape;
  if (x.size() != 4) REMAT_USER_ERROR("merge_heads expects [N, H, T, D], got " << shape_str(x));
  return TensorDesc{{x[0], x[2], x[1] * x[3]}, t};
}

// out[a, c, b, d] = in[a, b, c, d] for in [d0, d1, d2, d3].
void permute_0213_cpu(float* out, const float* in, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  for (int64_t a = 0; a < d0; ++a)
    for (int64_t b = 0; b < d1; ++b)
      for (int64_t c = 0; c < d2; ++c) {
        const float* src = in + ((a * d1 + b) * d2 + c) * d3;
        float* dst = out + ((a * d2 + c) * d1 + b) * d3;
        for (int64_t d = 0; d < d3; ++d) dst[d] = src[d];
      }
}

// The 4-D view each op permutes: split views x [N, T, C] as [N, T, H, D]; merge permutes its
// input [N, H, T, D] as is.
struct View4 {
  int64_t d0, d1, d2, d3;
};
View4 split_view(const ExecContext& ctx) {
  const Shape& y = ctx.output.shape();  // [N, H, T, D]
  return {y[0], y[2], y[1], y[3]};
}
View4 merge_view(const ExecContext& ctx) {
  const Shape& x = ctx.inputs[0].shape();
  return {x[0], x[1], x[2], x[3]};
}

template <View4 (*view)(const ExecContext&)>
void permute_cpu(const ExecContext& ctx) {
  const View4 v = view(ctx);
  permute_0213_cpu(ctx.output.f32(), ctx.inputs[0].f32(), v.d0, v.d1, v.d2, v.d3);
}

#ifdef REMAT_HAVE_CUDA
// F32 or bf16 values, moved as they are (bf16_cuda_native).
template <View4 (*view)(const ExecContext&)>
void permute_cuda(const ExecContext& ctx) {
  const View4 v = view(ctx);
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    permute_0213(storage<T>(ctx.output), storage<T>(ctx.inputs[0]), v.d0, v.d1, v.d2, v.d3,
                 cuda_stream(ctx));
  });
}
#endif

struct ShuffleAttrs : OpAttrs {
  int64_t groups = 1;
  bool channels_last = false;  // [N, H, W, C]
};

OpAttrsPtr shuffle_parse(AttrReader& r) {
  auto a = std::make_shared<ShuffleAttrs>();
  a->groups = r.require_int("groups", 1, int64_t{1} << 20);
  a->channels_last = read_channels_last(r);
  r.finish("channel_shuffle");
  return a;
}

int64_t shuffle_channels(const Shape& x, bool channels_last) { return channels_last ? x[3] : x[1]; }

TensorDesc shuffle_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const ShuffleAttrs&>(at);
  const DType t = require_float("channel_shuffle", in);
  const Shape& x = in.at(0).shape;
  if (x.size() != 4) REMAT_USER_ERROR("channel_shuffle expects [N, C, H, W], got " << shape_str(x));
  const int64_t c = shuffle_channels(x, a.channels_last);
  if (c % a.groups != 0)
    REMAT_USER_ERROR("channel_shuffle: channels C = " << c << " are not divisible by groups "
                                                      << a.groups);
  return TensorDesc{x, t};
}

View4 shuffle_view(const ExecContext& ctx) {
  const auto& a = attrs_of<ShuffleAttrs>(*ctx.node);
  const Shape& x = ctx.inputs[0].shape();
  const int64_t c = shuffle_channels(x, a.channels_last);
  if (a.channels_last) return {x[0] * x[1] * x[2], a.groups, c / a.groups, 1};
  return {x[0], a.groups, c / a.groups, x[2] * x[3]};
}

std::vector<ValueId> shuffle_gradient(GradEmitter& g, const Node& fwd, ValueId dy) {
  const auto& a = attrs_of<ShuffleAttrs>(fwd);
  const TensorDesc x = g.graph().value(fwd.inputs.at(0)).desc;
  AttrMap m;
  m.origin = fwd.attrs.origin;
  m.set("groups", shuffle_channels(x.shape, a.channels_last) / a.groups);
  if (a.channels_last) m.set("data_format", std::string("channels_last"));
  AttrReader rd(m);
  OpAttrsPtr typed = shuffle_parse(rd);
  return {g.emit("grad", "channel_shuffle", {dy}, x, m, typed)};
}

OpCost copy_cost(const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
  return elementwise_cost(in, out, 0);
}

}  // namespace

void register_heads_ops(OpRegistry& r) {
  OpDef split;
  split.name = "split_heads";
  split.summary = "[N, T, C] -> [N, H, T, C / H] (heads)";
  split.parse = split_parse;
  split.infer = split_infer;
  split.cost = copy_cost;
  split.cpu = permute_cpu<split_view>;
#ifdef REMAT_HAVE_CUDA
  split.cuda = permute_cuda<split_view>;
#endif
  split.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) -> std::vector<ValueId> {
    const TensorDesc x = g.graph().value(fwd.inputs.at(0)).desc;
    AttrMap m;
    m.origin = fwd.attrs.origin;
    return {g.emit("grad", "merge_heads", {dy}, x, m, std::make_shared<EmptyAttrs>())};
  };
  with_bf16_per_sample(split, 1).bf16_cuda_native = true;
  r.add(std::move(split));

  OpDef merge;
  merge.name = "merge_heads";
  merge.summary = "[N, H, T, D] -> [N, T, H D]";
  merge.parse = [](AttrReader& rd) { return parse_no_attrs(rd, "merge_heads"); };
  merge.infer = merge_infer;
  merge.cost = copy_cost;
  merge.cpu = permute_cpu<merge_view>;
#ifdef REMAT_HAVE_CUDA
  merge.cuda = permute_cuda<merge_view>;
#endif
  merge.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) -> std::vector<ValueId> {
    const TensorDesc x = g.graph().value(fwd.inputs.at(0)).desc;
    AttrMap m;
    m.origin = fwd.attrs.origin;
    m.set("heads", x.shape.at(1));
    AttrReader rd(m);
    OpAttrsPtr typed = split_parse(rd);
    return {g.emit("grad", "split_heads", {dy}, x, m, typed)};
  };
  with_bf16_per_sample(merge, 1).bf16_cuda_native = true;
  r.add(std::move(merge));

  OpDef shuffle;
  shuffle.name = "channel_shuffle";
  shuffle.summary = "[N, C, H, W]: channel j g + i <- channel i C / g + j (groups g)";
  shuffle.parse = shuffle_parse;
  shuffle.infer = shuffle_infer;
  shuffle.cost = copy_cost;
  shuffle.channels_last = [](const OpAttrs&, const std::vector<TensorDesc>& in) {
    return in.at(0).shape.size() == 4;
  };
  shuffle.cpu = permute_cpu<shuffle_view>;
#ifdef REMAT_HAVE_CUDA
  shuffle.cuda = permute_cuda<shuffle_view>;
#endif
  shuffle.gradient = shuffle_gradient;
  with_bf16_per_sample(shuffle, 1).bf16_cuda_native = true;
  r.add(std::move(shuffle));
}

}  // namespace remat
