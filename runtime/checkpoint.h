// Training checkpoints: every parameter, buffer and optimizer-state value of an executor as
// safetensors (tensor names are the value names, e.g. "conv1.weight", "conv1.weight.momentum",
// so PyTorch can read them), plus the step to resume from. Written atomically.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/executor.h"

namespace remat {

// Saves the state after `steps_done` steps. Metadata: format "remat-checkpoint/1", model,
// step.
void checkpoint_save(const Executor& ex, const std::string& path, int64_t steps_done);

// Loads a checkpoint into `ex` and returns the number of steps it was taken after. UserError
// naming the file and tensor for a missing tensor, a shape mismatch, another model, or a file
// that is not a remat checkpoint.
int64_t checkpoint_load(Executor& ex, const std::string& path);

}  // namespace remat
