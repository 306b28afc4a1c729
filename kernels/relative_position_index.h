// torchvision's relative_position_index of a Wh x Ww window, computed: the table row that token
// pair (i, j) reads, shared by the CPU reference (ops/relative_position_bias.cpp), the CUDA
// kernels (kernels/relative_position.cu) and the ONNX import's check of a file's index
// (models/onnx/onnx_token_ops.cpp).
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define REMAT_RELATIVE_FN __host__ __device__ __forceinline__
#else
#define REMAT_RELATIVE_FN inline
#endif

namespace remat {

// Token i sits at (i / ww, i % ww); the row is (hi - hj + wh - 1)(2 ww - 1) + (wi - wj + ww - 1),
// one of (2 wh - 1)(2 ww - 1).
REMAT_RELATIVE_FN int64_t relative_position_index(int64_t i, int64_t j, int64_t wh, int64_t ww) {
  return (i / ww - j / ww + wh - 1) * (2 * ww - 1) + (i % ww - j % ww + ww - 1);
}

}  // namespace remat
