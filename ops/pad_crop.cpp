// zeropad and crop: Keras's ZeroPadding2D and Cropping2D on [N, C, H, W]. zeropad adds rows and
// columns of zeros ([top, bottom, left, right]); crop removes them. Each is the other's
// gradient (a crop of dy, a zero-padding of dy), so no hidden backward op exists. Both are one
// window copy, out[p, h, w] = in[p, h + dh, w + dw] (0 outside in), on the CPU and the GPU
// (kernels/pad.cu), in F32 and natively in bf16: values move unchanged, so every path is exact.
// Channels-last [N, H, W, C] (data_format, Note [channels-last layout] in
// models/channels_last.cpp) is the same copy over planes of H rows of W C values, each pixel's C
// values moving together: column offsets and widths times C.
#include <memory>
#include <string>
#include <vector>

#include "ops/cpu_storage.h"
#include "ops/data_format.h"
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
  bool channels_last = false;
};

// zeropad reads `padding`, crop `cropping`: an int, [h, w] or [top, bottom, left, right].
OpAttrsPtr pad_crop_parse(AttrReader& r, const std::string& op_name, const std::string& key) {
  auto a = std::make_shared<PadCropAttrs>();
  if (!r.has(key)) r.fail(key, "is required");
  const PaddingSpec s = padding_parse(r, key, kMaxPad, false);
  a->sides = Pads{s.top, s.bottom, s.left, s.right};
  a->channels_last = read_channels_last(r);
  r.finish(op_name);
  return a;
}

void check_nchw(const TensorDesc& x, const std::string& op) {
  if (!dtype_is_float(x.dtype) || x.shape.size() != 4)
    REMAT_USER_ERROR(op << " expects an f32 or bf16 [N, C, H, W] input, got "
                        << dtype_name(x.dtype) << " " << shape_str(x.shape));
}

TensorDesc zeropad_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const PadCropAttrs&>(at);
  const Pads& p = a.sides;
  const TensorDesc& x = in.at(0);
  check_nchw(x, "zeropad");
  const ImageDims d = image_dims(x.shape, a.channels_last);
  return checked_desc(
      ImageDims{d.n, d.c, d.h + p.top + p.bottom, d.w + p.left + p.right, a.channels_last}.shape(),
      x.dtype, "zeropad output");
}

TensorDesc crop_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const PadCropAttrs&>(at);
  const Pads& p = a.sides;
  const TensorDesc& x = in.at(0);
  check_nchw(x, "crop");
  const ImageDims d = image_dims(x.shape, a.channels_last);
  const int64_t h = d.h - p.top - p.bottom, w = d.w - p.left - p.right;
  if (h < 1 || w < 1)
    REMAT_USER_ERROR("crop of [" << p.top << ", " << p.bottom << ", " << p.left << ", "
                                 << p.right << "] (top, bottom, left, right) leaves nothing of a "
                                 << d.h << "x" << d.w << " input");
  return TensorDesc{ImageDims{d.n, d.c, h, w, a.channels_last}.shape(), x.dtype};
}

// Row and column offsets of the window copy: out[h, w] = in[h + dh, w + dw].
struct Offsets {
  int64_t dh, dw;
};
Offsets zeropad_offsets(const Pads& p) { return {-p.top, -p.left}; }
Offsets crop_offsets(const Pads& p) { return {p.top, p.left}; }

// The copy as planes of rows: (planes, H, W) -> (planes, Ho, Wo) with offsets (dh, dw); for
// channels-last tensors a plane is one sample of H rows of W C values.
struct Window {
  int64_t planes, H, W, Ho, Wo;
  Offsets o;
};
Window window_of(const PadCropAttrs& a, const Shape& x, const Shape& y, Offsets o) {
  const ImageDims i = image_dims(x, a.channels_last), u = image_dims(y, a.channels_last);
  if (!a.channels_last) return {i.n * i.c, i.h, i.w, u.h, u.w, o};
  return {i.n, i.h, i.w * i.c, u.h, u.w * u.c, Offsets{o.dh, o.dw * i.c}};
}

// inputs [x [N, C, H, W]] -> y [N, C, Ho, Wo], element by element (zeros outside x).
template <typename T>
void window_copy_cpu_t(const ExecContext& ctx, Offsets offsets) {
  const TensorView& x = ctx.inputs[0];
  const Window win = window_of(attrs_of<PadCropAttrs>(*ctx.node), x.shape(),
                               ctx.output.shape(), offsets);
  const int64_t planes = win.planes, H = win.H, W = win.W, Ho = win.Ho, Wo = win.Wo;
  const Offsets o = win.o;
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
  const auto& a = attrs_of<PadCropAttrs>(*ctx.node);
  const TensorView& x = ctx.inputs[0];
  const Window w = window_of(a, x.shape(), ctx.output.shape(), offsets(a.sides));
  with_storage(x.desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    window_copy(storage<T>(ctx.output), storage<T>(x), w.planes, w.H, w.W, w.Ho, w.Wo, w.o.dh,
                w.o.dw, cuda_stream(ctx));
  });
}
#endif

// The gradient of zeropad (crop) is crop (zeropad) of dy by the same four sides.
std::vector<ValueId> emit_inverse(GradEmitter& g, const Node& fwd, ValueId dy,
                                  const std::string& op, const std::string& key) {
  const Pads p = attrs_of<PadCropAttrs>(fwd).sides;
  auto typed = std::make_shared<PadCropAttrs>();
  typed->sides = p;
  typed->channels_last = attrs_of<PadCropAttrs>(fwd).channels_last;
  AttrMap m;
  m.origin = fwd.attrs.origin;
  m.set(key, std::vector<int64_t>{p.top, p.bottom, p.left, p.right});
  if (typed->channels_last) m.set("data_format", std::string("channels_last"));
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
  op.channels_last = [](const OpAttrs&, const std::vector<TensorDesc>&) { return true; };
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
