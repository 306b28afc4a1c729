// CUDA device discovery and library version checks, shared by the CUDA backend, tests and
// tools. Nothing here creates a stream or handle; a failed query becomes a sentence, not a crash.
#include "runtime/backends/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <sstream>

#include "runtime/core/check.h"
#include "runtime/backends/cuda_context.h"

namespace remat {

namespace {

// "13.0" from 13000 (CUDA's encoding: 1000 * major + 10 * minor).
std::string cuda_version_str(int v) {
  if (v <= 0) return "none";
  std::ostringstream os;
  os << v / 1000 << "." << (v % 1000) / 10;
  return os.str();
}

// cuDNN 9 encodes versions as 10000 * major + 100 * minor + patch; cuDNN 8 and older used
// 1000 * major + 100 * minor + patch.
int cudnn_major_of(size_t v) { return static_cast<int>(v >= 10000 ? v / 10000 : v / 1000); }
std::string cudnn_version_str(size_t v) {
  std::ostringstream os;
  if (v >= 10000) os << v / 10000 << "." << (v % 10000) / 100 << "." << v % 100;
  else os << v / 1000 << "." << (v % 1000) / 100 << "." << v % 100;
  return os.str();
}

}  // namespace

bool cuda_device_available(std::string* why) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear the (non-sticky) error so later calls start clean
    int driver = 0, runtime = 0;
    (void)cudaDriverGetVersion(&driver);
    (void)cudaRuntimeGetVersion(&runtime);
    if (why)
      *why = std::string("no CUDA device: cudaGetDeviceCount failed: ") + cudaGetErrorString(e) +
             " (CUDA runtime " + cuda_version_str(runtime) + ", driver " +
             cuda_version_str(driver) + ")";
    return false;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device: cudaGetDeviceCount found 0 CUDA devices";
    return false;
  }
  return true;
}

int cuda_device_count() {
  if (!cuda_device_available(nullptr)) return 0;
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

CudaDeviceInfo cuda_device_info(int device) {
  std::string why;
  if (!cuda_device_available(&why)) REMAT_FAIL(why);
  int count = 0;
  REMAT_CUDA_CHECK(cudaGetDeviceCount(&count));
  REMAT_CHECK(device >= 0 && device < count,
              "CUDA device " << device << " does not exist (this machine has " << count << ")");
  int previous = 0;
  REMAT_CUDA_CHECK(cudaGetDevice(&previous));
  cudaDeviceProp prop{};
  REMAT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  // cudaMemGetInfo reports on the current device: switch for the query, then switch back.
  REMAT_CUDA_CHECK(cudaSetDevice(device));
  size_t free_b = 0, total_b = 0;
  cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
  REMAT_CUDA_CHECK(cudaSetDevice(previous));
  REMAT_CUDA_CHECK(e);
  CudaDeviceInfo info;
  info.index = device;
  info.name = prop.name;
  info.major = prop.major;
  info.minor = prop.minor;
  info.total_bytes = static_cast<int64_t>(total_b);
  info.free_bytes = static_cast<int64_t>(free_b);
  return info;
}

bool cuda_libraries_compatible(std::string* why) {
  const size_t cudnn = cudnnGetVersion();
  std::ostringstream os;
  // Note [cuDNN minor versions]: every cuDNN call remat makes (the legacy convolution,
  // batch-norm, pooling and tensor-descriptor API) exists unchanged in every cuDNN 9 release,
  // so any 9.x loads: PyTorch's wheels, for one, often carry an older 9.x than the toolkit
  // this binary was built with. cuDNN 8 and 10 differ in ABI and are refused.
  if (cudnn_major_of(cudnn) != CUDNN_MAJOR) {
    os << "cuDNN " << cudnn_version_str(cudnn) << " was found at run time, but this binary was "
       << "built with cuDNN " << cudnn_version_str(CUDNN_VERSION) << " and needs cuDNN "
       << CUDNN_MAJOR << ".x";
    if (why) *why = os.str();
    return false;
  }
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS) {
    if (why) *why = "cublasGetProperty failed: cannot read the cuBLAS version";
    return false;
  }
  if (major < CUBLAS_VER_MAJOR) {
    os << "cuBLAS " << major << "." << minor << "." << patch << " was found at run time, but this "
       << "binary was built with cuBLAS " << CUBLAS_VER_MAJOR << "." << CUBLAS_VER_MINOR << "."
       << CUBLAS_VER_PATCH << " and needs cuBLAS " << CUBLAS_VER_MAJOR << " or newer";
    if (why) *why = os.str();
    return false;
  }
  return true;
}

std::string cuda_library_versions() {
  int runtime = 0, driver = 0, major = 0, minor = 0, patch = 0;
  (void)cudaRuntimeGetVersion(&runtime);
  (void)cudaDriverGetVersion(&driver);
  (void)cublasGetProperty(MAJOR_VERSION, &major);
  (void)cublasGetProperty(MINOR_VERSION, &minor);
  (void)cublasGetProperty(PATCH_LEVEL, &patch);
  std::ostringstream os;
  os << "CUDA runtime " << cuda_version_str(runtime) << ", driver " << cuda_version_str(driver)
     << ", cuDNN " << cudnn_version_str(cudnnGetVersion()) << ", cuBLAS " << major << "." << minor
     << "." << patch;
  return os.str();
}

}  // namespace remat
