// Solver progress on stderr (Note [live lines]): on a terminal one line redrawn in place; in a
// log (a pipe or a file) a plain line now and then, so that logs hold no carriage returns. A
// ticker keeps the line's clock moving while a stage runs without reporting.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <vector>
#include <thread>

namespace remat {

// Note [live lines]: a line redrawn with '\r' is for a person watching a terminal; written to a
// log it turns into hundreds of overwritten copies. Every live line in the tools asks
// stream_is_terminal() and, when the answer is no, prints plain lines at an interval instead.
// On a terminal a redraw is "\r" + the text + ESC[K (erase to the end of the line), so a shorter
// text leaves nothing of a longer one behind, and output that replaces the line (a table row,
// the next header line) first erases it the same way. Under an MPI launcher the answer is always
// no: OpenMPI hands every rank a pseudo-terminal whatever the user redirected (`mpirun ... > log`
// would fill the log with redraws), and a launcher's forwarded output is read as a log anyway.
// Detected from the launchers' variables: OMPI_COMM_WORLD_SIZE (OpenMPI), PMI_SIZE (MPICH,
// Intel MPI), PMIX_RANK (PMIx), SLURM_STEP_ID with SLURM_PROCID (srun).
bool stream_is_terminal(std::FILE* stream);
bool launched_by_mpi();
// The width of the terminal `stream` writes to; 0 when it is not one or does not say. A live
// line is cut to fit (a line that wraps can not be redrawn in place).
int terminal_columns(std::FILE* stream);
// `text` cut to fit a terminal of `columns` (0: as it is), the last column left free.
std::string fit_to_columns(const std::string& text, int columns);

// The solver's live line: "<label>: 12.3s  [phase]  incumbent ...  bound ...  gap ...", or
// max batch's "<label>: 1.2s  batch >= 24, < 32". The time is the line's own (from
// progress_line_next, or its construction), not a sub-solver's. The best incumbent and the
// highest bound seen under one label are kept: the line never goes back to "no incumbent" when a
// later sub-solve starts without one, and a proven bound only rises (a later model's weaker
// bound is not shown). A new phase is shown at once, in a log too.
// Written with write(2) on out's descriptor, under `mu`: the ticker's thread writes too, and a
// thread inside stdio could leave a stream locked in a child the solver forks.
struct ProgressLine {
  ProgressLine();
  std::string label;
  std::FILE* out = stderr;
  bool terminal = stream_is_terminal(stderr);
  double log_interval = 5;  // log mode: the most seconds between plain lines (the first printed)
  // State of the current label.
  enum class Kind { None, Solve, Batch };
  Kind kind = Kind::None;     // what was last reported: None until a report under this label
  bool printed = false;       // terminal: a redrawn line is open
  double last_logged = -1;    // log mode: elapsed seconds of the last plain line, -1 none
  double best_incumbent = -1; // < 0: none yet
  double best_bound = -1;     // < 0: none yet
  int64_t batch_lo = 0, batch_hi = 0;  // max batch's bracket (Kind::Batch)
  // What the bracket counts ("batch", "seq", "input"), and for a search over a list of sizes
  // (an input size's) the sizes its indices 1, 2, ... stand for.
  std::string size_word = "batch";
  std::vector<int64_t> size_values;
  int64_t size_offset = 0;    // without size_values: index i stands for i + size_offset
  std::string phase;          // the stage running (SolveOptions::phase), "" before any
  double start = 0;           // seconds on the clock when the label started
  // Seconds on a monotonic clock; the steady clock unless a test sets another.
  std::function<double()> clock;
  double now() const;
  std::mutex mu;              // the state above, and the writes
};

// SolveOptions::progress and ::batch_progress callbacks; `user` is a ProgressLine*.
void progress_solve(double elapsed, double incumbent, double bound, void* user);
void progress_batch(double elapsed, int64_t lo, int64_t hi, void* user);
void progress_phase(const char* name, void* user);
// Erases an open terminal line and starts the next under `label` (fresh state); the output
// that follows takes the line's place. In a log the plain lines stay.
void progress_line_next(ProgressLine* line, const std::string& label);
// Terminal: erases the open line (for output that replaces it). Log mode: nothing. Either way
// the line is idle until its next report.
void progress_line_clear(ProgressLine* line);
// Redraws the line with the current time (terminal), or prints it in a log when log_interval
// has passed since its last plain line; nothing before the label's first report.
void progress_line_tick(ProgressLine* line);

// Note [progress ticker]: a stage can run for seconds without a report (the held-set search,
// Cbc's preprocessing, a max-batch probe), and a clock that stops looks like a hang. While it
// lives, the ticker calls progress_line_tick every `period` seconds from its own thread.
class ProgressTicker {
 public:
  explicit ProgressTicker(ProgressLine* line, double period = 0.2);
  ~ProgressTicker();
  ProgressTicker(const ProgressTicker&) = delete;
  ProgressTicker& operator=(const ProgressTicker&) = delete;

 private:
  ProgressLine* line_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace remat
