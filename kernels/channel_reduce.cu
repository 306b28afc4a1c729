// Per-channel reductions over (n, plane) of NCHW tensors, deterministic and spread over the
// whole GPU: the bias gradient (batch-norm's own reductions: batchnorm.cu). See Note [channel
// reductions] in channel_slices.cuh.
// Templated on the storage type T of the activations read (dout, x, dy: float or __nv_bfloat16,
// kernels/common.cuh): bf16 values are widened exactly and summed as the F32 kernels sum them;
// the gradient written (dbias) stays float.
#include <algorithm>

#include "kernels/channel_slices.cuh"
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

constexpr int kThreads = kSliceThreads;

// partial[(ch * splits + s)] = sum of dout over slice s of channel ch, in packs of V values
// (Note [packed channel walks]).
template <int V, typename T>
__global__ void bias_grad_partial_kernel(double* partial, const T* dout, int64_t n, int64_t c,
                                         int64_t plane, int64_t splits) {
  using P = Pack<T, V>;
  __shared__ double scratch[32];
  const ChannelSlice sl = block_slice(n, plane / V, splits);
  double acc = 0.0;
  for_slice<V>(
      sl.ch, c, plane / V, sl.begin, sl.end,
      [&](int64_t o) { return *reinterpret_cast<const P*>(dout + o); },
      [&](const P& p) {
#pragma unroll
        for (int i = 0; i < V; ++i) acc += ld(p.v[i]);
      });
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void bias_grad_final_kernel(float* dbias, const double* partial, int64_t c,
                                       int64_t splits) {
  for (int64_t ch = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; ch < c;
       ch += int64_t{gridDim.x} * blockDim.x) {
    double s = 0.0;
    for (int64_t k = 0; k < splits; ++k) s += partial[ch * splits + k];
    dbias[ch] = static_cast<float>(s);
  }
}

// plane == 1 ([N, C], dense). Up to kDirectRows rows: a thread per column, rows summed in
// order in double like the CPU (bit-identical to it), consecutive threads reading consecutive
// columns, no workspace. More rows: column_sum (layernorm.cu's fixed row slices), since a thread
// per column over all rows starves the GPU (768 threads over GPT-2's 8,192 rows: milliseconds
// per bias).
constexpr int64_t kDirectRows = 64;

template <typename T>
__global__ void bias_grad_columns_kernel(float* dbias, const T* dout, int64_t n, int64_t c) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < c;
       j += int64_t{gridDim.x} * blockDim.x) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += ld(dout[i * c + j]);
    dbias[j] = static_cast<float>(s);
  }
}

void column_sum_of(float* out, const float* inp, int64_t n, int64_t c, void* ws, cudaStream_t s) {
  column_sum(out, inp, n, c, ws, s);
}
void column_sum_of(float* out, const __nv_bfloat16* inp, int64_t n, int64_t c, void* ws,
                   cudaStream_t s) {
  column_sum(out, reinterpret_cast<const uint16_t*>(inp), n, c, ws, s);
}

template <typename T>
void bias_grad_reduce_impl(float* dbias, const T* dout, int64_t n, int64_t c, int64_t plane,
                           void* workspace, cudaStream_t stream) {
  if (c <= 0) return;
  if (n <= 0 || plane <= 0) {
    fill(dbias, 0.0f, c, stream);
    return;
  }
  if (plane == 1 && n <= kDirectRows) {
    bias_grad_columns_kernel<T><<<grid_for(c, kThreads), kThreads, 0, stream>>>(dbias, dout, n,
                                                                               c);
    REMAT_CUDA_LAUNCH_CHECK();
    return;
  }
  REMAT_CHECK(workspace, "bias_grad_reduce: needs bias_grad_workspace_bytes of workspace");
  if (plane == 1) return column_sum_of(dbias, dout, n, c, workspace, stream);
  const int64_t splits = splits_for(n, c, plane);
  auto* partial = static_cast<double*>(workspace);
  with_pack_width<T>(pack_width<T>(plane, dout), [&](auto w) {
    bias_grad_partial_kernel<decltype(w)::value, T>
        <<<static_cast<unsigned>(c * splits), kThreads, 0, stream>>>(partial, dout, n, c, plane,
                                                                     splits);
    REMAT_CUDA_LAUNCH_CHECK();
  });
  bias_grad_final_kernel<<<grid_for(c, kThreads), kThreads, 0, stream>>>(dbias, partial, c,
                                                                        splits);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace

int64_t bias_grad_workspace_bytes(int64_t n, int64_t c, int64_t plane) {
  if (n <= 0 || c <= 0 || plane <= 0) return 0;
  if (plane == 1) return n <= kDirectRows ? 0 : column_sum_workspace_bytes(n, c);
  return c * splits_for(n, c, plane) * static_cast<int64_t>(sizeof(double));
}

void bias_grad_reduce(float* dbias, const float* dout, int64_t n, int64_t c, int64_t plane,
                      void* workspace, cudaStream_t stream) {
  bias_grad_reduce_impl(dbias, dout, n, c, plane, workspace, stream);
}
void bias_grad_reduce(float* dbias, const uint16_t* dout, int64_t n, int64_t c, int64_t plane,
                      void* workspace, cudaStream_t stream) {
  bias_grad_reduce_impl(dbias, bf16_ptr(dout), n, c, plane, workspace, stream);
}

}  // namespace remat
