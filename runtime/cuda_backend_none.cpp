// The CUDA backend entry points when the build has no CUDA: report why, never crash.
#include "runtime/backend.h"

namespace remat {

bool cuda_backend_built() { return false; }

std::unique_ptr<Backend> make_cuda_backend(int, std::string* why) {
  if (why) *why = "this build of remat has no CUDA backend (nvcc/cuDNN were not found at configure time)";
  return nullptr;
}

}  // namespace remat
