// The executor: holds every persistent value of a training graph in backend memory and runs
// training steps by walking an ExecutionPlan (compute / free), then the optimizer updates.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/graph.h"
#include "runtime/plan.h"

namespace remat {

struct StepResult {
  float loss = 0;
  double seconds = 0;
  int64_t peak_bytes = 0;  // measured: persistent + live activations + workspace, at the max
  int computes = 0;
  int recomputes = 0;
};

class Executor {
 public:
  // Allocates every persistent value (zero-filled). The graph, registry and backend must
  // outlive the executor.
  Executor(const Graph& g, const OpRegistry& ops, Backend& backend);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Initial values of parameters, buffers and optimizer state (runtime/init.h).
  void init_parameters(uint64_t seed);

  // One training step: uploads the batch, runs `plan`'s steps, then every Update node.
  // `images` is [N, C, H, W] floats, `labels` the label tensor's ints.
  StepResult run_step(const ExecutionPlan& plan, const float* images, const int32_t* labels,
                      int64_t step);

  // Host copies of persistent values (float tensors).
  std::vector<float> read(ValueId v) const;
  void write(ValueId v, const std::vector<float>& host);

  const Graph& graph() const { return g_; }
  int64_t workspace_bytes(NodeId n);  // what the backend needs to run node n

 private:
  ExecContext make_context(NodeId n, bool require_resident);
  void run_node(NodeId n, bool recompute, int64_t step);

  const Graph& g_;
  const OpRegistry& ops_;
  Backend& be_;
  std::vector<void*> ptr_;  // per value: its memory, or null while not resident
  int64_t in_use_ = 0;
  int64_t peak_ = 0;
};

}  // namespace remat
