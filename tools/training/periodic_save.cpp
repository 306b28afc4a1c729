// Periodic checkpoints with a bounded count (only files this run wrote are ever removed: a
// resumed run must not delete the checkpoints of the run it continues from).
#include "tools/training/periodic_save.h"

#include <cstdio>

#include "runtime/checkpoint.h"

namespace remat {

std::string periodic_checkpoint_path(const std::string& save_file, int64_t step) {
  const size_t slash = save_file.find_last_of('/');
  const size_t dot = save_file.find_last_of('.');
  const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  const std::string stem = has_ext ? save_file.substr(0, dot) : save_file;
  const std::string ext = has_ext ? save_file.substr(dot) : "";
  return stem + "-step" + std::to_string(step) + ext;
}

PeriodicSave::PeriodicSave(std::string save_file, int64_t every, int keep)
    : save_file_(std::move(save_file)), every_(every), keep_(keep < 1 ? 1 : keep) {}

std::string PeriodicSave::after_step(const Executor& ex, int64_t steps_done) {
  if (every_ <= 0 || steps_done % every_ != 0) return "";
  const std::string path = periodic_checkpoint_path(save_file_, steps_done);
  checkpoint_save(ex, path, steps_done);
  written_.push_back(path);
  while (static_cast<int>(written_.size()) > keep_) {
    std::remove(written_.front().c_str());
    written_.pop_front();
  }
  return path;
}

}  // namespace remat
