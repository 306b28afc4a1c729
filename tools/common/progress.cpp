// The solver's progress line: redrawn on a terminal, plain lines at an interval in a log, and
// the ticker that keeps its clock moving.
#include "tools/common/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>

namespace remat {

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return std::getenv("SLURM_STEP_ID") && std::getenv("SLURM_PROCID");
}

bool stream_is_terminal(std::FILE* stream) {
  return ::isatty(::fileno(stream)) == 1 && !launched_by_mpi();
}

int terminal_columns(std::FILE* stream) {
  struct winsize ws {};
  if (::ioctl(::fileno(stream), TIOCGWINSZ, &ws) != 0) return 0;
  return ws.ws_col;
}

std::string fit_to_columns(const std::string& text, int columns) {
  if (columns <= 1 || text.size() < static_cast<size_t>(columns)) return text;
  return text.substr(0, static_cast<size_t>(columns - 1));
}

namespace {

double clock_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One write(2) of the whole text (Note [live lines]: no stdio from the ticker's thread).
void write_text(std::FILE* out, const std::string& text) {
  const int fd = ::fileno(out);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // progress is best effort
    done += static_cast<size_t>(n);
  }
}

// "\r" + ESC[K: back to the line's start, and erase it.
const char* const kEraseLine = "\r\033[K";

// Terminal: redraw. Log: print when the interval has passed, on the first report, or `now`.
// Under line->mu.
void emit(ProgressLine* line, double elapsed, const std::string& text, bool now = false) {
  if (line->terminal) {
    write_text(line->out, "\r" + fit_to_columns("  " + text, terminal_columns(line->out)) +
                              "\033[K");
    line->printed = true;
    return;
  }
  if (!now && line->last_logged >= 0 && elapsed - line->last_logged < line->log_interval) return;
  write_text(line->out, "  " + text + "\n");
  line->last_logged = elapsed;
}

// "<label>: 3.2s  [phase]  incumbent ... bound ... gap ..." from the line's state.
std::string solve_text(const ProgressLine& line, double elapsed) {
  char text[320];
  const std::string name = line.label.empty() ? "solving" : line.label;
  const std::string phase = line.phase.empty() ? "" : "  [" + line.phase + "]";
  char bound[48] = "";
  if (line.best_bound >= 0) std::snprintf(bound, sizeof bound, "  bound %.6g", line.best_bound);
  if (line.best_incumbent < 0) {
    std::snprintf(text, sizeof text, "%s: %7.1fs%s  no incumbent yet%s", name.c_str(), elapsed,
                  phase.c_str(), bound);
  } else {
    const double inc = line.best_incumbent, b = line.best_bound;
    const double gap = inc > 0 && b >= 0 && b < inc ? 100 * (inc - b) / inc : 0;
    std::snprintf(text, sizeof text, "%s: %7.1fs%s  incumbent %.6g%s  gap %.2f%%", name.c_str(),
                  elapsed, phase.c_str(), inc, bound, gap);
  }
  return text;
}

// "<label>: 1.2s  batch >= 24, < 32" (the size a search counts, as its value).
std::string batch_text(const ProgressLine& line, double elapsed) {
  auto value = [&](int64_t i) -> int64_t {
    if (i < 1) return i;
    if (line.size_values.empty()) return i + line.size_offset;
    return line.size_values[static_cast<size_t>(
        std::min<int64_t>(i, static_cast<int64_t>(line.size_values.size())) - 1)];
  };
  char upper[32] = "?";
  if (line.batch_hi > 0)
    std::snprintf(upper, sizeof upper, "%lld", static_cast<long long>(value(line.batch_hi)));
  char text[256];
  std::snprintf(text, sizeof text, "%s: %7.1fs  %s >= %lld, < %s", line.label.c_str(), elapsed,
                line.size_word.c_str(), static_cast<long long>(value(line.batch_lo)), upper);
  return text;
}

std::string text_of(const ProgressLine& line, double elapsed) {
  return line.kind == ProgressLine::Kind::Batch ? batch_text(line, elapsed)
                                                : solve_text(line, elapsed);
}

// Erases an open terminal line; the line is idle until its next report. Under line->mu.
void erase(ProgressLine* line) {
  if (line->printed) write_text(line->out, kEraseLine);
  line->printed = false;
  line->kind = ProgressLine::Kind::None;
}

}  // namespace

ProgressLine::ProgressLine() : start(clock_seconds()) {}

double ProgressLine::now() const { return clock ? clock() : clock_seconds(); }

void progress_solve(double, double incumbent, double bound, void* user) {
  auto* line = static_cast<ProgressLine*>(user);
  std::lock_guard<std::mutex> lock(line->mu);
  // Solvers report "none" as < 0 or as +huge; a sub-solve without one keeps the best so far.
  if (incumbent >= 0 && incumbent < 1e40 &&
      (line->best_incumbent < 0 || incumbent < line->best_incumbent))
    line->best_incumbent = incumbent;
  if (bound >= 0 && bound < 1e40 && bound > line->best_bound) line->best_bound = bound;
  line->kind = ProgressLine::Kind::Solve;
  const double elapsed = line->now() - line->start;
  emit(line, elapsed, solve_text(*line, elapsed));
}

void progress_phase(const char* name, void* user) {
  auto* line = static_cast<ProgressLine*>(user);
  std::lock_guard<std::mutex> lock(line->mu);
  line->phase = name ? name : "";
  line->kind = ProgressLine::Kind::Solve;
  const double elapsed = line->now() - line->start;
  emit(line, elapsed, solve_text(*line, elapsed), /*now=*/true);
}

void progress_batch(double, int64_t lo, int64_t hi, void* user) {
  auto* line = static_cast<ProgressLine*>(user);
  std::lock_guard<std::mutex> lock(line->mu);
  line->batch_lo = lo;
  line->batch_hi = hi;
  line->kind = ProgressLine::Kind::Batch;
  const double elapsed = line->now() - line->start;
  emit(line, elapsed, batch_text(*line, elapsed));
}

void progress_line_tick(ProgressLine* line) {
  std::lock_guard<std::mutex> lock(line->mu);
  if (line->kind == ProgressLine::Kind::None) return;
  const double elapsed = line->now() - line->start;
  emit(line, elapsed, text_of(*line, elapsed));
}

void progress_line_next(ProgressLine* line, const std::string& label) {
  std::lock_guard<std::mutex> lock(line->mu);
  erase(line);
  line->last_logged = -1;
  line->best_incumbent = -1;
  line->best_bound = -1;
  line->batch_lo = line->batch_hi = 0;
  line->phase.clear();
  line->start = line->now();
  line->label = label;
}

void progress_line_clear(ProgressLine* line) {
  std::lock_guard<std::mutex> lock(line->mu);
  erase(line);
}

ProgressTicker::ProgressTicker(ProgressLine* line, double period)
    : line_(line), thread_([this, period] {
        std::unique_lock<std::mutex> lock(mu_);
        while (!cv_.wait_for(lock, std::chrono::duration<double>(period), [this] { return stop_; }))
          progress_line_tick(line_);
      }) {}

ProgressTicker::~ProgressTicker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

}  // namespace remat
