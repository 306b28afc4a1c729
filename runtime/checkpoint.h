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

struct CheckpointInfo {
  int64_t step = 0;    // steps done when it was saved (>= 0)
  int unverified = 0;  // tensors without a checksum (files written before checksums existed)
};

// Loads a checkpoint into `ex`. UserError naming the file and tensor for a missing tensor, a
// shape mismatch, a NaN or infinite value, a checksum mismatch (a flipped bit), another model, a
// step that is not a non-negative integer, or a file that is not a remat checkpoint; the
// executor is left unchanged then.
CheckpointInfo checkpoint_load(Executor& ex, const std::string& path);

}  // namespace remat
