// Token and position embeddings on the device: the table lookup, its deterministic gradient
// (CUB's stable radix sort of (id, position) pairs, then one warp per id summing its rows in
// position order; Note [deterministic embedding gradient] in ops/embedding.cpp) and the
// broadcast add of learned positions, and ViT's class token (a learned row before each sample's
// tokens) with its gradient. The token embedding is F32 only; the position add and the class
// token are templated on the storage type T of their data (float or __nv_bfloat16,
// kernels/common.cuh), the table and the token staying float.
#include <cub/device/device_radix_sort.cuh>

#include <cmath>

#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

__global__ void embedding_forward_kernel(float* out, const int32_t* ids, const float* weight,
                                         int64_t rows, int64_t dim, int64_t vocab) {
  const int64_t total = rows * dim;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e / dim, c = e - r * dim;
    const int32_t id = ids[r];
    out[e] = id >= 0 && id < vocab ? weight[id * dim + c] : NAN;
  }
}

__global__ void iota_kernel(int32_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = static_cast<int32_t>(i);
}

// One warp per sorted index i that starts a run of equal ids: dweight[id, c] = the run's dout
// rows summed in double in position order (lanes stride over c). Ids outside [0, vocab) are
// skipped.
__global__ void embedding_runs_kernel(float* dweight, const float* dout, const int32_t* keys,
                                      const int32_t* positions, int64_t rows, int64_t dim,
                                      int64_t vocab) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x >> 5);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x >> 5} + (threadIdx.x >> 5); i < rows;
       i += warps) {
    const int32_t id = keys[i];
    if ((i > 0 && keys[i - 1] == id) || id < 0 || id >= vocab) continue;
    int64_t end = i + 1;
    while (end < rows && keys[end] == id) ++end;
    for (int64_t c = lane; c < dim; c += 32) {
      double s = 0.0;
      for (int64_t k = i; k < end; ++k) s += dout[static_cast<int64_t>(positions[k]) * dim + c];
      dweight[id * dim + c] = static_cast<float>(s);
    }
  }
}

// The sum in FP32, rounded once into a bf16 out: the CPU's x + w[k], then the staging's rounding.
template <typename T>
__global__ void position_add_kernel(T* out, const T* inp, const float* table, int64_t n,
                                    int64_t inner) {
  const int64_t total = n * inner;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x)
    out[e] = st<T>(__fadd_rn(ld(inp[e]), table[e % inner]));
}

// Element e of out (n, t + 1, c): row 0 the weight, rows 1.. inp's.
template <typename T>
__global__ void class_token_kernel(T* out, const T* inp, const float* weight, int64_t n, int64_t t,
                                   int64_t c) {
  const int64_t total = n * (t + 1) * c;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = e / ((t + 1) * c), row = e / c % (t + 1), k = e % c;
    out[e] = row == 0 ? st<T>(weight[k]) : inp[(s * t + row - 1) * c + k];
  }
}

// A thread per channel k: dweight[k] = sum over s of dout[s, 0, k], s in order.
template <typename T>
__global__ void class_token_grad_kernel(float* dweight, const T* dout, int64_t n, int64_t t,
                                        int64_t c) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < c;
       k += int64_t{gridDim.x} * blockDim.x) {
    double sum = 0.0;
    for (int64_t s = 0; s < n; ++s) sum += ld(dout[s * (t + 1) * c + k]);
    dweight[k] = static_cast<float>(sum);
  }
}

template <typename T>
void class_token_forward_impl(T* out, const T* inp, const float* weight, int64_t n, int64_t t,
                              int64_t c, cudaStream_t stream) {
  if (n <= 0 || c <= 0) return;
  class_token_kernel<T><<<grid_for(n * (t + 1) * c), kBlockSize, 0, stream>>>(out, inp, weight, n,
                                                                             t, c);
  REMAT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void class_token_backward_impl(float* dweight, const T* dout, int64_t n, int64_t t, int64_t c,
                               cudaStream_t stream) {
  if (c <= 0) return;
  class_token_grad_kernel<T><<<grid_for(c), kBlockSize, 0, stream>>>(dweight, dout, n, t, c);
  REMAT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void position_embedding_forward_impl(T* out, const T* inp, const float* table, int64_t n,
                                     int64_t inner, cudaStream_t stream) {
  if (n <= 0 || inner <= 0) return;
  position_add_kernel<T><<<grid_for(n * inner), kBlockSize, 0, stream>>>(out, inp, table, n,
                                                                          inner);
  REMAT_CUDA_LAUNCH_CHECK();
}

// Workspace layout: keys out, positions in, positions out (int32 each, rows), then CUB's scratch;
// each part 256-byte aligned.
int64_t align256(int64_t b) { return (b + 255) / 256 * 256; }

// All 32 key bits are sorted, so that an id outside [0, vocab) cannot interleave with valid
// ones (its rows are skipped; its forward rows are NaN).
size_t cub_scratch_bytes(int64_t rows) {
  size_t bytes = 0;
  REMAT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<int>(rows)));
  return bytes;
}

}  // namespace

void embedding_forward(float* out, const int32_t* ids, const float* weight, int64_t rows,
                       int64_t dim, int64_t vocab, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return;
  embedding_forward_kernel<<<grid_for(rows * dim), kBlockSize, 0, stream>>>(out, ids, weight, rows,
                                                                           dim, vocab);
  REMAT_CUDA_LAUNCH_CHECK();
}

int64_t embedding_backward_workspace_bytes(int64_t rows, int64_t vocab) {
  REMAT_CHECK(rows >= 0 && rows <= INT32_MAX && vocab >= 1,
              "embedding gradient: " << rows << " tokens exceed the sort's int range");
  return 3 * align256(rows * 4) + align256(static_cast<int64_t>(cub_scratch_bytes(rows)));
}

void embedding_backward(float* dweight, const float* dout, const int32_t* ids, int64_t rows,
                        int64_t dim, int64_t vocab, void* workspace, int64_t workspace_bytes,
                        cudaStream_t stream) {
  REMAT_CHECK(workspace_bytes >= embedding_backward_workspace_bytes(rows, vocab),
              "embedding_backward: workspace " << workspace_bytes << " bytes, needs "
                                               << embedding_backward_workspace_bytes(rows, vocab));
  REMAT_CUDA_CHECK(cudaMemsetAsync(dweight, 0, static_cast<size_t>(vocab * dim) * sizeof(float),
                                   stream));
  if (rows <= 0) return;
  char* w = static_cast<char*>(workspace);
  auto* keys_out = reinterpret_cast<int32_t*>(w);
  auto* pos_in = reinterpret_cast<int32_t*>(w + align256(rows * 4));
  auto* pos_out = reinterpret_cast<int32_t*>(w + 2 * align256(rows * 4));
  void* scratch = w + 3 * align256(rows * 4);
  size_t scratch_bytes = cub_scratch_bytes(rows);
  iota_kernel<<<grid_for(rows), kBlockSize, 0, stream>>>(pos_in, rows);
  REMAT_CUDA_LAUNCH_CHECK();
  REMAT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(scratch, scratch_bytes, ids, keys_out, pos_in,
                                                   pos_out, static_cast<int>(rows), 0, 32,
                                                   stream));
  constexpr int kWarpsPerBlock = kBlockSize / 32;
  embedding_runs_kernel<<<grid_for(rows, kWarpsPerBlock), kBlockSize, 0, stream>>>(
      dweight, dout, keys_out, pos_out, rows, dim, vocab);
  REMAT_CUDA_LAUNCH_CHECK();
}

void position_embedding_forward(float* out, const float* inp, const float* table, int64_t n,
                                int64_t inner, cudaStream_t stream) {
  position_embedding_forward_impl(out, inp, table, n, inner, stream);
}
void position_embedding_forward(uint16_t* out, const uint16_t* inp, const float* table, int64_t n,
                                int64_t inner, cudaStream_t stream) {
  position_embedding_forward_impl(bf16_ptr(out), bf16_ptr(inp), table, n, inner, stream);
}

void class_token_forward(float* out, const float* inp, const float* weight, int64_t n, int64_t t,
                         int64_t c, cudaStream_t stream) {
  class_token_forward_impl(out, inp, weight, n, t, c, stream);
}
void class_token_forward(uint16_t* out, const uint16_t* inp, const float* weight, int64_t n,
                         int64_t t, int64_t c, cudaStream_t stream) {
  class_token_forward_impl(bf16_ptr(out), bf16_ptr(inp), weight, n, t, c, stream);
}
void class_token_backward(float* dweight, const float* dout, int64_t n, int64_t t, int64_t c,
                          cudaStream_t stream) {
  class_token_backward_impl(dweight, dout, n, t, c, stream);
}
void class_token_backward(float* dweight, const uint16_t* dout, int64_t n, int64_t t, int64_t c,
                          cudaStream_t stream) {
  class_token_backward_impl(dweight, bf16_ptr(dout), n, t, c, stream);
}

}  // namespace remat
