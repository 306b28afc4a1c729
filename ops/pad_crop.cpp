// zeropad and crop: Keras's ZeroPadding2D and Cropping2D on [N, C, H, W]. zeropad adds rows and
// columns of zeros ([top, bottom, left, right]); crop removes them. Each is the other's
// gradient (a crop of dy, a zero-padding of dy), so no hidden backward op exists. Both are one
// window copy, out[p, h, w] = in[p, h + dh, w + dw] (0 outside in), on the CPU and the GPU
// (kernels/pad.cu), in F32 and natively in bf16: values move unchanged, so every path is exact.
#include <memory>
#include <string>
#include <vector>

#include "ops/cpu_storage.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/padding.h"
#include "ops/registry.h"

namespace remat {
namespace {

constexpr int64_t kMaxPad = int64_t(1) << 20;

// Rows and columns added (zeropad) or removed (crop) on each side.
struct PadCropAttrs : OpAttrs {
  Pads sides;
};

// zeropad reads `padding`, crop `cropping`: an int, [h, w] or [top, bottom, left, right].
OpAttrsPtr pad_crop_parse(AttrReader& r, const std::string& op_name, const std::string& key) {
  auto a = std::make_shared<PadCropAttrs>();
  if (!r.has(key)) r.fail(key, "is required");
  const PaddingSpec s = padding_parse(r, key, kMaxPad, false);
  a->sides = Pads{s.top, s.bottom, s.left, s.right};
  r.finish(op_name);
  return a;
}

void check_nchw(const TensorDesc& x, const std::string& op) {
  if (!dtype_is_float(x.dtype) || x.shape.size() != 4)
    REMAT_USER_ERROR(op << " expects an f32 or bf16 [N, C, H, W] input, got "
                        << dtype_name(x.dtype) << " " << shape_str(x.shape));
}

TensorDesc zeropad_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const Pads& p = static_cast<const PadCropAttrs&>(at).sides;
  const TensorDesc& x = in.at(0);
  check_nchw(x, "zeropad");
  return checked_desc({x.shape[0], x.shape[1], x.shape[2] + p.top + p.bottom,
                       x.shape[3] + p.left + p.right},
                      x.dtype, "zeropad output");
}

TensorDesc crop_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const Pads& p = static_cast<const PadCropAttrs&>(at).sides;
  const TensorDesc& x = in.at(0);
  check_nchw(x, "crop");
  const int64_t h = x.shape[2] - p.top - p.bottom, w = x.shape[3] - p.left - p.right;
  if (h < 1 || w < 1)
    REMAT_USER_ERROR("crop of [" << p.top << ", " << p.bottom << ", " << p.left << ", "
                                 << p.right << "] (top, bottom, left, right) leaves nothing of a "
                                 << x.shape[2] << "x" << x.shape[3] << " input");
  return TensorDesc{{x.shape[0], x.shape[1], h, w}, x.dtype};
}

// Row and column offsets of the window copy: out[h, w] = in[h + dh, w + dw].
struct Offsets {
  int64_t dh, dw;
};
Offsets zeropad_offsets(const Pads& p) { return {-p.top, -p.left}; }
Offsets crop_offsets(const Pads& p) { return {p.top, p.left}; }

// inputs [x [N, C, H, W]] -> y [N, C, Ho, Wo], element by element (zeros outside x).
template <typename T>
void window_copy_cpu_t(const ExecContext& ctx, Offsets o) {
  const TensorView& x = ctx.inputs[0];
  const int64_t planes = x.dim(0) * x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t Ho = ctx.output.dim(2), Wo = ctx.output.dim(3);
  const T* in = storage<T>(x);
  T* out = storage<T>(ctx.output);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t h = 0; h < Ho; ++h) {
      const int64_t hi = h + o.dh;
      for (int64_t w = 0; w < Wo; ++w) {
        const int64_t wi = w + o.dw;
        const bool inside = hi >= 0 && hi < H && wi >= 0 && wi < W;
        out[(p * Ho + h) * Wo + w] = inside ? in[(p * H + hi) * W + wi] : T{0};
      }
    }
}

template <Offsets (*offsets)(const Pads&)>
void window_copy_cpu(const ExecContext& ctx) {
  const Offsets o = offsets(attrs_of<PadCropAttrs>(*ctx.node).sides);
  with_storage(ctx.inputs[0].desc->dtype,
               [&](auto tag) { window_copy_cpu_t<decltype(tag)>(ctx, o); });
}

#ifdef REMAT_HAVE_CUDA
template <Offsets (*offsets)(const Pads&)>
void window_copy_cuda(const ExecContext& ctx) {
  const Offsets o = offsets(attrs_of<PadCropAttrs>(*ctx.node).sides);
  const TensorView& x = ctx.inputs[0];
  with_storage(x.desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    window_copy(storage<T>(ctx.output), storage<T>(x), x.dim(0) * x.dim(1), x.dim(2), x.dim(3),
                ctx.output.dim(2), ctx.output.dim(3), o.dh, o.dw, cuda_stream(ctx));
  });
}
#endif

// The gradient of zeropad (crop) is crop (zeropad) of dy by the same four sides.
std::vector<ValueId> emit_inverse(GradEmitter& g, const Node& fwd, ValueId dy,
                                  const std::string& op, const std::string& key) {
  const Pads p = attrs_of<PadCropAttrs>(fwd).sides;
  auto typed = std::make_shared<PadCropAttrs>();
  typed->sides = p;
  AttrMap m;
  m.set(key, std::vector<int64_t>{p.top, p.bottom, p.left, p.right});
  const TensorDesc x = g.graph().value(fwd.inputs.at(0)).desc;
  return {g.emit("grad", op, {dy}, x, m, typed)};
}

template <Offsets (*offsets)(const Pads&)>
OpDef pad_crop_op(const std::string& name, const std::string& summary, const std::string& key) {
  OpDef op;
  op.name = name;
  op.summary = summary;
  op.parse = [name, key](AttrReader& rd) { return pad_crop_parse(rd, name, key); };
  op.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, 1.0);
  };
  op.cpu = window_copy_cpu<offsets>;
#ifdef REMAT_HAVE_CUDA
  op.cuda = window_copy_cuda<offsets>;
#endif
  with_bf16_per_sample(op, 1).bf16_cpu_native = true;
  op.bf16_cuda_native = true;
  return op;
}

}  // namespace

void register_pad_crop_ops(OpRegistry& r) {
  OpDef pad = pad_crop_op<zeropad_offsets>(
      "zeropad", "zero rows / columns around [N, C, H, W] (padding: [top, bottom, left, right])",
      "padding");
  pad.infer = zeropad_infer;
  pad.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) {
    return emit_inverse(g, fwd, dy, "crop", "cropping");
  };
  r.add(std::move(pad));

  OpDef crop = pad_crop_op<crop_offsets>(
      "crop", "remove rows / columns of [N, C, H, W] (cropping: [top, bottom, left, right])",
      "cropping");
  crop.infer = crop_infer;
  crop.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) {
    return emit_inverse(g, fwd, dy, "zeropad", "padding");
  };
  r.add(std::move(crop));
}

}  // namespace remat
