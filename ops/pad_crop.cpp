// zeropad and crop: Keras's ZeroPadding2D and Cropping2D on [N, C, H, W]. zeropad adds rows and
// columns of zeros ([top, bottom, left, right]); crop removes them. Each is the other's
// gradient (a crop of dy, a zero-padding of dy), so no hidden backward op exists. Both are one
// window copy, out[p, h, w] = in[p, h + dh, w + dw] (0 outside in), on the CPU and the GPU
// (kernels/pad.cu), in F32 and natively in bf16: values move unchanged, so every path is exact.
// Channels-last [N, H, W, C] (data_format, Note [channels-last layout] in
// models/channels_last.cpp) is the same copy over planes of H rows of W C values, each pixel's C
// values moving together: column offsets and widths times C. zeropad's `padding: same` pads per
// input size, for the window given by `kernel` and `stride` (Note [same padding] in padding.h):
// every path resolves it from the input's shape, and the gradient crops the resolved sides.
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

// Rows and columns added (zeropad) or removed (crop) on each side: fixed, or zeropad's 'same'
// for a kh x kw window at stride (sh, sw), resolved per input.
struct PadCropAttrs : OpAttrs {
  PaddingSpec pad;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1;  // 'same' only
  bool channels_last = false;
  // The sides for an input of H x W.
  Pads sides(int64_t h, int64_t w) const { return padding_resolve(pad, h, w, kh, kw, sh, sw); }
  Pads sides_of(const Shape& x) const {
    const ImageDims d = image_dims(x, channels_last);
    return sides(d.h, d.w);
  }
};

// zeropad reads `padding`, crop `cropping`: an int, [h, w] or [top, bottom, left, right];
// zeropad also 'valid' (none) or 'same' with `kernel` (required) and `stride` (default 1).
OpAttrsPtr pad_crop_parse(AttrReader& r, const std::string& op_name, const std::string& key,
                          bool allow_words) {
  auto a = std::make_shared<PadCropAttrs>();
  if (!r.has(key)) r.fail(key, "is required");
  a->pad = padding_parse(r, key, kMaxPad, allow_words);
  if (a->pad.same) {
    if (!r.has("kernel"))
      r.fail("kernel", "is required with padding: same (the window it pads for)");
    const std::vector<int64_t> k = r.get_ints("kernel", 2, {}, 1, kMaxPad);
    const std::vector<int64_t> s = r.get_ints("stride", 2, {1, 1}, 1, kMaxPad);
    a->kh = k[0], a->kw = k[1], a->sh = s[0], a->sw = s[1];
  } else if (allow_words) {
    for (const char* k : {"kernel", "stride"})
      if (r.has(k)) r.fail(k, "applies only with padding: same (the window it pads for)");
  }
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
  const TensorDesc& x = in.at(0);
  check_nchw(x, "zeropad");
  const ImageDims d = image_dims(x.shape, a.channels_last);
  const Pads p = a.sides(d.h, d.w);
  return checked_desc(
      ImageDims{d.n, d.c, d.h + p.top + p.bottom, d.w + p.left + p.right, a.channels_last}.shape(),
      x.dtype, "zeropad output");
}

TensorDesc crop_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const PadCropAttrs&>(at);
  const TensorDesc& x = in.at(0);
  check_nchw(x, "crop");
  const ImageDims d = image_dims(x.shape, a.channels_last);
  const Pads p = a.sides(d.h, d.w);
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
  const Offsets o = offsets(attrs_of<PadCropAttrs>(*ctx.node).sides_of(ctx.inputs[0].shape()));
  with_storage(ctx.inputs[0].desc->dtype,
               [&](auto tag) { window_copy_cpu_t<decltype(tag)>(ctx, o); });
}

#ifdef REMAT_HAVE_CUDA
template <Offsets (*offsets)(const Pads&)>
void window_copy_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<PadCropAttrs>(*ctx.node);
  const TensorView& x = ctx.inputs[0];
  const Window w = window_of(a, x.shape(), ctx.output.shape(), offsets(a.sides_of(x.shape())));
  with_storage(x.desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    window_copy(storage<T>(ctx.output), storage<T>(x), w.planes, w.H, w.W, w.Ho, w.Wo, w.o.dh,
                w.o.dw, cuda_stream(ctx));
  });
}
#endif

// The gradient of zeropad (crop) is crop (zeropad) of dy by the same four sides, those the
// forward resolved for its input.
std::vector<ValueId> emit_inverse(GradEmitter& g, const Node& fwd, ValueId dy,
                                  const std::string& op, const std::string& key) {
  const auto& a = attrs_of<PadCropAttrs>(fwd);
  const TensorDesc x = g.graph().value(fwd.inputs.at(0)).desc;
  const Pads p = a.sides_of(x.shape);
  auto typed = std::make_shared<PadCropAttrs>();
  typed->pad = PaddingSpec{false, p.top, p.bottom, p.left, p.right};
  typed->channels_last = a.channels_last;
  AttrMap m;
  m.origin = fwd.attrs.origin;
  m.set(key, std::vector<int64_t>{p.top, p.bottom, p.left, p.right});
  if (typed->channels_last) m.set("data_format", std::string("channels_last"));
  return {g.emit("grad", op, {dy}, x, m, typed)};
}

template <Offsets (*offsets)(const Pads&)>
OpDef pad_crop_op(const std::string& name, const std::string& summary, const std::string& key,
                  bool allow_words) {
  OpDef op;
  op.name = name;
  op.summary = summary;
  op.parse = [name, key, allow_words](AttrReader& rd) {
    return pad_crop_parse(rd, name, key, allow_words);
  };
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
      "zeropad",
      "zero rows / columns around [N, C, H, W] (padding: [top, bottom, left, right], or same "
      "with the kernel and stride of the window that follows)",
      "padding", true);
  pad.infer = zeropad_infer;
  pad.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) {
    return emit_inverse(g, fwd, dy, "crop", "cropping");
  };
  r.add(std::move(pad));

  OpDef crop = pad_crop_op<crop_offsets>(
      "crop", "remove rows / columns of [N, C, H, W] (cropping: [top, bottom, left, right])",
      "cropping", false);
  crop.infer = crop_infer;
  crop.gradient = [](GradEmitter& g, const Node& fwd, ValueId dy) {
    return emit_inverse(g, fwd, dy, "zeropad", "padding");
  };
  r.add(std::move(crop));
}

}  // namespace remat
