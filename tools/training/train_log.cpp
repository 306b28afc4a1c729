// Step lines with elapsed time and ETA, and the per-step metrics file.
#include "tools/training/train_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/core/check.h"
#include "tools/common/cli.h"
#include "tools/common/progress.h"

namespace remat {

std::string format_duration(double seconds) {
  char buf[32];
  if (!(seconds >= 0)) seconds = 0;
  if (seconds < 60) {
    std::snprintf(buf, sizeof buf, "%.1fs", seconds);
  } else if (seconds < 3600) {
    const long s = std::lround(seconds);
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  } else {
    const long m = std::lround(seconds / 60);
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", m / 60, m % 60);
  }
  return buf;
}

std::string metrics_json_line(const StepRecord& r, double elapsed_seconds) {
  nlohmann::ordered_json j;
  j["step"] = r.step;
  j["loss"] = std::isfinite(r.loss) ? nlohmann::ordered_json(r.loss) : nullptr;  // JSON has no NaN
  j["lr"] = r.lr;
  j["batch"] = r.batch;
  j["samples_per_second"] = r.seconds > 0 ? static_cast<double>(r.batch) / r.seconds : 0.0;
  j["ms_per_step"] = 1000 * r.seconds;
  j["peak_bytes"] = r.peak_bytes;
  j["recomputes"] = r.recomputes;
  j["elapsed_seconds"] = elapsed_seconds;
  return j.dump();
}

namespace {

// Note [metrics on resume]: a resumed run continues its metrics file. The lines of steps up to
// the checkpoint's (steps and validations) stay; lines of later steps — written by a run that
// went on past the checkpoint it is resumed from — and a line cut short go, so that the file
// holds each step once, in order. The file is then rewritten with those lines, and the new
// steps are appended.
struct KeptMetrics {
  std::string text;   // the lines kept, each with its newline
  int64_t kept = 0, dropped = 0;
};

KeptMetrics metrics_through(const std::string& path, int64_t last_step) {
  KeptMetrics k;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool ours = j.is_object() && j.contains("step") && j["step"].is_number_integer();
    if (ours && j["step"].get<int64_t>() <= last_step) {
      k.text += line + "\n";
      ++k.kept;
    } else {
      ++k.dropped;
    }
  }
  return k;
}

}  // namespace

StepLog::StepLog(StepLogOptions opt) : opt_(std::move(opt)) {
  if (opt_.metrics_file.empty()) return;
  KeptMetrics kept;
  if (opt_.first_step > 0) kept = metrics_through(opt_.metrics_file, opt_.first_step);
  metrics_fd_ = ::open(opt_.metrics_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (metrics_fd_ < 0)
    REMAT_USER_ERROR("--metrics " << opt_.metrics_file << ": cannot open for writing ("
                                  << std::strerror(errno) << ")");
  if (kept.kept + kept.dropped == 0) return;
  write_metrics(kept.text);
  std::fprintf(opt_.out, "metrics: %s continues after step %lld (%s kept",
               opt_.metrics_file.c_str(), static_cast<long long>(opt_.first_step),
               plural(kept.kept, "line").c_str());
  if (kept.dropped > 0)
    std::fprintf(opt_.out, "; %s of later steps or cut short dropped",
                 plural(kept.dropped, "line").c_str());
  std::fprintf(opt_.out, ")\n");
}

StepLog::~StepLog() {
  if (metrics_fd_ >= 0) ::close(metrics_fd_);
}

// One line in one write; a short or failed write is cut back to the last complete line.
void StepLog::write_metrics(const std::string& text) {
  if (metrics_fd_ < 0) return;
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(metrics_fd_, text.data() + done, text.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    failure_ = "--metrics " + opt_.metrics_file + ": cannot write (" +
               std::strerror(n < 0 ? errno : ENOSPC) + ")";
    if (::ftruncate(metrics_fd_, metrics_bytes_) != 0) {  // the partial line goes
      failure_ += "; the last line may be incomplete";
    }
    ::close(metrics_fd_);
    metrics_fd_ = -1;
    return;
  }
  metrics_bytes_ += static_cast<int64_t>(text.size());
}

std::string StepLog::line(const StepRecord& r, double elapsed) const {
  char buf[256];
  const int width = static_cast<int>(std::to_string(opt_.total_steps).size());
  // Both speeds from one mean: the steps after this run's first (which warms up), or the first.
  const double ms = timed_steps_ > 0 ? 1000 * timed_seconds_ / static_cast<double>(timed_steps_)
                                     : 1000 * r.seconds;
  const double eta = ms / 1000 * static_cast<double>(opt_.total_steps - r.step);
  std::snprintf(buf, sizeof buf,
                "step %*lld/%lld  loss %.4f  %9.1f samples/s  %8.1f ms/step  peak %s  "
                "elapsed %s  eta %s",
                width, static_cast<long long>(r.step), static_cast<long long>(opt_.total_steps),
                r.loss, ms > 0 ? 1000 * static_cast<double>(r.batch) / ms : 0.0, ms,
                format_bytes(r.peak_bytes).c_str(), format_duration(elapsed).c_str(),
                format_duration(eta).c_str());
  return buf;
}

void StepLog::record(const StepRecord& r) {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (r.step > opt_.first_step + 1) timed_seconds_ += r.seconds, ++timed_steps_;
  write_metrics(metrics_json_line(r, elapsed) + "\n");
  const bool first = r.step == opt_.first_step + 1, last = r.step == opt_.total_steps;
  const std::string text = line(r, elapsed);
  if (opt_.terminal && opt_.log_every == 0) {  // one live line (Note [live lines])
    std::fprintf(opt_.out, "\r%s\033[K",
                 fit_to_columns(text, terminal_columns(opt_.out)).c_str());
    live_open_ = true;
    if (last) end_line();
  } else {
    const int every = opt_.log_every > 0 ? opt_.log_every : 1;
    if (!first && !last && r.step % every != 0) return;
    end_line();
    std::fprintf(opt_.out, "%s\n", text.c_str());
  }
  std::fflush(opt_.out);
}

void StepLog::end_line() {
  if (!live_open_) return;
  std::fprintf(opt_.out, "\n");
  std::fflush(opt_.out);
  live_open_ = false;
}

}  // namespace remat
