// Batch normalisation's per-channel statistics from partial sums, shared by the NCHW kernels
// (batchnorm.cu) and the channels-last ones (batchnorm_nhwc.cu): partial[K (ch splits + s) + k]
// is moment k of channel ch over slice s (x, x^2; then dy, dy x when K = 4), added in slice
// order (Note [batchnorm kernels] in batchnorm.cu).
#pragma once

#include <cstdint>

namespace remat {
namespace {

// Channel ch's K moments into m (its partials added in slice order), and from them the batch
// mean, the biased variance (clamped at 0) and 1 / sqrt(var + eps).
struct ChannelStats {
  double mean, var, inv_std;
};
template <int K>
__device__ __forceinline__ ChannelStats channel_stats(double* m, const double* partial,
                                                      int64_t ch, int64_t splits, double count,
                                                      double eps) {
  for (int k = 0; k < K; ++k) m[k] = 0.0;
  for (int64_t s = 0; s < splits; ++s)
    for (int k = 0; k < K; ++k) m[k] += partial[K * (ch * splits + s) + k];
  const double mean = m[0] / count;
  const double var = fmax(m[1] / count - mean * mean, 0.0);
  return {mean, var, 1.0 / sqrt(var + eps)};
}

// coef[2 ch] = scale, coef[2 ch + 1] = shift; the running statistics when given.
__global__ void bn_forward_final_kernel(float* coef, float* running_mean, float* running_var,
                                        const float* gamma, const float* beta,
                                        const double* partial, int64_t c, int64_t splits,
                                        double count, double eps, double momentum) {
  for (int64_t ch = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; ch < c;
       ch += int64_t{gridDim.x} * blockDim.x) {
    double m[2];
    const ChannelStats s = channel_stats<2>(m, partial, ch, splits, count, eps);
    const double g = gamma ? gamma[ch] : 1.0;
    coef[2 * ch] = static_cast<float>(g * s.inv_std);
    coef[2 * ch + 1] = static_cast<float>(beta[ch] - s.mean * g * s.inv_std);
    if (running_mean) {
      const double unbiased = s.var * count / (count - 1.0);
      running_mean[ch] = static_cast<float>((1.0 - momentum) * running_mean[ch] + momentum * s.mean);
      running_var[ch] = static_cast<float>((1.0 - momentum) * running_var[ch] + momentum * unbiased);
    }
  }
}

// coef[3 ch ..] = A, B, C of dx = A dy + B x + C (Note [batchnorm kernels]).
__global__ void bn_backward_final_kernel(double* coef, const float* gamma, const double* partial,
                                         int64_t c, int64_t splits, double count, double eps) {
  for (int64_t ch = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; ch < c;
       ch += int64_t{gridDim.x} * blockDim.x) {
    double m[4];
    const ChannelStats s = channel_stats<4>(m, partial, ch, splits, count, eps);
    const double inv_std = s.inv_std;
    const double g = gamma ? gamma[ch] : 1.0;
    const double mean_dy = m[2] / count;
    const double mean_dy_xhat = (m[3] - s.mean * m[2]) * inv_std / count;
    const double a = g * inv_std;
    coef[3 * ch] = a;
    coef[3 * ch + 1] = -a * mean_dy_xhat * inv_std;
    coef[3 * ch + 2] = a * (s.mean * mean_dy_xhat * inv_std - mean_dy);
  }
}

__global__ void bn_gamma_final_kernel(float* dgamma, const double* partial, int64_t c,
                                      int64_t splits, double count, double eps) {
  for (int64_t ch = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; ch < c;
       ch += int64_t{gridDim.x} * blockDim.x) {
    double m[4];
    const ChannelStats s = channel_stats<4>(m, partial, ch, splits, count, eps);
    dgamma[ch] = static_cast<float>((m[3] - s.mean * m[2]) / sqrt(s.var + eps));
  }
}

}  // namespace
}  // namespace remat
