// The CUDA entry points when the build has no CUDA: report why, never crash.
#include "runtime/backends/backend.h"
#include "runtime/core/check.h"
#include "runtime/backends/cuda_backend.h"

namespace remat {

namespace {
constexpr const char* kNoCuda =
    "this build of remat has no CUDA backend (nvcc/cuDNN were not found at configure time)";
}  // namespace

bool cuda_backend_built() { return false; }

std::unique_ptr<Backend> make_cuda_backend(int, std::string* why, const CudaOptions&) {
  if (why) *why = kNoCuda;
  return nullptr;
}

bool cuda_device_available(std::string* why) {
  if (why) *why = kNoCuda;
  return false;
}

CudaDeviceInfo cuda_device_info(int) { REMAT_FAIL(kNoCuda); }

int cuda_device_count() { return 0; }

bool cuda_libraries_compatible(std::string* why) {
  if (why) *why = kNoCuda;
  return false;
}

std::string cuda_library_versions() { return kNoCuda; }

}  // namespace remat
