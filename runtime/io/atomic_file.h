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

// Note [temporary files at exit]: a process that ends at once on a signal (the second stop
// signal of Note [graceful stop]) never returns to write_file_atomic's clean-up, and would leave
// PATH.tmp half-written (the final name is safe). The temporary being written is therefore
// registered while it exists, and the handler removes it with remove_temporary_in_progress(),
// which is async-signal-safe (one unlink). One write at a time registers (a second, concurrent
// one is not registered; writes happen on the main thread).
class TemporaryInProgress {
 public:
  explicit TemporaryInProgress(const std::string& tmp_path);
  ~TemporaryInProgress();
  TemporaryInProgress(const TemporaryInProgress&) = delete;
  TemporaryInProgress& operator=(const TemporaryInProgress&) = delete;

 private:
  bool registered_ = false;
};
void remove_temporary_in_progress();

}  // namespace remat
