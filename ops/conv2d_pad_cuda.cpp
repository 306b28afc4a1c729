// conv2d with per-side padding on the GPU. cuDNN's convolutions pad symmetrically, so when the
// top and bottom (or left and right) pads differ — TensorFlow's 'same' at stride 2 on an even
// input pads (0, 1) — the pass runs on an explicitly padded copy (Note [padded convolution]).
#include <cstdint>

#include "kernels/kernels.h"
#include "ops/conv2d_cuda.h"
#include "ops/cpu_storage.h"
#include "ops/data_format.h"
#include "ops/op_cuda.h"

namespace remat {
namespace {

// Note [padded convolution]
// With pads (top, bottom, left, right) not symmetric, x is padded into the workspace as
// x_pad [N, C, H + top + bottom, W + left + right] (kernels/ window_copy: zeros around an exact
// copy) and cuDNN convolves x_pad without padding, which is the same sum of the same products.
// Forward and weight gradient read x_pad; the data gradient writes dx_pad into the workspace and
// crops it into dx (the padded border's gradient is dropped). Workspace layout:
// [x_pad or dx_pad, 256-byte aligned][the unpadded pass's own workspace]. The copy is one input
// (or input gradient) of extra memory while the node runs: it is part of the node's workspace,
// so the plan counts it. Channels-last tensors (ConvCudaParams::channels_last) are padded
// the same way as [N, H, W, C]: window_copy over planes of H rows of W C values, the column
// offset times C.

bool symmetric(const ConvCudaParams& p) { return p.pad_h == p.pad_bottom && p.pad_w == p.pad_right; }

ConvCudaParams without_padding(ConvCudaParams p) {
  p.pad_h = p.pad_w = p.pad_bottom = p.pad_right = 0;
  return p;
}

// The padded descriptor of x [N, C, H, W] and its bytes in the workspace.
struct PaddedX {
  TensorDesc desc;
  int64_t bytes = 0;
};

PaddedX padded_of(const ConvCudaParams& p, const TensorDesc& x) {
  const ImageDims d = image_dims(x.shape, p.channels_last);
  PaddedX out;
  out.desc = TensorDesc{ImageDims{d.n, d.c, d.h + p.pad_h + p.pad_bottom,
                                  d.w + p.pad_w + p.pad_right, p.channels_last}
                            .shape(),
                        x.dtype};
  out.bytes = (out.desc.bytes() + 255) / 256 * 256;
  return out;
}

// The convolution input of `pass`: x for the forward and filter passes, dx for the data pass.
TensorView& x_slot(ConvPass pass, ExecContext& c) {
  switch (pass) {
    case ConvPass::Forward: return c.inputs.at(0);
    case ConvPass::BackwardData: return c.output;
    case ConvPass::BackwardFilter: return c.inputs.at(1);
  }
  REMAT_FAIL("bad conv pass");
}

void run_unpadded(ConvPass pass, const ConvCudaParams& p, const ExecContext& ctx) {
  switch (pass) {
    case ConvPass::Forward: return conv2d_forward_cuda(p, ctx);
    case ConvPass::BackwardData: return conv2d_grad_input_cuda(p, ctx);
    case ConvPass::BackwardFilter: return conv2d_grad_weight_cuda(p, ctx);
  }
}

int64_t workspace_unpadded(ConvPass pass, const ConvCudaParams& p, const ExecContext& ctx) {
  switch (pass) {
    case ConvPass::Forward: return conv2d_forward_cuda_workspace(p, ctx);
    case ConvPass::BackwardData: return conv2d_grad_input_cuda_workspace(p, ctx);
    case ConvPass::BackwardFilter: return conv2d_grad_weight_cuda_workspace(p, ctx);
  }
  REMAT_FAIL("bad conv pass");
}

// out (planes, Ho, Wo)[h, w] = in (planes, H, W)[h + dh, w + dw], 0 outside; channels-last:
// planes of H rows of W C values.
void copy_window(const TensorView& out, const TensorView& in, int64_t dh, int64_t dw,
                 bool channels_last, cudaStream_t stream) {
  const ImageDims i = image_dims(in.shape(), channels_last);
  const ImageDims o = image_dims(out.shape(), channels_last);
  const int64_t k = i.pixel_stride();  // values per pixel in a row
  with_storage(in.desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    window_copy(storage<T>(out), storage<T>(in), i.n * i.c / k, i.h, i.w * k, o.h, o.w * k, dh,
                dw * k, stream);
  });
}

}  // namespace

int64_t conv2d_pass_cuda_workspace(ConvPass pass, const ConvCudaParams& p,
                                   const ExecContext& ctx) {
  if (symmetric(p)) return workspace_unpadded(pass, p, ctx);
  ExecContext c = ctx;
  TensorView& x = x_slot(pass, c);
  const PaddedX padded = padded_of(p, *x.desc);
  x = TensorView{&padded.desc, nullptr};  // sizing only: no data
  c.workspace = nullptr;
  return padded.bytes + workspace_unpadded(pass, without_padding(p), c);
}

void conv2d_pass_cuda(ConvPass pass, const ConvCudaParams& p, const ExecContext& ctx) {
  if (symmetric(p)) return run_unpadded(pass, p, ctx);
  const int64_t need = conv2d_pass_cuda_workspace(pass, p, ctx);
  REMAT_CHECK(ctx.workspace != nullptr && ctx.workspace_bytes >= need,
              "node '" << (ctx.node ? ctx.node->name : std::string("?")) << "' needs " << need
                       << " workspace bytes for its padded input, got " << ctx.workspace_bytes);
  const cudaStream_t stream = cuda_stream(ctx);
  ExecContext c = ctx;
  TensorView& x = x_slot(pass, c);
  const TensorView original = x;
  const PaddedX padded = padded_of(p, *original.desc);
  x = TensorView{&padded.desc, ctx.workspace};
  c.workspace = static_cast<char*>(ctx.workspace) + padded.bytes;
  c.workspace_bytes = ctx.workspace_bytes - padded.bytes;
  if (pass != ConvPass::BackwardData)
    copy_window(x, original, -p.pad_h, -p.pad_w, p.channels_last, stream);
  run_unpadded(pass, without_padding(p), c);
  if (pass == ConvPass::BackwardData)
    copy_window(original, x, p.pad_h, p.pad_w, p.channels_last, stream);
}

}  // namespace remat
