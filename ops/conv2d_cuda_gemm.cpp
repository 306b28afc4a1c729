// 1 x 1 convolutions as cuBLAS GEMMs on NCHW tensors: when the shape allows it, the plan's
// measurement, and the call. See ops/conv2d_cuda_plan.h.
#include <algorithm>
#include <cfloat>

#include "ops/conv2d_cuda_plan.h"

namespace remat {

// Note [1x1 convolutions as GEMMs]
// A 1 x 1 convolution with stride 1, no padding and one group is, for each sample n, a matrix
// product over the channels: y_n [K, HW] = w [K, C] x_n [C, HW], and its data gradient
// dx_n [C, HW] = w^T [C, K] dy_n [K, HW]. In NCHW each sample's [C, HW] block is contiguous, so
// the whole batch is one cuBLAS strided-batched GEMM whose weight has batch stride 0: no
// staging and no workspace but the bf16 weight copy (Note [bf16 weights]). cuDNN's NCHW kernels
// took 0.30-0.44 ms for ResNet-50's 1 x 1 convolutions at batch 64 in bf16 on an H200
// (GPU_RESULTS.md, 2026-11-27), a few hundred GB/s of the pass's own traffic, and staging
// channels-last copies (Note [staged NHWC convolutions]) doubles the traffic of a pass that
// moves more bytes than it computes, so neither layout of cuDNN's served them.
// The choice is measured as cuDNN's algorithms are (Note [conv algorithm choice]): the GEMM is
// timed with CUDA events (one warm-up call, then the best of three) on the op's own tensors,
// writing only its output as Find's Ex variant does, or, when a sizing call has no data, on
// the search scratch (zeroed first); it is kept when within 5 % of the best cuDNN plan's time,
// because it needs the least workspace of all (with REMAT_CONV_LAYOUT=nhwc, which forces
// staging, only REMAT_CONV_GEMM=on makes it a GEMM). The weight gradient stays with cuDNN:
// its sum over the samples would take a GEMM per sample or per-sample partial products in
// workspace.
// Sums are cuBLAS's with FP32 accumulation (CUBLAS_COMPUTE_32F for bf16 operands; for FP32,
// PEDANTIC, or FAST_TF32 where convolutions may use TF32), so the CPU comparison's GEMM
// tolerance with reduction length C (forward) or K (data gradient) holds; bias and fused
// activation follow in the same kernels/ epilogue as after cuDNN. cuBLAS is bit-reproducible
// for one call shape on one GPU and stream, so recomputation stays bit-identical.

namespace {

struct GemmDims {
  int64_t n, c, k, hw;  // samples, input channels, output channels, plane
};

GemmDims gemm_dims(const ConvTensors& t) {
  const Shape& x = t.x->shape;
  return {x[0], x[1], t.y->shape[1], x[2] * x[3]};
}

cublasComputeType_t compute_type(DType dtype, const CudaContext& cc) {
  if (dtype == DType::BF16) return CUBLAS_COMPUTE_32F;
  return cc.conv_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC;
}

int64_t tensor_bytes(const TensorDesc& d, DType dtype) {
  return alloc_bytes(checked_mul(d.numel(), dtype_size(dtype), "", "1x1 GEMM timing bytes"));
}

}  // namespace

bool conv_gemm_applies(ConvPass pass, const ConvCudaParams& p, const ConvTensors& t) {
  if (pass == ConvPass::BackwardFilter) return false;
  if (p.kernel_h != 1 || p.kernel_w != 1 || p.stride_h != 1 || p.stride_w != 1 || p.groups != 1)
    return false;
  if (p.pad_h != 0 || p.pad_w != 0 || p.pad_bottom != 0 || p.pad_right != 0) return false;
  if (t.x->shape.size() != 4 || t.y->shape.size() != 4) return false;
  if (t.x->dtype != DType::F32 && t.x->dtype != DType::BF16) return false;
  const GemmDims d = gemm_dims(t);
  const int64_t most = INT_MAX;
  return t.x->shape[2] == t.y->shape[2] && t.x->shape[3] == t.y->shape[3] && d.n <= most &&
         d.c <= most && d.k <= most && d.hw <= most;
}

ConvPlan conv_gemm_plan(const ConvTensors& t) {
  ConvPlan plan;
  plan.gemm = true;
  plan.chosen = true;
  plan.dtype = t.x->dtype;
  plan.chunk = t.x->shape[0];
  plan.x_per_sample = t.x->numel() / std::max<int64_t>(t.x->shape[0], 1);
  plan.y_per_sample = t.y->numel() / std::max<int64_t>(t.y->shape[0], 1);
  plan.weight_copy = plan.dtype == DType::BF16 ? bf16_copy_bytes(*t.w) : 0;
  return plan;
}

// Column-major, as cuBLAS sees the row-major blocks: x_n [C, HW] is the column-major
// [HW, C] matrix with leading dimension HW, w [K, C] the column-major [C, K] one.
//   forward: y_n^T [HW, K] = x_n^T [HW, C] w^T [C, K]
//   data:    dx_n^T [HW, C] = dy_n^T [HW, K] w [K, C]  (w's column-major [C, K], transposed)
void conv_gemm_run(ConvPass pass, const ConvTensors& t, const void* in, const void* w, void* out,
                   const CudaContext& cc) {
  REMAT_CHECK(pass != ConvPass::BackwardFilter, "conv_gemm_run: no GEMM form of the weight gradient");
  const GemmDims d = gemm_dims(t);
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

double conv_gemm_time_ms(ConvPass pass, const ConvTensors& t, const CudaContext& cc) {
  const bool forward = pass == ConvPass::Forward;
  const DType dtype = t.x->dtype;
  const void* in = forward ? t.x_data : t.y_data;
  void* out = forward ? t.y_data : t.x_data;
  const void* w = t.w_data;
  char* scratch = static_cast<char*>(cc.search_scratch);
  const int64_t w_bytes = tensor_bytes(*t.w, dtype);
  if (in && out && w) {
    if (dtype == DType::BF16) {  // the weight as the call reads it: a bf16 copy
      if (!scratch || w_bytes > cc.workspace_limit) return -1;
      bf16_narrow(reinterpret_cast<uint16_t*>(scratch), static_cast<const float*>(w),
                  t.w->numel(), cc.stream);
      w = scratch;
    }
  } else {
    const TensorDesc& in_d = forward ? *t.x : *t.y;
    const TensorDesc& out_d = forward ? *t.y : *t.x;
    const int64_t in_bytes = tensor_bytes(in_d, dtype), out_bytes = tensor_bytes(out_d, dtype);
    if (!scratch || in_bytes + out_bytes + w_bytes > cc.workspace_limit) return -1;
    REMAT_CUDA_CHECK(cudaMemsetAsync(scratch, 0, static_cast<size_t>(in_bytes + out_bytes + w_bytes),
                                     cc.stream));
    w = scratch;
    in = scratch + w_bytes;
    out = scratch + w_bytes + in_bytes;
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  REMAT_CUDA_CHECK(cudaEventCreate(&start));
  if (cudaEventCreate(&stop) != cudaSuccess) {
    (void)cudaEventDestroy(start);
    REMAT_FAIL("conv_gemm_time_ms: cudaEventCreate failed");
  }
  float best = FLT_MAX;
  try {
    conv_gemm_run(pass, t, in, w, out, cc);  // warm-up: kernel selection and loading
    for (int rep = 0; rep < 3; ++rep) {
      REMAT_CUDA_CHECK(cudaEventRecord(start, cc.stream));
      conv_gemm_run(pass, t, in, w, out, cc);
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
