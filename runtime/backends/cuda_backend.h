// What tests and tools need to know about CUDA without holding a backend: whether a device is
// usable, its name and memory, the library versions. Defined in every build (CPU-only builds
// answer "no" with the reason).
#pragma once

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

namespace remat {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;          // "NVIDIA H100 80GB HBM3"
  int major = 0, minor = 0;  // compute capability (9, 0 = sm_90)
  int64_t total_bytes = 0;   // device memory (cudaMemGetInfo)
  int64_t free_bytes = 0;    // free at the time of the query (cudaMemGetInfo)
};

// True when this build has CUDA and at least one device is usable; otherwise false with
// `why` (may be null) set to one sentence naming the CUDA error, e.g. "no CUDA device:
// cudaGetDeviceCount failed: CUDA driver version is insufficient for CUDA runtime version ...".
bool cuda_device_available(std::string* why);

// Number of usable CUDA devices (0 when none is usable or the build has no CUDA).
int cuda_device_count();

// Name, capability and memory of device `device`. Throws remat::Error when it is unusable.
// Leaves the calling thread's current device unchanged.
CudaDeviceInfo cuda_device_info(int device);

// True when the cuDNN and cuBLAS found at run time can serve this binary: cuDNN of the same
// major version and at least the version compiled against, cuBLAS of at least the compiled
// major version. Otherwise false with `why` naming the found and required versions.
bool cuda_libraries_compatible(std::string* why);

// "CUDA runtime 13.0, driver 12.8, cuDNN 9.19.0, cuBLAS 13.1.0" (or why there is no CUDA).
std::string cuda_library_versions();

// "cuda:0 NVIDIA H100 80GB HBM3 (sm_90, 80 GiB)": the CUDA backend's name() for a device.
inline std::string cuda_device_label(const CudaDeviceInfo& info) {
  std::ostringstream os;
  os << "cuda:" << info.index << " " << info.name << " (sm_" << info.major << info.minor << ", "
     << std::llround(static_cast<double>(info.total_bytes) / (1024.0 * 1024.0 * 1024.0))
     << " GiB)";
  return os.str();
}

}  // namespace remat
