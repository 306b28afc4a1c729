// `--version` of every tool: remat's version and git revision, the build type, and the CUDA,
// cuDNN, cuBLAS and Cbc versions it was built with (and, with CUDA, found at run time).
#pragma once

#include <string>

namespace remat {

// Several lines, each ending in '\n'; the first is "<program> (remat) <version> (<revision>)".
std::string version_text(const std::string& program);

}  // namespace remat
