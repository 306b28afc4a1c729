// Validation: the model's forward graph in inference mode (batch norm from its running
// statistics, dropout off) at the training batch, planned on its own — nothing is kept for a
// backward — under the same budget, and run on the `val` data (Note [borrowed memory]: inside
// the training executor's memory, between its steps; or on an executor of its own, as
// `evaluate` runs it). One pass covers the whole validation set of an image source (its last
// batch wraps around and counts only the samples not seen yet), or `batches` batches of a token
// file or of generated data. Metrics: tools/training/metrics.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "models/build.h"
#include "models/config.h"
#include "models/data.h"
#include "runtime/executor.h"
#include "tools/training/metrics.h"
#include "tools/training/step_plan.h"

namespace remat {

class Communicator;

struct EvalOptions {
  StepPlanOptions plan;      // budget and strategy (the training run's); constant_bytes set below
  LoaderOptions loader;      // threads, skip_bad_samples (evaluation order is implied)
  int64_t batches = 0;       // batches per pass; 0: the whole set (images), 20 (tokens, synthetic)
  DataShard shard;           // data parallel: this rank's slice of each validation batch
  Communicator* host_comm = nullptr;  // data parallel: the ranks' metrics are summed over it
};

// cfg with every batch-norm layer in inference mode and every dropout rate 0.
ModelConfig inference_config(const ModelConfig& cfg);

class Evaluator {
 public:
  // Builds the validation graph and its plan (UserError when the config has no `val` section).
  // `constant_bytes`: what is resident beside the plan — the training layout's constant when
  // borrowing (Note [borrowed memory]), -1 for the graph's own parameters.
  Evaluator(const ModelConfig& cfg, const BuildOptions& bo, const OpRegistry& ops, Backend& be,
            const EvalOptions& opt, int64_t constant_bytes);
  ~Evaluator();

  const Graph& graph() const { return g_; }
  const StepPlan& plan() const { return sp_; }
  // Bytes the plan's activations take past the persistent values in an arena (what a training
  // executor without a budget reserves for it too).
  int64_t arena_bytes() const;
  // The executor it runs on: one borrowing `host` (made once), or its own (null host), whose
  // budget is the plan's (arena mode) and whose parameters the caller writes.
  Executor& executor(Executor* host);

  // One pass over the validation data, then the ranks' sums added. Returns the metrics and the
  // seconds it took.
  EvalMetrics run(double* seconds = nullptr);
  int64_t samples() const { return samples_; }  // the last pass's samples (all ranks, counted once)
  std::string describe() const;  // "validation: <data>; plan <strategy>, peak ..."
  int recomputes() const;        // the plan's recomputations per pass

 private:
  const ModelConfig cfg_;
  const OpRegistry& ops_;
  Backend& be_;
  const EvalOptions opt_;
  Graph g_;
  StepPlan sp_;
  ValueId logits_ = kNoValue;
  std::unique_ptr<DataSource> data_;
  std::unique_ptr<Executor> ex_;
  int64_t samples_ = 0;
};

}  // namespace remat
