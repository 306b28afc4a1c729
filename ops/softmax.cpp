// softmax: over the last dimension, optionally causal: for x [.., T, T] (attention scores of
// query i against key j) causal: true gives key j > query i probability exactly 0, so no token
// sees a later one. Backward softmax_grad [dy, y] -> dx = y * (dy - sum_j dy_j y_j), zero where
// masked. Sums and exponentials in double, one rounding per output (CUDA: kernels/softmax.cu).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/cpu_storage.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

struct SoftmaxAttrs : OpAttrs {
  bool causal = false;
};

OpAttrsPtr softmax_parse(AttrReader& r, const std::string& op_name) {
  auto a = std::make_shared<SoftmaxAttrs>();
  a->causal = r.get_bool("causal", false);
  r.finish(op_name);
  return a;
}

TensorDesc softmax_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  require_float("softmax", in);
  const Shape& x = in.at(0).shape;
  if (x.empty() || x.back() < 1) REMAT_USER_ERROR("softmax needs a non-empty last dimension, got " << shape_str(x));
  if (static_cast<const SoftmaxAttrs&>(at).causal &&
      (x.size() < 2 || x[x.size() - 2] != x.back()))
    REMAT_USER_ERROR("softmax with causal: true expects square scores [.., T, T], got " << shape_str(x));
  return in[0];
}

// Row r of `rows` rows of length `len`: the number of unmasked entries (keys 0 .. query).
int64_t row_width(bool causal, int64_t r, int64_t len) { return causal ? r % len + 1 : len; }

void softmax_cpu(const ExecContext& ctx) {
  const bool causal = attrs_of<SoftmaxAttrs>(*ctx.node).causal;
  const int64_t len = ctx.inputs[0].shape().back(), rows = ctx.inputs[0].numel() / len;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = ctx.inputs[0].f32() + r * len;
    float* y = ctx.output.f32() + r * len;
    const int64_t w = row_width(causal, r, len);
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < w; ++j) m = std::max(m, x[j]);
    double s = 0;
    for (int64_t j = 0; j < w; ++j) s += std::exp(static_cast<double>(x[j]) - m);
    for (int64_t j = 0; j < w; ++j) y[j] = static_cast<float>(std::exp(static_cast<double>(x[j]) - m) / s);
    std::fill(y + w, y + len, 0.0f);
  }
}

// inputs [dy, y] -> dx.
void softmax_grad_cpu(const ExecContext& ctx) {
  const bool causal = attrs_of<SoftmaxAttrs>(*ctx.node).causal;
  const int64_t len = ctx.inputs[0].shape().back(), rows = ctx.inputs[0].numel() / len;
  for (int64_t r = 0; r < rows; ++r) {
    const float* dy = ctx.inputs[0].f32() + r * len;
    const float* y = ctx.inputs[1].f32() + r * len;
    float* dx = ctx.output.f32() + r * len;
    const int64_t w = row_width(causal, r, len);
    double dot = 0;
    for (int64_t j = 0; j < w; ++j) dot += static_cast<double>(dy[j]) * y[j];
    for (int64_t j = 0; j < w; ++j) dx[j] = static_cast<float>(y[j] * (dy[j] - dot));
    std::fill(dx + w, dx + len, 0.0f);
  }
}

#ifdef REMAT_HAVE_CUDA
// F32 or BF16 data, all of one dtype (bf16-native: Note [bf16 launchers] in kernels/kernels.h).
void softmax_cuda(const ExecContext& ctx) {
  const int64_t len = ctx.inputs[0].shape().back();
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    softmax_forward(storage<T>(ctx.output), storage<T>(ctx.inputs[0]),
                    ctx.inputs[0].numel() / len, len, attrs_of<SoftmaxAttrs>(*ctx.node).causal,
                    cuda_stream(ctx));
  });
}
void softmax_grad_cuda(const ExecContext& ctx) {
  const int64_t len = ctx.inputs[0].shape().back();
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    softmax_backward(storage<T>(ctx.output), storage<T>(ctx.inputs[0]), storage<T>(ctx.inputs[1]),
                     ctx.inputs[0].numel() / len, len, attrs_of<SoftmaxAttrs>(*ctx.node).causal,
                     cuda_stream(ctx));
  });
}
#endif

}  // namespace

void register_softmax_ops(OpRegistry& r) {
  OpDef f;
  f.name = "softmax";
  f.summary = "softmax over the last dimension (causal: mask keys after the query in [.., T, T])";
  f.parse = [](AttrReader& rd) { return softmax_parse(rd, "softmax"); };
  f.infer = softmax_infer;
  f.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, 5);  // max, exp, sum, divide
  };
  f.cpu = softmax_cpu;
#ifdef REMAT_HAVE_CUDA
  f.cuda = softmax_cuda;
#endif
  // The gradient reads the output y: the input scores may be freed once y exists.
  f.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) -> std::vector<ValueId> {
    const TensorDesc d = g.graph().value(fwd.output).desc;
    return {g.emit("grad", "softmax_grad", {dy, fwd.output}, d)};
  };
  with_bf16_per_sample(f, 1).bf16_cuda_native = true;
  r.add(std::move(f));

  OpDef gd;
  gd.name = "softmax_grad";
  gd.summary = "softmax gradient [dy, y]";
  gd.user_visible = false;
  gd.min_inputs = gd.max_inputs = 2;
  gd.parse = [](AttrReader& rd) { return softmax_parse(rd, "softmax_grad"); };
  gd.infer = [](const OpAttrs&, const std::vector<TensorDesc>& in) { return in.at(1); };
  gd.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, 4);
  };
  gd.cpu = softmax_grad_cpu;
#ifdef REMAT_HAVE_CUDA
  gd.cuda = softmax_grad_cuda;
#endif
  with_bf16_per_sample(gd, 2).bf16_cuda_native = true;
  r.add(std::move(gd));
}

}  // namespace remat
