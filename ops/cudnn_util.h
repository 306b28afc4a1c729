// Small helpers for the ops' CUDA paths (CUDA builds only): owned cuDNN descriptors, NCHW
// tensor descriptors (F32 or BF16) from shapes, the backend's per-shape cache, int range checks,
// and the bf16 copy of an F32 parameter a bf16 cuDNN / cuBLAS call reads from the workspace.
// Descriptors are shared_ptr so they can live in CudaCache entries (copyable values).
#pragma once

#ifdef REMAT_HAVE_CUDA

#include <algorithm>
#include <climits>
#include <memory>
#include <string>
#include <type_traits>

#include "kernels/kernels.h"
#include "ops/fused_activation.h"
#include "ops/op_cuda.h"  // cuda_context
#include "runtime/backends/cuda_context.h"
#include "runtime/core/check.h"
#include "runtime/graph/op.h"

namespace remat {

using CudnnTensorDesc = std::shared_ptr<std::remove_pointer_t<cudnnTensorDescriptor_t>>;
using CudnnFilterDesc = std::shared_ptr<std::remove_pointer_t<cudnnFilterDescriptor_t>>;
using CudnnConvDesc = std::shared_ptr<std::remove_pointer_t<cudnnConvolutionDescriptor_t>>;
using CudnnPoolDesc = std::shared_ptr<std::remove_pointer_t<cudnnPoolingDescriptor_t>>;

inline CudaCache& cuda_cache(const ExecContext& ctx) {
  CudaContext& cc = cuda_context(ctx);
  REMAT_CHECK(cc.cache != nullptr, "CudaContext has no CudaCache (node "
                                       << (ctx.node ? ctx.node->name : std::string("?")) << ")");
  return *cc.cache;
}

// cuDNN and cuBLAS take int sizes.
inline int to_int(int64_t v, const char* what) {
  REMAT_CHECK(v >= 0 && v <= INT_MAX, what << " = " << v << " does not fit an int (cuDNN/cuBLAS)");
  return static_cast<int>(v);
}

// cuDNN's name for a float dtype (F32 or BF16).
inline cudnnDataType_t cudnn_dtype(DType t) {
  REMAT_CHECK(dtype_is_float(t), "cuDNN tensor of " << dtype_name(t) << " values");
  return t == DType::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

// A packed NCHW (or, with format CUDNN_TENSOR_NHWC, NHWC) tensor descriptor (F32 or BF16).
inline CudnnTensorDesc cudnn_tensor_4d(int64_t n, int64_t c, int64_t h, int64_t w,
                                       DType dtype = DType::F32,
                                       cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW) {
  cudnnTensorDescriptor_t d = nullptr;
  REMAT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
  CudnnTensorDesc owned(d, [](cudnnTensorDescriptor_t p) { cudnnDestroyTensorDescriptor(p); });
  REMAT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, format, cudnn_dtype(dtype),
                                               to_int(n, "N"), to_int(c, "C"), to_int(h, "H"),
                                               to_int(w, "W")));
  return owned;
}

// [N, C, H, W] as is; [N, F] as [N, F, 1, 1] (same memory layout).
inline CudnnTensorDesc cudnn_tensor_of(const Shape& s, DType dtype = DType::F32) {
  REMAT_CHECK(s.size() == 4 || s.size() == 2, "cuDNN tensor needs a 2-D or 4-D shape, got "
                                                  << shape_str(s));
  return s.size() == 4 ? cudnn_tensor_4d(s[0], s[1], s[2], s[3], dtype)
                       : cudnn_tensor_4d(s[0], s[1], 1, 1, dtype);
}

// A KCRS (or, with format CUDNN_TENSOR_NHWC, KRSC) filter of logical shape [K, C/g, R, S].
inline CudnnFilterDesc cudnn_filter_4d(const Shape& kcrs, DType dtype = DType::F32,
                                       cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW) {
  REMAT_CHECK(kcrs.size() == 4, "cuDNN filter needs a 4-D shape, got " << shape_str(kcrs));
  cudnnFilterDescriptor_t d = nullptr;
  REMAT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d));
  CudnnFilterDesc owned(d, [](cudnnFilterDescriptor_t p) { cudnnDestroyFilterDescriptor(p); });
  REMAT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d, cudnn_dtype(dtype), format,
                                               to_int(kcrs[0], "K"), to_int(kcrs[1], "C/g"),
                                               to_int(kcrs[2], "R"), to_int(kcrs[3], "S")));
  return owned;
}

inline CudnnConvDesc cudnn_conv_desc() {
  cudnnConvolutionDescriptor_t d = nullptr;
  REMAT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
  return CudnnConvDesc(d, [](cudnnConvolutionDescriptor_t p) {
    cudnnDestroyConvolutionDescriptor(p);
  });
}

inline CudnnPoolDesc cudnn_pool_desc() {
  cudnnPoolingDescriptor_t d = nullptr;
  REMAT_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&d));
  return CudnnPoolDesc(d, [](cudnnPoolingDescriptor_t p) { cudnnDestroyPoolingDescriptor(p); });
}

// The kernels/ epilogue's name for a fused activation.
inline KernelActivation kernel_activation(Activation a) {
  if (a == Activation::Relu) return KernelActivation::Relu;
  if (a == Activation::Relu6) return KernelActivation::Relu6;
  return KernelActivation::None;
}

// Note [bf16 weights]
// A bf16 convolution or GEMM reads its weight in bf16 (cuDNN requires the filter in the data's
// type; cuBLAS's bf16 GEMMs take both operands in bf16). No persistent bf16 copy exists: each
// call rounds the FP32 master weight into the node's workspace first (Note [bf16 execution]'s
// bf16_operands, so the CPU reference reads the same values), which costs 2 bytes per weight of
// workspace and one elementwise kernel, small next to the GEMM it feeds.
inline int64_t bf16_copy_bytes(const TensorDesc& weight) {
  return alloc_bytes(checked_mul(weight.numel(), int64_t{2}, "", "bf16 weight copy bytes"));
}

// Note [cuDNN's element limit]
// cuDNN's legacy API describes a tensor with int sizes and refuses one of 2^31 elements or more
// (CUDNN_STATUS_NOT_SUPPORTED), a size the largest batches reach: VGG19's first pooling at batch
// 700 in bf16 holds 2.2e9. Every sample of an NCHW or NHWC tensor is contiguous, and
// convolution, pooling and inference-mode batch norm treat samples alone, so such a call runs
// as several calls over consecutive samples (the convolution plan chooses its own chunks, Note
// [conv algorithm choice]); train-mode batch norm, whose statistics span the batch, runs on our
// kernels instead (Note [batchnorm on the GPU]). CudaContext::cudnn_max_elements is the limit;
// tests lower it to run the split calls at small sizes.
//
// Samples per cuDNN call for a batch of `n` samples of `per_sample` elements each (the larger
// of a call's tensors): all n when they fit.
inline int64_t cudnn_samples_per_call(const ExecContext& ctx, int64_t n, int64_t per_sample) {
  const CudaContext& cc = cuda_context(ctx);
  REMAT_CHECK(per_sample <= cc.cudnn_max_elements,
              "node '" << (ctx.node ? ctx.node->name : std::string("?")) << "': one sample holds "
                       << per_sample << " elements, more than a cuDNN tensor may ("
                       << cc.cudnn_max_elements << ", Note [cuDNN's element limit])");
  return std::min(n, cc.cudnn_max_elements / std::max<int64_t>(per_sample, 1));
}

// `base` + `offset` bytes (a later sample of a split call).
template <typename P>
P* at_byte(P* base, int64_t offset) {
  using Byte = std::conditional_t<std::is_const_v<P>, const char, char>;
  return reinterpret_cast<P*>(reinterpret_cast<Byte*>(base) + offset);
}

// "2x3x4x5" for cache keys.
inline std::string shape_key(const Shape& s) {
  std::string k;
  for (size_t i = 0; i < s.size(); ++i) k += (i ? "x" : "") + std::to_string(s[i]);
  return k;
}

}  // namespace remat

#endif  // REMAT_HAVE_CUDA
