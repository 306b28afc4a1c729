// SIGINT/SIGTERM handlers for Note [graceful stop]: a flag on the first, _exit on the second.
#include "tools/training/stop_signal.h"

#include <time.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

#include "runtime/core/check.h"

namespace remat {

namespace {

// A signal handler can only reach state through a global; this one is written by the handler
// and read by the training loop, and is the only state the handlers have.
volatile std::sig_atomic_t g_received = 0;
struct timespec g_first_at {};  // when the first signal came (CLOCK_MONOTONIC)
bool g_installed = false;
struct sigaction g_old_int, g_old_term;

void write_stderr(const char* text) {
  ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

// Only async-signal-safe calls here (write, clock_gettime, _exit).
extern "C" void on_stop_signal(int sig) {
  struct timespec now {};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  if (g_received != 0) {
    const double since = static_cast<double>(now.tv_sec - g_first_at.tv_sec) +
                         1e-9 * static_cast<double>(now.tv_nsec - g_first_at.tv_nsec);
    if (since < kStopGraceSeconds) return;  // the same key press, delivered twice
    write_stderr("\nstopped at once (second signal)\n");
    ::_exit(128 + sig);
  }
  g_first_at = now;
  g_received = sig;
  write_stderr("\nstopping after this step (signal again after a second to stop at once)\n");
}

}  // namespace

StopSignals::StopSignals() {
  REMAT_CHECK(!g_installed, "StopSignals installed twice");
  g_received = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // reads and writes in the step go on
  ::sigaction(SIGINT, &sa, &g_old_int);
  ::sigaction(SIGTERM, &sa, &g_old_term);
  g_installed = true;
}

StopSignals::~StopSignals() {
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
  g_installed = false;
  g_received = 0;
}

int stop_signal_received() { return g_received; }

}  // namespace remat
