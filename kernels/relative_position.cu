// The relative position bias of window attention (kernels/relative_position.h): the broadcast
// add of table rows picked by each token pair's offset, and the table's gradient from the
// per-pair sums. Templated on the storage type T of the scores (float or __nv_bfloat16,
// kernels/common.cuh); the table stays float.
#include "kernels/common.cuh"
#include "kernels/relative_position.h"
#include "kernels/relative_position_index.h"

namespace remat {
namespace {

template <typename T>
__global__ void relative_bias_kernel(T* out, const T* inp, const float* table, int64_t total,
                                     int64_t heads, RelativeWindows w) {
  const int64_t t = w.wh * w.ww;
  const bool masked = w.sh != 0 || w.sw != 0;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = e % t, i = e / t % t, h = e / (t * t) % heads;
    float y = ld(inp[e]) + table[relative_position_index(i, j, w.wh, w.ww) * heads + h];
    if (masked) {
      const int64_t win = e / (t * t * heads) % (w.gh * w.gw);
      y += shifted_window_mask(win, i, j, w.gh, w.gw, w.wh, w.ww, w.sh, w.sw);
    }
    out[e] = st<T>(y);
  }
}

// A thread per table entry (r, h) walks every pair (i, j) and adds the ones at offset r.
__global__ void relative_table_grad_kernel(float* dtable, const float* db, int64_t heads,
                                           int64_t wh, int64_t ww) {
  const int64_t t = wh * ww, rows = (2 * wh - 1) * (2 * ww - 1);
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < rows * heads;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e / heads, h = e % heads;
    double sum = 0.0;
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < t; ++j)
        if (relative_position_index(i, j, wh, ww) == r) sum += db[(h * t + i) * t + j];
    dtable[e] = static_cast<float>(sum);
  }
}

template <typename T>
void forward_impl(T* out, const T* inp, const float* table, int64_t lead, int64_t heads,
                  const RelativeWindows& w, cudaStream_t stream) {
  const int64_t total = lead * heads * w.wh * w.ww * w.wh * w.ww;
  if (total <= 0) return;
  relative_bias_kernel<T><<<grid_for(total), kBlockSize, 0, stream>>>(out, inp, table, total,
                                                                       heads, w);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void relative_position_bias_forward(float* out, const float* inp, const float* table,
                                    int64_t lead, int64_t heads, const RelativeWindows& w,
                                    cudaStream_t stream) {
  forward_impl(out, inp, table, lead, heads, w, stream);
}
void relative_position_bias_forward(uint16_t* out, const uint16_t* inp, const float* table,
                                    int64_t lead, int64_t heads, const RelativeWindows& w,
                                    cudaStream_t stream) {
  forward_impl(bf16_ptr(out), bf16_ptr(inp), table, lead, heads, w, stream);
}

void relative_position_bias_table_grad(float* dtable, const float* db, int64_t heads, int64_t wh,
                                       int64_t ww, cudaStream_t stream) {
  const int64_t entries = (2 * wh - 1) * (2 * ww - 1) * heads;
  if (entries <= 0) return;
  relative_table_grad_kernel<<<grid_for(entries), kBlockSize, 0, stream>>>(dtable, db, heads, wh,
                                                                           ww);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace remat
