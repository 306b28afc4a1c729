// conv2d: 2-D convolution over NCHW input with KCRS weights (groups, depthwise, stride,
// padding — per side or TensorFlow's 'same', Note [same padding] in ops/padding.h —, dilation,
// optional bias and fused relu/relu6), and its backward ops
// conv2d_grad_input [dy, weight], conv2d_grad_weight [dy, x], conv2d_grad_bias [dy].
// CPU path: ops/conv2d_cpu.cpp (im2col + GEMM; the im2col buffer is the op's workspace).
// CUDA path: ops/conv2d_cuda.cpp (cuDNN), attached in register_conv2d_ops; per-side padding
// through ops/conv2d_pad_cuda.cpp (an explicitly padded copy in the workspace).
#include <memory>

#include "ops/conv2d.h"
#include "ops/conv2d_cuda.h"
#include "ops/cpu_storage.h"
#include "ops/registry.h"

namespace remat {

int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pads, int64_t dil) {
  int64_t span = dil * (kernel - 1) + 1;
  if (in + pads < span) return 0;
  return (in + pads - span) / stride + 1;
}

// The geometry's pad_h / pad_w are the top and left pads (im2col's offsets); the bottom and
// right ones only enter the output size.
ConvDims conv_dims(const Conv2dAttrs& a, const Shape& x) {
  const ImageDims i = image_dims(x, a.channels_last);
  ConvDims d;
  d.n = i.n, d.c = i.c, d.k = a.filters;
  d.cg = d.c / a.groups, d.kg = d.k / a.groups;
  d.channels_last = a.channels_last;
  const Pads p = a.pads(i.h, i.w);
  d.geo = ConvGeometry{d.cg,
                       i.h,
                       i.w,
                       a.kernel_h,
                       a.kernel_w,
                       p.top,
                       p.left,
                       a.stride_h,
                       a.stride_w,
                       a.dilation_h,
                       a.dilation_w,
                       conv_out_size(i.h, a.kernel_h, a.stride_h, p.top + p.bottom, a.dilation_h),
                       conv_out_size(i.w, a.kernel_w, a.stride_w, p.left + p.right, a.dilation_w)};
  return d;
}


ParamSpec conv_bias_spec(int64_t filters, const ParamSpec& weight) {
  ParamSpec b;
  b.suffix = "bias";
  b.desc = TensorDesc{{filters}, DType::F32};
  b.init = InitKind::Zeros;
  b.fan_in = weight.fan_in;
  b.fan_out = weight.fan_out;
  return b;
}

#ifdef REMAT_HAVE_CUDA
ConvCudaParams conv2d_cuda_params(const Conv2dAttrs& a, const Shape& x) {
  const ImageDims xd = image_dims(x, a.channels_last);
  const Pads pads = a.pads(xd.h, xd.w);
  ConvCudaParams p;
  p.kernel_h = a.kernel_h, p.kernel_w = a.kernel_w;
  p.stride_h = a.stride_h, p.stride_w = a.stride_w;
  p.pad_h = pads.top, p.pad_w = pads.left, p.pad_bottom = pads.bottom, p.pad_right = pads.right;
  p.dilation_h = a.dilation_h, p.dilation_w = a.dilation_w;
  p.groups = a.groups;
  p.bias = a.bias;
  p.activation = a.activation;
  p.channels_last = a.channels_last;
  return p;
}
#endif

namespace {

// The backward ops share the forward node's attrs, so all four parse the same keys.
OpAttrsPtr conv2d_parse(AttrReader& r, const std::string& op_name) {
  auto a = std::make_shared<Conv2dAttrs>();
  a->filters = r.require_int("filters", 1, int64_t{1} << 24);
  if (!r.has("kernel")) r.fail("kernel", "is required");
  auto k = r.get_ints("kernel", 2, {1, 1}, 1, 1024);
  auto s = r.get_ints("stride", 2, {1, 1}, 1, 1024);
  a->pad = padding_parse(r, "padding", 1024, true);
  auto d = r.get_ints("dilation", 2, {1, 1}, 1, 1024);
  a->kernel_h = k[0], a->kernel_w = k[1];
  a->stride_h = s[0], a->stride_w = s[1];
  a->dilation_h = d[0], a->dilation_w = d[1];
  a->groups = r.get_int("groups", 1, 1, int64_t{1} << 24);
  if (a->filters % a->groups != 0)
    r.fail("groups", "filters " + std::to_string(a->filters) + " not divisible by groups " +
                         std::to_string(a->groups));
  a->bias = r.get_bool("bias", true);
  a->activation = parse_activation(r);
  a->channels_last = read_channels_last(r);
  r.finish(op_name);
  return a;
}

TensorDesc conv2d_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const Conv2dAttrs&>(at);
  const DType t = require_float("conv2d", in, 1);
  const Shape& x = in.at(0).shape;
  if (x.size() != 4)
    REMAT_USER_ERROR("conv2d expects a 4-D input [N, C, H, W], got " << shape_str(x));
  for (int64_t v : x)
    if (v < 1) REMAT_USER_ERROR("conv2d input has an empty dimension: " << shape_str(x));
  ConvDims d = conv_dims(a, x);
  if (d.c % a.groups != 0)
    REMAT_USER_ERROR("conv2d input channels " << d.c << " not divisible by groups " << a.groups);
  if (d.geo.out_h < 1 || d.geo.out_w < 1)
    REMAT_USER_ERROR("conv2d output would be empty: input " << shape_str(x) << " with kernel "
                     << a.kernel_h << "x" << a.kernel_w << ", dilation " << a.dilation_h << "x"
                     << a.dilation_w << ", padding " << padding_str(a.pad));
  return TensorDesc{ImageDims{d.n, d.k, d.geo.out_h, d.geo.out_w, a.channels_last}.shape(), t};
}

std::vector<ParamSpec> conv2d_params(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const Conv2dAttrs&>(at);
  int64_t c = image_dims(in.at(0).shape, a.channels_last).c, rs = a.kernel_h * a.kernel_w;
  std::vector<ParamSpec> out;
  ParamSpec w;
  w.suffix = "weight";
  w.desc = TensorDesc{{a.filters, c / a.groups, a.kernel_h, a.kernel_w}, DType::F32};
  w.init = weight_init_for(a.activation);
  w.fan_in = c / a.groups * rs;
  w.fan_out = a.filters * rs;  // PyTorch's convention: size(0) * receptive field
  out.push_back(w);
  if (a.bias) out.push_back(conv_bias_spec(a.filters, w));
  return out;
}

// Forward, grad_input and grad_weight each do 2 * N * K * Ho * Wo * (C/g) * R * S flops and
// (unless pointwise) need one group's im2col buffer.
OpCost conv_cost(const Conv2dAttrs& a, const Shape& x, const Shape& y,
                 const std::vector<TensorDesc>& in, const TensorDesc& out) {
  const ImageDims xd = image_dims(x, a.channels_last), yd = image_dims(y, a.channels_last);
  int64_t cg = xd.c / a.groups;
  OpCost c;
  c.flops = 2.0 * static_cast<double>(yd.n * yd.c * yd.h * yd.w) *
            static_cast<double>(cg * a.kernel_h * a.kernel_w);
  c.bytes_moved = io_bytes(in, out);
  if (!a.pointwise())
    c.workspace_bytes = checked_product({cg, a.kernel_h, a.kernel_w, yd.h, yd.w,
                                         dtype_size(DType::F32)},
                                        "conv2d im2col buffer", "workspace_bytes");
  if (a.channels_last) {  // conv2d_cpu_nhwc.cpp: one image of x and of y in FP32 after it
    const int64_t x_image = checked_product({xd.c, xd.h, xd.w, 4}, "conv2d image", "workspace");
    const int64_t y_image = checked_product({yd.c, yd.h, yd.w, 4}, "conv2d image", "workspace");
    c.workspace_bytes =
        alloc_bytes(c.workspace_bytes) + alloc_bytes(x_image) + alloc_bytes(y_image);
  }
  return c;
}

OpCost conv2d_cost(const OpAttrs& at, const std::vector<TensorDesc>& in, const TensorDesc& out) {
  const auto& a = static_cast<const Conv2dAttrs&>(at);
  OpCost c = conv_cost(a, in.at(0).shape, out.shape, in, out);
  double extra = (a.bias ? 1.0 : 0.0) + (a.activation != Activation::None ? 1.0 : 0.0);
  c.flops += extra * static_cast<double>(out.numel());
  return c;
}

// conv_cost's im2col buffer, and for bf16 data one image's group of dz and of x in FP32.
int64_t conv2d_grad_weight_workspace(const Conv2dAttrs& a, const std::vector<TensorDesc>& in,
                                     int64_t im2col_bytes) {
  // Channels-last: conv_cost's figure already holds one image of dz and of x in FP32.
  if (in.at(0).dtype != DType::BF16 || a.channels_last) return im2col_bytes;
  const Shape& dz = in[0].shape;
  const Shape& x = in.at(1).shape;
  const int64_t kg = dz[1] / a.groups, cg = x[1] / a.groups;
  return alloc_bytes(im2col_bytes) + alloc_bytes(checked_product({kg, dz[2], dz[3], 4}, "", "ws")) +
         alloc_bytes(checked_product({cg, x[2], x[3], 4}, "", "ws"));
}

std::vector<ValueId> conv2d_gradient(GradEmitter& g, const Node& fwd, ValueId dy) {
  // Copies first: emit() grows the graph, which may move `fwd` and the value table.
  const OpAttrsPtr typed = fwd.typed;
  const auto& a = static_cast<const Conv2dAttrs&>(*typed);
  const std::vector<ValueId> in = fwd.inputs;
  std::vector<TensorDesc> descs;
  for (ValueId v : in) descs.push_back(g.graph().value(v).desc);
  ValueId dz = emit_activation_grad(g, fwd, dy, a.activation);
  std::vector<ValueId> out(in.size(), kNoValue);
  out[0] = g.emit("grad_input", "conv2d_grad_input", {dz, in[1]}, descs[0]);
  out[1] = g.emit("grad_weight", "conv2d_grad_weight", {dz, in[0]}, descs[1]);
  if (a.bias) out[2] = g.emit("grad_bias", "conv2d_grad_bias", {dz}, descs[2]);
  return out;
}

// Backward shape inference. grad_input's x shape is the smallest that gives dy's size (with
// stride > 1 several input sizes do); emitted nodes carry the exact shape.
TensorDesc grad_input_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const Conv2dAttrs&>(at);
  const Shape& w = in.at(1).shape;
  REMAT_CHECK(in.at(0).shape.size() == 4 && w.size() == 4,
              "conv2d_grad_input expects 4-D dy and weight");
  const ImageDims dy = image_dims(in[0].shape, a.channels_last);
  const DType t = require_float("conv2d_grad_input", in, 1);
  // 'same': the smallest input with ceil(in / stride) = dy's size.
  const PaddingSpec& p = a.pad;
  int64_t h = (dy.h - 1) * a.stride_h + 1, wd = (dy.w - 1) * a.stride_w + 1;
  if (!p.same) {
    h = (dy.h - 1) * a.stride_h - p.top - p.bottom + a.dilation_h * (a.kernel_h - 1) + 1;
    wd = (dy.w - 1) * a.stride_w - p.left - p.right + a.dilation_w * (a.kernel_w - 1) + 1;
  }
  return TensorDesc{ImageDims{dy.n, w[1] * a.groups, h, wd, a.channels_last}.shape(), t};
}

TensorDesc grad_weight_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const Conv2dAttrs&>(at);
  const Shape& x = in.at(1).shape;
  REMAT_CHECK(x.size() == 4, "conv2d_grad_weight expects a 4-D x");
  require_float("conv2d_grad_weight", in);  // dy and x; the gradient is the F32 parameter's
  return TensorDesc{{a.filters, image_dims(x, a.channels_last).c / a.groups, a.kernel_h,
                     a.kernel_w},
                    DType::F32};
}

OpDef conv2d_backward_op(const std::string& name, const std::string& summary) {
  OpDef op;
  op.name = name;
  op.summary = summary;
  op.user_visible = false;
  op.parse = [name](AttrReader& r) { return conv2d_parse(r, name); };
  return op;
}

#ifdef REMAT_HAVE_CUDA
// Attaches a conv pass's CUDA kernel and its workspace query (which chooses the algorithm); x
// is the pass's convolution input (ConvPass in conv2d_pad_cuda.h).
void set_cuda(OpDef& op, ConvPass pass) {
  auto x_of = [pass](const ExecContext& ctx) -> const Shape& {
    return pass == ConvPass::Forward        ? ctx.inputs.at(0).shape()
           : pass == ConvPass::BackwardData ? ctx.output.shape()
                                            : ctx.inputs.at(1).shape();
  };
  op.cuda = [pass, x_of](const ExecContext& ctx) {
    conv2d_pass_cuda(pass, conv2d_cuda_params(attrs_of<Conv2dAttrs>(*ctx.node), x_of(ctx)), ctx);
  };
  op.cuda_workspace = [pass, x_of](const ExecContext& ctx) {
    return conv2d_pass_cuda_workspace(pass, conv2d_cuda_params(attrs_of<Conv2dAttrs>(*ctx.node), x_of(ctx)),
                                      ctx);
  };
}
#endif

}  // namespace

void register_conv2d_ops(OpRegistry& r) {
  OpDef f;
  f.name = "conv2d";
  f.summary = "2-D convolution (groups, stride, padding, dilation, bias, fused relu/relu6)";
  f.parse = [](AttrReader& rd) { return conv2d_parse(rd, "conv2d"); };
  f.infer = conv2d_infer;
  f.params = conv2d_params;
  f.cost = conv2d_cost;
  f.cpu = conv2d_cpu;
  f.gradient = conv2d_gradient;
  f.channels_last = [](const OpAttrs&, const std::vector<TensorDesc>& in) {
    return in.at(0).shape.size() == 4;
  };
#ifdef REMAT_HAVE_CUDA
  set_cuda(f, ConvPass::Forward);
#endif
  with_bf16_per_sample(f, 1).autocast_bf16 = true;
  f.bf16_operands = {1};  // the weight; the bias is added in FP32
  f.bf16_cuda_native = true;  // Note [bf16 convolutions] in conv2d_cuda.cpp
  r.add(std::move(f));

  OpDef gi = conv2d_backward_op("conv2d_grad_input", "conv2d input gradient [dy, weight]");
  gi.min_inputs = gi.max_inputs = 2;
  gi.infer = grad_input_infer;
  gi.cost = [](const OpAttrs& at, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return conv_cost(static_cast<const Conv2dAttrs&>(at), out.shape, in.at(0).shape, in, out);
  };
  gi.cpu = conv2d_grad_input_cpu;
#ifdef REMAT_HAVE_CUDA
  set_cuda(gi, ConvPass::BackwardData);
#endif
  with_bf16_per_sample(gi, 1).bf16_operands = {1};  // the weight
  gi.bf16_cuda_native = true;
  r.add(std::move(gi));

  OpDef gw = conv2d_backward_op("conv2d_grad_weight", "conv2d weight gradient [dy, x]");
  gw.min_inputs = gw.max_inputs = 2;
  gw.infer = grad_weight_infer;
  gw.cost = [](const OpAttrs& at, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    const auto& a = static_cast<const Conv2dAttrs&>(at);
    OpCost c = conv_cost(a, in.at(1).shape, in.at(0).shape, in, out);
    c.workspace_bytes = conv2d_grad_weight_workspace(a, in, c.workspace_bytes);
    return c;
  };
  gw.cpu = conv2d_grad_weight_cpu;
#ifdef REMAT_HAVE_CUDA
  set_cuda(gw, ConvPass::BackwardFilter);
#endif
  with_bf16(gw).bf16_rounds_output = true;
  gw.bf16_cpu_native = gw.bf16_cuda_native = true;
  r.add(std::move(gw));

  OpDef gb = conv2d_backward_op("conv2d_grad_bias", "conv2d bias gradient [dy]");
  gb.infer = [](const OpAttrs& at, const std::vector<TensorDesc>&) {
    return TensorDesc{{static_cast<const Conv2dAttrs&>(at).filters}, DType::F32};
  };
  gb.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, static_cast<double>(in.at(0).numel()) / out.numel());
  };
  gb.cpu = conv2d_grad_bias_cpu;
#ifdef REMAT_HAVE_CUDA
  gb.cuda = [](const ExecContext& ctx) {
    conv2d_grad_bias_cuda(ctx, attrs_of<Conv2dAttrs>(*ctx.node).channels_last);
  };
  gb.cuda_workspace = [](const ExecContext& ctx) {
    return conv2d_grad_bias_cuda_workspace(ctx, attrs_of<Conv2dAttrs>(*ctx.node).channels_last);
  };
#endif
  with_bf16(gb).bf16_cpu_native = gb.bf16_cuda_native = true;
  r.add(std::move(gb));
}

}  // namespace remat
