// What both families of attention kernels (attention.cu's rows, attention_tiled*.cu's tiles)
// check and set before a launch: the arguments every caller must get right, and the opt-in
// to more than 48 KB of dynamic shared memory.
#pragma once

#include <cstdint>

#include "kernels/common.cuh"

namespace remat {
namespace {

// Sizes are never negative and the dropout rate is in [0, 1); each family adds its own limits.
inline void check_attention_sizes(int64_t bh, int64_t t, int64_t d, float rate) {
  REMAT_CHECK(bh >= 0 && t >= 0 && d >= 0,
              "attention: negative size (bh " << bh << ", t " << t << ", d " << d << ")");
  REMAT_CHECK(rate >= 0.0f && rate < 1.0f, "attention: dropout rate " << rate << " outside [0, 1)");
}

// Allows `bytes` of dynamic shared memory for `kernel`: an opt-in above what it may take by
// default, 48 KB less its static shared memory (the row kernels' reduction arrays; on sm_90
// also 1 KB the compiler reserves), so a request just under 48 KB opts in too.
template <typename K>
void allow_shared(K* kernel, size_t bytes) {
  cudaFuncAttributes fa{};
  REMAT_CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
  if (bytes > static_cast<size_t>(fa.maxDynamicSharedSizeBytes))
    REMAT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(bytes)));
}

}  // namespace
}  // namespace remat
