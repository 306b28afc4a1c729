// Where plan/maxbatch/sweep get their Problem and solver settings: the flags that name a problem
// (a saved problem file, or a model config built into a training graph and costed), and the
// functions that read them back.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/config.h"
#include "runtime/memory/param_layout.h"
#include "runtime/core/tensor.h"
#include "solver/problem.h"
#include "solver/strategies.h"
#include "tools/common/cli.h"
#include "tools/common/progress.h"

namespace remat {

// Declares the problem-source flags on `flags`:
//   --problem FILE        a remat-problem/1 JSON file
//   --config FILE         a model YAML: forward graph -> training graph -> costs -> problem
//   --batch N             the batch the problem is built at (config: overrides its batch;
//                         problem: rescaled linearly with problem_at_batch)
//   --input CxHxW         per-sample input size override (config only)
//   --seq T               a token model's sequence length override (config only)
//   --cost-model M        flops (default: flops_costs) or a remat-costs/1 JSON file (config only)
//   --world N             plan one rank of N data-parallel ranks: its constant holds the
//                         gradient buckets (config only; runtime/memory/param_layout.h)
//   --shard-optimizer     ... with 1/N of the optimizer state per rank (ZeRO-1)
//   --precision P         fp32 | bf16 (tf32 and tf32-all plan as fp32): the activations'
//                         dtype, overriding the config's `precision` (config only)
//   --accumulate K        K micro-batches per optimizer step: the graph gets its accumulate
//                         nodes (runtime/graph/accumulate.h), the batch is a micro-batch's
//   --link-bandwidth GB/s the host link each way (Problem::copy_cost_per_byte)
//   --device-tflops F     FLOPs costs: the device rate copy time converts at (default 100)
//   --copy-overlap M      stage (default) or stream: how copies overlap compute
//   KEY=VALUE ...         config overrides, as train takes them (config only)
void add_problem_flags(FlagParser& flags);

// Builds the Problem from exactly one of --config / --problem; UserError naming the flags
// otherwise, or when a config-only flag is given with --problem.
Problem problem_from_flags(const FlagParser& flags);

// The problem at batch b for max batch (Note [max-batch problems]): --config with the FLOPs
// model rebuilds the training graph at b; a --problem file or a measured cost table can only be
// scaled (problem_at_batch). Null means "scale".
ProblemAtBatch problem_at_batch_from_flags(const FlagParser& flags);

// The host link of --link-bandwidth and --device-tflops (Note [offload semantics]).
struct LinkSpeed {
  double bytes_per_second = 0;  // 0: no link
  double device_flops = 100e12; // FLOPs costs: the sustained rate copy time is counted at
  CopyOverlap overlap = CopyOverlap::Stage;  // --copy-overlap (Note [streamed copies])
};
LinkSpeed link_from_flags(const FlagParser& flags);

// What --config and its companion flags describe.
struct ConfigProblem {
  std::string config;                   // the model YAML
  std::optional<int64_t> batch;         // overrides the config's batch
  std::optional<Shape> input;           // per-sample input size override (image models)
  std::optional<int64_t> sequence;      // sequence length override (token models)
  std::string cost_model = "flops";     // "flops" or a remat-costs/1 cost table path
  ParallelConfig parallel;              // one rank of a data-parallel job (default: one process)
  std::optional<DType> precision;       // overrides the config's `precision`
  std::optional<int> accumulate;        // overrides the config's `accumulate`
  std::vector<std::string> overrides;   // KEY=VALUE config overrides
  LinkSpeed link;                       // --link-bandwidth, --device-tflops
  // The config, once loaded (with_loaded_config): a search builds many problems of one model,
  // and an ONNX file is read once for all of them.
  std::shared_ptr<const ModelConfig> loaded;
};

// `c` with its config loaded (ConfigProblem::loaded).
ConfigProblem with_loaded_config(ConfigProblem c);

// The ConfigProblem of the --config flags (--cost-model, --input, --seq, --world,
// --shard-optimizer, --precision, --accumulate, KEY=VALUE); --batch is left to the caller.
ConfigProblem config_problem_from_flags(const FlagParser& flags);

// The Problem a model config defines: the training graph uses the config's optimizer. With a
// cost table and no batch, the graph is built at the table's batch so the two match.
Problem problem_from_config(const ConfigProblem& c);

// Micro-batches per optimizer step the flags describe: --accumulate, else the config's
// `accumulate` (1 for a --problem file).
int micro_batches_from_flags(const FlagParser& flags);

// --world and --shard-optimizer as a ParallelConfig (rank 0: every rank's constant is the same);
// UserError for --shard-optimizer without --world N >= 2.
ParallelConfig parallel_from_flags(const FlagParser& flags);

// The largest sequence length a token model builds at (its position table's length), found by
// bisection on building the forward graph; UserError for an image model.
int64_t max_buildable_sequence(const ConfigProblem& c);

// Note [allocator for solving]
// A schedule is two n x n byte matrices (4.9 MB each at DenseNet-201's 2,213 nodes), and the
// searches build and drop one per candidate, hundreds per second. glibc hands blocks that large
// back to the kernel on free, so each new one costs a page fault per 4 KB to zero it again:
// chen-greedy on DenseNet-201 took 3.7 s, 2.1 s with the blocks kept in the heap. The solving
// tools (plan, sweep, maxbatch) therefore keep blocks up to 64 MB in the heap
// and return freed memory only beyond 512 MB. Nothing on non-glibc systems.
void tune_allocator_for_solving();

// Declares --strategies (alias --strategy), --time-limit, --threads, --gap, --log-level,
// --host-budget (default: MemAvailable of /proc/meminfo).
void add_solve_flags(FlagParser& flags);
SolveOptions solve_options_from_flags(const FlagParser& flags);

// Strategy names selected by --strategies: "all", or a comma-separated list of known names
// (kept in the order given; a name not known is a UserError listing the known ones).
std::vector<std::string> strategies_from_flags(const FlagParser& flags);
std::vector<std::string> parse_strategy_list(const std::string& text, const std::string& what);

// Points opt.progress and opt.batch_progress at `line` (tools/progress.h) when
// opt.log_level >= 1 (the line must outlive the solves).
void progress_line_attach(SolveOptions& opt, ProgressLine* line);

}  // namespace remat
