// conv2d_transpose [x] with weight [C_in, filters / groups, R, S] and bias [filters]: PyTorch's
// ConvTranspose2d (the upsampling of U-Nets and decoders). Note [transposed convolution].
#include "ops/conv2d.h"
#include "ops/conv2d_cuda.h"
#include "ops/cpu_storage.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {

// Note [transposed convolution]
// A transposed convolution is the input gradient of the convolution it transposes: that
// convolution takes `filters` channels to C_in with the same kernel, stride, padding, dilation
// and groups, and its weight [K = C_in, filters / groups, R, S] is PyTorch's ConvTranspose2d
// weight as it is stored. So the op runs the convolution's own passes: the forward is
// conv2d_grad_input [x, w] plus the bias (CPU: conv2d_grad_input_image_cpu per image; CUDA:
// cuDNN's backward data, then kernels/' bias epilogue); its input gradient is that
// convolution's forward, a conv2d node [dy, w]; its weight gradient the convolution's weight
// gradient with x and dy in each other's roles, conv2d_grad_weight [x, dy]; its bias gradient
// conv2d_grad_bias [dy]. Output size per axis: (H - 1) stride - pads + dilation (R - 1) +
// output_padding + 1 (output_padding < stride picks among the sizes the convolution maps to
// H). NCHW only: a channels-last model converts around it.

namespace {

struct Conv2dTransposeAttrs : OpAttrs {
  Conv2dAttrs conv;  // the transposed convolution; its filters (= C_in) are set per input
  int64_t filters = 0;  // output channels
  int64_t output_padding_h = 0, output_padding_w = 0;
  bool bias = true;
  // The convolution for an input of c_in channels.
  Conv2dAttrs conv_for(int64_t c_in) const {
    Conv2dAttrs v = conv;
    v.filters = c_in;
    return v;
  }
};

OpAttrsPtr transpose_parse(AttrReader& r) {
  auto a = std::make_shared<Conv2dTransposeAttrs>();
  Conv2dAttrs& c = a->conv;
  a->filters = r.require_int("filters", 1, int64_t{1} << 24);
  if (!r.has("kernel")) r.fail("kernel", "is required");
  const auto k = r.get_ints("kernel", 2, {1, 1}, 1, 1024);
  const auto s = r.get_ints("stride", 2, {1, 1}, 1, 1024);
  c.pad = padding_parse(r, "padding", 1024, false);
  const auto d = r.get_ints("dilation", 2, {1, 1}, 1, 1024);
  const auto op = r.get_ints("output_padding", 2, {0, 0}, 0, 1024);
  c.kernel_h = k[0], c.kernel_w = k[1];
  c.stride_h = s[0], c.stride_w = s[1];
  c.dilation_h = d[0], c.dilation_w = d[1];
  c.groups = r.get_int("groups", 1, 1, int64_t{1} << 24);
  c.bias = false;
  if (a->filters % c.groups != 0)
    r.fail("groups", "filters " + std::to_string(a->filters) + " not divisible by groups " +
                         std::to_string(c.groups));
  a->output_padding_h = op[0], a->output_padding_w = op[1];
  // Below the stride, the convolution of the output gives back exactly the input's size (PyTorch
  // also takes output_padding below the dilation alone; that case is refused here).
  if (op[0] >= s[0] || op[1] >= s[1])
    r.fail("output_padding", "must be below the stride");
  a->bias = r.get_bool("bias", true);
  r.finish("conv2d_transpose");
  return a;
}

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t pads, int64_t d, int64_t op) {
  return (in - 1) * s - pads + d * (k - 1) + op + 1;
}

TensorDesc transpose_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const Conv2dTransposeAttrs&>(at);
  const DType t = require_float("conv2d_transpose", in, 1);
  const Shape& x = in.at(0).shape;
  if (x.size() != 4)
    REMAT_USER_ERROR("conv2d_transpose expects a 4-D input [N, C, H, W], got " << shape_str(x));
  if (x[1] % a.conv.groups != 0)
    REMAT_USER_ERROR("conv2d_transpose input channels " << x[1] << " not divisible by groups "
                                                        << a.conv.groups);
  const PaddingSpec& p = a.conv.pad;
  const int64_t h = out_size(x[2], a.conv.kernel_h, a.conv.stride_h, p.top + p.bottom,
                             a.conv.dilation_h, a.output_padding_h);
  const int64_t w = out_size(x[3], a.conv.kernel_w, a.conv.stride_w, p.left + p.right,
                             a.conv.dilation_w, a.output_padding_w);
  if (h < 1 || w < 1)
    REMAT_USER_ERROR("conv2d_transpose output would be empty: input " << shape_str(x)
                     << " with padding " << padding_str(p));
  return TensorDesc{{x[0], a.filters, h, w}, t};
}

std::vector<ParamSpec> transpose_params(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const Conv2dTransposeAttrs&>(at);
  const int64_t c_in = in.at(0).shape.at(1), rs = a.conv.kernel_h * a.conv.kernel_w;
  ParamSpec w;
  w.suffix = "weight";
  w.desc = TensorDesc{{c_in, a.filters / a.conv.groups, a.conv.kernel_h, a.conv.kernel_w},
                      DType::F32};
  w.init = weight_init_for(Activation::None);
  w.fan_in = a.filters / a.conv.groups * rs;  // PyTorch: weight.size(1) * receptive field
  w.fan_out = c_in * rs;
  std::vector<ParamSpec> out = {w};
  if (a.bias) out.push_back(conv_bias_spec(a.filters, w));
  return out;
}

// The convolution's input-gradient pass: 2 N H W C_in (filters / g) R S flops, one group's
// im2col buffer of the output.
OpCost transpose_cost(const OpAttrs& at, const std::vector<TensorDesc>& in, const TensorDesc& out) {
  const auto& a = static_cast<const Conv2dTransposeAttrs&>(at);
  const Shape& x = in.at(0).shape;
  const int64_t rs = a.conv.kernel_h * a.conv.kernel_w;
  OpCost c;
  c.flops = 2.0 * static_cast<double>(x[0] * x[1] * x[2] * x[3]) *
                static_cast<double>(a.filters / a.conv.groups * rs) +
            (a.bias ? static_cast<double>(out.numel()) : 0.0);
  c.bytes_moved = io_bytes(in, out);
  c.workspace_bytes = checked_product({a.filters / a.conv.groups, rs, x[2], x[3],
                                       dtype_size(DType::F32)},
                                      "conv2d_transpose im2col buffer", "workspace_bytes");
  return c;
}

void transpose_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<Conv2dTransposeAttrs>(*ctx.node);
  const Conv2dAttrs conv = a.conv_for(ctx.inputs[0].shape()[1]);
  const ConvDims d = conv_dims(conv, ctx.output.shape());  // the convolution of y into x
  const float* x = ctx.inputs[0].f32();
  const float* w = ctx.inputs[1].f32();
  float* y = ctx.output.f32();
  float* col = static_cast<float*>(ctx.workspace);
  for (int64_t n = 0; n < d.n; ++n) {
    conv2d_grad_input_image_cpu(conv, d, x + n * d.k * d.out_plane(), w, y + n * d.in_image(), col);
    if (a.bias) {
      const float* b = ctx.inputs.at(2).f32();
      const int64_t plane = d.geo.height * d.geo.width;
      for (int64_t k = 0; k < d.c; ++k)
        for (int64_t i = 0; i < plane; ++i) y[n * d.in_image() + k * plane + i] += b[k];
    }
  }
}

#ifdef REMAT_HAVE_CUDA
ConvCudaParams transpose_cuda_params(const ExecContext& ctx) {
  const auto& a = attrs_of<Conv2dTransposeAttrs>(*ctx.node);
  return conv2d_cuda_params(a.conv_for(ctx.inputs[0].shape()[1]), ctx.output.shape());
}

void transpose_cuda(const ExecContext& ctx) {
  conv2d_pass_cuda(ConvPass::BackwardData, transpose_cuda_params(ctx), ctx);
  if (!attrs_of<Conv2dTransposeAttrs>(*ctx.node).bias) return;
  const Shape& y = ctx.output.shape();
  with_storage(ctx.output.desc->dtype, [&](auto tag) {
    bias_act_forward(storage<decltype(tag)>(ctx.output), ctx.inputs.at(2).f32(), y[0], y[1],
                     y[2] * y[3], KernelActivation::None, cuda_stream(ctx));
  });
}
#endif

// The conv2d attributes of the convolution for the gradient's nodes (their own attrs: a graph
// file re-reads them), and its typed form.
AttrMap conv_attr_map(const Conv2dAttrs& c, bool bias) {
  AttrMap m;
  m.set("filters", c.filters);
  m.set("kernel", std::vector<int64_t>{c.kernel_h, c.kernel_w});
  m.set("stride", std::vector<int64_t>{c.stride_h, c.stride_w});
  m.set("padding", std::vector<int64_t>{c.pad.top, c.pad.bottom, c.pad.left, c.pad.right});
  m.set("dilation", std::vector<int64_t>{c.dilation_h, c.dilation_w});
  m.set("groups", c.groups);
  m.set("bias", bias);
  return m;
}

std::vector<ValueId> transpose_gradient(GradEmitter& g, const Node& fwd, ValueId dy) {
  const auto& a = attrs_of<Conv2dTransposeAttrs>(fwd);
  const std::vector<ValueId> in = fwd.inputs;  // copies: emit grows the graph
  std::vector<TensorDesc> descs;
  for (ValueId v : in) descs.push_back(g.graph().value(v).desc);
  const Conv2dAttrs conv = a.conv_for(descs[0].shape[1]);
  auto typed = [](Conv2dAttrs c, bool bias) {
    c.bias = bias;
    return std::make_shared<Conv2dAttrs>(c);
  };
  std::vector<ValueId> out(in.size(), kNoValue);
  out[0] = g.emit("grad_input", "conv2d", {dy, in[1]}, descs[0], conv_attr_map(conv, false),
                  typed(conv, false));
  out[1] = g.emit("grad_weight", "conv2d_grad_weight", {in[0], dy}, descs[1],
                  conv_attr_map(conv, false), typed(conv, false));
  if (a.bias) {
    Conv2dAttrs by_output = conv;
    by_output.filters = a.filters;
    out[2] = g.emit("grad_bias", "conv2d_grad_bias", {dy}, descs[2],
                    conv_attr_map(by_output, true), typed(by_output, true));
  }
  return out;
}

}  // namespace

void register_conv2d_transpose_ops(OpRegistry& r) {
  OpDef f;
  f.name = "conv2d_transpose";
  f.summary = "transposed 2-D convolution (PyTorch's ConvTranspose2d: stride, padding, "
              "output_padding, dilation, groups, bias)";
  f.parse = transpose_parse;
  f.infer = transpose_infer;
  f.params = transpose_params;
  f.cost = transpose_cost;
  f.cpu = transpose_cpu;
  f.gradient = transpose_gradient;
#ifdef REMAT_HAVE_CUDA
  f.cuda = transpose_cuda;
  f.cuda_workspace = [](const ExecContext& ctx) {
    return conv2d_pass_cuda_workspace(ConvPass::BackwardData, transpose_cuda_params(ctx), ctx);
  };
#endif
  with_bf16_per_sample(f, 1).autocast_bf16 = true;
  f.bf16_operands = {1};  // the weight; the bias is added in FP32
  f.bf16_cuda_native = true;
  r.add(std::move(f));
}

}  // namespace remat
