// Launchers of the per-channel reductions, batch normalisation (NCHW and channels-last), the
// global average pool and channel scale, and the finite check (Note [bf16 launchers] in
// kernels/kernels.h, which includes this).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/launchers_elementwise.h"  // KernelActivation

namespace remat {

// ---- per-channel reductions (channel_reduce.cu), Note [channel reductions] ----------------------
// bf16 overloads (Note [bf16 launchers]): bf16 dout; dbias stays float.
// dbias (c) = sum over n and plane of dout (n, c, plane); conv2d: plane = H * W, dense: 1.
// workspace: bias_grad_workspace_bytes(n, c, plane) bytes (plane 1: none, and null allowed, up
// to 64 rows, summed in order as on the CPU; more rows: column_sum's).
int64_t bias_grad_workspace_bytes(int64_t n, int64_t c, int64_t plane);
void bias_grad_reduce(float* dbias, const float* dout, int64_t n, int64_t c, int64_t plane,
                      void* workspace, cudaStream_t stream);
void bias_grad_reduce(float* dbias, const uint16_t* dout, int64_t n, int64_t c, int64_t plane,
                      void* workspace, cudaStream_t stream);

// ---- batch normalisation in train mode (batchnorm.cu), Note [batchnorm kernels] ----------------
// x, y, dy, dx (n, c, plane) in F32 or bf16 (Note [bf16 launchers]); gamma (null: 1), beta,
// the running statistics and dgamma (c) are float. Batch statistics with the biased variance;
// running = (1 - momentum) running + momentum batch (unbiased variance), skipped when
// running_mean is null (a recomputation); the forward applies `act` before rounding (Note
// [batchnorm activation]). Each takes its *_workspace_bytes(n, c, plane) bytes.
int64_t batchnorm_train_forward_workspace_bytes(int64_t n, int64_t c, int64_t plane);
void batchnorm_train_forward(float* y, const float* x, const float* gamma, const float* beta,
                             float* running_mean, float* running_var, int64_t n, int64_t c,
                             int64_t plane, double eps, double momentum, KernelActivation act,
                             void* workspace, cudaStream_t stream);
void batchnorm_train_forward(uint16_t* y, const uint16_t* x, const float* gamma, const float* beta,
                             float* running_mean, float* running_var, int64_t n, int64_t c,
                             int64_t plane, double eps, double momentum, KernelActivation act,
                             void* workspace, cudaStream_t stream);
// dx = gamma / sigma (dy - mean(dy) - xhat mean(dy xhat)), the batch statistics of x.
int64_t batchnorm_train_backward_input_workspace_bytes(int64_t n, int64_t c, int64_t plane);
void batchnorm_train_backward_input(float* dx, const float* dy, const float* x, const float* gamma,
                                    int64_t n, int64_t c, int64_t plane, double eps,
                                    void* workspace, cudaStream_t stream);
void batchnorm_train_backward_input(uint16_t* dx, const uint16_t* dy, const uint16_t* x,
                                    const float* gamma, int64_t n, int64_t c, int64_t plane,
                                    double eps, void* workspace, cudaStream_t stream);
// dgamma (c) = sum over n and plane of dy * (x - mean) / sqrt(var + eps), in one read of x and
// dy.
int64_t batchnorm_grad_gamma_workspace_bytes(int64_t n, int64_t c, int64_t plane);
void batchnorm_grad_gamma(float* dgamma, const float* x, const float* dy, int64_t n, int64_t c,
                          int64_t plane, double eps, void* workspace, cudaStream_t stream);
void batchnorm_grad_gamma(float* dgamma, const uint16_t* x, const uint16_t* dy, int64_t n,
                          int64_t c, int64_t plane, double eps, void* workspace,
                          cudaStream_t stream);

// ---- batch normalisation in train mode, channels-last (batchnorm_nhwc.cu) ---------------------
// The three passes above over [rows, c] tensors (rows = N H W of an [N, H, W, C] tensor; Note
// [channels-last batch-norm kernels]), with the same arithmetic.
int64_t batchnorm_nhwc_train_forward_workspace_bytes(int64_t rows, int64_t c);
void batchnorm_nhwc_train_forward(float* y, const float* x, const float* gamma, const float* beta,
                                  float* running_mean, float* running_var, int64_t rows, int64_t c,
                                  double eps, double momentum, KernelActivation act,
                                  void* workspace, cudaStream_t stream);
void batchnorm_nhwc_train_forward(uint16_t* y, const uint16_t* x, const float* gamma,
                                  const float* beta, float* running_mean, float* running_var,
                                  int64_t rows, int64_t c, double eps, double momentum,
                                  KernelActivation act, void* workspace, cudaStream_t stream);
int64_t batchnorm_nhwc_train_backward_input_workspace_bytes(int64_t rows, int64_t c);
void batchnorm_nhwc_train_backward_input(float* dx, const float* dy, const float* x,
                                         const float* gamma, int64_t rows, int64_t c, double eps,
                                         void* workspace, cudaStream_t stream);
void batchnorm_nhwc_train_backward_input(uint16_t* dx, const uint16_t* dy, const uint16_t* x,
                                         const float* gamma, int64_t rows, int64_t c, double eps,
                                         void* workspace, cudaStream_t stream);
int64_t batchnorm_nhwc_grad_gamma_workspace_bytes(int64_t rows, int64_t c);
void batchnorm_nhwc_grad_gamma(float* dgamma, const float* x, const float* dy, int64_t rows,
                               int64_t c, double eps, void* workspace, cudaStream_t stream);
void batchnorm_nhwc_grad_gamma(float* dgamma, const uint16_t* x, const uint16_t* dy, int64_t rows,
                               int64_t c, double eps, void* workspace, cudaStream_t stream);

// ---- reductions (reduce.cu) --------------------------------------------------------------------
// bf16 overloads (Note [bf16 launchers]) with bf16 inputs and outputs.
// out (planes) = mean over hw of inp (planes, hw), accumulated in double. `pixel`: 1 for NCHW
// planes; C for NHWC (plane n * C + c, its values C apart).
void global_avgpool_forward(float* out, const float* inp, int64_t planes, int64_t hw,
                            int64_t pixel, cudaStream_t stream);
void global_avgpool_forward(uint16_t* out, const uint16_t* inp, int64_t planes, int64_t hw,
                            int64_t pixel, cudaStream_t stream);
// dinp (planes, hw) = dout[p] / hw (planes laid out as in the forward).
void global_avgpool_backward(float* dinp, const float* dout, int64_t planes, int64_t hw,
                             int64_t pixel, cudaStream_t stream);
void global_avgpool_backward(uint16_t* dinp, const uint16_t* dout, int64_t planes, int64_t hw,
                             int64_t pixel, cudaStream_t stream);

// channel_scale (channel_scale.cu), planes laid out as global_avgpool's: out (planes, hw) =
// x * s[p], one FP32 product as on the CPU; ds (planes) = sum over hw of dy * x, in double.
void channel_scale_forward(float* out, const float* x, const float* s, int64_t planes, int64_t hw,
                           int64_t pixel, cudaStream_t stream);
void channel_scale_forward(uint16_t* out, const uint16_t* x, const uint16_t* s, int64_t planes,
                           int64_t hw, int64_t pixel, cudaStream_t stream);
void channel_scale_backward(float* ds, const float* dy, const float* x, int64_t planes,
                            int64_t hw, int64_t pixel, cudaStream_t stream);
void channel_scale_backward(uint16_t* ds, const uint16_t* dy, const uint16_t* x, int64_t planes,
                            int64_t hw, int64_t pixel, cudaStream_t stream);
// bf16 data with an F32 scale and F32 scale gradient (mul_table's table, a persistent value).
void channel_scale_forward(uint16_t* out, const uint16_t* x, const float* s, int64_t planes,
                           int64_t hw, int64_t pixel, cudaStream_t stream);
void channel_scale_backward(float* ds, const uint16_t* dy, const uint16_t* x, int64_t planes,
                            int64_t hw, int64_t pixel, cudaStream_t stream);

// ---- finite check (finite.cu) ------------------------------------------------------------------
// Sets *flag = 1 when any of x (n) is NaN or +-inf; never clears it. `flag` is device memory or
// mapped pinned host memory (the CUDA backend's choice: no device allocation outside the pool).
void flag_nonfinite(const float* x, int64_t n, unsigned int* flag, cudaStream_t stream);
// The same over bf16 values (bf16.cu).
void flag_nonfinite_bf16(const uint16_t* x, int64_t n, unsigned int* flag, cudaStream_t stream);

}  // namespace remat
