// upsample: [N, C, H, W] -> [N, C, H fh, W fw] by integer factors, nearest-neighbour (each input
// repeated in an fh x fw block) or bilinear with half-pixel centres (TensorFlow 2's
// resize(bilinear), Keras's UpSampling2D(interpolation='bilinear'), PyTorch's
// interpolate(align_corners=False): kernels/bilinear.h); its backward op upsample_grad (block
// sums for nearest, the transposed interpolation for bilinear). Channels-last [N, H, W, C]
// (data_format, Note [channels-last layout] in models/channels_last.cpp): the same arithmetic
// per plane, its pixels C apart.
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/bilinear.h"
#include "ops/cpu_storage.h"
#include "ops/data_format.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"
#include "runtime/core/check.h"

namespace remat {
namespace {

struct UpsampleAttrs : OpAttrs {
  int64_t fh = 2, fw = 2;
  bool bilinear = false;
  bool channels_last = false;
};

OpAttrsPtr upsample_parse(AttrReader& r, const std::string& op_name) {
  auto a = std::make_shared<UpsampleAttrs>();
  if (!r.has("factor")) r.fail("factor", "is required");
  const auto f = r.get_ints("factor", 2, {}, 1, 1 << 16);
  a->fh = f[0], a->fw = f[1];
  a->bilinear = r.get_choice("mode", "nearest", {"nearest", "bilinear"}) == "bilinear";
  a->channels_last = read_channels_last(r);
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
  const ImageDims d = image_dims(x.shape, a.channels_last);
  return checked_desc(ImageDims{d.n, d.c, checked_mul(d.h, a.fh, "upsample height"),
                                checked_mul(d.w, a.fw, "upsample width"), a.channels_last}
                          .shape(),
                      x.dtype, "upsample output");
}

TensorDesc upsample_grad_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const UpsampleAttrs&>(at);
  const TensorDesc& dy = in.at(0);
  check_nchw(dy, "upsample_grad");
  const ImageDims d = image_dims(dy.shape, a.channels_last);
  if (d.h % a.fh || d.w % a.fw)
    REMAT_USER_ERROR("upsample_grad: gradient " << shape_str(dy.shape)
                                                << " is not divisible by factor " << a.fh << "x"
                                                << a.fw);
  return TensorDesc{ImageDims{d.n, d.c, d.h / a.fh, d.w / a.fw, a.channels_last}.shape(),
                    dy.dtype};
}

// Nearest: one move per element of the larger side; bilinear: 4 taps (7 flops) per output.
OpCost upsample_cost(const OpAttrs& at, const std::vector<TensorDesc>& in, const TensorDesc& out) {
  const auto& a = static_cast<const UpsampleAttrs&>(at);
  OpCost c;
  c.flops = (a.bilinear ? 7.0 : 1.0) * static_cast<double>(std::max(in.at(0).numel(), out.numel()));
  c.bytes_moved = in.at(0).bytes() + out.bytes();
  return c;
}

// A plane's pixels as floats (kernels/bilinear.h's accessor), `pixel` elements apart.
struct PlaneLoad {
  const float* p;
  int64_t pixel;
  float operator()(int64_t i) const { return p[i * pixel]; }
};

// inputs [x [N,C,H,W]] -> y [N,C,H*fh,W*fw]: nearest y[.., h, w] = x[.., h/fh, w/fw], or
// bilinear (Note [bilinear arithmetic]).
void upsample_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<UpsampleAttrs>(*ctx.node);
  const ImageDims xd = image_dims(ctx.inputs[0].shape(), a.channels_last);
  const ImageDims yd = image_dims(ctx.output.shape(), a.channels_last);
  const int64_t H = xd.h, W = xd.w, Ho = yd.h, Wo = yd.w, k = xd.pixel_stride();
  for (int64_t q = 0; q < xd.n * xd.c; ++q) {
    const float* xp = ctx.inputs[0].f32() + xd.plane_start(q);
    float* yp = ctx.output.f32() + yd.plane_start(q);
    for (int64_t h = 0; h < Ho; ++h)
      for (int64_t w = 0; w < Wo; ++w)
        yp[(h * Wo + w) * k] = a.bilinear
                                   ? bilinear_value(PlaneLoad{xp, k}, h, w, H, W, a.fh, a.fw)
                                   : xp[((h / a.fh) * W + w / a.fw) * k];
  }
}

// inputs [dy [N,C,H*fh,W*fw]] -> dx [N,C,H,W]: nearest sums each fh x fw block (row-major
// order); bilinear gathers the outputs that read each input.
void upsample_grad_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<UpsampleAttrs>(*ctx.node);
  const ImageDims xd = image_dims(ctx.output.shape(), a.channels_last);
  const ImageDims yd = image_dims(ctx.inputs[0].shape(), a.channels_last);
  const int64_t H = xd.h, W = xd.w, Wo = yd.w, k = xd.pixel_stride();
  for (int64_t q = 0; q < xd.n * xd.c; ++q) {
    const float* dyp = ctx.inputs[0].f32() + yd.plane_start(q);
    float* dxp = ctx.output.f32() + xd.plane_start(q);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) {
        float s = 0;
        if (a.bilinear) {
          s = bilinear_grad(PlaneLoad{dyp, k}, h, w, H, W, a.fh, a.fw);
        } else {
          for (int64_t i = 0; i < a.fh; ++i)
            for (int64_t j = 0; j < a.fw; ++j)
              s += dyp[((h * a.fh + i) * Wo + w * a.fw + j) * k];
        }
        dxp[(h * W + w) * k] = s;
      }
  }
}

#ifdef REMAT_HAVE_CUDA
// F32 or bf16 (bf16_cuda_native: computed in FP32, each result rounded once).
void upsample_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<UpsampleAttrs>(*ctx.node);
  const TensorView& x = ctx.inputs[0];
  const ImageDims d = image_dims(x.shape(), a.channels_last);
  with_storage(x.desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    T* y = storage<T>(ctx.output);
    if (a.bilinear)
      upsample_bilinear_forward(y, storage<T>(x), d.n * d.c, d.h, d.w, a.fh, a.fw,
                                d.pixel_stride(), cuda_stream(ctx));
    else
      upsample_nearest_forward(y, storage<T>(x), d.n * d.c, d.h, d.w, a.fh, a.fw,
                               d.pixel_stride(), cuda_stream(ctx));
  });
}

void upsample_grad_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<UpsampleAttrs>(*ctx.node);
  const TensorView& dx = ctx.output;
  const ImageDims d = image_dims(dx.shape(), a.channels_last);
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* dy = storage<T>(ctx.inputs[0]);
    if (a.bilinear)
      upsample_bilinear_backward(storage<T>(dx), dy, d.n * d.c, d.h, d.w, a.fh, a.fw,
                                 d.pixel_stride(), cuda_stream(ctx));
    else
      upsample_nearest_backward(storage<T>(dx), dy, d.n * d.c, d.h, d.w, a.fh, a.fw,
                                d.pixel_stride(), cuda_stream(ctx));
  });
}
#endif

}  // namespace

void register_upsample_ops(OpRegistry& r) {
  OpDef up;
  up.name = "upsample";
  up.summary = "upsampling by integer factors (factor: f or [fh, fw]; mode nearest | bilinear)";
  up.parse = [](AttrReader& rd) { return upsample_parse(rd, "upsample"); };
  up.infer = upsample_infer;
  up.cost = upsample_cost;
  up.cpu = upsample_cpu;
  up.channels_last = [](const OpAttrs&, const std::vector<TensorDesc>&) { return true; };
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
  ug.summary = "upsample input gradient [dy]: block sums (nearest), transposed interpolation";
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
