// Loss ops: softmax_xent (logits [N, K], labels [N]), softmax_xent_pixel (logits [N, K, H, W],
// labels [N, H, W]) and token_xent (logits [N, T, V], targets [N, T]; tokens whose target is
// ignore_index, default -100, count neither in the mean nor get a gradient; the image losses skip
// the labels equal to their ignore_index when one is given, e.g. 255 for VOC masks): mean softmax
// cross-entropy as a [1] tensor, and their backward ops, which produce (softmax - onehot) /
// count. Labels (i32) are not differentiable. The CUDA loss checks labels on the device and
// synchronizes once to report a bad one (kernels/softmax_xent.cu).
#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "ops/cpu_storage.h"
#include "ops/cpu_storage.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"
#include "runtime/core/check.h"

namespace remat {
namespace {

// Where the classes are: rows [N, K], pixels [N, K, H, W], tokens [N, T, V].
enum class XentLayout { Rows, Pixels, Tokens };

struct XentAttrs : OpAttrs {
  int64_t ignore_index = kNoIgnore;  // labels to skip (token_xent: default -100)
  static constexpr int64_t kNoIgnore = INT64_MIN;
};

OpAttrsPtr xent_parse(AttrReader& r, const std::string& op_name, XentLayout layout) {
  auto a = std::make_shared<XentAttrs>();
  if (layout == XentLayout::Tokens)  // negative, so that it never names a token
    a->ignore_index = r.get_int("ignore_index", -100, INT32_MIN, -1);
  else if (r.has("ignore_index"))  // VOC and Cityscapes mark unlabelled pixels 255
    a->ignore_index = r.get_int("ignore_index", 255, INT32_MIN, INT32_MAX);
  r.finish(op_name);
  return a;
}

// Logits as `outer` rows of K classes with stride `inner` between classes: [N, K] has
// outer = N, inner = 1; [N, K, H, W] has outer = N, inner = H * W (one softmax per pixel);
// [N, T, V] has outer = N * T, inner = 1.
struct XentDims {
  int64_t outer = 0, k = 0, inner = 0, width = 1;
  int64_t count() const { return outer * inner; }  // number of labelled samples
};

XentDims xent_dims(const Shape& logits) {
  XentDims d;
  if (logits.size() == 3) {  // tokens
    d.outer = logits[0] * logits[1];
    d.k = logits[2];
    d.inner = 1;
    d.width = logits[1];
    return d;
  }
  d.outer = logits.at(0);
  d.k = logits.at(1);
  d.inner = logits.size() == 4 ? logits[2] * logits[3] : 1;
  d.width = logits.size() == 4 ? logits[3] : 1;
  return d;
}

// Checks [logits, labels] for op `op`.
void xent_check(const std::vector<TensorDesc>& in, const std::string& op, XentLayout layout) {
  const TensorDesc& logits = in.at(0);
  const TensorDesc& labels = in.at(1);
  const size_t rank = layout == XentLayout::Pixels ? 4 : layout == XentLayout::Tokens ? 3 : 2;
  const char* want_logits = layout == XentLayout::Pixels ? "[N, K, H, W]"
                            : layout == XentLayout::Tokens ? "[N, T, V]" : "[N, K]";
  if (!dtype_is_float(logits.dtype) || logits.shape.size() != rank)
    REMAT_USER_ERROR(op << " expects f32 or bf16 logits " << want_logits << ", got "
                        << dtype_name(logits.dtype) << " " << shape_str(logits.shape));
  Shape want = {logits.shape[0]};
  if (layout == XentLayout::Pixels) want.insert(want.end(), {logits.shape[2], logits.shape[3]});
  if (layout == XentLayout::Tokens) want.push_back(logits.shape[1]);
  if (labels.dtype != DType::I32 || labels.shape != want)
    REMAT_USER_ERROR(op << " expects i32 labels " << shape_str(want) << " for logits "
                        << shape_str(logits.shape) << ", got " << dtype_name(labels.dtype) << " "
                        << shape_str(labels.shape));
  if (logits.shape[rank == 3 ? 2 : 1] < 1) REMAT_USER_ERROR(op << " needs at least one class");
}

OpCost xent_cost(const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
  OpCost c;
  c.flops = 4.0 * static_cast<double>(in.at(0).numel());  // max, exp, sum, (sub)
  c.bytes_moved = in.at(0).bytes() + in.at(1).bytes() + out.bytes();
  return c;
}

// Throws the user error for label y of sample (o, i) outside [0, K) (CPU and CUDA paths).
[[noreturn]] void xent_bad_label(const Node& node, const XentDims& d, int32_t y, int64_t o,
                                 int64_t i) {
  if (node.op.rfind("token_xent", 0) == 0)
    REMAT_USER_ERROR(node.op << " node '" << node.name << "': target " << y << " of sample "
                             << o / d.width << ", position " << o % d.width
                             << " is outside the vocabulary [0, " << d.k << ")");
  if (d.inner == 1)
    REMAT_USER_ERROR(node.op << " node '" << node.name << "': label " << y << " of sample " << o
                             << " is outside [0, " << d.k << ")");
  REMAT_USER_ERROR(node.op << " node '" << node.name << "': label " << y << " of sample " << o
                           << " at pixel (" << i / d.width << ", " << i % d.width
                           << ") is outside [0, " << d.k << ")");
}

// Label of sample (o, i), checked against [0, K).
int32_t xent_label(const int32_t* labels, const XentDims& d, int64_t o, int64_t i,
                   const Node& node) {
  const int32_t y = labels[o * d.inner + i];
  if (y < 0 || y >= d.k) xent_bad_label(node, d, y, o, i);
  return y;
}

// log(sum_k exp(z_k)) for the K logits starting at z with stride `inner`, stable (max shifted).
template <typename T>
double log_sum_exp(const T* z, const XentDims& d, double* max_out) {
  double m = load(z, 0);
  for (int64_t k = 1; k < d.k; ++k) m = std::max(m, static_cast<double>(load(z, k * d.inner)));
  double s = 0;
  for (int64_t k = 0; k < d.k; ++k) s += std::exp(load(z, k * d.inner) - m);
  *max_out = m;
  return m + std::log(s);
}

// Samples whose label is not the ignore index.
int64_t counted(const int32_t* labels, const XentDims& d, int64_t ignore) {
  if (ignore == XentAttrs::kNoIgnore) return d.count();
  int64_t c = 0;
  for (int64_t s = 0; s < d.count(); ++s) c += labels[s] != ignore;
  return c;
}

// inputs [logits, labels] -> [1] = mean over counted samples of logsumexp(z) - z[label]
// (0 when every sample is ignored).
// T: the logits' storage (ops/cpu_storage.h); the loss is F32 either way.
template <typename T>
void xent_cpu_t(const ExecContext& ctx) {
  const XentDims d = xent_dims(ctx.inputs[0].shape());
  const int64_t ignore = attrs_of<XentAttrs>(*ctx.node).ignore_index;
  const T* z = storage<T>(ctx.inputs[0]);
  const int32_t* labels = ctx.inputs[1].i32();
  double total = 0;
  for (int64_t o = 0; o < d.outer; ++o)
    for (int64_t i = 0; i < d.inner; ++i) {
      if (labels[o * d.inner + i] == ignore) continue;
      const T* zi = z + o * d.k * d.inner + i;
      const int32_t y = xent_label(labels, d, o, i, *ctx.node);
      double m = 0;
      total += log_sum_exp(zi, d, &m) - load(zi, y * d.inner);
    }
  const int64_t count = counted(labels, d, ignore);
  ctx.output.f32()[0] = count > 0 ? static_cast<float>(total / static_cast<double>(count)) : 0.0f;
}

// inputs [logits, labels] -> dlogits like logits = (softmax - onehot(label)) / count; 0 for
// ignored samples.
template <typename T>
void xent_grad_cpu_t(const ExecContext& ctx) {
  const XentDims d = xent_dims(ctx.inputs[0].shape());
  const int64_t ignore = attrs_of<XentAttrs>(*ctx.node).ignore_index;
  const T* z = storage<T>(ctx.inputs[0]);
  const int32_t* labels = ctx.inputs[1].i32();
  T* dz = storage<T>(ctx.output);
  const int64_t count = counted(labels, d, ignore);
  const double inv_count = count > 0 ? 1.0 / static_cast<double>(count) : 0.0;
  for (int64_t o = 0; o < d.outer; ++o)
    for (int64_t i = 0; i < d.inner; ++i) {
      const int64_t base = o * d.k * d.inner + i;
      if (labels[o * d.inner + i] == ignore) {
        for (int64_t k = 0; k < d.k; ++k) store(dz, base + k * d.inner, 0.0f);
        continue;
      }
      const int32_t y = xent_label(labels, d, o, i, *ctx.node);
      double m = 0;
      const double lse = log_sum_exp(z + base, d, &m);
      for (int64_t k = 0; k < d.k; ++k) {
        const double p = std::exp(load(z, base + k * d.inner) - lse);
        store(dz, base + k * d.inner, static_cast<float>((p - (k == y ? 1.0 : 0.0)) * inv_count));
      }
    }
}

void xent_cpu(const ExecContext& ctx) {
  with_storage(ctx.inputs[0].desc->dtype, [&](auto t) { xent_cpu_t<decltype(t)>(ctx); });
}
void xent_grad_cpu(const ExecContext& ctx) {
  with_storage(ctx.inputs[0].desc->dtype, [&](auto t) { xent_grad_cpu_t<decltype(t)>(ctx); });
}

#ifdef REMAT_HAVE_CUDA
int64_t ignore_of(const ExecContext& ctx) {
  const int64_t ignore = attrs_of<XentAttrs>(*ctx.node).ignore_index;
  return ignore == XentAttrs::kNoIgnore ? kXentNoIgnore : ignore;
}

int64_t xent_cuda_workspace(const ExecContext& ctx) {
  const XentDims d = xent_dims(ctx.inputs.at(0).shape());
  return softmax_xent_workspace_bytes(d.outer, d.inner);
}

// inputs [logits, labels] -> [1]. Reads the kernel's label check back (one stream sync per
// loss evaluation) so a bad label fails like on the CPU, naming the sample. Not while a CUDA
// graph is captured (Note [step graphs]): a bad label then makes the loss (and its gradient)
// NaN, the finite check (which graphs require) stops the step, and its eager re-run names the
// sample here.
// F32 or BF16 logits (bf16-native: Note [bf16 launchers] in kernels/kernels.h); the loss is F32
// either way.
void xent_cuda(const ExecContext& ctx) {
  const XentDims d = xent_dims(ctx.inputs[0].shape());
  REMAT_CHECK(ctx.workspace != nullptr && ctx.workspace_bytes >= xent_cuda_workspace(ctx),
              "node '" << ctx.node->name << "': softmax_xent needs " << xent_cuda_workspace(ctx)
                       << " workspace bytes, got " << ctx.workspace_bytes);
  const cudaStream_t stream = cuda_stream(ctx);
  const int32_t* labels = ctx.inputs[1].i32();
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    softmax_xent_forward(ctx.output.f32(), ctx.workspace, storage<T>(ctx.inputs[0]), labels,
                         d.outer, d.k, d.inner, ignore_of(ctx), stream);
  });
  if (cuda_context(ctx).capturing) return;
  int32_t bad = 0;
  const uint64_t s = softmax_xent_read_error(ctx.workspace, labels, &bad, stream);
  if (s != ~uint64_t{0}) {
    const int64_t flat = static_cast<int64_t>(s);
    xent_bad_label(*ctx.node, d, bad, flat / d.inner, flat % d.inner);
  }
}

// inputs [logits, labels] -> dlogits (the logits' dtype, F32 or BF16). No label check here:
// the loss, which runs first in every step, has reported bad labels; the kernel writes NaN for
// such samples.
void xent_grad_cuda(const ExecContext& ctx) {
  const XentDims d = xent_dims(ctx.inputs[0].shape());
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    softmax_xent_backward(storage<T>(ctx.output), storage<T>(ctx.inputs[0]), ctx.inputs[1].i32(),
                          d.outer, d.k, d.inner, ignore_of(ctx), ctx.workspace,
                          cuda_stream(ctx));
  });
}
#endif

// Labels are classes: below K (dim 1), or below V for tokens (dim 2).
int64_t xent_index_bound(const OpAttrs&, const std::vector<TensorDesc>& in, int) {
  return in.at(0).shape.size() == 3 ? in[0].shape[2] : in.at(0).shape.at(1);
}

void register_xent_pair(OpRegistry& r, const std::string& name, XentLayout layout,
                        const std::string& summary) {
  const std::string grad_name = name + "_grad";
  OpDef loss;
  loss.name = name;
  loss.summary = summary;
  loss.kind = NodeKind::Loss;
  loss.min_inputs = loss.max_inputs = 2;
  loss.parse = [name, layout](AttrReader& rd) { return xent_parse(rd, name, layout); };
  loss.infer = [name, layout](const OpAttrs&, const std::vector<TensorDesc>& in) {
    xent_check(in, name, layout);
    return TensorDesc{{1}, DType::F32};
  };
  loss.cost = xent_cost;
  loss.cpu = xent_cpu;
#ifdef REMAT_HAVE_CUDA
  loss.cuda = xent_cuda;
  loss.cuda_workspace = xent_cuda_workspace;
#endif
  loss.gradient = [grad_name](GradEmitter& g, const Node& fwd, ValueId dy) -> std::vector<ValueId> {
    REMAT_CHECK(dy == kNoValue, "loss node '" << fwd.name << "' got an output gradient");
    const ValueId logits = fwd.inputs.at(0), labels = fwd.inputs.at(1);
    return {g.emit("grad", grad_name, {logits, labels}, g.graph().value(logits).desc), kNoValue};
  };
  loss.index_bound = xent_index_bound;
  with_bf16(loss).bf16_cuda_native = loss.bf16_cpu_native = true;
  r.add(std::move(loss));

  OpDef grad;
  grad.name = grad_name;
  grad.summary = name + " logits gradient [logits, labels]: (softmax - onehot) / count";
  grad.user_visible = false;
  grad.kind = NodeKind::Backward;
  grad.min_inputs = grad.max_inputs = 2;
  grad.parse = [grad_name, layout](AttrReader& rd) { return xent_parse(rd, grad_name, layout); };
  grad.infer = [grad_name, layout](const OpAttrs&, const std::vector<TensorDesc>& in) {
    xent_check(in, grad_name, layout);
    return in[0];
  };
  grad.cost = xent_cost;
  grad.cpu = xent_grad_cpu;
#ifdef REMAT_HAVE_CUDA
  grad.cuda = xent_grad_cuda;
  grad.cuda_workspace = [](const ExecContext& ctx) {
    return softmax_xent_backward_workspace_bytes(ignore_of(ctx));
  };
#endif
  grad.index_bound = xent_index_bound;
  with_bf16(grad).bf16_cuda_native = grad.bf16_cpu_native = true;
  r.add(std::move(grad));
}

}  // namespace

void register_softmax_xent_ops(OpRegistry& r) {
  register_xent_pair(r, "softmax_xent", XentLayout::Rows,
                     "mean softmax cross-entropy loss: logits [N, K], labels [N] i32 -> [1]");
  register_xent_pair(r, "softmax_xent_pixel", XentLayout::Pixels,
                     "per-pixel mean softmax cross-entropy: logits [N, K, H, W], labels [N, H, W]");
  register_xent_pair(r, "token_xent", XentLayout::Tokens,
                     "per-token mean cross-entropy: logits [N, T, V], targets [N, T] "
                     "(ignore_index, default -100)");
}

}  // namespace remat
