// conv2d's CUDA path (cuDNN), called from ops/conv2d.cpp's OpDef::cuda / cuda_workspace:
// forward (+ bias and fused relu/relu6 epilogue), backward data, backward filter, bias grad.
// See Note [conv algorithm choice] in conv2d_cuda.cpp. CUDA builds only.
#pragma once

#ifdef REMAT_HAVE_CUDA

#include <cstdint>

#include "ops/fused_activation.h"
#include "runtime/graph/op.h"

namespace remat {

// The three convolution passes: [x, w] -> y, [dy, w] -> dx, [dy, x] -> dw.
enum class ConvPass { Forward, BackwardData, BackwardFilter };

// conv2d's attributes as the CUDA path needs them (the typed attrs stay private to conv2d.cpp),
// the pads resolved for the pass's input: pad_h / pad_w above and left, pad_bottom / pad_right
// below and right. cuDNN pads symmetrically: the functions below require pad_h == pad_bottom and
// pad_w == pad_right; conv2d_pass_cuda takes any pads.
struct ConvCudaParams {
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t pad_bottom = 0, pad_right = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
  bool bias = true;
  Activation activation = Activation::None;
  bool channels_last = false;  // x, y stored NHWC (Note [channels-last convolutions])
};

struct Conv2dAttrs;
// A convolution's parameters for a pass whose convolution input is x (forward: input 0;
// grad_input: the output; grad_weight: input 1), the pads resolved for it (ops/conv2d.cpp).
ConvCudaParams conv2d_cuda_params(const Conv2dAttrs& a, const Shape& x);

// y = act(conv(x, w) + b). inputs [x, w, (b)].
void conv2d_forward_cuda(const ConvCudaParams& p, const ExecContext& ctx);
int64_t conv2d_forward_cuda_workspace(const ConvCudaParams& p, const ExecContext& ctx);
// dx from [dz, w].
void conv2d_grad_input_cuda(const ConvCudaParams& p, const ExecContext& ctx);
int64_t conv2d_grad_input_cuda_workspace(const ConvCudaParams& p, const ExecContext& ctx);
// dw from [dz, x].
void conv2d_grad_weight_cuda(const ConvCudaParams& p, const ExecContext& ctx);
int64_t conv2d_grad_weight_cuda_workspace(const ConvCudaParams& p, const ExecContext& ctx);
// Any pass with any pads (ops/conv2d_pad_cuda.cpp): the functions above when the pads are
// symmetric, else the same on an explicitly padded copy in the workspace.
void conv2d_pass_cuda(ConvPass pass, const ConvCudaParams& p, const ExecContext& ctx);
int64_t conv2d_pass_cuda_workspace(ConvPass pass, const ConvCudaParams& p, const ExecContext& ctx);
// db[k] = sum of dz over N, H, W (deterministic reduction, kernels/). inputs [dz].
void conv2d_grad_bias_cuda(const ExecContext& ctx, bool channels_last);
int64_t conv2d_grad_bias_cuda_workspace(const ExecContext& ctx, bool channels_last);

}  // namespace remat

#endif  // REMAT_HAVE_CUDA
