// version_text(): the build facts CMake recorded at configure time (version_info.h.in) and the
// git revision of the last build (git_revision.h, cmake/git_revision.cmake).
#include "tools/common/version.h"

#include "runtime/backends/backend.h"
#include "runtime/backends/cuda_backend.h"
#include "tools/common/git_revision.h"
#include "tools/common/version_info.h"

namespace remat {

std::string version_text(const std::string& program) {
  std::string s = program + " (remat) " + REMAT_VERSION_STRING + " (git " + REMAT_GIT_REVISION +
                  ")\n";
  s += std::string("build: ") + REMAT_BUILD_TYPE + ", " + REMAT_COMPILER + "\n";
  s += std::string("built with: CUDA ") + REMAT_BUILT_CUDA + ", cuDNN " + REMAT_BUILT_CUDNN +
       ", cuBLAS " + REMAT_BUILT_CUBLAS + ", Cbc " + REMAT_BUILT_CBC + "\n";
  if (cuda_backend_built()) s += "found at run time: " + cuda_library_versions() + "\n";
  return s;
}

}  // namespace remat
