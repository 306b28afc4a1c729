// The solver's progress line: redrawn on a terminal, plain lines at an interval in a log.
#include "tools/common/progress.h"

#include <unistd.h>

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

namespace {

double clock_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Terminal: redraw. Log: print when the interval has passed, on the first report, or `now`.
void emit(ProgressLine* line, double elapsed, const std::string& text, bool now = false) {
  if (line->terminal) {
    std::fprintf(line->out, "\r  %s      ", text.c_str());
    line->printed = true;
  } else {
    if (!now && line->last_logged >= 0 && elapsed - line->last_logged < line->log_interval)
      return;
    std::fprintf(line->out, "  %s\n", text.c_str());
    line->last_logged = elapsed;
  }
  std::fflush(line->out);
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

}  // namespace

ProgressLine::ProgressLine() : start(clock_seconds()) {}

double ProgressLine::now() const { return clock ? clock() : clock_seconds(); }

void progress_solve(double, double incumbent, double bound, void* user) {
  auto* line = static_cast<ProgressLine*>(user);
  // Solvers report "none" as < 0 or as +huge; a sub-solve without one keeps the best so far.
  if (incumbent >= 0 && incumbent < 1e40 &&
      (line->best_incumbent < 0 || incumbent < line->best_incumbent))
    line->best_incumbent = incumbent;
  if (bound >= 0 && bound < 1e40 && bound > line->best_bound) line->best_bound = bound;
  const double elapsed = line->now() - line->start;
  emit(line, elapsed, solve_text(*line, elapsed));
}

void progress_phase(const char* name, void* user) {
  auto* line = static_cast<ProgressLine*>(user);
  line->phase = name ? name : "";
  const double elapsed = line->now() - line->start;
  emit(line, elapsed, solve_text(*line, elapsed), /*now=*/true);
}

void progress_batch(double, int64_t lo, int64_t hi, void* user) {
  auto* line = static_cast<ProgressLine*>(user);
  char upper[32] = "?";
  if (hi > 0) std::snprintf(upper, sizeof upper, "%lld", static_cast<long long>(hi));
  char text[256];
  const double elapsed = line->now() - line->start;
  std::snprintf(text, sizeof text, "%s: %7.1fs  batch >= %lld, < %s", line->label.c_str(), elapsed,
                static_cast<long long>(lo), upper);
  emit(line, elapsed, text);
}

void progress_line_next(ProgressLine* line, const std::string& label) {
  if (line->printed) std::fprintf(line->out, "\n");
  line->printed = false;
  line->last_logged = -1;
  line->best_incumbent = -1;
  line->best_bound = -1;
  line->phase.clear();
  line->start = line->now();
  line->label = label;
}

void progress_line_clear(ProgressLine* line) {
  if (line->printed) std::fprintf(line->out, "\r%100s\r", "");
  line->printed = false;
  std::fflush(line->out);
}

}  // namespace remat
