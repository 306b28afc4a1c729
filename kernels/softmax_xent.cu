// Softmax cross-entropy on the device: the mean loss (a deterministic two-pass reduction in
// double: per-block partial sums over a grid fixed by the shape, then one block sums them in a
// fixed tree, so a recomputed loss is bit-identical) and the logits gradient. Labels outside
// [0, K) are recorded in an error slot of the workspace (the smallest bad sample index; an
// integer atomicMin, whose result does not depend on timing) for the op to report. The
// kernels are templated on the storage type T of the logits and their gradient (float or
// __nv_bfloat16, kernels/common.cuh): logits are widened exactly, the math is the F32 kernels',
// and a bf16 gradient is rounded from the FP32 result (Note [bf16 execution]); the loss is F32.
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

constexpr int kXentThreads = 256;         // threads per block of the per-sample kernels
constexpr int kXentWarps = kXentThreads / 32;
constexpr int kXentMaxBlocks = 1024;      // partial sums (and the finish block's width)
constexpr uint64_t kNoError = ~uint64_t{0};

// Samples are rows (inner == 1: a warp per sample, lanes stride over the K classes) or pixels
// (inner > 1: a thread per sample, consecutive threads read consecutive pixels).
unsigned xent_blocks(int64_t outer, int64_t inner) {
  const int64_t count = outer * inner;
  const int64_t per_block = inner == 1 ? kXentWarps : kXentThreads;
  int64_t b = (count + per_block - 1) / per_block;
  if (b < 1) b = 1;
  if (b > kXentMaxBlocks) b = kXentMaxBlocks;
  return static_cast<unsigned>(b);
}

__device__ __forceinline__ bool label_ok(int32_t y, int64_t k) { return y >= 0 && y < k; }

// ---- forward ----------------------------------------------------------------------------------

// inner == 1: per-block partial sums of logsumexp(z) - z[y] over rows, and of the number of
// rows counted (rows labelled `ignore` are skipped): partial[b] and partial[gridDim.x + b].
template <typename T>
__global__ void xent_rows_partial_kernel(double* partial, unsigned long long* error,
                                         const T* logits, const int32_t* labels,
                                         int64_t outer, int64_t k, int64_t ignore) {
  __shared__ double scratch[32];
  const int lane = threadIdx.x & 31;
  const int64_t warp0 = blockIdx.x * int64_t{kXentWarps} + (threadIdx.x >> 5);
  const int64_t warps = int64_t{gridDim.x} * kXentWarps;
  double acc = 0.0, counted = 0.0;
  for (int64_t o = warp0; o < outer; o += warps) {
    const int32_t y = labels[o];
    if (y == ignore) continue;  // the whole warp reads the same label
    const T* z = logits + o * k;
    float m = -INFINITY;
    for (int64_t c = lane; c < k; c += 32) m = fmaxf(m, ld(z[c]));
    m = warp_max(m);
    double s = 0.0;
    for (int64_t c = lane; c < k; c += 32) s += exp(static_cast<double>(ld(z[c])) - m);
    s = warp_sum(s);
    if (lane == 0) {
      counted += 1.0;
      if (label_ok(y, k)) acc += (m + log(s)) - static_cast<double>(ld(z[y]));
      else atomicMin(error, static_cast<unsigned long long>(o));
    }
  }
  const double total = block_sum(acc, scratch);
  const double rows = block_sum(counted, scratch);
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = total;
    partial[gridDim.x + blockIdx.x] = rows;
  }
}

// inner > 1: per-block partial sums over pixels (sample s = o * inner + i).
template <typename T>
__global__ void xent_pixels_partial_kernel(double* partial, unsigned long long* error,
                                           const T* logits, const int32_t* labels,
                                           int64_t outer, int64_t k, int64_t inner) {
  __shared__ double scratch[32];
  const int64_t count = outer * inner;
  double acc = 0.0;
  for (int64_t s = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; s < count;
       s += int64_t{gridDim.x} * blockDim.x) {
    const int64_t o = s / inner, i = s - o * inner;
    const T* z = logits + o * k * inner + i;
    float m = ld(z[0]);
    for (int64_t c = 1; c < k; ++c) m = fmaxf(m, ld(z[c * inner]));
    double e = 0.0;
    for (int64_t c = 0; c < k; ++c) e += exp(static_cast<double>(ld(z[c * inner])) - m);
    const int32_t y = labels[s];
    if (label_ok(y, k)) acc += (m + log(e)) - static_cast<double>(ld(z[y * inner]));
    else atomicMin(error, static_cast<unsigned long long>(s));
  }
  const double total = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

// One block of kXentMaxBlocks threads: loss[0] = sum(partial[0 .. blocks)) / count, where
// count > 0 is given (pixels) or 0: the rows counted, the sum of partial[blocks .. 2 blocks)
// (rows); the loss is 0 when every row is ignored, and NaN when a label was bad: inside a CUDA
// graph the op cannot read the error slot back, and a NaN loss makes the finite check re-run
// the step eagerly, where the op names the label (Note [step graphs]), forward-only graphs
// (an evaluation) included.
__global__ void xent_finish_kernel(float* loss, const double* partial, unsigned blocks,
                                   int64_t count, const unsigned long long* error) {
  __shared__ double scratch[32];
  const double v = threadIdx.x < blocks ? partial[threadIdx.x] : 0.0;
  const double total = block_sum(v, scratch);
  const double c = count == 0 && threadIdx.x < blocks ? partial[blocks + threadIdx.x] : 0.0;
  const double rows = count > 0 ? static_cast<double>(count) : block_sum(c, scratch);
  if (threadIdx.x == 0)
    loss[0] = *error != kNoError ? nanf("") : rows > 0 ? static_cast<float>(total / rows) : 0.0f;
}

// Counts the rows whose label is not `ignore` (integer atomics: the count does not depend on
// their order) into *count, which the caller zeroed.
__global__ void xent_count_kernel(unsigned long long* count, const int32_t* labels, int64_t outer,
                                  int64_t ignore) {
  unsigned long long mine = 0;
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < outer;
       o += int64_t{gridDim.x} * blockDim.x)
    mine += labels[o] != ignore;
  for (int off = 16; off > 0; off >>= 1) mine += __shfl_xor_sync(0xffffffffu, mine, off);
  if ((threadIdx.x & 31) == 0 && mine > 0) atomicAdd(count, mine);
}

// ---- backward ---------------------------------------------------------------------------------

// `count`: rows counted (device; null: inv_count is given).
template <typename T>
__global__ void xent_rows_backward_kernel(T* dlogits, const T* logits,
                                          const int32_t* labels, int64_t outer, int64_t k,
                                          double inv_count, int64_t ignore,
                                          const unsigned long long* count) {
  const int lane = threadIdx.x & 31;
  const int64_t warp0 = blockIdx.x * int64_t{kXentWarps} + (threadIdx.x >> 5);
  const int64_t warps = int64_t{gridDim.x} * kXentWarps;
  if (count) inv_count = *count > 0 ? 1.0 / static_cast<double>(*count) : 0.0;
  for (int64_t o = warp0; o < outer; o += warps) {
    const T* z = logits + o * k;
    T* dz = dlogits + o * k;
    if (labels[o] == ignore) {
      for (int64_t c = lane; c < k; c += 32) dz[c] = st<T>(0.0f);
      continue;
    }
    float m = -INFINITY;
    for (int64_t c = lane; c < k; c += 32) m = fmaxf(m, ld(z[c]));
    m = warp_max(m);
    double s = 0.0;
    for (int64_t c = lane; c < k; c += 32) s += exp(static_cast<double>(ld(z[c])) - m);
    s = warp_sum(s);
    const double lse = m + log(s);
    const int32_t y = labels[o];
    const bool ok = label_ok(y, k);
    for (int64_t c = lane; c < k; c += 32) {
      const double p = exp(static_cast<double>(ld(z[c])) - lse);
      dz[c] = st<T>(ok ? static_cast<float>((p - (c == y ? 1.0 : 0.0)) * inv_count) : NAN);
    }
  }
}

template <typename T>
__global__ void xent_pixels_backward_kernel(T* dlogits, const T* logits,
                                            const int32_t* labels, int64_t outer, int64_t k,
                                            int64_t inner, double inv_count) {
  const int64_t count = outer * inner;
  for (int64_t s = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; s < count;
       s += int64_t{gridDim.x} * blockDim.x) {
    const int64_t o = s / inner, i = s - o * inner;
    const int64_t base = o * k * inner + i;
    const T* z = logits + base;
    float m = ld(z[0]);
    for (int64_t c = 1; c < k; ++c) m = fmaxf(m, ld(z[c * inner]));
    double e = 0.0;
    for (int64_t c = 0; c < k; ++c) e += exp(static_cast<double>(ld(z[c * inner])) - m);
    const double lse = m + log(e);
    const int32_t y = labels[s];
    const bool ok = label_ok(y, k);
    for (int64_t c = 0; c < k; ++c) {
      const double p = exp(static_cast<double>(ld(z[c * inner])) - lse);
      dlogits[base + c * inner] =
          st<T>(ok ? static_cast<float>((p - (c == y ? 1.0 : 0.0)) * inv_count) : NAN);
    }
  }
}

template <typename T>
void softmax_xent_forward_impl(float* loss, void* workspace, const T* logits,
                               const int32_t* labels, int64_t outer, int64_t k, int64_t inner,
                               int64_t ignore_index, cudaStream_t stream) {
  REMAT_CHECK(outer > 0 && k > 0 && inner > 0 && workspace != nullptr,
              "softmax_xent_forward: outer " << outer << ", k " << k << ", inner " << inner
                                             << ", workspace " << workspace);
  auto* error = static_cast<unsigned long long*>(workspace);
  auto* partial = reinterpret_cast<double*>(static_cast<char*>(workspace) + sizeof(uint64_t));
  REMAT_CUDA_CHECK(cudaMemsetAsync(error, 0xFF, sizeof(uint64_t), stream));  // kNoError
  const unsigned blocks = xent_blocks(outer, inner);
  REMAT_CHECK(inner == 1 || ignore_index == kXentNoIgnore,
              "softmax_xent_forward: an ignore index applies to rows (inner 1) only");
  if (inner == 1)
    xent_rows_partial_kernel<T><<<blocks, kXentThreads, 0, stream>>>(partial, error, logits,
                                                                     labels, outer, k,
                                                                     ignore_index);
  else
    xent_pixels_partial_kernel<T><<<blocks, kXentThreads, 0, stream>>>(partial, error, logits,
                                                                       labels, outer, k, inner);
  REMAT_CUDA_LAUNCH_CHECK();
  xent_finish_kernel<<<1, kXentMaxBlocks, 0, stream>>>(loss, partial, blocks,
                                                       inner == 1 ? 0 : outer * inner, error);
  REMAT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void softmax_xent_backward_impl(T* dlogits, const T* logits, const int32_t* labels, int64_t outer,
                                int64_t k, int64_t inner, int64_t ignore_index, void* workspace,
                                cudaStream_t stream) {
  REMAT_CHECK(outer > 0 && k > 0 && inner > 0,
              "softmax_xent_backward: outer " << outer << ", k " << k << ", inner " << inner);
  REMAT_CHECK(inner == 1 || ignore_index == kXentNoIgnore,
              "softmax_xent_backward: an ignore index applies to rows (inner 1) only");
  const double inv_count = 1.0 / static_cast<double>(outer * inner);  // as the CPU computes it
  const unsigned blocks = xent_blocks(outer, inner);
  unsigned long long* count = nullptr;
  if (ignore_index != kXentNoIgnore) {
    REMAT_CHECK(workspace != nullptr, "softmax_xent_backward: an ignore index needs workspace");
    count = static_cast<unsigned long long*>(workspace);
    REMAT_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(uint64_t), stream));
    xent_count_kernel<<<grid_for(outer), kBlockSize, 0, stream>>>(count, labels, outer, ignore_index);
    REMAT_CUDA_LAUNCH_CHECK();
  }
  if (inner == 1)
    xent_rows_backward_kernel<T><<<blocks, kXentThreads, 0, stream>>>(
        dlogits, logits, labels, outer, k, inv_count, ignore_index, count);
  else
    xent_pixels_backward_kernel<T><<<blocks, kXentThreads, 0, stream>>>(
        dlogits, logits, labels, outer, k, inner, inv_count);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace

int64_t softmax_xent_workspace_bytes(int64_t outer, int64_t inner) {
  return static_cast<int64_t>(sizeof(uint64_t)) +
         2 * static_cast<int64_t>(xent_blocks(outer, inner)) * static_cast<int64_t>(sizeof(double));
}

void softmax_xent_forward(float* loss, void* workspace, const float* logits,
                          const int32_t* labels, int64_t outer, int64_t k, int64_t inner,
                          int64_t ignore_index, cudaStream_t stream) {
  softmax_xent_forward_impl(loss, workspace, logits, labels, outer, k, inner, ignore_index,
                            stream);
}
void softmax_xent_forward(float* loss, void* workspace, const uint16_t* logits,
                          const int32_t* labels, int64_t outer, int64_t k, int64_t inner,
                          int64_t ignore_index, cudaStream_t stream) {
  softmax_xent_forward_impl(loss, workspace, bf16_ptr(logits), labels, outer, k, inner,
                            ignore_index, stream);
}

int64_t softmax_xent_backward_workspace_bytes(int64_t ignore_index) {
  return ignore_index == kXentNoIgnore ? 0 : static_cast<int64_t>(sizeof(uint64_t));
}

void softmax_xent_backward(float* dlogits, const float* logits, const int32_t* labels,
                           int64_t outer, int64_t k, int64_t inner, int64_t ignore_index,
                           void* workspace, cudaStream_t stream) {
  softmax_xent_backward_impl(dlogits, logits, labels, outer, k, inner, ignore_index, workspace,
                             stream);
}
void softmax_xent_backward(uint16_t* dlogits, const uint16_t* logits, const int32_t* labels,
                           int64_t outer, int64_t k, int64_t inner, int64_t ignore_index,
                           void* workspace, cudaStream_t stream) {
  softmax_xent_backward_impl(bf16_ptr(dlogits), bf16_ptr(logits), labels, outer, k, inner,
                             ignore_index, workspace, stream);
}

uint64_t softmax_xent_read_error(const void* workspace, const int32_t* labels,
                                 int32_t* bad_label, cudaStream_t stream) {
  uint64_t slot = kNoError;
  REMAT_CUDA_CHECK(
      cudaMemcpyAsync(&slot, workspace, sizeof(slot), cudaMemcpyDeviceToHost, stream));
  REMAT_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (slot != kNoError && bad_label) {
    REMAT_CUDA_CHECK(cudaMemcpyAsync(bad_label, labels + slot, sizeof(int32_t),
                                     cudaMemcpyDeviceToHost, stream));
    REMAT_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return slot;
}

}  // namespace remat
