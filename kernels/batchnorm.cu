// Batch normalisation in train mode over (n, c, plane) tensors (NCHW; [N, F] as plane 1), as
// ops/batchnorm.cpp's CPU reference computes it: the forward with the batch statistics and the
// running-statistics update, the input gradient, and the scale gradient. Note [batchnorm
// kernels]. Templated on the storage type T (float or __nv_bfloat16, kernels/common.cuh).
#include "kernels/batchnorm_stats.cuh"
#include "kernels/channel_slices.cuh"
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

// Note [batchnorm kernels]
// Each pass is a reduction then an elementwise pass, both over fixed slices (Note [channel
// reductions]), so every result is a function of the shapes and reruns are bit-identical:
//   forward:  sums of x and x^2 per channel (one read of x); per channel in double, mean,
//             biased variance E[x^2] - mean^2 (clamped at 0), scale = gamma / sqrt(var + eps)
//             and shift = beta - mean * scale rounded to float, as the CPU does; y = x * scale +
//             shift in float without contraction (the CPU's expression); the running statistics
//             (unbiased variance, PyTorch's momentum) only when the caller passes them (the first
//             computation; a recomputation leaves them alone);
//   dx:       sums of x, x^2, dy and dy * x per channel (one read of x and dy); then dx = A dy +
//             B x + C in double with A = gamma / sigma, B = -A mean(dy xhat) / sigma, C = A (mean
//             mean(dy xhat) / sigma - mean(dy)), the CPU's gamma / sigma (dy - mean(dy) - xhat
//             mean(dy xhat)) rearranged (sigma = sqrt(var + eps), xhat = (x - mean) / sigma);
//   dgamma:   the same four sums; dgamma = (S(dy x) - mean S(dy)) / sigma.
// Three reads and a write of the tensor's size for the forward, two reads, two reads and a
// write for dx, in packs of up to 16 bytes (Note [packed channel walks]): 103 MB in bf16 (ResNet-50's
// first batch norm) in 0.10 ms forward, 0.15 ms dx on an H200, where cuDNN's spatial routines
// take 0.72 and 1.39 ms; ops/batchnorm_cuda.cpp picks the faster side by plane size (Note
// [batchnorm on the GPU]).
// The one-pass variance differs from the CPU's two-pass one by the cancellation of E[x^2] and
// mean^2 in double: relative 2^-53 (mean / sigma)^2, far inside the batchnorm tolerance of
// tests/cuda_op_harness.h for any activation.

// K sums per (channel, slice): x, x^2 (K = 2) and dy, dy * x (K = 4), at partial[K * block];
// packs of V values (Note [packed channel walks]).
template <int K, int V, typename T>
__global__ void bn_moments_partial_kernel(double* partial, const T* x, const T* dy, int64_t n,
                                          int64_t c, int64_t plane, int64_t splits) {
  static_assert(K == 2 || K == 4, "two or four moments");
  using P = Pack<T, V>;
  struct Two {
    P x, dy;
  };
  __shared__ double scratch[32];
  const ChannelSlice sl = block_slice(n, plane / V, splits);
  double s[4] = {0.0, 0.0, 0.0, 0.0};
  for_slice<V>(
      sl.ch, c, plane / V, sl.begin, sl.end,
      [&](int64_t o) {
        Two t;
        t.x = *reinterpret_cast<const P*>(x + o);
        if (K == 4) t.dy = *reinterpret_cast<const P*>(dy + o);
        return t;
      },
      [&](const Two& t) {
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const double xv = ld(t.x.v[i]);
          s[0] += xv;
          s[1] += xv * xv;
          if (K == 4) {
            const double dv = ld(t.dy.v[i]);
            s[2] += dv;
            s[3] += dv * xv;
          }
        }
      });
  double* out = partial + K * int64_t{blockIdx.x};
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const double t = block_sum(s[k], scratch);
    if (threadIdx.x == 0) out[k] = t;
  }
}

// y = act(x * scale + shift) (float, the CPU's rounding: no contraction into an FMA), a pack of
// V values at offset o.
template <typename T, int V>
struct ForwardApply {
  T* __restrict__ y;
  const T* __restrict__ x;
  const float* __restrict__ coef;
  KernelActivation act;
  __device__ void operator()(int64_t o, int64_t ch) const {
    using P = Pack<T, V>;
    const P in = *reinterpret_cast<const P*>(x + o);
    const float scale = coef[2 * ch], shift = coef[2 * ch + 1];
    P out;
#pragma unroll
    for (int i = 0; i < V; ++i)
      out.v[i] = st<T>(activate(__fadd_rn(__fmul_rn(ld(in.v[i]), scale), shift), act));
    *reinterpret_cast<P*>(y + o) = out;
  }
};

// dx = A dy + B x + C in double.
template <typename T, int V>
struct BackwardApply {
  T* __restrict__ dx;
  const T* __restrict__ dy;
  const T* __restrict__ x;
  const double* __restrict__ coef;
  __device__ void operator()(int64_t o, int64_t ch) const {
    using P = Pack<T, V>;
    const P g = *reinterpret_cast<const P*>(dy + o), in = *reinterpret_cast<const P*>(x + o);
    const double a = coef[3 * ch], b = coef[3 * ch + 1], k = coef[3 * ch + 2];
    P out;
#pragma unroll
    for (int i = 0; i < V; ++i)
      out.v[i] = st<T>(static_cast<float>(a * ld(g.v[i]) + b * ld(in.v[i]) + k));
    *reinterpret_cast<P*>(dx + o) = out;
  }
};

// Every pack of V values of the (n, c, plane) tensor through `op` (channel_slices.cuh's walk).
template <int V, typename Op>
__global__ void bn_apply_kernel(Op op, int64_t n, int64_t c, int64_t plane) {
  for_each_with_channel<V>(n, c, plane, op);
}

template <int V, typename Op>
void launch_apply(const Op& op, int64_t n, int64_t c, int64_t plane, cudaStream_t stream) {
  bn_apply_kernel<V><<<grid_for(n * c * plane / V), kBlockSize, 0, stream>>>(op, n, c, plane);
  REMAT_CUDA_LAUNCH_CHECK();
}

// Workspace pieces, each on a 256-byte boundary: the partial sums, then the coefficients.
int64_t round_up256(int64_t b) { return (b + 255) / 256 * 256; }
int64_t partial_bytes(int k, int64_t n, int64_t c, int64_t plane) {
  return round_up256(k * c * splits_for(n, c, plane) * static_cast<int64_t>(sizeof(double)));
}

template <int K, int V, typename T>
int64_t moments(double* partial, const T* x, const T* dy, int64_t n, int64_t c, int64_t plane,
                cudaStream_t stream) {
  const int64_t splits = splits_for(n, c, plane);
  REMAT_CHECK(c * splits < (int64_t{1} << 31), "batchnorm: " << c << " channels");
  bn_moments_partial_kernel<K, V, T>
      <<<static_cast<unsigned>(c * splits), kSliceThreads, 0, stream>>>(partial, x, dy, n, c,
                                                                        plane, splits);
  REMAT_CUDA_LAUNCH_CHECK();
  return splits;
}

template <typename T>
void forward_impl(T* y, const T* x, const float* gamma, const float* beta, float* running_mean,
                  float* running_var, int64_t n, int64_t c, int64_t plane, double eps,
                  double momentum, KernelActivation act, void* workspace, cudaStream_t stream) {
  if (n * c * plane <= 0) return;
  REMAT_CHECK(workspace, "batchnorm_train_forward: needs its workspace");
  auto* partial = static_cast<double*>(workspace);
  auto* coef = reinterpret_cast<float*>(static_cast<char*>(workspace) + partial_bytes(2, n, c, plane));
  with_pack_width<T>(pack_width<T>(plane, x, y), [&](auto w) {
    constexpr int V = decltype(w)::value;
    const int64_t splits = moments<2, V>(partial, x, static_cast<const T*>(nullptr), n, c, plane, stream);
    bn_forward_final_kernel<<<grid_for(c), kBlockSize, 0, stream>>>(
        coef, running_mean, running_var, gamma, beta, partial, c, splits,
        static_cast<double>(n * plane), eps, momentum);
    REMAT_CUDA_LAUNCH_CHECK();
    launch_apply<V>(ForwardApply<T, V>{y, x, coef, act}, n, c, plane, stream);
  });
}

template <typename T>
void backward_input_impl(T* dx, const T* dy, const T* x, const float* gamma, int64_t n, int64_t c,
                         int64_t plane, double eps, void* workspace, cudaStream_t stream) {
  if (n * c * plane <= 0) return;
  REMAT_CHECK(workspace, "batchnorm_train_backward_input: needs its workspace");
  auto* partial = static_cast<double*>(workspace);
  auto* coef = reinterpret_cast<double*>(static_cast<char*>(workspace) + partial_bytes(4, n, c, plane));
  with_pack_width<T>(pack_width<T>(plane, x, dy, dx), [&](auto w) {
    constexpr int V = decltype(w)::value;
    const int64_t splits = moments<4, V>(partial, x, dy, n, c, plane, stream);
    bn_backward_final_kernel<<<grid_for(c), kBlockSize, 0, stream>>>(
        coef, gamma, partial, c, splits, static_cast<double>(n * plane), eps);
    REMAT_CUDA_LAUNCH_CHECK();
    launch_apply<V>(BackwardApply<T, V>{dx, dy, x, coef}, n, c, plane, stream);
  });
}

template <typename T>
void grad_gamma_impl(float* dgamma, const T* x, const T* dy, int64_t n, int64_t c, int64_t plane,
                     double eps, void* workspace, cudaStream_t stream) {
  if (c <= 0) return;
  if (n <= 0 || plane <= 0) {
    fill(dgamma, 0.0f, c, stream);
    return;
  }
  REMAT_CHECK(workspace, "batchnorm_grad_gamma: needs its workspace");
  auto* partial = static_cast<double*>(workspace);
  int64_t splits = 0;
  with_pack_width<T>(pack_width<T>(plane, x, dy), [&](auto w) {
    splits = moments<4, decltype(w)::value>(partial, x, dy, n, c, plane, stream);
  });
  bn_gamma_final_kernel<<<grid_for(c), kBlockSize, 0, stream>>>(
      dgamma, partial, c, splits, static_cast<double>(n * plane), eps);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace

int64_t batchnorm_train_forward_workspace_bytes(int64_t n, int64_t c, int64_t plane) {
  if (n <= 0 || c <= 0 || plane <= 0) return 0;
  return partial_bytes(2, n, c, plane) + round_up256(2 * c * static_cast<int64_t>(sizeof(float)));
}

void batchnorm_train_forward(float* y, const float* x, const float* gamma, const float* beta,
                             float* running_mean, float* running_var, int64_t n, int64_t c,
                             int64_t plane, double eps, double momentum, KernelActivation act,
                             void* workspace, cudaStream_t stream) {
  forward_impl(y, x, gamma, beta, running_mean, running_var, n, c, plane, eps, momentum, act,
               workspace, stream);
}
void batchnorm_train_forward(uint16_t* y, const uint16_t* x, const float* gamma, const float* beta,
                             float* running_mean, float* running_var, int64_t n, int64_t c,
                             int64_t plane, double eps, double momentum, KernelActivation act,
                             void* workspace, cudaStream_t stream) {
  forward_impl(bf16_ptr(y), bf16_ptr(x), gamma, beta, running_mean, running_var, n, c, plane, eps,
               momentum, act, workspace, stream);
}

int64_t batchnorm_train_backward_input_workspace_bytes(int64_t n, int64_t c, int64_t plane) {
  if (n <= 0 || c <= 0 || plane <= 0) return 0;
  return partial_bytes(4, n, c, plane) + round_up256(3 * c * static_cast<int64_t>(sizeof(double)));
}

void batchnorm_train_backward_input(float* dx, const float* dy, const float* x, const float* gamma,
                                    int64_t n, int64_t c, int64_t plane, double eps,
                                    void* workspace, cudaStream_t stream) {
  backward_input_impl(dx, dy, x, gamma, n, c, plane, eps, workspace, stream);
}
void batchnorm_train_backward_input(uint16_t* dx, const uint16_t* dy, const uint16_t* x,
                                    const float* gamma, int64_t n, int64_t c, int64_t plane,
                                    double eps, void* workspace, cudaStream_t stream) {
  backward_input_impl(bf16_ptr(dx), bf16_ptr(dy), bf16_ptr(x), gamma, n, c, plane, eps, workspace,
                      stream);
}

int64_t batchnorm_grad_gamma_workspace_bytes(int64_t n, int64_t c, int64_t plane) {
  if (n <= 0 || c <= 0 || plane <= 0) return 0;
  return partial_bytes(4, n, c, plane);
}

void batchnorm_grad_gamma(float* dgamma, const float* x, const float* dy, int64_t n, int64_t c,
                          int64_t plane, double eps, void* workspace, cudaStream_t stream) {
  grad_gamma_impl(dgamma, x, dy, n, c, plane, eps, workspace, stream);
}
void batchnorm_grad_gamma(float* dgamma, const uint16_t* x, const uint16_t* dy, int64_t n,
                          int64_t c, int64_t plane, double eps, void* workspace,
                          cudaStream_t stream) {
  grad_gamma_impl(dgamma, bf16_ptr(x), bf16_ptr(dy), n, c, plane, eps, workspace, stream);
}

}  // namespace remat
