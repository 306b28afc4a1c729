// What `train` reports per step: the step line (elapsed time, ms/step, ETA; one live line on a
// terminal, plain lines in a log, Note [live lines]) and the --metrics file (one JSON object per
// step, for plotting).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace remat {

// One step as the log sees it.
struct StepRecord {
  int64_t step = 0;        // 1-based: steps done after this one
  float loss = 0;
  double lr = 0;           // the learning rate this step used
  double seconds = 0;      // this step's wall time
  int64_t batch = 0;       // samples in the step
  int64_t peak_bytes = 0;  // measured exact peak of the step
  int recomputes = 0;      // rematerialized computes in the step
};

// The step line's samples/s and ms/step are both means over this run's steps after its first;
// the --metrics line holds each step's own.
struct StepLogOptions {
  int64_t first_step = 0;      // steps done before this run (a resumed run)
  int64_t total_steps = 0;     // --steps
  int log_every = 0;           // 0: a live line on a terminal, every step in a log
  std::string metrics_file;    // "": none
  std::FILE* out = stdout;
  bool terminal = false;       // `out` is a terminal (stream_is_terminal)
};

// "4.2s", "3m07s", "1h02m": a duration for people.
std::string format_duration(double seconds);

// One --metrics line, no newline: {"step", "loss", "lr", "samples_per_second", "ms_per_step",
// "peak_bytes", "recomputes", "elapsed_seconds"}.
std::string metrics_json_line(const StepRecord& r, double elapsed_seconds);

// Note [side outputs]: the metrics file, periodic checkpoints and the trace serve the run; the
// run is the training state. When one of them cannot be written (a full disk, a quota), `train`
// says why (the system's reason), keeps what it wrote whole (the metrics file ends on its last
// complete line; checkpoints and traces are atomic) and trains on; it ends with exit code 4
// (training done, a side output failed) instead of 0. The final --save is the state itself: its
// failure is an error (exit 1).

class StepLog {
 public:
  // Opens the metrics file: a new one, or after a resume the same one with the lines up to
  // first_step (Note [metrics on resume]); UserError naming it when it cannot be opened.
  explicit StepLog(StepLogOptions opt);
  ~StepLog();
  StepLog(const StepLog&) = delete;
  StepLog& operator=(const StepLog&) = delete;
  // Prints the step's line as the options say and appends its metrics line (one write, so a run
  // that is stopped keeps every step it did). A metrics line that cannot be written is taken
  // back whole, the metrics stop, and failure() says why (Note [side outputs]).
  void record(const StepRecord& r);
  // Appends one more metrics line (a validation result), as record() does its own.
  void record_metrics_line(const std::string& json) { write_metrics(json + "\n"); }
  // Ends an open live line (before other output).
  void end_line();
  // Why the metrics stopped ("" while they are written).
  const std::string& failure() const { return failure_; }

 private:
  std::string line(const StepRecord& r, double elapsed) const;
  void write_metrics(const std::string& text);
  StepLogOptions opt_;
  int metrics_fd_ = -1;
  int64_t metrics_bytes_ = 0;  // bytes of complete lines written
  std::string failure_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double timed_seconds_ = 0;  // steps after this run's first (which warms up)
  int64_t timed_steps_ = 0;
  bool live_open_ = false;
};

}  // namespace remat
