// Where the repository's files (configs/, tests/data/) are when a test runs: tests may run
// from a build carried to another machine, so the path baked in at build time is the last resort.
#pragma once

#include <cstdlib>
#include <string>
#include <sys/stat.h>

namespace remat {

// $REMAT_SOURCE_DIR if set; else the nearest directory at or above the working directory that
// holds configs/small_cnn.yaml; else REMAT_SOURCE_DIR as configured by CMake.
inline std::string test_source_dir() {
  if (const char* env = std::getenv("REMAT_SOURCE_DIR"); env && *env) return env;
  auto has_configs = [](const std::string& d) {
    struct stat st {};
    return ::stat((d + "/configs/small_cnn.yaml").c_str(), &st) == 0;
  };
  if (char* cwd = ::realpath(".", nullptr)) {
    std::string dir(cwd);
    std::free(cwd);
    for (;;) {
      if (has_configs(dir)) return dir;
      const auto slash = dir.find_last_of('/');
      if (slash == std::string::npos || dir.size() <= 1) break;
      dir = slash == 0 ? std::string("/") : dir.substr(0, slash);
    }
  }
#ifdef REMAT_SOURCE_DIR
  return REMAT_SOURCE_DIR;
#else
  return ".";
#endif
}

}  // namespace remat
