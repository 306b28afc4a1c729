// batchnorm's CUDA path (cuDNN, spatial mode; [N, F] runs as [N, F, 1, 1]), called from
// ops/batchnorm.cpp's OpDef::cuda / cuda_workspace. See Note [batchnorm on cuDNN] in
// batchnorm_cuda.cpp. CUDA builds only.
#pragma once

#ifdef REMAT_HAVE_CUDA

#include <cstdint>

#include "kernels/kernels.h"
#include "runtime/graph/op.h"

namespace remat {

struct BnCudaParams {
  double momentum = 0.1;  // PyTorch convention = cuDNN's exponentialAverageFactor
  double eps = 1e-5;
  bool train = true;
  bool scale = true;  // false: no weight input; gamma = 1 from a workspace vector of ones
  bool channels_last = false;  // x [N, H, W, C]: cuDNN on NHWC descriptors (Note [batchnorm on
                               // the GPU])
  KernelActivation activation = KernelActivation::None;  // Note [batchnorm activation]
};

// inputs [x, weight (scale only), bias, running_mean, running_var] -> y; running stats updated
// on the first computation only (train mode).
void batchnorm_forward_cuda(const BnCudaParams& p, const ExecContext& ctx);
int64_t batchnorm_forward_cuda_workspace(const BnCudaParams& p, const ExecContext& ctx);
// train: [dy, x, weight]; inference: [dy, x, weight, running_mean, running_var] -> dx (no weight
// without scale).
void batchnorm_grad_input_cuda(const BnCudaParams& p, const ExecContext& ctx);
int64_t batchnorm_grad_input_cuda_workspace(const BnCudaParams& p, const ExecContext& ctx);
// train: [dy, x]; inference: [dy, x, running_mean, running_var] -> dweight [C].
void batchnorm_grad_weight_cuda(const BnCudaParams& p, const ExecContext& ctx);
int64_t batchnorm_grad_weight_cuda_workspace(const BnCudaParams& p, const ExecContext& ctx);
// [dy] -> dbias [C] (deterministic reduction, kernels/).
void batchnorm_grad_bias_cuda(const BnCudaParams& p, const ExecContext& ctx);
int64_t batchnorm_grad_bias_cuda_workspace(const BnCudaParams& p, const ExecContext& ctx);

}  // namespace remat

#endif  // REMAT_HAVE_CUDA
