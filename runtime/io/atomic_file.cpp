// write_file_atomic: temporary file, fsync, rename, directory fsync.
#include "runtime/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "runtime/core/check.h"

namespace remat {

namespace {

std::string errno_text() { return std::strerror(errno); }

// write(2) all of `bytes`, retrying short and interrupted writes.
void write_all(int fd, const char* data, size_t bytes, const std::string& path) {
  while (bytes > 0) {
    ssize_t n = ::write(fd, data, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) REMAT_USER_ERROR(path << ": cannot write: " << errno_text());
    data += n;
    bytes -= static_cast<size_t>(n);
  }
}

std::string parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Note [temporary files at exit]: the registered temporary's path, NUL-terminated, readable from
// a signal handler once g_tmp_state is kTmpSet.
constexpr int kTmpFree = 0, kTmpClaimed = 1, kTmpSet = 2;
std::atomic<int> g_tmp_state{kTmpFree};
char g_tmp_path[4096];

}  // namespace

TemporaryInProgress::TemporaryInProgress(const std::string& tmp_path) {
  int expected = kTmpFree;
  if (tmp_path.size() >= sizeof g_tmp_path ||
      !g_tmp_state.compare_exchange_strong(expected, kTmpClaimed))
    return;
  std::memcpy(g_tmp_path, tmp_path.c_str(), tmp_path.size() + 1);
  g_tmp_state.store(kTmpSet);
  registered_ = true;
}

TemporaryInProgress::~TemporaryInProgress() {
  if (registered_) g_tmp_state.store(kTmpFree);
}

void remove_temporary_in_progress() {
  static_assert(std::atomic<int>::is_always_lock_free, "read from a signal handler");
  if (g_tmp_state.load() == kTmpSet) ::unlink(g_tmp_path);
}

void check_output_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    REMAT_USER_ERROR(what << " " << path << ": exists and is not a regular file ("
                          << (S_ISDIR(st.st_mode) ? "a directory" : "a FIFO, socket or device")
                          << "); not replacing it");
  const std::string dir = parent_dir(path);
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    REMAT_USER_ERROR(what << " " << path << ": directory '" << dir << "' does not exist");
}

void write_file_atomic(const std::string& path, const std::vector<std::string_view>& parts) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    REMAT_USER_ERROR(path << ": exists and is not a regular file; not replacing it");
  const std::string tmp = path + ".tmp";
  const TemporaryInProgress in_progress(tmp);  // Note [temporary files at exit]
  // A stale temporary (an earlier run killed mid-write) is replaced; O_EXCL | O_NOFOLLOW make
  // sure the data goes into a fresh regular file, never through a FIFO or a link left there.
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) REMAT_USER_ERROR(tmp << ": cannot create: " << errno_text());
  try {
    for (std::string_view p : parts) write_all(fd, p.data(), p.size(), tmp);
    if (::fsync(fd) != 0) REMAT_USER_ERROR(tmp << ": fsync failed: " << errno_text());
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    REMAT_USER_ERROR(tmp << ": close failed: " << errno_text());
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string why = errno_text();
    ::unlink(tmp.c_str());
    REMAT_USER_ERROR(path << ": cannot replace with " << tmp << ": " << why);
  }
  // Make the rename itself durable.
  const std::string dir = parent_dir(path);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) REMAT_USER_ERROR(dir << ": cannot open directory to fsync: " << errno_text());
  int rc = ::fsync(dfd);
  ::close(dfd);
  if (rc != 0) REMAT_USER_ERROR(dir << ": directory fsync failed: " << errno_text());
}

}  // namespace remat
