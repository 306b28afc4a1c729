// Writing a file so that a reader sees the old contents or the new, never a half-written
// file: data goes to PATH.tmp, is fsynced, then renamed over PATH (and the directory fsynced).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace remat {

// Writes the concatenation of `parts` to `path` atomically. Refuses a `path` that exists and
// is not a regular file (a FIFO, a device, a directory). Throws UserError naming the path.
void write_file_atomic(const std::string& path, const std::vector<std::string_view>& parts);
inline void write_file_atomic(const std::string& path, std::string_view text) {
  write_file_atomic(path, std::vector<std::string_view>{text});
}

// Refuses up front what write_file_atomic would refuse at the end: a `path` that exists and is
// not a regular file, or whose directory does not exist. Tools check their outputs before any
// work, so a long run does not end in an error. UserError naming `what` ("--save") and path.
void check_output_file(const std::string& path, const std::string& what);

}  // namespace remat
