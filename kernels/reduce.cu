// Deterministic reductions: the bias gradient (sum over N and the spatial plane per channel) and
// global average pooling with its gradient. Sums are in double in an order fixed by the shapes
// (Note [kernel determinism]); no atomics.
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

constexpr int kReduceThreads = 256;

// plane == 1 ([N, C], dense): a thread per column, rows summed in order like the CPU
// (bit-identical to it), consecutive threads reading consecutive columns.
__global__ void bias_grad_columns_kernel(float* dbias, const float* dout, int64_t n, int64_t c) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < c;
       j += int64_t{gridDim.x} * blockDim.x) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += dout[i * c + j];
    dbias[j] = static_cast<float>(s);
  }
}

// plane > 1 ([N, C, H, W], conv): a block per channel, threads striding over (n, p).
__global__ void bias_grad_planes_kernel(float* dbias, const float* dout, int64_t n, int64_t c,
                                        int64_t plane) {
  __shared__ double scratch[32];
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    double s = 0.0;
    for (int64_t idx = threadIdx.x; idx < n * plane; idx += blockDim.x) {
      const int64_t i = idx / plane, p = idx - i * plane;
      s += dout[(i * c + ch) * plane + p];
    }
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) dbias[ch] = static_cast<float>(s);
  }
}

// A warp per plane: out[p] = mean of its hw values.
__global__ void global_avgpool_forward_kernel(float* out, const float* inp, int64_t planes,
                                              int64_t hw) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x >> 5);
  for (int64_t p = blockIdx.x * int64_t{blockDim.x >> 5} + (threadIdx.x >> 5); p < planes;
       p += warps) {
    const float* x = inp + p * hw;
    double s = 0.0;
    for (int64_t i = lane; i < hw; i += 32) s += x[i];
    s = warp_sum(s);
    if (lane == 0) out[p] = static_cast<float>(s / static_cast<double>(hw));
  }
}

__global__ void global_avgpool_backward_kernel(float* dinp, const float* dout, int64_t planes,
                                               int64_t hw) {
  const float div = static_cast<float>(hw);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < planes * hw;
       i += int64_t{gridDim.x} * blockDim.x)
    dinp[i] = __fdiv_rn(dout[i / hw], div);
}

}  // namespace

void bias_grad_reduce(float* dbias, const float* dout, int64_t n, int64_t c, int64_t plane,
                      cudaStream_t stream) {
  if (c <= 0) return;
  if (n <= 0 || plane <= 0) {
    fill(dbias, 0.0f, c, stream);
    return;
  }
  if (plane == 1)
    bias_grad_columns_kernel<<<grid_for(c, kReduceThreads), kReduceThreads, 0, stream>>>(
        dbias, dout, n, c);
  else
    bias_grad_planes_kernel<<<grid_for(c, 1), kReduceThreads, 0, stream>>>(dbias, dout, n, c,
                                                                           plane);
  REMAT_CUDA_LAUNCH_CHECK();
}

void global_avgpool_forward(float* out, const float* inp, int64_t planes, int64_t hw,
                            cudaStream_t stream) {
  REMAT_CHECK(hw > 0, "global_avgpool_forward: empty plane");
  if (planes <= 0) return;
  global_avgpool_forward_kernel<<<grid_for(planes, kReduceThreads / 32), kReduceThreads, 0,
                                  stream>>>(out, inp, planes, hw);
  REMAT_CUDA_LAUNCH_CHECK();
}

void global_avgpool_backward(float* dinp, const float* dout, int64_t planes, int64_t hw,
                             cudaStream_t stream) {
  if (planes <= 0 || hw <= 0) return;
  global_avgpool_backward_kernel<<<grid_for(planes * hw), kBlockSize, 0, stream>>>(dinp, dout,
                                                                                   planes, hw);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace remat
