// conv2d on the GPU through cuDNN's legacy convolution API (F32 or BF16 data with FP32
// compute, groups, dilation) on NCHW tensors, or on NHWC copies staged in the workspace where
// that is faster (Note [staged NHWC convolutions]), or, for 1 x 1 convolutions, as cuBLAS GEMMs
// (Note [1x1 convolutions as GEMMs]); the plans (descriptors, layout, chunk, algorithm) come
// from ops/conv2d_cuda_plan.cpp. Bias and fused relu/relu6 as one kernels/
// epilogue; bias gradient by a kernels/ reduction. bf16: Note [bf16 convolutions].
#include "ops/conv2d_cuda.h"

#include "kernels/kernels.h"
#include "ops/conv2d_cuda_plan.h"
#include "ops/cpu_storage.h"
#include "ops/cudnn_util.h"
#include "ops/data_format.h"

namespace remat {
namespace {

// The node's workspace, checked to hold the plan's (ConvPlan's pieces).
char* workspace_of(const ConvPlan& plan, const ExecContext& ctx) {
  const int64_t need = plan.total_workspace();
  if (need == 0) return nullptr;
  REMAT_CHECK(ctx.workspace != nullptr && ctx.workspace_bytes >= need,
              "node '" << (ctx.node ? ctx.node->name : std::string("?")) << "' needs " << need
                       << " workspace bytes, got " << ctx.workspace_bytes);
  return static_cast<char*>(ctx.workspace);
}

// cuDNN's part of the workspace (after the weight copy and the staged tensors).
void* cudnn_workspace(const ConvPlan& plan, const ExecContext& ctx) {
  return plan.workspace == 0 ? nullptr : workspace_of(plan, ctx) + plan.cudnn_at();
}

// The weight as cuDNN reads it: the F32 master (NCHW, F32), its bf16 rounding (NCHW, bf16), or
// its KRSC transpose in the data's dtype (NHWC), the latter two in the workspace.
const void* weight_for(const ConvPlan& plan, const ExecContext& ctx, cudaStream_t stream) {
  const TensorView& w = ctx.inputs.at(1);
  if (!plan.nhwc && plan.dtype != DType::BF16) return w.data;
  void* copy = workspace_of(plan, ctx);
  if (!plan.nhwc) {
    bf16_narrow(static_cast<uint16_t*>(copy), w.f32(), w.numel(), stream);
    return copy;
  }
  const Shape& s = w.shape();  // [K, C/g, R, S] -> [K, R, S, C/g]
  if (plan.dtype == DType::BF16)
    transpose_batched_narrow(static_cast<uint16_t*>(copy), w.f32(), s[0], s[1], s[2] * s[3], stream);
  else
    transpose_batched(static_cast<float*>(copy), w.f32(), s[0], s[1], s[2] * s[3], false, stream);
  return copy;
}

// Byte offset of chunk k of a tensor with `per_sample` elements per sample.
inline int64_t chunk_offset(const ConvPlan& plan, int64_t k, int64_t per_sample) {
  return k * plan.chunk * per_sample * dtype_size(plan.dtype);
}

inline const void* at(const void* p, int64_t bytes) { return static_cast<const char*>(p) + bytes; }
inline void* at(void* p, int64_t bytes) { return static_cast<char*>(p) + bytes; }

// Calls of plan.chunk samples for the batch of inputs[0] (x or dy).
int64_t chunks_of(const ConvPlan& plan, const ExecContext& ctx) {
  return ctx.inputs.at(0).shape()[0] / plan.chunk;
}

// One chunk of plan.chunk samples [rows, cols] each, transposed to [cols, rows] (Note [staged
// NHWC convolutions]): NCHW to NHWC is rows = c, cols = hw; back, rows = hw, cols = c.
void transpose_chunk(void* dst, const void* src, const ConvPlan& plan, int64_t rows,
                     int64_t cols, cudaStream_t stream) {
  if (plan.dtype == DType::BF16)
    transpose_batched(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), plan.chunk,
                      rows, cols, stream);
  else
    transpose_batched(static_cast<float*>(dst), static_cast<const float*>(src), plan.chunk, rows,
                      cols, false, stream);
}

// A staged pass's transposes (Note [staged NHWC convolutions]): each sample of a tensor is a
// [rows, cols] matrix in the tensor's layout, transposed into the call's layout ([cols, rows])
// and back. NCHW tensors staged NHWC: rows = C, cols = H W; channels-last tensors staged NCHW
// (Note [channels-last convolutions]): rows = H W, cols = C.
struct Staging {
  int64_t rows, cols;
};
Staging staging(const Shape& s, bool channels_last) {
  const ImageDims d = image_dims(s, channels_last);
  return channels_last ? Staging{d.plane(), d.c} : Staging{d.c, d.plane()};
}

// A 4-D tensor as the kernels/ channel loops see it, [rows, c, plane]: NCHW is [N, C, H * W],
// NHWC [N * H * W, C, 1].
struct RowsChannelsPlane {
  int64_t rows, c, plane;
};
RowsChannelsPlane rows_channels_plane(const Shape& s, bool channels_last) {
  if (channels_last) return {s[0] * s[1] * s[2], s[3], 1};
  return {s[0], s[1], s[2] * s[3]};
}

}  // namespace

void conv2d_forward_cuda(const ConvCudaParams& p, const ExecContext& ctx) {
  CudaContext& cc = cuda_context(ctx);
  ConvPlan& plan = ready_plan(ConvPass::Forward, p, ctx);
  const float one = 1.0f, zero = 0.0f;
  const void* x = ctx.inputs[0].data;  // [N, C, H, W]
  void* y = ctx.output.data;           // [N, K, Ho, Wo]
  const void* w = weight_for(plan, ctx, cc.stream);
  const Staging xs = staging(ctx.inputs[0].shape(), p.channels_last),
                ys = staging(ctx.output.shape(), p.channels_last);
  if (plan.gemm) {  // Note [1x1 convolutions as GEMMs]
    conv_gemm_run(ConvPass::Forward, conv_tensors(ConvPass::Forward, ctx), p.channels_last, x, w, y,
                  cc);
  } else {
    for (int64_t k = 0, n = chunks_of(plan, ctx); k < n; ++k) {
      const void* xk = at(x, chunk_offset(plan, k, plan.x_per_sample));
      void* yk = at(y, chunk_offset(plan, k, plan.y_per_sample));
      const void* xin = xk;
      void* yout = yk;
      if (plan.staged) {
        char* ws = workspace_of(plan, ctx);
        transpose_chunk(ws + plan.stage_x_at(), xk, plan, xs.rows, xs.cols, cc.stream);
        xin = ws + plan.stage_x_at();
        yout = ws + plan.stage_y_at();
      }
      REMAT_CUDNN_CHECK(cudnnConvolutionForward(
          cc.cudnn, &one, plan.x.get(), xin, plan.w.get(), w, plan.conv.get(),
          static_cast<cudnnConvolutionFwdAlgo_t>(plan.algo), cudnn_workspace(plan, ctx),
          static_cast<size_t>(plan.workspace), &zero, plan.y.get(), yout));
      if (plan.staged) transpose_chunk(yk, yout, plan, ys.cols, ys.rows, cc.stream);
    }
  }
  if (p.bias || p.activation != Activation::None) {
    const RowsChannelsPlane r = rows_channels_plane(ctx.output.shape(), p.channels_last);
    const float* bias = p.bias ? ctx.inputs.at(2).f32() : nullptr;
    with_storage(plan.dtype, [&](auto tag) {
      bias_act_forward(storage<decltype(tag)>(ctx.output), bias, r.rows, r.c, r.plane,
                       kernel_activation(p.activation), cc.stream);
    });
  }
}

int64_t conv2d_forward_cuda_workspace(const ConvCudaParams& p, const ExecContext& ctx) {
  return ready_plan(ConvPass::Forward, p, ctx).total_workspace();
}

// dx [N, C, H, W] from dy [N, K, Ho, Wo] (inputs[0]) and w (inputs[1]); plan.x is dx's chunk.
void conv2d_grad_input_cuda(const ConvCudaParams& p, const ExecContext& ctx) {
  CudaContext& cc = cuda_context(ctx);
  ConvPlan& plan = ready_plan(ConvPass::BackwardData, p, ctx);
  const float one = 1.0f, zero = 0.0f;
  const void* dy = ctx.inputs[0].data;
  void* dx = ctx.output.data;
  const void* w = weight_for(plan, ctx, cc.stream);
  const Staging ys = staging(ctx.inputs[0].shape(), p.channels_last),
                xs = staging(ctx.output.shape(), p.channels_last);
  if (plan.gemm) {  // Note [1x1 convolutions as GEMMs]
    conv_gemm_run(ConvPass::BackwardData, conv_tensors(ConvPass::BackwardData, ctx),
                  p.channels_last, dy, w, dx, cc);
    return;
  }
  for (int64_t k = 0, n = chunks_of(plan, ctx); k < n; ++k) {
    const void* dyk = at(dy, chunk_offset(plan, k, plan.y_per_sample));
    void* dxk = at(dx, chunk_offset(plan, k, plan.x_per_sample));
    const void* din = dyk;
    void* dout = dxk;
    if (plan.staged) {
      char* ws = workspace_of(plan, ctx);
      transpose_chunk(ws + plan.stage_y_at(), dyk, plan, ys.rows, ys.cols, cc.stream);
      din = ws + plan.stage_y_at();
      dout = ws + plan.stage_x_at();
    }
    REMAT_CUDNN_CHECK(cudnnConvolutionBackwardData(
        cc.cudnn, &one, plan.w.get(), w, plan.y.get(), din, plan.conv.get(),
        static_cast<cudnnConvolutionBwdDataAlgo_t>(plan.algo), cudnn_workspace(plan, ctx),
        static_cast<size_t>(plan.workspace), &zero, plan.x.get(), dout));
    if (plan.staged) transpose_chunk(dxk, dout, plan, xs.cols, xs.rows, cc.stream);
  }
}

int64_t conv2d_grad_input_cuda_workspace(const ConvCudaParams& p, const ExecContext& ctx) {
  return ready_plan(ConvPass::BackwardData, p, ctx).total_workspace();
}

// dw [K, C/g, R, S] from dy (inputs[0]) and x (inputs[1]); chunks accumulate in order. bf16:
// into the workspace, then widened (Note [bf16 convolutions]). Staged NHWC: the gradient comes
// out KRSC in the workspace and is transposed into dw (Note [staged NHWC convolutions]).
void conv2d_grad_weight_cuda(const ConvCudaParams& p, const ExecContext& ctx) {
  CudaContext& cc = cuda_context(ctx);
  ConvPlan& plan = ready_plan(ConvPass::BackwardFilter, p, ctx);
  const float one = 1.0f, zero = 0.0f;
  const void* dy = ctx.inputs[0].data;
  const void* x = ctx.inputs[1].data;
  float* dw = ctx.output.f32();
  const bool bf16 = plan.dtype == DType::BF16;
  const int64_t n = ctx.inputs[1].shape()[0] / plan.chunk, count = ctx.output.numel();
  if (n == 0) {
    fill(dw, 0.0f, count, cc.stream);
    return;
  }
  if (plan.gemm) {  // Note [1x1 convolutions as GEMMs]
    conv_gemm_run(ConvPass::BackwardFilter, conv_tensors(ConvPass::BackwardFilter, ctx),
                  p.channels_last, dy, x, dw, cc);
    return;
  }
  const Staging xs = staging(ctx.inputs[1].shape(), p.channels_last),
                ys = staging(ctx.inputs[0].shape(), p.channels_last);
  const Shape& ws_shape = ctx.output.shape();  // [K, C/g, R, S]
  const int64_t kf = ws_shape[0], cg = ws_shape[1], rs = ws_shape[2] * ws_shape[3];
  char* ws = workspace_of(plan, ctx);
  void* out = bf16 || plan.nhwc ? static_cast<void*>(ws) : static_cast<void*>(dw);
  for (int64_t k = 0; k < n; ++k) {
    const void* xk = at(x, chunk_offset(plan, k, plan.x_per_sample));
    const void* dyk = at(dy, chunk_offset(plan, k, plan.y_per_sample));
    if (plan.staged) {
      transpose_chunk(ws + plan.stage_x_at(), xk, plan, xs.rows, xs.cols, cc.stream);
      transpose_chunk(ws + plan.stage_y_at(), dyk, plan, ys.rows, ys.cols, cc.stream);
      xk = ws + plan.stage_x_at();
      dyk = ws + plan.stage_y_at();
    }
    // bf16 chunks each start from zero and are added in FP32 below; FP32 chunks accumulate.
    REMAT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
        cc.cudnn, &one, plan.x.get(), xk, plan.y.get(), dyk, plan.conv.get(),
        static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan.algo), cudnn_workspace(plan, ctx),
        static_cast<size_t>(plan.workspace), k == 0 || bf16 ? &zero : &one, plan.w.get(), out));
    if (!bf16) continue;
    const uint16_t* part = static_cast<const uint16_t*>(out);
    if (plan.nhwc) transpose_batched_widen(dw, part, kf, rs, cg, k > 0, cc.stream);
    else if (k == 0) bf16_widen(dw, part, count, cc.stream);
    else bf16_widen_add(dw, part, count, cc.stream);
  }
  if (plan.nhwc && !bf16)
    transpose_batched(dw, static_cast<const float*>(out), kf, rs, cg, false, cc.stream);
  if (bf16 && n > 1) bf16_round(dw, dw, count, cc.stream);
}

int64_t conv2d_grad_weight_cuda_workspace(const ConvCudaParams& p, const ExecContext& ctx) {
  return ready_plan(ConvPass::BackwardFilter, p, ctx).total_workspace();
}

void conv2d_grad_bias_cuda(const ExecContext& ctx, bool channels_last) {
  // dz [N, K, Ho, Wo], or [N, Ho, Wo, K]: rows of K
  const RowsChannelsPlane r = rows_channels_plane(ctx.inputs.at(0).shape(), channels_last);
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    bias_grad_reduce(ctx.output.f32(), storage<decltype(tag)>(ctx.inputs[0]), r.rows, r.c,
                     r.plane, ctx.workspace, cuda_context(ctx).stream);
  });
}

int64_t conv2d_grad_bias_cuda_workspace(const ExecContext& ctx, bool channels_last) {
  const RowsChannelsPlane r = rows_channels_plane(ctx.inputs.at(0).shape(), channels_last);
  return bias_grad_workspace_bytes(r.rows, r.c, r.plane);
}

}  // namespace remat
