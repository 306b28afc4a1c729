// Elementwise and data-movement kernels: fill, copies (plain and strided: concat,
// concat_slice; the 0213 permutation of attention heads), relu / relu6 forward and backward,
// bias + activation epilogue, n-ary add.
// Operation order and rounding follow the CPU reference (Note [kernel vs CPU rounding]).
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

// ---- generic unary / binary maps with a float4 fast path -----------------------------------

struct ReluOp {
  __device__ float operator()(float x) const { return x > 0.0f ? x : 0.0f; }
};
struct Relu6Op {
  __device__ float operator()(float x) const { return fminf(x > 0.0f ? x : 0.0f, 6.0f); }
};
// (dy, y) -> dx
struct ReluGradOp {
  __device__ float operator()(float dy, float y) const { return y > 0.0f ? dy : 0.0f; }
};
struct AddOp {
  __device__ float operator()(float a, float b) const { return __fadd_rn(a, b); }
};
struct Relu6GradOp {
  __device__ float operator()(float dy, float y) const {
    return (y > 0.0f && y < 6.0f) ? dy : 0.0f;
  }
};

template <typename Op>
__global__ void unary_kernel(float* out, const float* inp, int64_t n, Op op) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = op(inp[i]);
}

template <typename Op>
__global__ void unary_kernel_vec4(float4* out, const float4* inp, int64_t n4, Op op) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n4;
       i += int64_t{gridDim.x} * blockDim.x) {
    float4 v = inp[i];
    out[i] = make_float4(op(v.x), op(v.y), op(v.z), op(v.w));
  }
}

template <typename Op>
__global__ void binary_kernel(float* out, const float* a, const float* b, int64_t n, Op op) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = op(a[i], b[i]);
}

template <typename Op>
__global__ void binary_kernel_vec4(float4* out, const float4* a, const float4* b, int64_t n4,
                                   Op op) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n4;
       i += int64_t{gridDim.x} * blockDim.x) {
    float4 x = a[i], y = b[i];
    out[i] = make_float4(op(x.x, y.x), op(x.y, y.y), op(x.z, y.z), op(x.w, y.w));
  }
}

// The first 4 * (n / 4) elements as float4 when the pointers allow it, the tail scalar.
template <typename Op>
void launch_unary(float* out, const float* inp, int64_t n, Op op, cudaStream_t stream) {
  if (n <= 0) return;
  const int64_t n4 = aligned16(out, inp) ? n / 4 : 0;
  if (n4 > 0) {
    unary_kernel_vec4<<<grid_for(n4), kBlockSize, 0, stream>>>(
        reinterpret_cast<float4*>(out), reinterpret_cast<const float4*>(inp), n4, op);
    REMAT_CUDA_LAUNCH_CHECK();
  }
  const int64_t done = 4 * n4;
  if (n > done) {
    unary_kernel<<<grid_for(n - done), kBlockSize, 0, stream>>>(out + done, inp + done, n - done,
                                                                 op);
    REMAT_CUDA_LAUNCH_CHECK();
  }
}

template <typename Op>
void launch_binary(float* out, const float* a, const float* b, int64_t n, Op op,
                   cudaStream_t stream) {
  if (n <= 0) return;
  const int64_t n4 = aligned16(out, a, b) ? n / 4 : 0;
  if (n4 > 0) {
    binary_kernel_vec4<<<grid_for(n4), kBlockSize, 0, stream>>>(
        reinterpret_cast<float4*>(out), reinterpret_cast<const float4*>(a),
        reinterpret_cast<const float4*>(b), n4, op);
    REMAT_CUDA_LAUNCH_CHECK();
  }
  const int64_t done = 4 * n4;
  if (n > done) {
    binary_kernel<<<grid_for(n - done), kBlockSize, 0, stream>>>(out + done, a + done, b + done,
                                                                  n - done, op);
    REMAT_CUDA_LAUNCH_CHECK();
  }
}

// ---- fill, strided copy -----------------------------------------------------------------------

__global__ void fill_kernel(float* out, float value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = value;
}

// T is float or float4; strides and row_len are in units of T.
template <typename T>
__global__ void strided_copy_kernel(T* out, int64_t out_stride, const T* inp, int64_t inp_stride,
                                    int64_t rows, int64_t row_len) {
  const int64_t total = rows * row_len;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / row_len, j = i - r * row_len;
    out[r * out_stride + j] = inp[r * inp_stride + j];
  }
}

// ---- bias + activation, n-ary add -------------------------------------------------------------

__global__ void bias_act_kernel(float* out, const float* bias, int64_t n, int64_t c,
                                int64_t plane, KernelActivation act) {
  const int64_t total = n * c * plane;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    float v = out[i];
    if (bias) v = __fadd_rn(v, bias[(i / plane) % c]);
    if (act == KernelActivation::Relu) v = v > 0.0f ? v : 0.0f;
    else if (act == KernelActivation::Relu6) v = fminf(v > 0.0f ? v : 0.0f, 6.0f);
    out[i] = v;
  }
}

// plane % 4 == 0 and 16-byte aligned: four values of one channel per thread, and one 32-bit
// division per four values (the 64-bit division per value above dominates its run time).
__global__ void bias_act_kernel_vec4(float4* out, const float* bias, uint32_t c, uint32_t plane4,
                                     uint32_t total4, KernelActivation act) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total4; i += gridDim.x * blockDim.x) {
    const float b = bias[(i / plane4) % c];
    float4 v = out[i];
    float* e = &v.x;
    for (int j = 0; j < 4; ++j) {
      float x = __fadd_rn(e[j], b);
      if (act == KernelActivation::Relu) x = x > 0.0f ? x : 0.0f;
      else if (act == KernelActivation::Relu6) x = fminf(x > 0.0f ? x : 0.0f, 6.0f);
      e[j] = x;
    }
    out[i] = v;
  }
}

constexpr int kAddChunk = 8;  // input pointers per launch, passed by value
struct AddPtrs {
  const float* p[kAddChunk];
};

// out = (first ? p[0] : out) + p[1] + ... (left to right, like the CPU's y += x loop).
__global__ void add_kernel(float* out, AddPtrs ptrs, int k, bool first, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float acc = first ? ptrs.p[0][i] : __fadd_rn(out[i], ptrs.p[0][i]);
    for (int j = 1; j < k; ++j) acc = __fadd_rn(acc, ptrs.p[j][i]);
    out[i] = acc;
  }
}

// out[a, c, b, d] = inp[a, b, c, d]; one thread per output element (reads are strided by d3
// runs, writes coalesced).
__global__ void permute_0213_kernel(float* out, const float* inp, int64_t d1, int64_t d2,
                                    int64_t d3, int64_t total) {
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

void relu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  launch_unary(out, inp, n, ReluOp{}, stream);
}
void relu6_forward(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  launch_unary(out, inp, n, Relu6Op{}, stream);
}
void relu_backward(float* dinp, const float* dout, const float* out, int64_t n,
                   cudaStream_t stream) {
  launch_binary(dinp, dout, out, n, ReluGradOp{}, stream);
}
void relu6_backward(float* dinp, const float* dout, const float* out, int64_t n,
                    cudaStream_t stream) {
  launch_binary(dinp, dout, out, n, Relu6GradOp{}, stream);
}

void bias_act_forward(float* out, const float* bias, int64_t n, int64_t c, int64_t plane,
                      KernelActivation act, cudaStream_t stream) {
  const int64_t total = n * c * plane;
  if (total <= 0 || (!bias && act == KernelActivation::None)) return;
  if (!bias) {  // activation only: the vectorised maps
    if (act == KernelActivation::Relu) relu_forward(out, out, total, stream);
    else relu6_forward(out, out, total, stream);
    return;
  }
  if (plane % 4 == 0 && aligned16(out) && total / 4 < (int64_t{1} << 31)) {
    bias_act_kernel_vec4<<<grid_for(total / 4), kBlockSize, 0, stream>>>(
        reinterpret_cast<float4*>(out), bias, static_cast<uint32_t>(c),
        static_cast<uint32_t>(plane / 4), static_cast<uint32_t>(total / 4), act);
  } else {
    bias_act_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(out, bias, n, c, plane, act);
  }
  REMAT_CUDA_LAUNCH_CHECK();
}

void add_forward(float* out, const float* const* inps, int k, int64_t n, cudaStream_t stream) {
  REMAT_CHECK(k >= 1, "add_forward: needs at least one input, got " << k);
  if (n <= 0) return;
  if (k == 2) {  // the common case (residual adds, two-way gradient sums): vectorised
    launch_binary(out, inps[0], inps[1], n, AddOp{}, stream);
    return;
  }
  for (int base = 0; base < k; base += kAddChunk) {
    AddPtrs ptrs{};
    const int m = k - base < kAddChunk ? k - base : kAddChunk;
    for (int j = 0; j < m; ++j) ptrs.p[j] = inps[base + j];
    add_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(out, ptrs, m, base == 0, n);
    REMAT_CUDA_LAUNCH_CHECK();
  }
}

void concat_forward(float* out, const float* inp, int64_t n, int64_t c_in, int64_t c_out,
                    int64_t offset, int64_t inner, cudaStream_t stream) {
  REMAT_CHECK(offset >= 0 && offset + c_in <= c_out,
              "concat_forward: channels [" << offset << ", +" << c_in << ") outside " << c_out);
  strided_copy(out + offset * inner, c_out * inner, inp, c_in * inner, n, c_in * inner, stream);
}

void concat_slice_forward(float* dinp, const float* dout, int64_t n, int64_t c_total,
                          int64_t offset, int64_t channels, int64_t inner, cudaStream_t stream) {
  REMAT_CHECK(offset >= 0 && offset + channels <= c_total,
              "concat_slice_forward: channels [" << offset << ", +" << channels << ") outside "
                                                 << c_total);
  strided_copy(dinp, channels * inner, dout + offset * inner, c_total * inner, n,
               channels * inner, stream);
}

void permute_0213(float* out, const float* inp, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                  cudaStream_t stream) {
  const int64_t total = d0 * d1 * d2 * d3;
  if (total <= 0) return;
  permute_0213_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(out, inp, d1, d2, d3, total);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace remat
