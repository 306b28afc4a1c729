// `train --save-every N --keep-last K`: a checkpoint every N steps beside the --save file,
// the oldest of those this run wrote removed so that K remain.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

namespace remat {

class Executor;

// "runs/ck.safetensors", step 200 -> "runs/ck-step200.safetensors" (the extension kept when the
// name has one).
std::string periodic_checkpoint_path(const std::string& save_file, int64_t step);

class PeriodicSave {
 public:
  // every = 0: never. keep >= 1.
  PeriodicSave(std::string save_file, int64_t every, int keep);
  // After `steps_done` steps: writes (atomically) when steps_done is a multiple of `every`, then
  // removes the oldest checkpoint this run wrote beyond `keep`. Returns the path written or "".
  std::string after_step(const Executor& ex, int64_t steps_done);

 private:
  std::string save_file_;
  int64_t every_;
  int keep_;
  std::deque<std::string> written_;  // oldest first
};

}  // namespace remat
