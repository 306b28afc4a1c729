// child_run: fork, a pipe of (tag, doubles) records from the child, a shared stop flag, and
// SIGKILL at the deadline. The child never returns into the caller's code: it leaves through
// _exit, so no destructors or atexit handlers of the parent's state run twice.
#include "solver/child_run.h"

#include <poll.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>

#include "runtime/core/check.h"

namespace remat {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kErrorTag = -1;  // the work threw: the record holds the message's characters

struct Header {
  int32_t tag;
  int32_t pad;
  uint64_t count;  // doubles that follow
};

static_assert(std::atomic<int>::is_always_lock_free, "the stop flag is shared across processes");

bool write_all(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t w = ::write(fd, p, bytes);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    bytes -= size_t(w);
  }
  return true;
}

class PipeChannel : public ChildChannel {
 public:
  PipeChannel(int fd, const std::atomic<int>* stop) : fd_(fd), stop_(stop) {}
  void send(int tag, const std::vector<double>& data) override {
    Header h{tag, 0, data.size()};
    // A parent that stopped reading has killed us or is about to; nothing to do on failure.
    if (write_all(fd_, &h, sizeof h)) write_all(fd_, data.data(), data.size() * sizeof(double));
  }
  bool stop_requested() const override { return stop_->load(std::memory_order_relaxed) != 0; }

 private:
  int fd_;
  const std::atomic<int>* stop_;
};

class DirectChannel : public ChildChannel {
 public:
  explicit DirectChannel(const std::function<bool(int, const std::vector<double>&)>& handler)
      : handler_(handler) {}
  void send(int tag, const std::vector<double>& data) override {
    if (handler_(tag, data)) stop_ = true;
  }
  bool stop_requested() const override { return stop_; }

 private:
  const std::function<bool(int, const std::vector<double>&)>& handler_;
  bool stop_ = false;
};

std::vector<double> encode_text(const std::string& s) { return {s.begin(), s.end()}; }
std::string decode_text(const std::vector<double>& d) {
  std::string s;
  for (double c : d) s.push_back(static_cast<char>(c));
  return s;
}

[[noreturn]] void child_main(int fd, const std::atomic<int>* stop,
                             const std::function<void(ChildChannel&)>& work) {
  int code = 0;
  PipeChannel channel(fd, stop);
  try {
    work(channel);
  } catch (const std::exception& e) {
    channel.send(kErrorTag, encode_text(e.what()));
    code = 3;
  } catch (...) {
    channel.send(kErrorTag, encode_text("unknown exception in the solver process"));
    code = 3;
  }
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  ::close(fd);
  ::_exit(code);
}

// Splits complete records off the front of `buf` and hands them to `deliver`.
void parse_records(std::vector<char>* buf,
                   const std::function<void(int, std::vector<double>&&)>& deliver) {
  size_t pos = 0;
  while (buf->size() - pos >= sizeof(Header)) {
    Header h;
    std::memcpy(&h, buf->data() + pos, sizeof h);
    const size_t bytes = sizeof h + h.count * sizeof(double);
    if (buf->size() - pos < bytes) break;
    std::vector<double> data(h.count);
    if (h.count) std::memcpy(data.data(), buf->data() + pos + sizeof h, h.count * sizeof(double));
    pos += bytes;
    deliver(h.tag, std::move(data));
  }
  buf->erase(buf->begin(), buf->begin() + long(pos));
}

}  // namespace

ChildEnd child_run(const std::function<void(ChildChannel&)>& work, double deadline_seconds,
                   const std::function<bool(int, const std::vector<double>&)>& on_record,
                   std::string* error) {
  const auto t0 = Clock::now();
  auto in_process = [&](const std::string& why) {
    if (error) *error = why;
    DirectChannel channel(on_record);
    work(channel);
    return ChildEnd::InProcess;
  };
  void* shared = ::mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return in_process(std::string("mmap: ") + std::strerror(errno));
  auto* stop = new (shared) std::atomic<int>(0);
  struct Unmap {
    void* p;
    ~Unmap() { ::munmap(p, sizeof(std::atomic<int>)); }
  } unmap{shared};
  int fds[2];
  if (::pipe(fds) != 0) return in_process(std::string("pipe: ") + std::strerror(errno));
  std::cout.flush();
  std::fflush(nullptr);  // or the child's exit would print the parent's buffered output again
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return in_process(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
#ifdef __linux__
    // A parent that ends without waiting (`train` stopped while it solves, Note [graceful stop]
    // in tools/training/stop_signal.h) takes its solver along instead of leaving it running.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
#endif
    ::close(fds[0]);
    // The solver's own log goes to stderr: stdout is the tools' results (one JSON object per
    // line with --json), and a killed child's half-written line must not land in it.
    std::fflush(stdout);
    ::dup2(STDERR_FILENO, STDOUT_FILENO);
    child_main(fds[1], stop, work);
  }
  ::close(fds[1]);

  std::vector<char> buf;
  std::string child_error;
  bool eof = false, killed = false;
  auto deliver = [&](int tag, std::vector<double>&& data) {
    if (tag == kErrorTag) child_error = decode_text(data);
    else if (on_record(tag, data)) stop->store(1, std::memory_order_relaxed);
  };
  while (!eof) {
    const double left = deadline_seconds - std::chrono::duration<double>(Clock::now() - t0).count();
    if (left <= 0) {
      ::kill(pid, SIGKILL);
      killed = true;
      break;
    }
    pollfd pfd{fds[0], POLLIN, 0};
    int ready = ::poll(&pfd, 1, int(std::min(left * 1000.0 + 1, 1000.0)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    char chunk[1 << 16];
    ssize_t got = ::read(fds[0], chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      eof = true;
      break;
    }
    buf.insert(buf.end(), chunk, chunk + got);
    parse_records(&buf, deliver);
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (killed) return ChildEnd::Killed;
  if (!child_error.empty()) throw Error(child_error);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return ChildEnd::Finished;
  if (error) {
    *error = WIFSIGNALED(status) ? std::string("solver process killed by signal ") +
                                       std::to_string(WTERMSIG(status)) + " (" +
                                       strsignal(WTERMSIG(status)) + ")"
                                 : "solver process exited with status " +
                                       std::to_string(WEXITSTATUS(status));
  }
  return ChildEnd::Crashed;
}

}  // namespace remat
