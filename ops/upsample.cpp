// upsample: nearest-neighbour upsampling of [N, C, H, W] by an integer factor, and its backward
// op upsample_grad, which sums each factor x factor block of dy.
#include <algorithm>
#include <string>
#include <vector>

#include "ops/cpu_storage.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"
#include "runtime/core/check.h"

namespace remat {
namespace {

struct UpsampleAttrs : OpAttrs {
  int64_t factor = 2;
};

OpAttrsPtr upsample_parse(AttrReader& r, const std::string& op_name) {
  auto a = std::make_shared<UpsampleAttrs>();
  a->factor = r.require_int("factor", 1, 1 << 16);
  r.get_choice("mode", "nearest", {"nearest"});
  r.finish(op_name);
  return a;
}

void check_nchw(const TensorDesc& x, const std::string& op) {
  if (!dtype_is_float(x.dtype) || x.shape.size() != 4)
    REMAT_USER_ERROR(op << " expects an f32 or bf16 [N, C, H, W] input, got " << dtype_name(x.dtype) << " "
                        << shape_str(x.shape));
}

TensorDesc upsample_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const UpsampleAttrs&>(at);
  const TensorDesc& x = in.at(0);
  check_nchw(x, "upsample");
  return TensorDesc{{x.shape[0], x.shape[1], x.shape[2] * a.factor, x.shape[3] * a.factor},
                    x.dtype};
}

TensorDesc upsample_grad_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const UpsampleAttrs&>(at);
  const TensorDesc& dy = in.at(0);
  check_nchw(dy, "upsample_grad");
  if (dy.shape[2] % a.factor || dy.shape[3] % a.factor)
    REMAT_USER_ERROR("upsample_grad: gradient " << shape_str(dy.shape)
                                                << " is not divisible by factor " << a.factor);
  return TensorDesc{{dy.shape[0], dy.shape[1], dy.shape[2] / a.factor, dy.shape[3] / a.factor},
                    dy.dtype};
}

OpCost upsample_cost(const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
  OpCost c;
  c.flops = static_cast<double>(std::max(in.at(0).numel(), out.numel()));
  c.bytes_moved = in.at(0).bytes() + out.bytes();
  return c;
}

// inputs [x [N,C,H,W]] -> y [N,C,H*f,W*f], y[.., h, w] = x[.., h/f, w/f].
void upsample_cpu(const ExecContext& ctx) {
  const int64_t f = attrs_of<UpsampleAttrs>(*ctx.node).factor;
  const TensorView& x = ctx.inputs[0];
  const int64_t planes = x.dim(0) * x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t Ho = H * f, Wo = W * f;
  float* y = ctx.output.f32();
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t h = 0; h < Ho; ++h)
      for (int64_t w = 0; w < Wo; ++w)
        y[(p * Ho + h) * Wo + w] = x.f32()[(p * H + h / f) * W + w / f];
}

// inputs [dy [N,C,H*f,W*f]] -> dx [N,C,H,W], each the sum of its f x f block (row-major order).
void upsample_grad_cpu(const ExecContext& ctx) {
  const int64_t f = attrs_of<UpsampleAttrs>(*ctx.node).factor;
  const TensorView& dy = ctx.inputs[0];
  const int64_t planes = ctx.output.dim(0) * ctx.output.dim(1);
  const int64_t H = ctx.output.dim(2), W = ctx.output.dim(3), Wo = W * f;
  float* dx = ctx.output.f32();
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) {
        float s = 0;
        for (int64_t i = 0; i < f; ++i)
          for (int64_t j = 0; j < f; ++j) s += dy.f32()[(p * H * f + h * f + i) * Wo + w * f + j];
        dx[(p * H + h) * W + w] = s;
      }
}

#ifdef REMAT_HAVE_CUDA
// F32 or bf16 (bf16_cuda_native: the bf16 backward sums each block in FP32, rounding once).
void upsample_cuda(const ExecContext& ctx) {
  const TensorView& x = ctx.inputs[0];
  with_storage(x.desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    upsample_nearest_forward(storage<T>(ctx.output), storage<T>(x), x.dim(0) * x.dim(1),
                             x.dim(2), x.dim(3), attrs_of<UpsampleAttrs>(*ctx.node).factor,
                             cuda_stream(ctx));
  });
}

void upsample_grad_cuda(const ExecContext& ctx) {
  const TensorView& dx = ctx.output;
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    upsample_nearest_backward(storage<T>(dx), storage<T>(ctx.inputs[0]), dx.dim(0) * dx.dim(1),
                              dx.dim(2), dx.dim(3), attrs_of<UpsampleAttrs>(*ctx.node).factor,
                              cuda_stream(ctx));
  });
}
#endif

}  // namespace

void register_upsample_ops(OpRegistry& r) {
  OpDef up;
  up.name = "upsample";
  up.summary = "nearest-neighbour upsampling by an integer factor (factor, mode nearest)";
  up.parse = [](AttrReader& rd) { return upsample_parse(rd, "upsample"); };
  up.infer = upsample_infer;
  up.cost = upsample_cost;
  up.cpu = upsample_cpu;
#ifdef REMAT_HAVE_CUDA
  up.cuda = upsample_cuda;
#endif
  up.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) -> std::vector<ValueId> {
    return {g.emit("grad", "upsample_grad", {dy}, g.graph().value(fwd.inputs.at(0)).desc)};
  };
  with_bf16_per_sample(up, 1).bf16_cuda_native = true;
  r.add(std::move(up));

  OpDef ug;
  ug.name = "upsample_grad";
  ug.summary = "upsample input gradient [dy]: sums each factor x factor block";
  ug.user_visible = false;
  ug.kind = NodeKind::Backward;
  ug.parse = [](AttrReader& rd) { return upsample_parse(rd, "upsample_grad"); };
  ug.infer = upsample_grad_infer;
  ug.cost = upsample_cost;
  ug.cpu = upsample_grad_cpu;
#ifdef REMAT_HAVE_CUDA
  ug.cuda = upsample_grad_cuda;
#endif
  with_bf16_per_sample(ug, 1).bf16_cuda_native = true;
  r.add(std::move(ug));
}

}  // namespace remat
