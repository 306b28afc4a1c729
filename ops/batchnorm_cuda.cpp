// batchnorm on the GPU, matching ops/batchnorm.cpp's PyTorch semantics: train mode through
// kernels/batchnorm.cu (Note [batchnorm kernels]), inference mode through cuDNN's
// batch-normalisation routines (spatial mode) with scratch (from the op's workspace) for the
// outputs they do not keep.
#include "ops/batchnorm_cuda.h"

#include <algorithm>
#include <cstdint>

#include "kernels/kernels.h"
#include "ops/cpu_storage.h"
#include "ops/cudnn_util.h"
#include "ops/data_format.h"

namespace remat {
namespace {

// Note [batchnorm on the GPU]
// - Train mode runs our kernels (kernels/batchnorm.cu, Note [batchnorm kernels]) for the
//   forward on planes of at least kOwnForwardPlane values (H x W >= 56 x 56) and for the input
//   gradient on planes of at least kOwnGradInputPlane (14 x 14): the statistics and the
//   elementwise pass in fixed slices, so reruns are bit-identical; a recomputation
//   (ctx.first_compute false) passes no running statistics, so they are updated once a step.
//   grad_input computes the batch statistics and its two sums in one read of x and dy. Smaller
//   planes ([N, F] as 1 x 1 included) run cuDNN's spatial routines. REMAT_BN_KERNELS=own or
//   cudnn forces one side on every plane (CudaOptions::bn_kernels), to compare them, but for
//   tensors past cuDNN's element limit (Note [cuDNN's element limit] in cudnn_util.h), which
//   run our kernels whatever it says: the statistics span the batch. Measured on
//   an H200 in bf16 at batch 64 with the packed walks (GPU_RESULTS.md, 2026-11-27, revision
//   d10911b; ResNet-50's batch norms summed by plane, ours against cuDNN's, microseconds):
//     plane       112x112   56x56   28x28   14x14   7x7
//     forward     103/722   278/789 173/138 154/99  189/105
//     dx          149/1389  393/1473 236/374 184/199 210/175
//   Small planes are a few microseconds of work a node, where our four launches a pass (two
//   reductions, the coefficients, the elementwise pass) cost more than cuDNN's.
// - cuDNN, train mode: the batch variance is biased and running = factor * batch + (1 -
//   factor) * running with the UNBIASED variance, PyTorch's convention with factor = momentum.
//   A recomputation runs the very same call with the running statistics copied to workspace
//   scratch that absorbs the update (null pointers would let cuDNN pick another kernel), so it
//   gives y bit for bit as the first computation did. grad_input runs cuDNN's backward, which
//   computes dx, dscale and dbias together from x, dy and scale (savedMean / savedInvVariance
//   null: it recomputes the batch statistics), dscale/dbias going to workspace scratch.
// - grad_weight (dgamma) is one pass of kernels/ batchnorm_grad_gamma over x and dy on every
//   plane; grad_bias is the bias reduction of dy.
// - Inference mode (running statistics are constants) stays on cuDNN, which normalises with
//   them as ops/batchnorm.cpp does: dx = dy * gamma / sqrt(var + eps) is
//   cudnnBatchNormalizationForwardInference applied to dy with mean 0 and bias 0; dweight =
//   sum dy * (x - mean) * invstd is cuDNN's backward given savedMean = running_mean and
//   savedInvVariance = invstd, where invstd = 1 / sqrt(running_var + eps) is itself a
//   ForwardInference on a [1, C, 1, 1] tensor of ones. cuDNN's batch-norm routines are not in
//   its list of non-reproducible routines (cuDNN developer guide, "Reproducibility").
// - [N, F] inputs run as [N, F, 1, 1]: statistics over N, as on the CPU.
// - Channels-last x [N, H, W, C] (Note [channels-last layout] in models/channels_last.cpp): in
//   train mode our channels-last kernels (kernels/batchnorm_nhwc.cu, the NCHW kernels'
//   arithmetic over [N H W, C] rows) on every plane; REMAT_BN_KERNELS=cudnn runs cuDNN's
//   spatial routines on NHWC descriptors instead, dgamma then through cuDNN's backward with the
//   batch statistics recomputed and its dx in workspace scratch the size of x. Inference mode
//   is cuDNN on NHWC descriptors as above. dbeta sums the columns of dy as [N H W, C] rows.
// - Inference mode past cuDNN's element limit runs the same calls over consecutive samples
//   (each sample is normalised alone); the weight gradient's sums accumulate over them.
// - Without a learned scale (scale: false) the kernels take gamma = null (1); cuDNN takes a
//   vector of ones in the workspace (filled on every call: the workspace is not kept between
//   calls), so the arithmetic is that of gamma = 1; no weight gradient node exists.
// - bf16: x, y, dy and dx are bf16 (CUDNN_DATA_BFLOAT16 for cuDNN, whose derived
//   scale/bias/mean/variance descriptor is FP32); the parameters, running statistics and their
//   gradients stay FP32 and the statistics are computed in double (kernels) or FP32 (cuDNN).
constexpr int64_t kOwnForwardPlane = 56 * 56;
constexpr int64_t kOwnGradInputPlane = 14 * 14;

constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL;

struct BnDescs {
  CudnnTensorDesc x;   // [N, C, H, W] (or [N, F, 1, 1])
  CudnnTensorDesc bn;  // [1, C, 1, 1]
};

BnDescs& bn_descs(const ExecContext& ctx, const TensorDesc& x, bool channels_last) {
  const std::string key = "batchnorm:" + shape_key(x.shape) +
                          (x.dtype == DType::BF16 ? ":bf16" : "") + (channels_last ? ":nhwc" : "");
  return cuda_cache(ctx).get_or_create<BnDescs>(key, [&] {
    BnDescs d;
    if (channels_last && x.shape.size() == 4) {
      const ImageDims i = image_dims(x.shape, true);
      d.x = cudnn_tensor_4d(i.n, i.c, i.h, i.w, x.dtype, CUDNN_TENSOR_NHWC);
    } else {
      d.x = cudnn_tensor_of(x.shape, x.dtype);
    }
    cudnnTensorDescriptor_t raw = nullptr;
    REMAT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&raw));
    d.bn = CudnnTensorDesc(raw, [](cudnnTensorDescriptor_t p) { cudnnDestroyTensorDescriptor(p); });
    REMAT_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(raw, d.x.get(), kMode));
    return d;
  });
}

// Workspace carving: every piece starts on a 256-byte boundary.
int64_t round_up(int64_t b) { return (b + 255) / 256 * 256; }

struct Carver {
  char* base;
  int64_t used = 0;
  float* take(int64_t floats) {
    float* p = reinterpret_cast<float*>(base + used);
    used += round_up(floats * 4);
    return p;
  }
};

float* carve_start(const ExecContext& ctx, int64_t need) {
  REMAT_CHECK(ctx.workspace != nullptr && ctx.workspace_bytes >= need,
              "node '" << (ctx.node ? ctx.node->name : std::string("?")) << "' needs " << need
                       << " workspace bytes, got " << ctx.workspace_bytes);
  return static_cast<float*>(ctx.workspace);
}

// [N, C, H, W] as (n, c, plane); [N, F] as (n, f, 1); channels-last [N, H, W, C] as the rows
// (n * h * w, c, 1) the column reductions see.
struct NcPlane {
  int64_t n, c, plane;
};
NcPlane nc_plane(const Shape& s, bool channels_last) {
  if (channels_last && s.size() == 4) return {s[0] * s[1] * s[2], s[3], 1};
  return {s[0], s[1], s.size() == 4 ? s[2] * s[3] : 1};
}

int64_t channels(const BnCudaParams& p, const ExecContext& ctx, int x_input) {
  return nc_plane(ctx.inputs.at(x_input).shape(), p.channels_last).c;
}

// Bytes of the ones vector standing in for gamma without a learned scale (at the workspace's
// end); 0 with a scale.
int64_t ones_bytes(const BnCudaParams& p, int64_t c) { return p.scale ? 0 : round_up(c * 4); }

// gamma: the weight input `slot`, or (scale: false) c ones written at `ws`.
const void* gamma_of(const BnCudaParams& p, const ExecContext& ctx, int slot, int64_t c, void* ws,
                     cudaStream_t stream) {
  if (p.scale) return ctx.inputs.at(slot).data;
  fill(static_cast<float*>(ws), 1.0f, c, stream);
  return ws;
}

// Whether x ([N, C, plane] or [N H W, C, 1]) is past cuDNN's element limit.
bool past_cudnn_limit(const ExecContext& ctx, const NcPlane& sh) {
  return sh.n * sh.c * sh.plane > cuda_context(ctx).cudnn_max_elements;
}

// Our kernels (train mode on planes of at least `min_plane` values, or as REMAT_BN_KERNELS
// says, or past cuDNN's element limit) or cuDNN (Note [batchnorm on the GPU]).
bool own_kernels(const BnCudaParams& p, const ExecContext& ctx, const NcPlane& sh,
                 int64_t min_plane) {
  if (!p.train) return false;
  if (past_cudnn_limit(ctx, sh)) return true;
  switch (cuda_context(ctx).bn_kernels) {
    case BnKernels::Own: return true;
    case BnKernels::Cudnn: return false;
    case BnKernels::Auto: break;
  }
  return p.channels_last || sh.plane >= min_plane;
}

// The scale gradient in train mode by our kernels: always for NCHW, for channels-last unless
// REMAT_BN_KERNELS=cudnn (then cuDNN's backward, with an input-sized scratch).
bool own_gamma(const BnCudaParams& p, const ExecContext& ctx) {
  return p.train && (!p.channels_last || cuda_context(ctx).bn_kernels != BnKernels::Cudnn ||
                     past_cudnn_limit(ctx, nc_plane(ctx.inputs.at(1).shape(), true)));
}

// Inference mode: calls f(descs, byte offset of the first sample) over x's batch in as few
// calls as cuDNN's element limit allows (Note [cuDNN's element limit]).
template <typename F>
void for_each_inference_call(const BnCudaParams& p, const ExecContext& ctx, const TensorDesc& x,
                             F f) {
  const int64_t n = x.shape[0];
  const int64_t chunk = cudnn_samples_per_call(ctx, n, x.numel() / n);
  for (int64_t first = 0; first < n; first += chunk) {
    TensorDesc part = x;
    part.shape[0] = std::min(chunk, n - first);
    f(bn_descs(ctx, part, p.channels_last), first * (x.bytes() / n));
  }
}

// The fused activation (Note [batchnorm activation]) after a cuDNN call, over the stored output
// in place: the standalone relu's pass (relu and relu6 commute with the rounding cuDNN did).
// Our kernels apply it before they store.
void activate_in_place(const BnCudaParams& p, const ExecContext& ctx) {
  if (p.activation == KernelActivation::None) return;
  with_storage(ctx.output.desc->dtype, [&](auto tag) {
    bias_act_forward(storage<decltype(tag)>(ctx.output), nullptr, ctx.output.numel(), 1, 1,
                     p.activation, cuda_context(ctx).stream);
  });
}

}  // namespace

void batchnorm_forward_cuda(const BnCudaParams& p, const ExecContext& ctx) {
  const CudaContext& cc = cuda_context(ctx);
  const int s = p.scale ? 1 : 0;  // inputs [x, weight (scale only), bias, mean, var]
  const NcPlane sh = nc_plane(ctx.inputs[0].shape(), p.channels_last);
  if (own_kernels(p, ctx, sh, kOwnForwardPlane)) {
    REMAT_CHECK(ctx.workspace_bytes >= batchnorm_forward_cuda_workspace(p, ctx),
                "node '" << ctx.node->name << "': batchnorm workspace too small");
    const bool update = ctx.first_compute;
    const float* gamma = p.scale ? ctx.inputs[1].f32() : nullptr;
    const float* beta = ctx.inputs[1 + s].f32();
    float* rm = update ? ctx.inputs[2 + s].f32() : nullptr;
    float* rv = update ? ctx.inputs[3 + s].f32() : nullptr;
    with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
      using T = decltype(tag);
      T* y = storage<T>(ctx.output);
      const T* x = storage<T>(ctx.inputs[0]);
      if (p.channels_last)  // sh: [N H W, C, 1]
        batchnorm_nhwc_train_forward(y, x, gamma, beta, rm, rv, sh.n, sh.c, p.eps, p.momentum,
                                     p.activation, ctx.workspace, cc.stream);
      else
        batchnorm_train_forward(y, x, gamma, beta, rm, rv, sh.n, sh.c, sh.plane, p.eps, p.momentum,
                                p.activation, ctx.workspace, cc.stream);
    });
    return;
  }
  const float one = 1.0f, zero = 0.0f;
  const int64_t c = channels(p, ctx, 0);
  char* ws_end = static_cast<char*>(ctx.workspace) + (p.train ? 2 * round_up(c * 4) : 0);
  const void* x = ctx.inputs[0].data;
  const void* gamma = gamma_of(p, ctx, 1, c, ws_end, cc.stream);
  const void* beta = ctx.inputs[1 + s].data;
  void* rm = ctx.inputs[2 + s].data;
  void* rv = ctx.inputs[3 + s].data;
  if (!p.train) {
    for_each_inference_call(p, ctx, *ctx.inputs[0].desc, [&](const BnDescs& part, int64_t at) {
      REMAT_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
          cc.cudnn, kMode, &one, &zero, part.x.get(), at_byte(x, at), part.x.get(),
          at_byte(ctx.output.data, at), part.bn.get(), gamma, beta, rm, rv, p.eps));
    });
    activate_in_place(p, ctx);
    return;
  }
  if (!ctx.first_compute) {  // Note [batchnorm on the GPU]: scratch absorbs the update
    Carver ws{reinterpret_cast<char*>(carve_start(ctx, batchnorm_forward_cuda_workspace(p, ctx)))};
    float* rm_scratch = ws.take(c);
    float* rv_scratch = ws.take(c);
    REMAT_CUDA_CHECK(cudaMemcpyAsync(rm_scratch, rm, c * 4, cudaMemcpyDeviceToDevice, cc.stream));
    REMAT_CUDA_CHECK(cudaMemcpyAsync(rv_scratch, rv, c * 4, cudaMemcpyDeviceToDevice, cc.stream));
    rm = rm_scratch;
    rv = rv_scratch;
  }
  const BnDescs& d = bn_descs(ctx, *ctx.inputs[0].desc, p.channels_last);
  REMAT_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      cc.cudnn, kMode, &one, &zero, d.x.get(), x, d.x.get(), ctx.output.data, d.bn.get(), gamma,
      beta, p.momentum, rm, rv, p.eps, nullptr, nullptr));
  activate_in_place(p, ctx);
}

int64_t batchnorm_forward_cuda_workspace(const BnCudaParams& p, const ExecContext& ctx) {
  // The same on first computation and recomputation, so a plan's workspace does not depend on
  // which one a step runs. cuDNN: [running-statistics scratch (train)][ones (scale: false)].
  const NcPlane sh = nc_plane(ctx.inputs.at(0).shape(), p.channels_last);
  if (own_kernels(p, ctx, sh, kOwnForwardPlane))
    return p.channels_last ? batchnorm_nhwc_train_forward_workspace_bytes(sh.n, sh.c)
                           : batchnorm_train_forward_workspace_bytes(sh.n, sh.c, sh.plane);
  const int64_t c = channels(p, ctx, 0);
  return (p.train ? 2 * round_up(c * 4) : 0) + ones_bytes(p, c);
}

int64_t batchnorm_grad_input_cuda_workspace(const BnCudaParams& p, const ExecContext& ctx) {
  const NcPlane sh = nc_plane(ctx.inputs.at(1).shape(), p.channels_last);
  if (own_kernels(p, ctx, sh, kOwnGradInputPlane))
    return p.channels_last
               ? batchnorm_nhwc_train_backward_input_workspace_bytes(sh.n, sh.c)
               : batchnorm_train_backward_input_workspace_bytes(sh.n, sh.c, sh.plane);
  const int64_t c = channels(p, ctx, 1);
  return (p.train ? 2 * round_up(c * 4) : round_up(c * 4)) + ones_bytes(p, c);
}

void batchnorm_grad_input_cuda(const BnCudaParams& p, const ExecContext& ctx) {
  const CudaContext& cc = cuda_context(ctx);
  const NcPlane sh = nc_plane(ctx.inputs[1].shape(), p.channels_last);
  if (own_kernels(p, ctx, sh, kOwnGradInputPlane)) {
    REMAT_CHECK(ctx.workspace_bytes >= batchnorm_grad_input_cuda_workspace(p, ctx),
                "node '" << ctx.node->name << "': batchnorm_grad_input workspace too small");
    const float* gamma = p.scale ? ctx.inputs[2].f32() : nullptr;
    with_storage(ctx.inputs[1].desc->dtype, [&](auto tag) {
      using T = decltype(tag);
      T* dx = storage<T>(ctx.output);
      const T* dy = storage<T>(ctx.inputs[0]);
      const T* x = storage<T>(ctx.inputs[1]);
      if (p.channels_last)
        batchnorm_nhwc_train_backward_input(dx, dy, x, gamma, sh.n, sh.c, p.eps, ctx.workspace,
                                            cc.stream);
      else
        batchnorm_train_backward_input(dx, dy, x, gamma, sh.n, sh.c, sh.plane, p.eps,
                                       ctx.workspace, cc.stream);
    });
    return;
  }
  const int64_t c = channels(p, ctx, 1);
  Carver ws{reinterpret_cast<char*>(carve_start(ctx, batchnorm_grad_input_cuda_workspace(p, ctx)))};
  const float one = 1.0f, zero = 0.0f;
  const void* dy = ctx.inputs[0].data;
  const void* x = ctx.inputs[1].data;
  const int s = p.scale ? 1 : 0;  // inputs [dy, x, weight (scale only), mean, var]
  if (!p.train) {  // dx = gamma * (dy - 0) / sqrt(running_var + eps) + 0
    float* zeros = ws.take(c);
    const void* gamma = gamma_of(p, ctx, 2, c, ws.take(c), cc.stream);
    fill(zeros, 0.0f, c, cc.stream);
    for_each_inference_call(p, ctx, *ctx.inputs[1].desc, [&](const BnDescs& part, int64_t at) {
      REMAT_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
          cc.cudnn, kMode, &one, &zero, part.x.get(), at_byte(dy, at), part.x.get(),
          at_byte(ctx.output.data, at), part.bn.get(), gamma, zeros, zeros, ctx.inputs[3 + s].data,
          p.eps));
    });
    return;
  }
  const void* gamma = gamma_of(p, ctx, 2, c, ws.base + 2 * round_up(c * 4), cc.stream);
  float* dscale = ws.take(c);  // scratch
  float* dbias = ws.take(c);   // scratch
  const BnDescs& d = bn_descs(ctx, *ctx.inputs[1].desc, p.channels_last);
  REMAT_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      cc.cudnn, kMode, &one, &zero, &one, &zero, d.x.get(), x, d.x.get(), dy, d.x.get(),
      ctx.output.data, d.bn.get(), gamma, dscale, dbias, p.eps, nullptr, nullptr));
}

int64_t batchnorm_grad_weight_cuda_workspace(const BnCudaParams& p, const ExecContext& ctx) {
  const int64_t c = channels(p, ctx, 1);
  if (own_gamma(p, ctx)) {
    const NcPlane s = nc_plane(ctx.inputs.at(1).shape(), p.channels_last);
    return p.channels_last ? batchnorm_nhwc_grad_gamma_workspace_bytes(s.n, s.c)
                           : batchnorm_grad_gamma_workspace_bytes(s.n, s.c, s.plane);
  }
  return round_up(ctx.inputs.at(1).desc->bytes()) + 4 * round_up(c * 4);
}

void batchnorm_grad_weight_cuda(const BnCudaParams& p, const ExecContext& ctx) {
  const CudaContext& cc = cuda_context(ctx);
  const void* dy = ctx.inputs[0].data;
  const void* x = ctx.inputs[1].data;
  if (own_gamma(p, ctx)) {  // Note [batchnorm on the GPU]: one pass over x and dy
    const NcPlane s = nc_plane(ctx.inputs[1].shape(), p.channels_last);
    void* ws = carve_start(ctx, batchnorm_grad_weight_cuda_workspace(p, ctx));
    with_storage(ctx.inputs[1].desc->dtype, [&](auto tag) {
      using T = decltype(tag);
      const T* x = storage<T>(ctx.inputs[1]);
      const T* dy = storage<T>(ctx.inputs[0]);
      if (p.channels_last)
        batchnorm_nhwc_grad_gamma(ctx.output.f32(), x, dy, s.n, s.c, p.eps, ws, cc.stream);
      else
        batchnorm_grad_gamma(ctx.output.f32(), x, dy, s.n, s.c, s.plane, p.eps, ws, cc.stream);
    });
    return;
  }
  // Inference: cuDNN's backward with savedMean = running_mean, savedInvVariance = invstd;
  // channels-last train mode under REMAT_BN_KERNELS=cudnn: the same with the batch statistics
  // recomputed (null).
  const int64_t c = channels(p, ctx, 1);
  Carver ws{reinterpret_cast<char*>(carve_start(ctx, batchnorm_grad_weight_cuda_workspace(p, ctx)))};
  const float one = 1.0f, zero = 0.0f;
  void* dx = ws.take((ctx.inputs[1].desc->bytes() + 3) / 4);  // scratch, like x
  float* ones = ws.take(c);                    // the scale: it only affects dx
  fill(ones, 1.0f, c, cc.stream);
  float* dbias = ws.take(c);                   // scratch
  float* zeros = ws.take(c);
  float* inv_std = ws.take(c);
  fill(zeros, 0.0f, c, cc.stream);
  if (p.train) {
    const BnDescs& d = bn_descs(ctx, *ctx.inputs[1].desc, p.channels_last);
    REMAT_CUDNN_CHECK(cudnnBatchNormalizationBackward(
        cc.cudnn, kMode, &one, &zero, &one, &zero, d.x.get(), x, d.x.get(), dy, d.x.get(), dx,
        d.bn.get(), ones, ctx.output.data, dbias, p.eps, nullptr, nullptr));
    return;
  }
  const BnDescs& vec = bn_descs(ctx, TensorDesc{{1, c, 1, 1}, DType::F32}, false);
  REMAT_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
      cc.cudnn, kMode, &one, &zero, vec.x.get(), ones, vec.x.get(), inv_std, vec.bn.get(), ones,
      zeros, zeros, ctx.inputs[3].data, p.eps));
  bool first_call = true;  // later calls add their sums to the first's
  for_each_inference_call(p, ctx, *ctx.inputs[1].desc, [&](const BnDescs& part, int64_t at) {
    REMAT_CUDNN_CHECK(cudnnBatchNormalizationBackward(
        cc.cudnn, kMode, &one, &zero, &one, first_call ? &zero : &one, part.x.get(), at_byte(x, at),
        part.x.get(), at_byte(dy, at), part.x.get(), at_byte(dx, at), part.bn.get(), ones,
        ctx.output.data, dbias, p.eps, ctx.inputs[2].data, inv_std));
    first_call = false;
  });
}

void batchnorm_grad_bias_cuda(const BnCudaParams& p, const ExecContext& ctx) {
  // dy [N, C, H, W], [N, F] or [N, H, W, C]
  const NcPlane s = nc_plane(ctx.inputs.at(0).shape(), p.channels_last);
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    bias_grad_reduce(ctx.output.f32(), storage<decltype(tag)>(ctx.inputs[0]), s.n, s.c, s.plane,
                     ctx.workspace, cuda_context(ctx).stream);
  });
}

int64_t batchnorm_grad_bias_cuda_workspace(const BnCudaParams& p, const ExecContext& ctx) {
  const NcPlane s = nc_plane(ctx.inputs.at(0).shape(), p.channels_last);
  return bias_grad_workspace_bytes(s.n, s.c, s.plane);
}

}  // namespace remat
