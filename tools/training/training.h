// The `train` command's work, separate from flag parsing: load a model config, build the
// training graph, decide the step plan (keep everything, or a schedule for a budget), and run
// N steps inside the memory cap, printing one line per step and a closing comparison of
// predicted and measured memory and time. As one rank of an MPI job (data parallel), rank 0
// decides the plan and alone prints and writes files (tools/data_parallel.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/tensor.h"
#include "tools/training/metrics.h"
#include "tools/training/step_plan.h"

namespace remat {

struct TrainOptions {
  std::string config;              // model YAML
  std::string device = "cpu";      // cpu | cuda
  int64_t steps = 50;              // total steps (a resumed run continues up to this count)
  std::optional<int64_t> batch;    // overrides the config's batch (a micro-batch's samples)
  std::optional<int> accumulate;   // overrides the config's micro-batches per optimizer step
  std::optional<Shape> input;      // overrides the config's per-sample input size
  std::optional<int64_t> sequence; // overrides a token model's sequence length T
  uint64_t seed = 0;               // 0: use the config's seed
  std::vector<std::string> overrides;  // "key.path=value" config overrides (load_model_config)
  int log_every = 0;               // print every k-th step (the first and last always); 0: a
                                   // live line on a terminal, every step in a log
  std::string metrics_file;        // one JSON object per step (tools/train_log.h)
  StepPlanOptions plan;            // budget, strategy, cost model, schedule file
  std::string memory = "arena";    // arena | pool (with a budget)
  std::string trace_file;          // Chrome trace of the last trace_steps steps
  int64_t trace_steps = 1;         // steps the trace holds, one after another on its timeline
  std::string save_plan_file;      // the execution plan that ran (remat-plan/1 JSON)
  std::string save_file;           // checkpoint after the last step, or at a stop (Note
                                   // [graceful stop])
  int64_t save_every = 0;          // also a checkpoint every N steps (periodic_save.h); 0: none
  int keep_last = 3;               // periodic checkpoints kept
  std::string resume_file;         // checkpoint to continue from
  std::string summary_file;        // the run's summary as JSON (remat-train-summary/1)
  std::string compare_file;        // a keep-everything run's summary: the slowdown against it
  // fp32 | tf32 | tf32-all | bf16 (tools/common/cli.h); "" = the config's precision (bf16, or
  // tf32 for fp32 configs). bf16 stores activations in bfloat16; the others choose the GPU math.
  std::string precision;
  bool check_finite = true;        // stop at a non-finite loss or gradient (Note [finite check])
  bool cuda_graph = true;          // replay the plan as a CUDA graph (Note [step graphs])
  // --workspace-limit: the most workspace one algorithm may use on a GPU; unset, the rule of
  // workspace_limit_for (tools/training/training_setup.cpp).
  std::optional<int64_t> workspace_limit;
  // Data: decode threads of image sources (0: the cores left over), replacing unreadable samples
  // instead of stopping (models/data.h LoaderOptions).
  int data_threads = 0;
  bool skip_bad_samples = false;
  // Validation (tools/training/evaluation.h) on the config's `val` data: every eval_every steps
  // (0: only at the end) and at the end; eval_batches per pass (0: the whole set / 20).
  int64_t eval_every = 0;
  int64_t eval_batches = 0;
  bool no_eval = false;            // skip validation even when the config has `val`
  // Data parallel (an MPI job of several ranks; ignored for one process).
  bool shard_optimizer = false;       // each rank keeps 1/world of the optimizer state (ZeRO-1)
  int64_t bucket_bytes = 25'000'000;  // gradient bucket size (Note [gradient buckets])
  int64_t check_every = 100;          // steps between checks that the ranks' weights agree
};

struct TrainSummary {
  float first_loss = 0, last_loss = 0;
  std::vector<float> losses;       // every step's loss, in order (this run's steps)
  // Over all steps after the first but the one that recorded the CUDA graph (Note [step
  // graphs]; that one when it is the only other step).
  double samples_per_second = 0;
  int64_t peak_bytes = 0;          // largest measured exact per-step peak
  int64_t reserved_peak_bytes = 0; // largest peak of the memory source (pool / arena)
  int64_t predicted_peak = 0;
  double fragmentation = 0;        // pool mode: largest external fragmentation at a step's peak
  int recomputes_per_step = 0;
  int world = 1;                   // ranks that trained together
  int64_t constant_bytes = 0;      // the plan's constant (this rank's persistent layout)
  double comm_wait_ms = 0;         // data parallel: mean ms per step waiting for collectives
  uint64_t weights_checksum = 0;   // data parallel: the ranks' common checksum at the end
  int64_t steps_done = 0;          // after the run (resumed steps included)
  int stop_signal = 0;             // the signal that stopped it early (Note [graceful stop]), or 0
  std::string precision;           // the precision it ran in (resolve_precision)
  // The last validation's metrics (tools/training/metrics.h), if any ran.
  std::optional<EvalMetrics> val;
  double data_wait_ms = 0;         // mean ms the steps after the first waited for their batch
  int64_t skipped_samples = 0;     // unreadable samples replaced (--skip-bad-samples)
  std::string step_graph;          // how the last step ran its plan (Executor::graph_note)
  // Side outputs that failed (Note [side outputs] in train_log.h): why, one line each.
  std::vector<std::string> side_output_failures;
};

class MpiSession;

// Trains and prints progress to stdout. Throws UserError for bad configs, devices, budgets,
// and NonFiniteError when a step's loss or a gradient is not finite (with check_finite). A stop
// signal (tools/stop_signal.h) ends it after the running step, with the checkpoint written and
// summary.stop_signal set. With `session` of several ranks, trains data parallel: every rank
// calls it with the same options; losses are means over the ranks, peaks the largest.
TrainSummary run_training(const TrainOptions& opt, MpiSession* session = nullptr);

}  // namespace remat
