// SIGINT/SIGTERM handlers for Note [graceful stop]: _exit during the set-up; then a flag on the
// first signal, _exit on the second.
#include "tools/training/stop_signal.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

#include "runtime/core/check.h"
#include "runtime/io/atomic_file.h"

namespace remat {

namespace {

// A signal handler can only reach state through globals; these are written by the handler and
// the training loop, and are the only state the handlers have.
volatile std::sig_atomic_t g_received = 0;
volatile std::sig_atomic_t g_graceful = 0;  // the first step has started
struct timespec g_first_at {};  // when the first signal came (CLOCK_MONOTONIC)
pid_t g_owner = 0;              // the process that installed them (not a forked solver)
StopMessages g_messages = StopMessages::All;
bool g_installed = false;
struct sigaction g_old_int, g_old_term;

void write_stderr(const char* text) {
  ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

// Note [output of a stopping rank]: after Ctrl-C, OpenMPI's mpirun stops reading its ranks'
// output (pseudo-terminals of a few KB) while it waits a second before sending them SIGTERM
// and another before SIGKILL. A rank printing a step line every few milliseconds fills that
// buffer and then blocks in write(2) — the SIGTERM's handler returns into the same blocked
// write (SA_RESTART) — and is killed before it writes its checkpoint. So a rank that receives a
// stop signal makes its stdout and stderr non-blocking: a line that does not fit is dropped
// (mpirun is not reading it), and the stop goes on to the checkpoint. A regular file ignores
// the flag; a pipe loses what does not fit after the signal.
void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}
void never_block_output() {
  set_nonblocking(STDOUT_FILENO);
  set_nonblocking(STDERR_FILENO);
}

// Only async-signal-safe calls here (write, getpid, clock_gettime, unlink, fcntl, _exit).
extern "C" void on_stop_signal(int sig) {
  if (::getpid() != g_owner) ::_exit(128 + sig);  // a solver child: its parent reports
  if (g_graceful == 0) {
    if (g_messages != StopMessages::None)
      write_stderr(sig == SIGINT ? "\nstopped by SIGINT before the first step (while setting up "
                                   "or solving): nothing trained, nothing written\n"
                                 : "\nstopped by SIGTERM before the first step (while setting up "
                                   "or solving): nothing trained, nothing written\n");
    remove_temporary_in_progress();
    ::_exit(128 + sig);
  }
  struct timespec now {};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  if (g_received != 0) {
    const double since = static_cast<double>(now.tv_sec - g_first_at.tv_sec) +
                         1e-9 * static_cast<double>(now.tv_nsec - g_first_at.tv_nsec);
    if (since < kStopGraceSeconds) return;  // the same key press, delivered twice
    remove_temporary_in_progress();  // Note [temporary files at exit]
    if (g_messages != StopMessages::None) write_stderr("\nstopped at once (second signal)\n");
    ::_exit(128 + sig);
  }
  g_first_at = now;
  g_received = sig;
  if (g_messages == StopMessages::All)
    write_stderr("\nstopping after this step (signal again after a second to stop at once)\n");
  else
    never_block_output();  // a rank of a job: Note [output of a stopping rank]
}

}  // namespace

StopSignals::StopSignals(StopMessages messages) {
  REMAT_CHECK(!g_installed, "StopSignals installed twice");
  g_received = 0;
  g_graceful = 0;
  g_owner = ::getpid();
  g_messages = messages;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // reads and writes in the step go on
  ::sigaction(SIGINT, &sa, &g_old_int);
  ::sigaction(SIGTERM, &sa, &g_old_term);
  g_installed = true;
}

StopSignals::~StopSignals() {
  g_installed = false;
  // A run that a signal stopped is on its way out with 128 + the signal's number: the handlers
  // stay, so the same key press delivered again between here and the exit is still one stop
  // (with the default action back it killed the process after it had saved and reported), and
  // a later signal still exits at once.
  if (g_received != 0) return;
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
  g_graceful = 0;
}

void stop_signals_graceful() { g_graceful = 1; }

int stop_signal_received() { return g_received; }

const char* stop_signal_name(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

}  // namespace remat
