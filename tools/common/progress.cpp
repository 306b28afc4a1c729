// The solver's progress line: redrawn on a terminal, plain lines at an interval in a log.
#include "tools/common/progress.h"

#include <unistd.h>

namespace remat {

bool stream_is_terminal(std::FILE* stream) { return ::isatty(::fileno(stream)) == 1; }

namespace {

// Terminal: redraw. Log: print when the interval has passed, or on the first report.
void emit(ProgressLine* line, double elapsed, const std::string& text) {
  if (line->terminal) {
    std::fprintf(line->out, "\r  %s      ", text.c_str());
    line->printed = true;
  } else {
    if (line->last_logged >= 0 && elapsed - line->last_logged < line->log_interval) return;
    std::fprintf(line->out, "  %s\n", text.c_str());
    line->last_logged = elapsed;
  }
  std::fflush(line->out);
}

}  // namespace

void progress_solve(double elapsed, double incumbent, double bound, void* user) {
  auto* line = static_cast<ProgressLine*>(user);
  // Solvers report "none" as < 0 or as +huge; a sub-solve without one keeps the best so far.
  if (incumbent >= 0 && incumbent < 1e40 &&
      (line->best_incumbent < 0 || incumbent < line->best_incumbent))
    line->best_incumbent = incumbent;
  char text[256];
  const std::string name = line->label.empty() ? "solving" : line->label;
  if (line->best_incumbent < 0) {
    std::snprintf(text, sizeof text, "%s: %7.1fs  no incumbent yet  bound %.6g", name.c_str(),
                  elapsed, bound);
  } else {
    const double inc = line->best_incumbent;
    const double gap = inc > 0 && bound < inc ? 100 * (inc - bound) / inc : 0;
    std::snprintf(text, sizeof text, "%s: %7.1fs  incumbent %.6g  bound %.6g  gap %.2f%%",
                  name.c_str(), elapsed, inc, bound, gap);
  }
  emit(line, elapsed, text);
}

void progress_batch(double elapsed, int64_t lo, int64_t hi, void* user) {
  auto* line = static_cast<ProgressLine*>(user);
  char upper[32] = "?";
  if (hi > 0) std::snprintf(upper, sizeof upper, "%lld", static_cast<long long>(hi));
  char text[256];
  std::snprintf(text, sizeof text, "%s: %7.1fs  batch >= %lld, < %s", line->label.c_str(), elapsed,
                static_cast<long long>(lo), upper);
  emit(line, elapsed, text);
}

void progress_line_next(ProgressLine* line, const std::string& label) {
  if (line->printed) std::fprintf(line->out, "\n");
  line->printed = false;
  line->last_logged = -1;
  line->best_incumbent = -1;
  line->label = label;
}

void progress_line_clear(ProgressLine* line) {
  if (line->printed) std::fprintf(line->out, "\r%100s\r", "");
  line->printed = false;
  std::fflush(line->out);
}

}  // namespace remat
