// Data-parallel gradient synchronisation inside a training step (Note [gradient buckets]):
// each bucket's collective starts as soon as the plan has written the last gradient in it,
// while the rest of the backward runs; all are complete before the optimizer runs; with a
// sharded optimizer the updated parameter shards are then gathered by every rank.
#pragma once

#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/graph/graph.h"
#include "runtime/memory/param_layout.h"
#include "runtime/memory/plan.h"

namespace remat {

class GradSync {
 public:
  // `region` is the executor's persistent region in `comm`'s memory (host for MPI, device for
  // NCCL), laid out by `layout` (world > 1). All must outlive the GradSync.
  GradSync(const Graph& g, const PersistentLayout& layout, Communicator& comm, char* region);

  // Learns, for a new plan, after which of its steps each bucket's gradients are final (the
  // last computation of every node writing one of them).
  void prepare(const ExecutionPlan& plan);
  // Starts the buckets no plan step writes (gradients of unused parameters).
  void begin_step();
  // Plan step `i` has run: starts the buckets it completed, lets the others progress.
  void after_plan_step(int i);
  // Waits for every bucket: gradients averaged over the ranks (whole buckets, or this rank's
  // shard of each when the optimizer is sharded).
  void finish_gradients();
  // Sharded optimizer, after this rank's updates: every rank's parameter shards to every rank.
  void gather_parameters();

  // Host seconds this step spent waiting for collectives (communication not hidden behind
  // computation; with NCCL the host does not wait and this stays near 0).
  double wait_seconds() const { return wait_seconds_; }

 private:
  void start(size_t b);

  const Graph& g_;
  const PersistentLayout& layout_;
  Communicator& comm_;
  char* region_;
  std::vector<std::vector<NodeId>> writers_;  // per bucket: nodes writing its gradients
  std::vector<int> ready_after_;  // per bucket: plan step after which it starts (-1: at once)
  std::vector<std::vector<size_t>> starts_at_;  // per plan step: buckets it completes
  std::vector<CommHandle> pending_;
  std::vector<bool> started_;
  double wait_seconds_ = 0;
};

}  // namespace remat
