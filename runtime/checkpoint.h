// Training checkpoints: every parameter, buffer and optimizer-state value of an executor as
// safetensors (tensor names are the value names, e.g. "conv1.weight", "conv1.weight.momentum",
// so PyTorch can read them), plus the step to resume from. Written atomically. A checkpoint
// holds the state as one process has it, whatever the world size that wrote it, so it resumes
// under any world size (data parallel: runtime/replica_state.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/executor.h"

namespace remat {

// True for the kinds of value a checkpoint holds: parameters, buffers, optimizer state.
bool checkpoint_holds(ValueKind k);

// Saves the state after `steps_done` steps. Metadata: format "remat-checkpoint/1", model,
// step.
void checkpoint_save(const Executor& ex, const std::string& path, int64_t steps_done);
// The same with each value's host copy from `read` (data parallel: gathered from the ranks).
void checkpoint_save(const Graph& g, const std::function<std::vector<float>(ValueId)>& read,
                     const std::string& path, int64_t steps_done);

// A checkpoint read and checked against `g`: the step it was taken after, and per value of g
// the tensor (empty for values a checkpoint does not hold). UserError naming the file and
// tensor for a missing tensor, a shape mismatch, another model, or a file that is not a remat
// checkpoint.
struct CheckpointData {
  int64_t step = 0;
  std::vector<std::vector<float>> values;
};
CheckpointData checkpoint_read(const Graph& g, const std::string& path);

// Loads a checkpoint into `ex` and returns the number of steps it was taken after.
int64_t checkpoint_load(Executor& ex, const std::string& path);

}  // namespace remat
