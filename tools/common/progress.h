// Solver progress on stderr (Note [live lines]): on a terminal one line redrawn in place; in a
// log (a pipe or a file) a plain line now and then, so that logs hold no carriage returns.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace remat {

// Note [live lines]: a line redrawn with '\r' is for a person watching a terminal; written to a
// log it turns into hundreds of overwritten copies. Every live line in the tools asks
// stream_is_terminal() and, when the answer is no, prints plain lines at an interval instead.
// Under an MPI launcher the answer is always no: OpenMPI hands every rank a pseudo-terminal
// whatever the user redirected (`mpirun ... > log` would fill the log with redraws), and a
// launcher's forwarded output is read as a log anyway. Detected from the launchers' variables:
// OMPI_COMM_WORLD_SIZE (OpenMPI), PMI_SIZE (MPICH, Intel MPI), PMIX_RANK (PMIx), SLURM_STEP_ID
// with SLURM_PROCID (srun).
bool stream_is_terminal(std::FILE* stream);
bool launched_by_mpi();

// The solver's live line: "<label>: 12.3s  [phase]  incumbent ...  bound ...  gap ...". The
// time is the line's own (from progress_line_next, or its construction), not a sub-solver's.
// The best incumbent and the highest bound seen under one label are kept: the line never goes
// back to "no incumbent" when a later sub-solve starts without one, and a proven bound only
// rises (a later model's weaker bound is not shown). A new phase is shown at once, in a log too.
struct ProgressLine {
  ProgressLine();
  std::string label;
  std::FILE* out = stderr;
  bool terminal = stream_is_terminal(stderr);
  double log_interval = 10;  // log mode: seconds between plain lines (the first is printed)
  // State of the current label.
  bool printed = false;       // terminal: a redrawn line is open (needs a newline)
  double last_logged = -1;    // log mode: elapsed seconds of the last plain line, -1 none
  double best_incumbent = -1; // < 0: none yet
  double best_bound = -1;     // < 0: none yet
  std::string phase;          // the stage running (SolveOptions::phase), "" before any
  double start = 0;           // seconds on the clock when the label started
  // Seconds on a monotonic clock; the steady clock unless a test sets another.
  std::function<double()> clock;
  double now() const;
};

// SolveOptions::progress and ::batch_progress callbacks; `user` is a ProgressLine*.
void progress_solve(double elapsed, double incumbent, double bound, void* user);
void progress_batch(double elapsed, int64_t lo, int64_t hi, void* user);
void progress_phase(const char* name, void* user);
// Ends an open terminal line with a newline and starts the next under `label` (fresh state).
void progress_line_next(ProgressLine* line, const std::string& label);
// Terminal: erases the open line (for output that replaces it). Log mode: nothing.
void progress_line_clear(ProgressLine* line);

}  // namespace remat
