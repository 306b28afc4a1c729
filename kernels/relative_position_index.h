// torchvision's relative_position_index of a Wh x Ww window and its shifted windows' attention
// mask, computed: the table row that token pair (i, j) reads and whether the pair may attend,
// shared by the CPU reference (ops/relative_position_bias.cpp), the CUDA
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

// Swin's shifted windows: after a cyclic shift by s of a side of g windows of w, the last s
// positions came from the other end, so torchvision cuts the side into bands [0, g w - w),
// [g w - w, g w - s), [g w - s, g w) (one band when s is 0). The band of position p:
REMAT_RELATIVE_FN int64_t shifted_band(int64_t p, int64_t g, int64_t w, int64_t s) {
  if (s == 0) return 0;
  return p < g * w - w ? 0 : p < g * w - s ? 1 : 2;
}

// torchvision's attention mask of window `win` (of a gh x gw grid of wh x ww windows, shifted by
// sh, sw): 0 when tokens i and j of the window lie in the same region (a pair of bands), else
// -100.
REMAT_RELATIVE_FN float shifted_window_mask(int64_t win, int64_t i, int64_t j, int64_t gh,
                                            int64_t gw, int64_t wh, int64_t ww, int64_t sh,
                                            int64_t sw) {
  const int64_t r0 = win / gw * wh, c0 = win % gw * ww;
  const bool same_rows =
      shifted_band(r0 + i / ww, gh, wh, sh) == shifted_band(r0 + j / ww, gh, wh, sh);
  const bool same_cols =
      shifted_band(c0 + i % ww, gw, ww, sw) == shifted_band(c0 + j % ww, gw, ww, sw);
  return same_rows && same_cols ? 0.0f : -100.0f;
}

}  // namespace remat
