// Swin's and MaxViT's relative position bias on the device (relative_position.cu), in the style
// of kernels/kernels.h: plain host-callable declarations, raw device pointers, a stream.
// ops/relative_position_bias.cpp is the spec (the offset index, the sums' order).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace remat {

// The window (wh x ww) and, for Swin's shifted windows, the grid of windows (gh x gw) and the
// shift (sh, sw; 0, 0: no mask).
struct RelativeWindows {
  int64_t wh, ww, gh, gw, sh, sw;
};

// out = inp + table[index(i, j), h] for inp [lead, heads, T, T], T = wh * ww, table [R, heads],
// then + shifted_window_mask(l % (gh gw), i, j, ..) when shifted (lead index l); in FP32 with the
// CPU's roundings (the bf16 overload rounds once at the end, as the CPU's bf16 path).
void relative_position_bias_forward(float* out, const float* inp, const float* table,
                                    int64_t lead, int64_t heads, const RelativeWindows& w,
                                    cudaStream_t stream);
void relative_position_bias_forward(uint16_t* out, const uint16_t* inp, const float* table,
                                    int64_t lead, int64_t heads, const RelativeWindows& w,
                                    cudaStream_t stream);
// dtable [R, heads]: entry (r, h) = the sum, in double with i and j in order, of db[h, i, j]
// over the (i, j) whose offset index is r (db [heads, T, T]: dy summed over its leading axes).
// A thread per entry; deterministic.
void relative_position_bias_table_grad(float* dtable, const float* db, int64_t heads, int64_t wh,
                                       int64_t ww, cudaStream_t stream);

}  // namespace remat
