// Data-movement kernels: fill, copies (plain and strided: concat, concat_slice) and the 0213
// permutation of attention heads (split_heads, merge_heads). They move values unchanged, bf16
// as 2-byte units (or wider units that hold several), so F32 and bf16 share them.
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

// ---- fill, strided copy -----------------------------------------------------------------------

__global__ void fill_kernel(float* out, float value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = value;
}

// U is the unit copied: float or float4 (F32), or an unsigned integer of 1 to 16 bytes (bf16,
// strided_copy_bytes); strides and row_len are in units of U.
template <typename U>
__global__ void strided_copy_kernel(U* out, int64_t out_stride, const U* inp, int64_t inp_stride,
                                    int64_t rows, int64_t row_len) {
  const int64_t total = rows * row_len;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / row_len, j = i - r * row_len;
    out[r * out_stride + j] = inp[r * inp_stride + j];
  }
}

template <typename U>
void launch_strided_copy(void* out, int64_t out_stride, const void* inp, int64_t inp_stride,
                         int64_t rows, int64_t row_bytes, cudaStream_t stream) {
  constexpr int64_t s = sizeof(U);
  strided_copy_kernel<U><<<grid_for(rows * (row_bytes / s)), kBlockSize, 0, stream>>>(
      static_cast<U*>(out), out_stride / s, static_cast<const U*>(inp), inp_stride / s, rows,
      row_bytes / s);
  REMAT_CUDA_LAUNCH_CHECK();
}

// Rows of row_bytes bytes, strides in bytes, copied in the widest unit (16, 8, 4, 2 or 1 bytes)
// that divides both addresses, both strides and the row: a copy converts nothing, so the unit
// need not be the element (8 bf16 values per 16-byte unit when the shapes allow it).
void strided_copy_bytes(void* out, int64_t out_stride, const void* inp, int64_t inp_stride,
                        int64_t rows, int64_t row_bytes, cudaStream_t stream) {
  if (rows <= 0 || row_bytes <= 0) return;
  const uint64_t all = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(out)) |
                       static_cast<uint64_t>(reinterpret_cast<uintptr_t>(inp)) |
                       static_cast<uint64_t>(out_stride) | static_cast<uint64_t>(inp_stride) |
                       static_cast<uint64_t>(row_bytes);
  if (all % 16 == 0)
    launch_strided_copy<uint4>(out, out_stride, inp, inp_stride, rows, row_bytes, stream);
  else if (all % 8 == 0)
    launch_strided_copy<uint2>(out, out_stride, inp, inp_stride, rows, row_bytes, stream);
  else if (all % 4 == 0)
    launch_strided_copy<uint32_t>(out, out_stride, inp, inp_stride, rows, row_bytes, stream);
  else if (all % 2 == 0)
    launch_strided_copy<uint16_t>(out, out_stride, inp, inp_stride, rows, row_bytes, stream);
  else
    launch_strided_copy<uint8_t>(out, out_stride, inp, inp_stride, rows, row_bytes, stream);
}

// out[a, c, b, d] = inp[a, b, c, d]; one thread per output element (reads are strided by d3
// runs, writes coalesced). Moves T values unchanged.
template <typename T>
__global__ void permute_0213_kernel(T* out, const T* inp, int64_t d1, int64_t d2, int64_t d3,
                                    int64_t total) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t d = e % d3;
    int64_t rest = e / d3;
    const int64_t b = rest % d1;
    rest /= d1;
    const int64_t c = rest % d2, a = rest / d2;
    out[e] = inp[((a * d1 + b) * d2 + c) * d3 + d];
  }
}

template <typename T>
void launch_permute_0213(T* out, const T* inp, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                         cudaStream_t stream) {
  const int64_t total = d0 * d1 * d2 * d3;
  if (total <= 0) return;
  permute_0213_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(out, inp, d1, d2, d3, total);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void fill(float* out, float value, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  fill_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(out, value, n);
  REMAT_CUDA_LAUNCH_CHECK();
}

void copy_forward(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  if (n <= 0 || out == inp) return;
  REMAT_CUDA_CHECK(cudaMemcpyAsync(out, inp, static_cast<size_t>(n) * sizeof(float),
                                   cudaMemcpyDeviceToDevice, stream));
}
void copy_forward(uint16_t* out, const uint16_t* inp, int64_t n, cudaStream_t stream) {
  if (n <= 0 || out == inp) return;
  REMAT_CUDA_CHECK(cudaMemcpyAsync(out, inp, static_cast<size_t>(n) * sizeof(uint16_t),
                                   cudaMemcpyDeviceToDevice, stream));
}

void strided_copy(float* out, int64_t out_stride, const float* inp, int64_t inp_stride,
                  int64_t rows, int64_t row_len, cudaStream_t stream) {
  if (rows <= 0 || row_len <= 0) return;
  if (aligned16(out, inp) && row_len % 4 == 0 && out_stride % 4 == 0 && inp_stride % 4 == 0) {
    const int64_t len4 = row_len / 4;
    strided_copy_kernel<float4><<<grid_for(rows * len4), kBlockSize, 0, stream>>>(
        reinterpret_cast<float4*>(out), out_stride / 4, reinterpret_cast<const float4*>(inp),
        inp_stride / 4, rows, len4);
  } else {
    strided_copy_kernel<float><<<grid_for(rows * row_len), kBlockSize, 0, stream>>>(
        out, out_stride, inp, inp_stride, rows, row_len);
  }
  REMAT_CUDA_LAUNCH_CHECK();
}
void strided_copy(uint16_t* out, int64_t out_stride, const uint16_t* inp, int64_t inp_stride,
                  int64_t rows, int64_t row_len, cudaStream_t stream) {
  const int64_t e = sizeof(uint16_t);
  strided_copy_bytes(out, e * out_stride, inp, e * inp_stride, rows, e * row_len, stream);
}

namespace {
// concat and its slice for either storage type (strided_copy has an overload per element size).
template <typename T>
void concat_into(T* out, const T* inp, int64_t n, int64_t c_in, int64_t c_out, int64_t offset,
                 int64_t inner, cudaStream_t stream) {
  REMAT_CHECK(offset >= 0 && offset + c_in <= c_out,
              "concat_forward: channels [" << offset << ", +" << c_in << ") outside " << c_out);
  strided_copy(out + offset * inner, c_out * inner, inp, c_in * inner, n, c_in * inner, stream);
}
template <typename T>
void concat_slice_of(T* dinp, const T* dout, int64_t n, int64_t c_total, int64_t offset,
                     int64_t channels, int64_t inner, cudaStream_t stream) {
  REMAT_CHECK(offset >= 0 && offset + channels <= c_total,
              "concat_slice_forward: channels [" << offset << ", +" << channels << ") outside "
                                                 << c_total);
  strided_copy(dinp, channels * inner, dout + offset * inner, c_total * inner, n,
               channels * inner, stream);
}
}  // namespace

void concat_forward(float* out, const float* inp, int64_t n, int64_t c_in, int64_t c_out,
                    int64_t offset, int64_t inner, cudaStream_t stream) {
  concat_into(out, inp, n, c_in, c_out, offset, inner, stream);
}
void concat_forward(uint16_t* out, const uint16_t* inp, int64_t n, int64_t c_in, int64_t c_out,
                    int64_t offset, int64_t inner, cudaStream_t stream) {
  concat_into(out, inp, n, c_in, c_out, offset, inner, stream);
}

void concat_slice_forward(float* dinp, const float* dout, int64_t n, int64_t c_total,
                          int64_t offset, int64_t channels, int64_t inner, cudaStream_t stream) {
  concat_slice_of(dinp, dout, n, c_total, offset, channels, inner, stream);
}
void concat_slice_forward(uint16_t* dinp, const uint16_t* dout, int64_t n, int64_t c_total,
                          int64_t offset, int64_t channels, int64_t inner, cudaStream_t stream) {
  concat_slice_of(dinp, dout, n, c_total, offset, channels, inner, stream);
}

void permute_0213(float* out, const float* inp, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                  cudaStream_t stream) {
  launch_permute_0213(out, inp, d0, d1, d2, d3, stream);
}
void permute_0213(uint16_t* out, const uint16_t* inp, int64_t d0, int64_t d1, int64_t d2,
                  int64_t d3, cudaStream_t stream) {
  launch_permute_0213(bf16_ptr(out), bf16_ptr(inp), d0, d1, d2, d3, stream);
}

}  // namespace remat
