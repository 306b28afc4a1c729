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
// step, precision (the activations' dtype of the run: "fp32" or "bf16"; the tensors are F32 in
// both: master weights, running statistics and optimizer state).
void checkpoint_save(const Executor& ex, const std::string& path, int64_t steps_done);
// The same with each value's host copy from `read` (data parallel: gathered from the ranks).
void checkpoint_save(const Graph& g, const std::function<std::vector<float>(ValueId)>& read,
                     const std::string& path, int64_t steps_done);

// "" when every value a checkpoint holds is finite, else the first that is not ("tensor
// 'bn.running_mean': element 3 is nan"): a checkpoint holds finite values only.
std::string checkpoint_non_finite(const Executor& ex);

// Writes their initial values (zeros, ones) into the buffers of constant initialisation that
// hold a non-finite element (batch-norm running statistics a failed step's forward spoiled) and
// returns their names. Note [saving at an error] in tools/training/training.cpp.
std::vector<std::string> reset_non_finite_buffers(Executor& ex);

// A checkpoint read and checked against `g`, nothing written yet: the step it was taken after,
// per value of g the tensor (empty for values a checkpoint does not hold), and the tensors
// without a checksum (files written before checksums existed). UserError naming the file and
// tensor for a missing tensor, a shape mismatch, a NaN or infinite value, a checksum mismatch (a
// flipped bit), another model, a step that is not a non-negative integer, or a file that is not
// a remat checkpoint.
struct CheckpointData {
  int64_t step = 0;  // steps done when it was saved (>= 0)
  std::vector<std::vector<float>> values;
  int unverified = 0;
  std::string precision;  // "fp32" or "bf16"; "" for checkpoints written before bf16 existed
};
CheckpointData checkpoint_read(const Graph& g, const std::string& path);

struct CheckpointInfo {
  int64_t step = 0;    // steps done when it was saved (>= 0)
  int unverified = 0;  // tensors without a checksum (files written before checksums existed)
  std::string precision;  // the saving run's (CheckpointData::precision)
};

// "fp32" or "bf16": a graph's activation precision as the checkpoint metadata names it.
const char* checkpoint_precision_name(DType t);

// Loads a checkpoint into `ex` (checkpoint_read's errors; the executor is left unchanged then).
CheckpointInfo checkpoint_load(Executor& ex, const std::string& path);

}  // namespace remat
