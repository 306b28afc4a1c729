// Stopping a training run safely on Ctrl-C or SIGTERM (Note [graceful stop]).
#pragma once

namespace remat {

// Note [graceful stop]: until the first step starts (the set-up: building the graphs, solving
// the plan, loading a checkpoint) nothing can be lost, and the first SIGINT or SIGTERM ends
// `train` at once — the solver's child process with it — saying so, with 128 + the signal's
// number (130 for SIGINT, 143 for SIGTERM). From the first step on (stop_signals_graceful), the
// first signal only sets a flag; the training loop ends the step it is running, writes the
// checkpoint when --save was given, prints its summary and exits with 128 + the signal's number,
// as a shell expects of a command ended by a signal. A second signal exits at once (the same
// code, nothing written: checkpoints are atomic, and the temporary of a write in progress is
// removed, Note [temporary files at exit] in runtime/io/atomic_file.h) — unless it
// comes within kStopGraceSeconds of the first: one key press can reach a process twice (a
// terminal's SIGINT to the process group and a wrapper such as `timeout --foreground`
// forwarding it), and it must not cancel the checkpoint. Only `train` installs the handlers;
// code that trains without them (maxbatch --verify, tests) never sees a stop.
// Data parallel: Note [stopping a data-parallel job] (tools/training/data_parallel.h).
constexpr double kStopGraceSeconds = 1.0;

// Who says what when a signal comes: one process says everything on stderr; under mpirun the
// ranks agree on the stop first and rank 0 reports it on stdout, so the handlers say only that
// the set-up was stopped (rank 0), or nothing.
enum class StopMessages { All, AtOnceOnly, None };

// Installs the handlers for its lifetime and restores the previous ones after, unless a signal
// stopped the run: then they stay until the process exits. One at a time.
class StopSignals {
 public:
  explicit StopSignals(StopMessages messages = StopMessages::All);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
};

// From now on the first signal stops after the running step instead of at once.
void stop_signals_graceful();

// The signal received since the handlers were installed (SIGINT, SIGTERM), or 0.
int stop_signal_received();

// "SIGINT", "SIGTERM", or "a signal".
const char* stop_signal_name(int sig);

}  // namespace remat
