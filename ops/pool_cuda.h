// Pooling's CUDA path, called from ops/pool.cpp's OpDef::cuda: maxpool / avgpool and their
// grads through cuDNN pooling (symmetric padding, an average counting it) or kernels/pool.cu
// (per-side padding, an average over the real elements), global_avgpool and its grad through
// kernels/ launchers.
// CUDA builds only.
#pragma once

#ifdef REMAT_HAVE_CUDA

#include <cstdint>

#include "runtime/graph/op.h"

namespace remat {

// Window geometry (pool.cpp's PoolAttrs with the pads resolved for the input).
struct PoolCudaParams {
  int64_t kh = 1, kw = 1, sh = 1, sw = 1;
  int64_t top = 0, bottom = 0, left = 0, right = 0;
  bool max = true;        // max pooling (deterministic mode); else average
  bool count_pad = true;  // average: divide by kh * kw, else by the window's real elements
  bool channels_last = false;  // x, y [N, H, W, C]
};

// [x] -> y.
void pool_forward_cuda(const PoolCudaParams& p, const ExecContext& ctx);
// maxpool_grad [dy, x, y] -> dx; avgpool_grad [dy] -> dx.
void pool_backward_cuda(const PoolCudaParams& p, const ExecContext& ctx);
// [x [N, C, H, W]] -> y [N, C]; [dy [N, C]] -> dx [N, C, H, W] (or x, dx NHWC).
void global_avgpool_forward_cuda(const ExecContext& ctx, bool channels_last);
void global_avgpool_backward_cuda(const ExecContext& ctx, bool channels_last);

}  // namespace remat

#endif  // REMAT_HAVE_CUDA
