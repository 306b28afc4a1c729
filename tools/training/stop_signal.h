// Stopping a training run safely on Ctrl-C or SIGTERM (Note [graceful stop]).
#pragma once

namespace remat {

// Note [graceful stop]: the first SIGINT or SIGTERM only sets a flag; the training loop ends
// the step it is running, writes the checkpoint when --save was given, prints its summary and
// exits with 128 + the signal's number (130 for SIGINT, 143 for SIGTERM), as a shell expects of
// a command ended by a signal. A second signal exits at once (the same code, nothing written:
// checkpoints are atomic, so no half-written file is left) — unless it comes within
// kStopGraceSeconds of the first: one key press can reach a process twice (a terminal's SIGINT
// to the process group and a wrapper such as `timeout --foreground` forwarding it), and it must
// not cancel the checkpoint. Only `train` installs the handlers; code that trains without them
// (maxbatch --verify, tests) never sees a stop.
constexpr double kStopGraceSeconds = 1.0;

// Installs the handlers for its lifetime and restores the previous ones after. One at a time.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
};

// The signal received since the handlers were installed (SIGINT, SIGTERM), or 0.
int stop_signal_received();

}  // namespace remat
