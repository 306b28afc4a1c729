// 1 x 1 convolutions as cuBLAS GEMMs on NCHW or NHWC tensors: when the shape allows it, the
// plan's measurement, and the call. See ops/conv2d_cuda_plan.h.
#include <algorithm>
#include <cfloat>

#include "ops/conv2d_cuda_plan.h"

namespace remat {

// Note [1x1 convolutions as GEMMs]
// A 1 x 1 convolution with stride 1, no padding and one group is, for each sample n, a matrix
// product over the channels: y_n [K, HW] = w [K, C] x_n [C, HW], and its data gradient
// dx_n [C, HW] = w^T [C, K] dy_n [K, HW]. In NCHW each sample's [C, HW] block is contiguous, so
// the whole batch is one cuBLAS strided-batched GEMM whose weight has batch stride 0: no
// staging and no workspace but the bf16 weight copy (Note [bf16 weights]). The weight gradient
// dw [K, C] = sum_n dy_n [K, HW] x_n^T [HW, C] is one GEMM per sample accumulating (beta = 1)
// into the FP32 gradient in sample order — deterministic, N launches, no workspace; in bf16
// the FP32 sum is rounded to bf16 once at the end (the CPU reference's one rounding, where
// cuDNN's bf16 filter pass rounds each chunk's result). cuDNN's NCHW kernels
// took 0.30-0.44 ms for ResNet-50's 1 x 1 convolutions at batch 64 in bf16 on an H200
// (GPU_RESULTS.md, 2026-11-27), a few hundred GB/s of the pass's own traffic, and staging
// channels-last copies (Note [staged NHWC convolutions]) doubles the traffic of a pass that
// moves more bytes than it computes, so neither layout of cuDNN's served them.
// The choice is measured as cuDNN's algorithms are (Note [conv algorithm choice]): the GEMM is
// timed with CUDA events (one warm-up call, then the best of three) on the op's own tensors,
// writing only its output as Find's Ex variant does, or, when a sizing call has no data, on
// the search scratch (zeroed first); it is kept when within 5 % of the best cuDNN plan's time,
// because it needs the least workspace of all (with REMAT_CONV_LAYOUT=nhwc, which forces
// staging, only REMAT_CONV_GEMM=on makes it a GEMM). The weight gradient's N launches make it
// the likelier to lose to cuDNN at large batches; the measurement decides.
// Channels-last tensors (Note [channels-last convolutions]) are simpler still: x [N HW, C] and
// y [N HW, K] are plain matrices, so each pass is one GEMM over the whole batch, y = x w^T,
// dx = dy w and dw = dy^T x (the weight gradient one call with reduction length N HW rather
// than N accumulating ones), with the KCRS weight as it is (a 1 x 1 filter's KRSC is its
// KCRS). cuDNN's NHWC kernels are the fast ones there; the GEMM is measured against them all
// the same and kept only when as fast.
// Sums are cuBLAS's with FP32 accumulation (CUBLAS_COMPUTE_32F for bf16 operands; for FP32,
// PEDANTIC, or FAST_TF32 where convolutions may use TF32), so the CPU comparison's GEMM
// tolerance with reduction length C (forward), K (data gradient) or N HW (weight gradient)
// holds; bias and fused
// activation follow in the same kernels/ epilogue as after cuDNN. cuBLAS is bit-reproducible
// for one call shape on one GPU and stream, so recomputation stays bit-identical.

namespace {

struct GemmDims {
  int64_t n, c, k, hw;  // samples, input channels, output channels, plane
};

GemmDims gemm_dims(const ConvTensors& t, bool channels_last) {
  const Shape& x = t.x->shape;
  if (channels_last) return {x[0], x[3], t.y->shape[3], x[1] * x[2]};
  return {x[0], x[1], t.y->shape[1], x[2] * x[3]};
}

cublasComputeType_t compute_type(DType dtype, const CudaContext& cc) {
  if (dtype == DType::BF16) return CUBLAS_COMPUTE_32F;
  return cc.conv_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC;
}

int64_t tensor_bytes(const TensorDesc& d, DType dtype) {
  return alloc_bytes(checked_mul(d.numel(), dtype_size(dtype), "", "1x1 GEMM timing bytes"));
}

// dw [K, C] (FP32) = sum over samples of dy_n x_n^T, in sample order (see conv_gemm_run).
void filter_gemm_run(const GemmDims& d, DType dtype, const void* dy, const void* x, void* dw,
                     const CudaContext& cc) {
  auto* out = static_cast<float*>(dw);
  if (d.n == 0 || d.hw == 0) {
    fill(out, 0.0f, d.k * d.c, cc.stream);
    return;
  }
  const cudaDataType_t type = dtype == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
  const int64_t size = dtype_size(dtype);
  const float one = 1.0f, zero = 0.0f;
  for (int64_t n = 0; n < d.n; ++n) {
    const char* xn = static_cast<const char*>(x) + n * d.c * d.hw * size;
    const char* dyn = static_cast<const char*>(dy) + n * d.k * d.hw * size;
    REMAT_CUBLAS_CHECK(cublasGemmEx(
        cc.cublas, CUBLAS_OP_T, CUBLAS_OP_N, to_int(d.c, "1x1 GEMM m"), to_int(d.k, "1x1 GEMM n"),
        to_int(d.hw, "1x1 GEMM k"), &one, xn, type, to_int(d.hw, "1x1 GEMM lda"), dyn, type,
        to_int(d.hw, "1x1 GEMM ldb"), n == 0 ? &zero : &one, out, CUDA_R_32F,
        to_int(d.c, "1x1 GEMM ldc"), compute_type(dtype, cc), CUBLAS_GEMM_DEFAULT));
  }
  if (dtype == DType::BF16) bf16_round(out, out, d.k * d.c, cc.stream);
}

// Channels-last, column-major as cuBLAS sees the row-major matrices (M = N HW rows): x [M, C]
// is the column-major [C, M] with leading dimension C, y and dy [K, M] with K, w [K, C] the
// column-major [C, K] with C.
//   forward: y [K, M] = w^T [K, C] x [C, M]
//   data:    dx [C, M] = w [C, K] dy [K, M]
//   filter:  dw [C, K] = x [C, M] dy^T [M, K]  (FP32; bf16 data: rounded to bf16 once)
void nhwc_gemm_run(ConvPass pass, const GemmDims& d, DType dtype, const void* in, const void* w,
                   void* out, const CudaContext& cc) {
  const int64_t m = d.n * d.hw;
  if (pass == ConvPass::BackwardFilter && m == 0) {
    fill(static_cast<float*>(out), 0.0f, d.k * d.c, cc.stream);
    return;
  }
  if (m == 0) return;
  const cudaDataType_t type = dtype == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
  const float one = 1.0f, zero = 0.0f;
  const int c = to_int(d.c, "1x1 GEMM C"), k = to_int(d.k, "1x1 GEMM K"),
            rows = to_int(m, "1x1 GEMM N HW");
  switch (pass) {
    case ConvPass::Forward:  // in x, w the weight
      REMAT_CUBLAS_CHECK(cublasGemmEx(cc.cublas, CUBLAS_OP_T, CUBLAS_OP_N, k, rows, c, &one, w,
                                      type, c, in, type, c, &zero, out, type, k,
                                      compute_type(dtype, cc), CUBLAS_GEMM_DEFAULT));
      return;
    case ConvPass::BackwardData:  // in dy, w the weight
      REMAT_CUBLAS_CHECK(cublasGemmEx(cc.cublas, CUBLAS_OP_N, CUBLAS_OP_N, c, rows, k, &one, w,
                                      type, c, in, type, k, &zero, out, type, c,
                                      compute_type(dtype, cc), CUBLAS_GEMM_DEFAULT));
      return;
    case ConvPass::BackwardFilter:  // in dy, w x
      REMAT_CUBLAS_CHECK(cublasGemmEx(cc.cublas, CUBLAS_OP_N, CUBLAS_OP_T, c, k, rows, &one, w,
                                      type, c, in, type, k, &zero, out, CUDA_R_32F, c,
                                      compute_type(dtype, cc), CUBLAS_GEMM_DEFAULT));
      if (dtype == DType::BF16)
        bf16_round(static_cast<float*>(out), static_cast<float*>(out), d.k * d.c, cc.stream);
      return;
  }
}

}  // namespace

bool conv_gemm_applies(ConvPass, const ConvCudaParams& p, const ConvTensors& t) {
  if (p.kernel_h != 1 || p.kernel_w != 1 || p.stride_h != 1 || p.stride_w != 1 || p.groups != 1)
    return false;
  if (p.pad_h != 0 || p.pad_w != 0 || p.pad_bottom != 0 || p.pad_right != 0) return false;
  if (t.x->shape.size() != 4 || t.y->shape.size() != 4) return false;
  if (t.x->dtype != DType::F32 && t.x->dtype != DType::BF16) return false;
  const GemmDims d = gemm_dims(t, p.channels_last);
  const int64_t most = INT_MAX;
  const bool same_plane = p.channels_last
                              ? t.x->shape[1] == t.y->shape[1] && t.x->shape[2] == t.y->shape[2]
                              : t.x->shape[2] == t.y->shape[2] && t.x->shape[3] == t.y->shape[3];
  // NHWC calls take the whole batch's N HW rows as one GEMM dimension.
  const int64_t rows = p.channels_last ? (d.hw > 0 && d.n > most / d.hw ? most + 1 : d.n * d.hw)
                                       : std::max(d.n, d.hw);
  return same_plane && rows <= most && d.c <= most && d.k <= most;
}

ConvPlan conv_gemm_plan(ConvPass pass, const ConvTensors& t) {
  ConvPlan plan;
  plan.gemm = true;
  plan.chosen = true;
  plan.dtype = t.x->dtype;
  plan.chunk = std::max<int64_t>(t.x->shape[0], 1);
  plan.x_per_sample = t.x->numel() / std::max<int64_t>(t.x->shape[0], 1);
  plan.y_per_sample = t.y->numel() / std::max<int64_t>(t.y->shape[0], 1);
  // The forward and data passes read the weight as a bf16 copy; the filter pass writes FP32.
  plan.weight_copy =
      plan.dtype == DType::BF16 && pass != ConvPass::BackwardFilter ? bf16_copy_bytes(*t.w) : 0;
  return plan;
}

// Column-major, as cuBLAS sees the row-major blocks: x_n [C, HW] is the column-major
// [HW, C] matrix with leading dimension HW, w [K, C] the column-major [C, K] one.
//   forward: y_n^T [HW, K] = x_n^T [HW, C] w^T [C, K]
//   data:    dx_n^T [HW, C] = dy_n^T [HW, K] w [K, C]  (w's column-major [C, K], transposed)
//   filter:  dw^T [C, K] += x_n [C, HW] dy_n^T [HW, K]  (x_n's column-major [HW, C], transposed)
void conv_gemm_run(ConvPass pass, const ConvTensors& t, bool channels_last, const void* in,
                   const void* w, void* out, const CudaContext& cc) {
  const GemmDims d = gemm_dims(t, channels_last);
  if (channels_last) return nhwc_gemm_run(pass, d, t.x->dtype, in, w, out, cc);
  if (pass == ConvPass::BackwardFilter) return filter_gemm_run(d, t.x->dtype, in, w, out, cc);
  if (d.n == 0 || d.hw == 0) return;
  const bool forward = pass == ConvPass::Forward;
  const int64_t reduce = forward ? d.c : d.k, cols = forward ? d.k : d.c;
  const cudaDataType_t type = t.x->dtype == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
  const float one = 1.0f, zero = 0.0f;
  REMAT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      cc.cublas, CUBLAS_OP_N, forward ? CUBLAS_OP_N : CUBLAS_OP_T, to_int(d.hw, "1x1 GEMM m"),
      to_int(cols, "1x1 GEMM n"), to_int(reduce, "1x1 GEMM k"), &one, in, type,
      to_int(d.hw, "1x1 GEMM lda"), static_cast<long long>(reduce * d.hw), w, type,
      to_int(d.c, "1x1 GEMM ldb"), 0LL, &zero, out, type, to_int(d.hw, "1x1 GEMM ldc"),
      static_cast<long long>(cols * d.hw), to_int(d.n, "1x1 GEMM batch"),
      compute_type(t.x->dtype, cc), CUBLAS_GEMM_DEFAULT));
}

double conv_gemm_time_ms(ConvPass pass, const ConvTensors& t, bool channels_last,
                         const CudaContext& cc) {
  // The call's operands (conv_gemm_run): forward (x, w) -> y, data (dy, w) -> dx, filter
  // (dy, x) -> dw in FP32; w as the call reads it (a bf16 copy for bf16 data).
  const DType dtype = t.x->dtype;
  const bool forward = pass == ConvPass::Forward, filter = pass == ConvPass::BackwardFilter;
  const void* in = forward ? t.x_data : t.y_data;
  const void* second = filter ? t.x_data : t.w_data;
  void* out = forward ? t.y_data : filter ? t.w_data : t.x_data;
  const int64_t in_bytes = tensor_bytes(forward ? *t.x : *t.y, dtype);
  const int64_t second_bytes = tensor_bytes(filter ? *t.x : *t.w, dtype);
  const int64_t out_bytes =
      tensor_bytes(forward ? *t.y : filter ? *t.w : *t.x, filter ? DType::F32 : dtype);
  char* scratch = static_cast<char*>(cc.search_scratch);
  if (in && second && out) {
    if (dtype == DType::BF16 && !filter) {  // the weight as the call reads it: a bf16 copy
      if (!scratch || second_bytes > cc.workspace_limit) return -1;
      bf16_narrow(reinterpret_cast<uint16_t*>(scratch), static_cast<const float*>(second),
                  t.w->numel(), cc.stream);
      second = scratch;
    }
  } else {
    if (!scratch || in_bytes + second_bytes + out_bytes > cc.workspace_limit) return -1;
    REMAT_CUDA_CHECK(cudaMemsetAsync(
        scratch, 0, static_cast<size_t>(in_bytes + second_bytes + out_bytes), cc.stream));
    second = scratch;
    in = scratch + second_bytes;
    out = scratch + second_bytes + in_bytes;
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  REMAT_CUDA_CHECK(cudaEventCreate(&start));
  if (cudaEventCreate(&stop) != cudaSuccess) {
    (void)cudaEventDestroy(start);
    REMAT_FAIL("conv_gemm_time_ms: cudaEventCreate failed");
  }
  float best = FLT_MAX;
  try {
    conv_gemm_run(pass, t, channels_last, in, second, out, cc);  // warm-up: selection, loading
    for (int rep = 0; rep < 3; ++rep) {
      REMAT_CUDA_CHECK(cudaEventRecord(start, cc.stream));
      conv_gemm_run(pass, t, channels_last, in, second, out, cc);
      REMAT_CUDA_CHECK(cudaEventRecord(stop, cc.stream));
      REMAT_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      REMAT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      best = std::min(best, ms);
    }
  } catch (...) {
    (void)cudaEventDestroy(start);
    (void)cudaEventDestroy(stop);
    throw;
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  return best;
}

}  // namespace remat
