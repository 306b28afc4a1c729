// The state of a data-parallel job's replicas, over a host-memory communicator: a checksum
// showing that every rank holds the same weights, checkpoints that rank 0 writes with the
// optimizer state gathered from every rank's shard, and resuming from a checkpoint that rank 0
// reads (it may exist on rank 0's host only). Every function is collective: all ranks call it,
// in the same order (Note [collective order]).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/checkpoint.h"
#include "runtime/comm/communicator.h"
#include "runtime/executor.h"

namespace remat {

// FNV-1a (64 bits) over the bytes every rank holds identically: the parameters, the buffers
// (running statistics) and, unless sharded, the optimizer state. Not collective.
uint64_t replica_checksum(const Executor& ex);

// Throws Error naming every rank whose checksum differs from rank 0's, `when` saying where in
// the run ("after step 20").
void check_replicas_identical(const Executor& ex, Communicator& host, const std::string& when);

// Rank 0 writes a checkpoint holding the state as one process has it (runtime/checkpoint.h),
// after the others have sent their optimizer-state shards; every rank returns once it is
// written.
void checkpoint_save_replicas(const Executor& ex, Communicator& host, const std::string& path,
                              int64_t steps_done);

// Rank 0 reads and checks the checkpoint (checkpoint_read) and sends it to every rank; each
// keeps what its layout holds (its shards of the optimizer state when sharded). Returns the
// step it was taken after and the tensors without a checksum, on every rank.
CheckpointInfo checkpoint_load_replicas(Executor& ex, Communicator& host, const std::string& path);

}  // namespace remat
