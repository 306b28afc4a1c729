// What an op's CUDA path needs from ExecContext: the backend's CudaContext and its stream.
// Included by ops/*.cpp only under REMAT_HAVE_CUDA, next to kernels/kernels.h.
#pragma once

#ifdef REMAT_HAVE_CUDA

#include "kernels/kernels.h"
#include "runtime/core/check.h"
#include "runtime/backends/cuda_context.h"
#include "runtime/graph/op.h"

namespace remat {

// The CUDA backend sets ExecContext::device to its CudaContext before calling op.cuda.
inline CudaContext& cuda_context(const ExecContext& ctx) {
  REMAT_CHECK(ctx.device != nullptr,
              "node '" << (ctx.node ? ctx.node->name : std::string("?"))
                       << "': CUDA path called without a CudaContext (ExecContext::device)");
  return *static_cast<CudaContext*>(ctx.device);
}

inline cudaStream_t cuda_stream(const ExecContext& ctx) { return cuda_context(ctx).stream; }

// The step ctx runs for, as a kernel reads it (Note [step source] in kernels/rng.h): by value
// when launched eagerly, from the backend's device copy while a CUDA graph is being captured.
inline StepSource step_source(const ExecContext& ctx) {
  const CudaContext& cc = cuda_context(ctx);
  return StepSource{static_cast<uint64_t>(ctx.step), cc.capturing ? cc.step_device : nullptr};
}

}  // namespace remat

#endif  // REMAT_HAVE_CUDA
