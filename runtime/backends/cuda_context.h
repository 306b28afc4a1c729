// What a CUDA kernel path sees of the CUDA backend (ExecContext::device points to one): the
// stream, the cuDNN and cuBLAS handles, and the backend's per-shape caches. Included only by
// translation units built with REMAT_HAVE_CUDA. The backend owns everything here; ops never
// create handles, streams or device memory (workspace comes in ExecContext).
#pragma once

#ifdef REMAT_HAVE_CUDA

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "runtime/backends/backend.h"  // ConvLayout, ConvGemm, BnKernels, AttentionKernel
#include "runtime/core/check.h"

namespace remat {

// Per-shape cache of values an op computes once (cuDNN algorithm choices with their workspace,
// descriptor sets). Keys are strings the op builds from its shapes and attributes
// ("conv2d_fwd:32x3x224x224:64x3x3x3:s1p1d1g1"). Values are type-erased and owned here.
class CudaCache {
 public:
  template <typename T>
  T& get_or_create(const std::string& key, const std::function<T()>& make) {
    auto it = entries_.find(key);
    if (it == entries_.end())
      it = entries_.emplace(key, std::make_shared<Holder<T>>(make())).first;
    return static_cast<Holder<T>&>(*it->second).value;
  }
  size_t size() const { return entries_.size(); }

 private:
  struct Base {
    virtual ~Base() = default;
  };
  template <typename T>
  struct Holder : Base {
    explicit Holder(T v) : value(std::move(v)) {}
    T value;
  };
  std::map<std::string, std::shared_ptr<Base>> entries_;
};

struct CudaContext {
  cudaStream_t stream = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  bool conv_tf32 = false;            // TF32 tensor-core math in cuDNN convolutions
  bool matmul_tf32 = false;          // TF32 tensor-core math in cuBLAS GEMMs
  int64_t workspace_limit = 0;       // most workspace bytes an algorithm choice may need
  ConvLayout conv_layout = ConvLayout::Auto;  // Note [staged NHWC convolutions]
  ConvGemm conv_gemm = ConvGemm::Auto;        // Note [1x1 convolutions as GEMMs]
  BnKernels bn_kernels = BnKernels::Auto;     // Note [batchnorm on the GPU]
  AttentionKernel attention_kernel = AttentionKernel::Rows;  // Note [tiled attention kernels]
  int64_t cudnn_max_elements = kCudnnMaxElements;            // Note [cuDNN's element limit]
  CudaCache* cache = nullptr;        // per-shape algorithm and descriptor cache
  // Scratch device memory for algorithm search only (never during a step), at least
  // workspace_limit bytes; null when none was provided.
  void* search_scratch = nullptr;
  // Note [step graphs] in runtime/backends/backend.h: true while the backend captures the
  // stream into a CUDA graph. Ops then enqueue nothing that waits for the host (no
  // synchronisation, no read-back) and take the step from step_device (8 bytes the backend
  // owns and rewrites before each replay; Note [step source] in kernels/rng.h).
  bool capturing = false;
  const uint64_t* step_device = nullptr;
};

}  // namespace remat

// Error checks (STYLE.md): throw remat::Error with the expression, the library's status
// string and file:line.
#define REMAT_CUDA_CHECK(expr)                                                        \
  do {                                                                                \
    cudaError_t remat_e_ = (expr);                                                    \
    if (remat_e_ != cudaSuccess)                                                      \
      ::remat::detail::throw_check(#expr, std::string("CUDA error: ") +              \
                                              cudaGetErrorString(remat_e_),          \
                                   __FILE__, __LINE__);                               \
  } while (0)

#define REMAT_CUDNN_CHECK(expr)                                                       \
  do {                                                                                \
    cudnnStatus_t remat_s_ = (expr);                                                  \
    if (remat_s_ != CUDNN_STATUS_SUCCESS)                                             \
      ::remat::detail::throw_check(#expr, std::string("cuDNN error: ") +             \
                                              cudnnGetErrorString(remat_s_),         \
                                   __FILE__, __LINE__);                               \
  } while (0)

#define REMAT_CUBLAS_CHECK(expr)                                                      \
  do {                                                                                \
    cublasStatus_t remat_b_ = (expr);                                                 \
    if (remat_b_ != CUBLAS_STATUS_SUCCESS)                                            \
      ::remat::detail::throw_check(#expr, std::string("cuBLAS error: ") +            \
                                              cublasGetStatusString(remat_b_),       \
                                   __FILE__, __LINE__);                               \
  } while (0)

// After every kernel launch.
#define REMAT_CUDA_LAUNCH_CHECK() REMAT_CUDA_CHECK(cudaGetLastError())

#endif  // REMAT_HAVE_CUDA
