// Batched transposes between channels-first and channels-last layouts (NCHW <-> NHWC, KCRS <->
// KRSC), with the storage-type conversions the staged NHWC convolutions need (Note [staged NHWC
// convolutions] in ops/conv2d_cuda.cpp): each of `batch` row-major [rows, cols] matrices becomes
// its [cols, rows] transpose. 32 x 32 tiles through shared memory (one padding column against
// bank conflicts), so reads and writes are both coalesced. Pure data movement: a value is
// converted exactly (widen) or rounded to nearest even (narrow), as bf16.cu does.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

constexpr int kTile = 32;
constexpr int kTileRows = 8;  // threads per tile column: a block is kTile x kTileRows threads

template <typename Ti, typename To>
__global__ void transpose_kernel(To* dst, const Ti* src, int64_t batch, int64_t rows, int64_t cols,
                                 bool accumulate) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t c0 = int64_t{blockIdx.x} * kTile;
  // Row tiles and matrices past the grid's y and z limits (65,535) loop; the bounds depend on
  // the block only, so every thread of a block reaches each __syncthreads.
  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    const Ti* s = src + b * rows * cols;
    To* d = dst + b * rows * cols;
    for (int64_t r0 = int64_t{blockIdx.y} * kTile; r0 < rows; r0 += int64_t{gridDim.y} * kTile) {
      for (int k = threadIdx.y; k < kTile; k += kTileRows) {
        const int64_t r = r0 + k, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[k][threadIdx.x] = ld(s[r * cols + c]);
      }
      __syncthreads();
      for (int k = threadIdx.y; k < kTile; k += kTileRows) {
        const int64_t c = c0 + k, r = r0 + threadIdx.x;  // d is [cols, rows]
        if (r < rows && c < cols) {
          const float v = tile[threadIdx.x][k];
          To* out = d + c * rows + r;
          *out = accumulate ? st<To>(__fadd_rn(ld(*out), v)) : st<To>(v);
        }
      }
      __syncthreads();  // the tile is read before the next iteration overwrites it
    }
  }
}

template <typename Ti, typename To>
void launch(To* dst, const Ti* src, int64_t batch, int64_t rows, int64_t cols, bool accumulate,
            cudaStream_t stream) {
  if (batch <= 0 || rows <= 0 || cols <= 0) return;
  const int64_t gx = (cols + kTile - 1) / kTile, gy = (rows + kTile - 1) / kTile;
  REMAT_CHECK(gx < (int64_t{1} << 31), "transpose: " << batch << " matrices of " << rows << " x "
                                                     << cols << " (2^36 columns or more)");
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(std::min<int64_t>(gy, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(batch, 65535)));
  transpose_kernel<Ti, To>
      <<<grid, dim3(kTile, kTileRows), 0, stream>>>(dst, src, batch, rows, cols, accumulate);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void transpose_batched(float* dst, const float* src, int64_t batch, int64_t rows, int64_t cols,
                       bool accumulate, cudaStream_t stream) {
  launch(dst, src, batch, rows, cols, accumulate, stream);
}
void transpose_batched(uint16_t* dst, const uint16_t* src, int64_t batch, int64_t rows,
                       int64_t cols, cudaStream_t stream) {
  launch(bf16_ptr(dst), bf16_ptr(src), batch, rows, cols, false, stream);
}
void transpose_batched_narrow(uint16_t* dst, const float* src, int64_t batch, int64_t rows,
                              int64_t cols, cudaStream_t stream) {
  launch(bf16_ptr(dst), src, batch, rows, cols, false, stream);
}
void transpose_batched_widen(float* dst, const uint16_t* src, int64_t batch, int64_t rows,
                             int64_t cols, bool accumulate, cudaStream_t stream) {
  launch(dst, bf16_ptr(src), batch, rows, cols, accumulate, stream);
}

}  // namespace remat
