// Elementwise kernels: relu / relu6 forward and backward, the bias + activation epilogue,
// n-ary add (fill and the copies are kernels/copy.cu's).
// Operation order and rounding follow the CPU reference (Note [kernel vs CPU rounding]). The
// kernels are templated on their tensors' storage type T, float or __nv_bfloat16 (common.cuh):
// a bf16 kernel computes in float exactly as the F32 one and rounds each stored result once,
// which is what the backends' staging of an FP32 kernel gives (Note [bf16 execution]).
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

// ---- sixteen-byte packs for the vectorised paths ----------------------------------------------
// Pack16<T>::type holds kLanes values of T in 16 bytes, loaded and stored as one vector.
struct alignas(16) Bf16x8 {
  __nv_bfloat16 v[8];
};
template <typename T>
struct Pack16;
template <>
struct Pack16<float> {
  using type = float4;
  static constexpr int kLanes = 4;
};
template <>
struct Pack16<__nv_bfloat16> {
  using type = Bf16x8;
  static constexpr int kLanes = 8;
};
__device__ __forceinline__ float* lanes(float4& v) { return &v.x; }
__device__ __forceinline__ __nv_bfloat16* lanes(Bf16x8& v) { return v.v; }

// Host pointers as the kernels' storage types (the launchers' uint16_t* is __nv_bfloat16*).
inline const float* typed_ptr(const float* p) { return p; }
inline const __nv_bfloat16* typed_ptr(const uint16_t* p) { return bf16_ptr(p); }

// ---- generic unary / binary maps with a 16-byte fast path -------------------------------------

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

// op on every value of a pack: float4 as the F32 kernels always did, bf16 widened and rounded
// back one value at a time.
template <typename Op>
__device__ __forceinline__ float4 map_pack(float4 v, Op op) {
  return make_float4(op(v.x), op(v.y), op(v.z), op(v.w));
}
template <typename Op>
__device__ __forceinline__ Bf16x8 map_pack(Bf16x8 v, Op op) {
  Bf16x8 r;
#pragma unroll
  for (int j = 0; j < 8; ++j) r.v[j] = st<__nv_bfloat16>(op(ld(v.v[j])));
  return r;
}
template <typename Op>
__device__ __forceinline__ float4 map_pack(float4 x, float4 y, Op op) {
  return make_float4(op(x.x, y.x), op(x.y, y.y), op(x.z, y.z), op(x.w, y.w));
}
template <typename Op>
__device__ __forceinline__ Bf16x8 map_pack(Bf16x8 x, Bf16x8 y, Op op) {
  Bf16x8 r;
#pragma unroll
  for (int j = 0; j < 8; ++j) r.v[j] = st<__nv_bfloat16>(op(ld(x.v[j]), ld(y.v[j])));
  return r;
}

template <typename T, typename Op>
__global__ void unary_kernel(T* out, const T* inp, int64_t n, Op op) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = st<T>(op(ld(inp[i])));
}

// P: a Pack16 type; nv packs.
template <typename P, typename Op>
__global__ void unary_kernel_vec(P* out, const P* inp, int64_t nv, Op op) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < nv;
       i += int64_t{gridDim.x} * blockDim.x) {
    const P v = inp[i];
    out[i] = map_pack(v, op);
  }
}

template <typename T, typename Op>
__global__ void binary_kernel(T* out, const T* a, const T* b, int64_t n, Op op) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = st<T>(op(ld(a[i]), ld(b[i])));
}

template <typename P, typename Op>
__global__ void binary_kernel_vec(P* out, const P* a, const P* b, int64_t nv, Op op) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < nv;
       i += int64_t{gridDim.x} * blockDim.x) {
    const P x = a[i], y = b[i];
    out[i] = map_pack(x, y, op);
  }
}

// The first kLanes * (n / kLanes) elements as packs when the pointers allow it, the tail scalar.
template <typename T, typename Op>
void launch_unary(T* out, const T* inp, int64_t n, Op op, cudaStream_t stream) {
  using P = typename Pack16<T>::type;
  constexpr int64_t kLanes = Pack16<T>::kLanes;
  if (n <= 0) return;
  const int64_t nv = aligned16(out, inp) ? n / kLanes : 0;
  if (nv > 0) {
    unary_kernel_vec<<<grid_for(nv), kBlockSize, 0, stream>>>(
        reinterpret_cast<P*>(out), reinterpret_cast<const P*>(inp), nv, op);
    REMAT_CUDA_LAUNCH_CHECK();
  }
  const int64_t done = kLanes * nv;
  if (n > done) {
    unary_kernel<<<grid_for(n - done), kBlockSize, 0, stream>>>(out + done, inp + done, n - done,
                                                                 op);
    REMAT_CUDA_LAUNCH_CHECK();
  }
}

template <typename T, typename Op>
void launch_binary(T* out, const T* a, const T* b, int64_t n, Op op, cudaStream_t stream) {
  using P = typename Pack16<T>::type;
  constexpr int64_t kLanes = Pack16<T>::kLanes;
  if (n <= 0) return;
  const int64_t nv = aligned16(out, a, b) ? n / kLanes : 0;
  if (nv > 0) {
    binary_kernel_vec<<<grid_for(nv), kBlockSize, 0, stream>>>(
        reinterpret_cast<P*>(out), reinterpret_cast<const P*>(a), reinterpret_cast<const P*>(b),
        nv, op);
    REMAT_CUDA_LAUNCH_CHECK();
  }
  const int64_t done = kLanes * nv;
  if (n > done) {
    binary_kernel<<<grid_for(n - done), kBlockSize, 0, stream>>>(out + done, a + done, b + done,
                                                                  n - done, op);
    REMAT_CUDA_LAUNCH_CHECK();
  }
}

// ---- bias + activation, n-ary add -------------------------------------------------------------

// The bias is an FP32 parameter whatever T is: v = out + bias in float, then the activation,
// then one rounding into T.
template <typename T>
__global__ void bias_act_kernel(T* out, const float* bias, int64_t n, int64_t c, int64_t plane,
                                KernelActivation act) {
  const int64_t total = n * c * plane;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    float v = ld(out[i]);
    if (bias) v = __fadd_rn(v, bias[(i / plane) % c]);
    out[i] = st<T>(activate(v, act));
  }
}

// plane % kLanes == 0 and 16-byte aligned: one pack of one channel per thread, and one 32-bit
// division per pack (the 64-bit division per value above dominates its run time).
template <typename T>
__global__ void bias_act_kernel_vec(typename Pack16<T>::type* out, const float* bias, uint32_t c,
                                    uint32_t plane_v, uint32_t total_v, KernelActivation act) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total_v;
       i += gridDim.x * blockDim.x) {
    const float b = bias[(i / plane_v) % c];
    typename Pack16<T>::type v = out[i];
    T* e = lanes(v);
    for (int j = 0; j < Pack16<T>::kLanes; ++j)
      e[j] = st<T>(activate(__fadd_rn(ld(e[j]), b), act));
    out[i] = v;
  }
}

// plane == 1 (a channels-last tensor's rows of c channels, Note [channels-last layout]) and
// c % kLanes == 0: one pack of kLanes consecutive channels per thread, one 32-bit remainder per
// pack.
template <typename T>
__global__ void bias_act_rows_kernel_vec(typename Pack16<T>::type* out, const float* bias,
                                         uint32_t c_v, uint32_t total_v, KernelActivation act) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total_v;
       i += gridDim.x * blockDim.x) {
    const float* b = bias + (i % c_v) * Pack16<T>::kLanes;
    typename Pack16<T>::type v = out[i];
    T* e = lanes(v);
    for (int j = 0; j < Pack16<T>::kLanes; ++j)
      e[j] = st<T>(activate(__fadd_rn(ld(e[j]), b[j]), act));
    out[i] = v;
  }
}

template <typename T>
void launch_bias_act(T* out, const float* bias, int64_t n, int64_t c, int64_t plane,
                     KernelActivation act, cudaStream_t stream) {
  constexpr int64_t kLanes = Pack16<T>::kLanes;
  const int64_t total = n * c * plane;
  if (total <= 0 || (!bias && act == KernelActivation::None)) return;
  if (!bias) {  // activation only: the vectorised maps
    if (act == KernelActivation::Relu) launch_unary(out, out, total, ReluOp{}, stream);
    else launch_unary(out, out, total, Relu6Op{}, stream);
    return;
  }
  if (plane == 1 && c % kLanes == 0 && aligned16(out) && total / kLanes < (int64_t{1} << 31)) {
    bias_act_rows_kernel_vec<T><<<grid_for(total / kLanes), kBlockSize, 0, stream>>>(
        reinterpret_cast<typename Pack16<T>::type*>(out), bias, static_cast<uint32_t>(c / kLanes),
        static_cast<uint32_t>(total / kLanes), act);
  } else if (plane % kLanes == 0 && aligned16(out) && total / kLanes < (int64_t{1} << 31)) {
    bias_act_kernel_vec<T><<<grid_for(total / kLanes), kBlockSize, 0, stream>>>(
        reinterpret_cast<typename Pack16<T>::type*>(out), bias, static_cast<uint32_t>(c),
        static_cast<uint32_t>(plane / kLanes), static_cast<uint32_t>(total / kLanes), act);
  } else {
    bias_act_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(out, bias, n, c, plane, act);
  }
  REMAT_CUDA_LAUNCH_CHECK();
}

constexpr int kAddChunk = 8;  // input pointers per launch, passed by value
template <typename T, int Cap>
struct AddPtrs {
  const T* p[Cap];
};

// out = (first ? p[0] : out) + p[1] + ... (left to right, like the CPU's y += x loop).
template <typename T, int Cap>
__global__ void add_kernel(T* out, AddPtrs<T, Cap> ptrs, int k, bool first, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float acc = first ? ld(ptrs.p[0][i]) : __fadd_rn(ld(out[i]), ld(ptrs.p[0][i]));
    for (int j = 1; j < k; ++j) acc = __fadd_rn(acc, ld(ptrs.p[j][i]));
    out[i] = st<T>(acc);
  }
}

// Inputs in chunks of Cap pointers, one launch per chunk; each launch after the first adds to
// `out`, so only an F32 output can take more than one chunk (a bf16 output would round the
// partial sum). In is the launcher's pointer type (float or uint16_t).
template <typename T, int Cap, typename In>
void launch_add(T* out, const In* const* inps, int k, int64_t n, cudaStream_t stream) {
  for (int base = 0; base < k; base += Cap) {
    AddPtrs<T, Cap> ptrs{};
    const int m = k - base < Cap ? k - base : Cap;
    for (int j = 0; j < m; ++j) ptrs.p[j] = typed_ptr(inps[base + j]);
    add_kernel<T, Cap><<<grid_for(n), kBlockSize, 0, stream>>>(out, ptrs, m, base == 0, n);
    REMAT_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace

void relu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  launch_unary(out, inp, n, ReluOp{}, stream);
}
void relu_forward(uint16_t* out, const uint16_t* inp, int64_t n, cudaStream_t stream) {
  launch_unary(bf16_ptr(out), bf16_ptr(inp), n, ReluOp{}, stream);
}
void relu6_forward(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  launch_unary(out, inp, n, Relu6Op{}, stream);
}
void relu6_forward(uint16_t* out, const uint16_t* inp, int64_t n, cudaStream_t stream) {
  launch_unary(bf16_ptr(out), bf16_ptr(inp), n, Relu6Op{}, stream);
}
void relu_backward(float* dinp, const float* dout, const float* out, int64_t n,
                   cudaStream_t stream) {
  launch_binary(dinp, dout, out, n, ReluGradOp{}, stream);
}
void relu_backward(uint16_t* dinp, const uint16_t* dout, const uint16_t* out, int64_t n,
                   cudaStream_t stream) {
  launch_binary(bf16_ptr(dinp), bf16_ptr(dout), bf16_ptr(out), n, ReluGradOp{}, stream);
}
void relu6_backward(float* dinp, const float* dout, const float* out, int64_t n,
                    cudaStream_t stream) {
  launch_binary(dinp, dout, out, n, Relu6GradOp{}, stream);
}
void relu6_backward(uint16_t* dinp, const uint16_t* dout, const uint16_t* out, int64_t n,
                    cudaStream_t stream) {
  launch_binary(bf16_ptr(dinp), bf16_ptr(dout), bf16_ptr(out), n, Relu6GradOp{}, stream);
}

void bias_act_forward(float* out, const float* bias, int64_t n, int64_t c, int64_t plane,
                      KernelActivation act, cudaStream_t stream) {
  launch_bias_act(out, bias, n, c, plane, act, stream);
}
void bias_act_forward(uint16_t* out, const float* bias, int64_t n, int64_t c, int64_t plane,
                      KernelActivation act, cudaStream_t stream) {
  launch_bias_act(bf16_ptr(out), bias, n, c, plane, act, stream);
}

void add_forward(float* out, const float* const* inps, int k, int64_t n, cudaStream_t stream) {
  REMAT_CHECK(k >= 1, "add_forward: needs at least one input, got " << k);
  if (n <= 0) return;
  if (k == 2) {  // the common case (residual adds, two-way gradient sums): vectorised
    launch_binary(out, inps[0], inps[1], n, AddOp{}, stream);
    return;
  }
  launch_add<float, kAddChunk>(out, inps, k, n, stream);
}
void add_forward(uint16_t* out, const uint16_t* const* inps, int k, int64_t n,
                 cudaStream_t stream) {
  REMAT_CHECK(k >= 1, "add_forward: needs at least one input, got " << k);
  REMAT_CHECK(k <= kAddMaxBf16Inputs, "add_forward: a bf16 sum takes at most "
                                          << kAddMaxBf16Inputs << " inputs, got " << k);
  if (n <= 0) return;
  __nv_bfloat16* y = bf16_ptr(out);
  if (k == 2) {
    launch_binary(y, bf16_ptr(inps[0]), bf16_ptr(inps[1]), n, AddOp{}, stream);
    return;
  }
  // One launch whatever k (launch_add): 8 pointers of parameters in the common case, else the
  // 2 KB of kAddMaxBf16Inputs.
  if (k <= kAddChunk) launch_add<__nv_bfloat16, kAddChunk>(y, inps, k, n, stream);
  else launch_add<__nv_bfloat16, kAddMaxBf16Inputs>(y, inps, k, n, stream);
}

}  // namespace remat
