// batchnorm on the GPU through cuDNN's batch-normalisation routines (spatial mode), matching
// ops/batchnorm.cpp's PyTorch semantics; the three backward nodes each call cuDNN with scratch
// (from the op's workspace) for the outputs they do not keep.
#include "ops/batchnorm_cuda.h"

#include <cstdint>

#include "kernels/kernels.h"
#include "ops/cudnn_util.h"

namespace remat {
namespace {

// Note [batchnorm on cuDNN]
// - Semantics: cuDNN normalises with the biased batch variance and updates
//   running = factor * batch + (1 - factor) * running with the UNBIASED variance, which is
//   PyTorch's convention with factor = momentum (PyTorch's own cuDNN path passes momentum).
// - Recomputation (ctx.first_compute false) must not update the running statistics: we pass
//   null for both running pointers (cuDNN allows both null together) and factor 0, so cuDNN
//   only computes y. y does not depend on the running statistics in train mode.
// - [N, F] inputs run as [N, F, 1, 1] in spatial mode: statistics over N, as on the CPU.
// - The backward nodes are separate (dx, dweight, dbias). cuDNN's backward computes dx,
//   dscale and dbias together from x, dy and scale (savedMean / savedInvVariance null: it
//   recomputes the batch statistics), so grad_input sends dscale/dbias to workspace scratch and
//   grad_weight sends dx to workspace scratch (x's bytes) with a scale of ones.
// - Inference mode (running statistics are constants): dx = dy * gamma / sqrt(var + eps) is
//   cudnnBatchNormalizationForwardInference applied to dy with mean 0 and bias 0; dweight =
//   sum dy * (x - mean) * invstd is cuDNN's backward given savedMean = running_mean and
//   savedInvVariance = invstd, where invstd = 1 / sqrt(running_var + eps) is itself a
//   ForwardInference on a [1, C, 1, 1] tensor of ones.
// - cuDNN's batch-norm routines are not in its list of non-reproducible routines (cuDNN
//   developer guide, "Reproducibility"), so reruns are bit-identical.
constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL;

struct BnDescs {
  CudnnTensorDesc x;   // [N, C, H, W] (or [N, F, 1, 1])
  CudnnTensorDesc bn;  // [1, C, 1, 1]
};

BnDescs& bn_descs(const ExecContext& ctx, const Shape& x) {
  return cuda_cache(ctx).get_or_create<BnDescs>("batchnorm:" + shape_key(x), [&] {
    BnDescs d;
    d.x = cudnn_tensor_of(x);
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

int64_t channels(const ExecContext& ctx, int x_input) { return ctx.inputs.at(x_input).dim(1); }

}  // namespace

void batchnorm_forward_cuda(const BnCudaParams& p, const ExecContext& ctx) {
  const CudaContext& cc = cuda_context(ctx);
  const BnDescs& d = bn_descs(ctx, ctx.inputs[0].shape());
  const float one = 1.0f, zero = 0.0f;
  const void* x = ctx.inputs[0].data;
  const void* gamma = ctx.inputs[1].data;
  const void* beta = ctx.inputs[2].data;
  void* rm = ctx.inputs[3].data;
  void* rv = ctx.inputs[4].data;
  if (!p.train) {
    REMAT_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
        cc.cudnn, kMode, &one, &zero, d.x.get(), x, d.x.get(), ctx.output.data, d.bn.get(), gamma,
        beta, rm, rv, p.eps));
    return;
  }
  const bool update = ctx.first_compute;  // Note [batchnorm on cuDNN]
  REMAT_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      cc.cudnn, kMode, &one, &zero, d.x.get(), x, d.x.get(), ctx.output.data, d.bn.get(), gamma,
      beta, update ? p.momentum : 0.0, update ? rm : nullptr, update ? rv : nullptr, p.eps,
      nullptr, nullptr));
}

int64_t batchnorm_grad_input_cuda_workspace(const BnCudaParams& p, const ExecContext& ctx) {
  const int64_t c = channels(ctx, 1);
  return p.train ? 2 * round_up(c * 4) : round_up(c * 4);
}

void batchnorm_grad_input_cuda(const BnCudaParams& p, const ExecContext& ctx) {
  const CudaContext& cc = cuda_context(ctx);
  const BnDescs& d = bn_descs(ctx, ctx.inputs[1].shape());
  const int64_t c = channels(ctx, 1);
  Carver ws{reinterpret_cast<char*>(carve_start(ctx, batchnorm_grad_input_cuda_workspace(p, ctx)))};
  const float one = 1.0f, zero = 0.0f;
  const void* dy = ctx.inputs[0].data;
  const void* x = ctx.inputs[1].data;
  const void* gamma = ctx.inputs[2].data;
  if (!p.train) {  // dx = gamma * (dy - 0) / sqrt(running_var + eps) + 0
    float* zeros = ws.take(c);
    fill(zeros, 0.0f, c, cc.stream);
    REMAT_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
        cc.cudnn, kMode, &one, &zero, d.x.get(), dy, d.x.get(), ctx.output.data, d.bn.get(),
        gamma, zeros, zeros, ctx.inputs[4].data, p.eps));
    return;
  }
  float* dscale = ws.take(c);  // scratch
  float* dbias = ws.take(c);   // scratch
  REMAT_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      cc.cudnn, kMode, &one, &zero, &one, &zero, d.x.get(), x, d.x.get(), dy, d.x.get(),
      ctx.output.data, d.bn.get(), gamma, dscale, dbias, p.eps, nullptr, nullptr));
}

int64_t batchnorm_grad_weight_cuda_workspace(const BnCudaParams& p, const ExecContext& ctx) {
  const int64_t c = channels(ctx, 1);
  return round_up(ctx.inputs.at(1).numel() * 4) + (p.train ? 2 : 4) * round_up(c * 4);
}

void batchnorm_grad_weight_cuda(const BnCudaParams& p, const ExecContext& ctx) {
  const CudaContext& cc = cuda_context(ctx);
  const BnDescs& d = bn_descs(ctx, ctx.inputs[1].shape());
  const int64_t c = channels(ctx, 1);
  Carver ws{reinterpret_cast<char*>(carve_start(ctx, batchnorm_grad_weight_cuda_workspace(p, ctx)))};
  const float one = 1.0f, zero = 0.0f;
  const void* dy = ctx.inputs[0].data;
  const void* x = ctx.inputs[1].data;
  float* dx = ws.take(ctx.inputs[1].numel());  // scratch, like x
  float* ones = ws.take(c);                    // the scale: it only affects dx
  fill(ones, 1.0f, c, cc.stream);
  float* dbias = ws.take(c);                   // scratch
  const void* saved_mean = nullptr;
  const void* saved_inv_std = nullptr;
  if (!p.train) {  // Note [batchnorm on cuDNN]: inference dweight via saved statistics
    float* zeros = ws.take(c);
    float* inv_std = ws.take(c);
    fill(zeros, 0.0f, c, cc.stream);
    CudnnTensorDesc vec = cudnn_tensor_4d(1, c, 1, 1);
    REMAT_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
        cc.cudnn, kMode, &one, &zero, vec.get(), ones, vec.get(), inv_std, d.bn.get(), ones,
        zeros, zeros, ctx.inputs[3].data, p.eps));
    saved_mean = ctx.inputs[2].data;
    saved_inv_std = inv_std;
  }
  REMAT_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      cc.cudnn, kMode, &one, &zero, &one, &zero, d.x.get(), x, d.x.get(), dy, d.x.get(), dx,
      d.bn.get(), ones, ctx.output.data, dbias, p.eps, saved_mean, saved_inv_std));
}

void batchnorm_grad_bias_cuda(const ExecContext& ctx) {
  const Shape& s = ctx.inputs.at(0).shape();  // dy [N, C, H, W] or [N, F]
  const int64_t inner = s.size() == 4 ? s[2] * s[3] : 1;
  bias_grad_reduce(ctx.output.f32(), ctx.inputs[0].f32(), s[0], s[1], inner,
                   cuda_context(ctx).stream);
}

}  // namespace remat
