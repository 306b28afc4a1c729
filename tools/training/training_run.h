// The stages of run_training() and the state they share. The set-up (training_setup.cpp) builds
// a TrainingRun: the config, the training graph, the backend, the data-parallel job, the data,
// validation, and the executor with its plan. The resume, the step loop and the finish
// (training.cpp) train it and report.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "models/build.h"
#include "models/config.h"
#include "models/prefetch.h"
#include "ops/registry.h"
#include "runtime/backends/backend.h"
#include "runtime/executor.h"
#include "runtime/graph/graph.h"
#include "runtime/memory/param_layout.h"
#include "tools/training/data_parallel.h"
#include "tools/training/evaluation.h"
#include "tools/training/step_plan.h"
#include "tools/training/training.h"

namespace remat {

class MpiSession;

// Everything the set-up made, in the order it was made (members are destroyed in reverse: the
// executor before the data and the evaluator, the job's communicators before the backend). The
// evaluator and the data source hold references into it: it lives where it was made.
struct TrainingRun {
  ModelConfig cfg;
  OpRegistry ops;
  std::string precision;           // resolve_precision: fp32 | tf32 | tf32-all | bf16
  BuildOptions bo;
  Graph g;                         // the training graph
  double base_ms = 0;              // --compare: the keep-everything run's ms per step (0: none)
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ParallelJob> job;  // null for one process
  ExecutorOptions eo;
  int64_t step_batch = 0;          // this rank's samples per step (K micro-batches)
  PersistentLayout layout;
  TensorDesc step_in, step_labels; // one step's batch: K micro-batches, one after another
  std::unique_ptr<PrefetchSource> data;
  std::unique_ptr<Evaluator> eval; // null without `val` data or with --no-eval
  StepPlan sp;
  std::unique_ptr<Executor> exec;
  bool writer = true;              // rank 0 (or the only process): prints the plan, writes files

  int world() const { return job ? job->world : 1; }
  int64_t global_batch() const { return step_batch * world(); }
};

// The set-up: config, graphs, backend, job, data, validation; prints the run's header lines and
// decides the plan (solving it for a budget). UserError for what the options or config refuse.
std::unique_ptr<TrainingRun> training_set_up(const TrainOptions& opt, MpiSession* session);

}  // namespace remat
