// What `train` reports per step: the step line (elapsed time, ms/step, ETA; one live line on a
// terminal, plain lines in a log, Note [live lines]) and the --metrics file (one JSON object per
// step, for plotting).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
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

class StepLog {
 public:
  // Opens (truncates) the metrics file; UserError naming it when it cannot be opened.
  explicit StepLog(StepLogOptions opt);
  // Prints the step's line as the options say and appends its metrics line (flushed, so a run
  // that is stopped keeps every step it did).
  void record(const StepRecord& r);
  // Ends an open live line (before other output).
  void end_line();

 private:
  std::string line(const StepRecord& r, double elapsed) const;
  StepLogOptions opt_;
  std::ofstream metrics_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double timed_seconds_ = 0;  // steps after this run's first (which warms up)
  int64_t timed_steps_ = 0;
  bool live_open_ = false;
};

}  // namespace remat
