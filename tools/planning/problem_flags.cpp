// Problem-source and solver flags shared by plan, maxbatch and sweep: --problem or --config
// (config -> forward graph -> training graph -> cost table -> Problem), and the solver knobs.
#include "tools/planning/problem_flags.h"

#include <algorithm>
#include <fstream>
#include <cstdio>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <optional>

#include "models/build.h"
#include "models/config.h"
#include "ops/registry.h"
#include "runtime/graph/autodiff.h"
#include "runtime/core/check.h"
#include "runtime/graph/costs.h"
#include "solver/from_graph.h"

namespace remat {

void add_problem_flags(FlagParser& flags) {
  flags.add("problem", "FILE", "rematerialization problem (remat-problem/1 JSON)")
      .add("config", "FILE", "model config (YAML); builds the training graph's problem")
      .add("onnx", "FILE", kOnnxFlagHelp)
      .add("batch", "N", "batch size (config: overrides its batch; problem: rescales it)")
      .add("input", "CxHxW", "per-sample input size override, F or TxF too (with --config)")
      .add("seq", "T", "a token model's sequence length override (with --config)")
      .add("cost-model", "M", "flops, or a remat-costs/1 JSON cost table (with --config)",
           "flops")
      .add("world", "N", "plan one rank of N data-parallel ranks (with --config)", "1")
      .add("shard-optimizer", "", "with --world: 1/N of the optimizer state per rank")
      .add("precision", "fp32|bf16", "activations' dtype, overriding the config's (with "
                                    "--config; tf32 and tf32-all plan as fp32)")
      .add("accumulate", "K", "K micro-batches per optimizer step (with --config): the problem "
                              "is one micro-batch's, its gradients accumulated")
      .add("link-bandwidth", "GB/s", "host link bandwidth each way, in 1e9 bytes per second; "
                                     "lets the offload strategies copy values to host memory")
      .add("device-tflops", "F", "with --link-bandwidth and FLOPs costs: the device's sustained "
                                 "rate, which turns copy time into FLOPs", "100")
      .add("copy-overlap", "stage|stream", "with --link-bandwidth: each copy within its stage "
                                           "(the MILP's model), or queued on its stream across "
                                           "stages", "stage")
      .allow_positional("KEY=VALUE", "override a config field (with --config), e.g. "
                                     "precision=bf16 batch=64");
}

LinkSpeed link_from_flags(const FlagParser& flags) {
  LinkSpeed link;
  if (flags.has("link-bandwidth"))
    link.bytes_per_second = flags.get_double("link-bandwidth", 1e-6, 1e6) * 1e9;
  link.device_flops = flags.get_double("device-tflops", 1e-6, 1e9) * 1e12;
  link.overlap = copy_overlap_from_name(flags.get_choice("copy-overlap", {"stage", "stream"}), "");
  return link;
}

ParallelConfig parallel_from_flags(const FlagParser& flags) {
  ParallelConfig pc;
  pc.world = static_cast<int>(flags.get_int("world", 1, 1 << 20));
  pc.shard_optimizer = flags.has("shard-optimizer");
  if (pc.shard_optimizer && pc.world < 2)
    REMAT_USER_ERROR("--shard-optimizer needs --world N with N >= 2 (the ranks that share the "
                     "optimizer state)");
  return pc;
}

ConfigProblem config_problem_from_flags(const FlagParser& flags) {
  ConfigProblem c;
  c.config = model_file_flag(flags, "");
  if (flags.has("input"))
    c.input = parse_flag_value([&] { return parse_input_size(flags.get("input"), "--input"); });
  if (flags.has("seq")) c.sequence = flags.get_int("seq", 1, int64_t{1} << 24);
  c.cost_model = flags.get("cost-model");
  c.parallel = parallel_from_flags(flags);
  if (flags.has("precision"))
    c.precision = precision_storage(flags.get_choice("precision", kPrecisionChoices));
  if (flags.has("accumulate"))
    c.accumulate = static_cast<int>(flags.get_int("accumulate", 1, kMaxMicroBatches));
  c.overrides = model_overrides(flags, c.config);
  c.link = link_from_flags(flags);
  return c;
}

ConfigProblem with_loaded_config(ConfigProblem c) {
  c.loaded = std::make_shared<const ModelConfig>(load_model_config(c.config, c.overrides));
  return c;
}

Problem problem_from_config(const ConfigProblem& c) {
  ModelConfig cfg = c.loaded ? *c.loaded : load_model_config(c.config, c.overrides);
  if (c.accumulate) cfg.accumulate = *c.accumulate;
  std::optional<int64_t> batch = c.batch;
  std::optional<CostTable> table;
  if (c.cost_model != "flops") {
    table = costs_load(c.cost_model);
    // A table measured at some batch only matches a graph of that batch: default to it.
    if (!batch && table->batch > 0) batch = table->batch;
  }
  const OpRegistry ops = make_builtin_registry();
  BuildOptions bo;
  bo.batch = batch;
  bo.input = c.input;
  bo.sequence = c.sequence;
  bo.precision = c.precision;
  const Graph fwd = build_forward_graph(cfg, ops, bo);
  const Graph g = make_training_graph(fwd, ops, cfg.optimizer.op, cfg.optimizer.attrs, cfg.accumulate);
  const CostTable costs = table ? *table : flops_costs(g, ops);
  Problem p =
      problem_from_graph(g, costs, persistent_layout(g, c.parallel).constant_bytes).problem;
  if (p.name.empty()) p.name = cfg.name;
  problem_set_link(p, link_bytes_per_second(c.link.bytes_per_second, costs),
                   c.link.device_flops, c.link.overlap);
  return p;
}

int micro_batches_from_flags(const FlagParser& flags) {
  if (model_file_flag(flags, "").empty()) return 1;
  const ConfigProblem c = config_problem_from_flags(flags);
  return c.accumulate ? *c.accumulate : load_model_config(c.config, c.overrides).accumulate;
}

int64_t max_buildable_sequence(const ConfigProblem& c) {
  const ModelConfig cfg = load_model_config(c.config, c.overrides);
  if (!cfg.tokens())
    REMAT_USER_ERROR(c.config << ": not a token model (no `sequence`): its sequence length "
                                 "cannot vary");
  const OpRegistry ops = make_builtin_registry();
  auto builds = [&](int64_t t) {
    BuildOptions bo;
    bo.batch = 1;
    bo.sequence = t;
    bo.precision = c.precision;
    try {
      build_forward_graph(cfg, ops, bo);
      return true;
    } catch (const UserError&) {
      return false;
    }
  };
  if (!builds(1)) build_forward_graph(cfg, ops, {});  // reports why the model does not build
  int64_t lo = 1, hi = 2;
  const int64_t limit = int64_t{1} << 24;  // the YAML limit of `sequence`
  while (hi <= limit && builds(hi)) lo = hi, hi *= 2;
  hi = std::min(hi, limit + 1);
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (builds(mid) ? lo : hi) = mid;
  }
  return lo;
}

Problem problem_from_flags(const FlagParser& flags) {
  const bool has_problem = flags.has("problem"), has_config = !model_file_flag(flags, "").empty();
  if (has_problem && has_config)
    throw UsageError("--problem and --config / --onnx are exclusive: give exactly one of them");
  if (!has_problem && !has_config)
    throw UsageError("no problem given: use --config FILE (a model YAML), --onnx FILE (an ONNX "
                     "model) or --problem FILE (a remat-problem/1 JSON)");
  std::optional<int64_t> batch;
  if (flags.has("batch")) batch = flags.get_int("batch", 1, int64_t(1) << 40);
  if (has_problem) {
    for (const char* f : {"input", "seq", "cost-model", "world", "shard-optimizer", "precision",
                          "accumulate"})
      if (flags.has(f))
        throw UsageError(std::string("--") + f + " needs --config; a --problem file already has "
                                                 "its sizes and costs");
    if (!flags.positional().empty())
      throw UsageError("'" + flags.positional()[0] + "': KEY=VALUE overrides need --config");
    Problem p = problem_load(flags.get("problem"));
    const LinkSpeed link = link_from_flags(flags);
    problem_set_link(p, link.bytes_per_second, link.device_flops, link.overlap);
    return batch ? problem_at_batch(p, *batch) : p;
  }
  ConfigProblem c = config_problem_from_flags(flags);
  c.batch = batch;
  return problem_from_config(c);
}

ProblemAtBatch problem_at_batch_from_flags(const FlagParser& flags) {
  if (model_file_flag(flags, "").empty() || flags.get("cost-model") != "flops") return nullptr;
  const ConfigProblem c = with_loaded_config(config_problem_from_flags(flags));
  return [c](int64_t batch) {
    ConfigProblem at = c;
    at.batch = batch;
    return problem_from_config(at);
  };
}

void add_solve_flags(FlagParser& flags) {
  flags.add("strategies", "S", "'all' or a comma-separated list of strategy names", "all")
      .alias("--strategy", "strategies")
      .add("time-limit", "SEC", "wall-clock limit of each strategy (and of each budget a sweep "
                                "solves) in seconds; the solver strategies keep to it, the "
                                "command takes their sum", "60")
      .add("threads", "N", "solver threads", "1")
      .add("gap", "G", "MILP relative gap to stop at", "0.0001")
      .add("log-level", "N", "0 silent, 1 live progress line, 2 solver log", "1")
      .add("host-budget", "SIZE", "host memory the offload strategies' copies may use at once "
                                  "(default: what the machine has available)");
}

int64_t host_memory_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

void tune_allocator_for_solving() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
#endif
}

SolveOptions solve_options_from_flags(const FlagParser& flags) {
  SolveOptions opt;
  opt.time_limit_seconds = flags.get_double("time-limit", 0.001, 1e7);
  opt.threads = static_cast<int>(flags.get_int("threads", 1, 1024));
  opt.relative_gap = flags.get_double("gap", 0, 1);
  opt.log_level = static_cast<int>(flags.get_int("log-level", 0, 3));
  opt.host_budget = flags.has("host-budget") ? parse_flag_value([&] {
    return parse_bytes(flags.get("host-budget"), "--host-budget");
  }) : host_memory_available();
  return opt;
}

std::vector<std::string> parse_strategy_list(const std::string& text, const std::string& what) {
  std::vector<std::string> known = strategy_names();
  const std::vector<std::string>& plain = strategy_names();  // what "all" means
  for (const auto& n : offload_strategy_names()) known.push_back(n);
  std::vector<std::string> out;
  auto add = [&](const std::string& name) {
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  };
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string name = text.substr(start, comma - start);
    start = comma + 1;
    if (name == "all") {  // anywhere in the list: every strategy without copies, in order
      for (const auto& n : plain) add(n);
      continue;
    }
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
      std::vector<std::string> all_names = known;
      all_names.push_back("all");
      throw UsageError(what + ": unknown strategy '" + name + "'" + did_you_mean(name, all_names) +
                       " (known: all, " + list + ")");
    }
    add(name);
  }
  return out;
}

std::vector<std::string> strategies_from_flags(const FlagParser& flags) {
  return parse_strategy_list(flags.get("strategies"), "--strategies");
}

void progress_line_attach(SolveOptions& opt, ProgressLine* line) {
  if (opt.log_level < 1) return;
  opt.progress = progress_solve;
  opt.batch_progress = progress_batch;
  opt.phase = progress_phase;
  opt.progress_user = line;
}

}  // namespace remat
