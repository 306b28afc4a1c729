// maxbatch (the paper's Figure 5): the largest batch whose schedule fits a memory budget, per
// strategy, as a table (or JSON lines) and optionally an SVG bar chart; with --vary seq, the
// longest sequence of a token model instead (its graph rebuilt at each length); with --vary
// input, the largest square input of an image model (Note [input-size search]).
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/io/atomic_file.h"
#include "runtime/core/check.h"
#include "solver/griewank.h"
#include "solver/strategies.h"
#include "tools/common/cli.h"
#include "tools/planning/input_sizes.h"
#include "tools/planning/problem_flags.h"
#include "tools/planning/svg.h"
#include "tools/training/training.h"
#include "models/build.h"

namespace remat {
namespace {

// The status of a strategy that does not apply to the graph (griewank on a non-chain): its row
// reads "n/a", never a batch of 0 (which would mean "even batch 1 does not fit").
const char* const kNotApplicable = "not applicable: the graph is not a chain";

std::string maxbatch_svg(const Problem& p, int64_t budget, const std::string& size_name,
                         const std::vector<MaxBatchResult>& results) {
  SvgBarChart c;
  c.title = p.name + ": max " + size_name + " within " + format_bytes(budget);
  c.y_label = "max " + size_name;
  for (const MaxBatchResult& r : results) {
    c.labels.push_back(r.strategy);
    c.values.push_back(static_cast<double>(r.batch));
    if (r.status == kNotApplicable) {
      c.notes.push_back("n/a");
      continue;
    }
    std::string note = std::to_string(r.batch);
    if (r.upper_bound > r.batch) note += " (<= " + std::to_string(r.upper_bound) + ")";
    c.notes.push_back(note);
  }
  return svg_bar_chart(c);
}

// --verify: trains two steps of the real graph at each strategy's batch, under the budget, and
// reports the measured peak next to the plan's. Returns the number of rows that failed (an
// error, or a measurement that disagrees with the plan).
int verify(const FlagParser& flags, int64_t budget, const std::string& vary,
           const std::vector<MaxBatchResult>& results, int64_t channels) {
  const bool vary_seq = vary == "seq";
  if (model_file_flag(flags, "maxbatch").empty())
    throw UsageError("maxbatch: --verify needs --config or --onnx (a model to train)");
  const std::string device = flags.get_choice("device", {"cpu", "cuda"});
  struct Row {
    std::string strategy;
    int64_t batch;
    std::string outcome;
  };
  std::vector<Row> rows;
  int failed = 0;
  for (const MaxBatchResult& r : results) {
    if (r.batch < 1) continue;
    std::printf("\n--verify %s at %s %lld on %s:\n", r.strategy.c_str(),
                vary_seq ? "sequence" : vary == "input" ? "input side" : "batch",
                static_cast<long long>(r.batch), device.c_str());
    TrainOptions t;
    t.config = model_file_flag(flags, "maxbatch");
    t.device = device;
    t.steps = 2;
    if (vary_seq || vary == "input") {
      if (vary_seq) t.sequence = r.batch;
      if (flags.has("batch")) t.batch = flags.get_int("batch", 1, int64_t(1) << 40);
    } else {
      t.batch = r.batch;
      if (flags.has("seq")) t.sequence = flags.get_int("seq", 1, int64_t{1} << 24);
    }
    if (flags.has("input"))
      t.input = parse_flag_value(
          [&] { return parse_input_size(flags.get("input"), "maxbatch: --input"); });
    if (vary == "input") t.input = Shape{channels, r.batch, r.batch};
    if (flags.has("precision")) t.precision = flags.get("precision");
    if (flags.has("accumulate"))
      t.accumulate = static_cast<int>(flags.get_int("accumulate", 1, kMaxMicroBatches));
    t.overrides = model_overrides(flags, t.config);
    t.plan.budget = budget;
    t.plan.strategy = r.strategy;
    t.plan.cost_model = flags.get("cost-model");
    t.plan.time_limit = flags.get_double("time-limit", 0.1, 1e6);
    t.plan.log_level = 0;
    t.log_every = 100;
    char buf[160];
    bool ok = false;
    try {
      TrainSummary s = run_training(t);
      ok = s.reserved_peak_bytes <= budget && s.peak_bytes == s.predicted_peak;
      std::snprintf(buf, sizeof buf, "predicted %s, measured %s, held %s: %s",
                    format_bytes(s.predicted_peak).c_str(), format_bytes(s.peak_bytes).c_str(),
                    format_bytes(s.reserved_peak_bytes).c_str(), ok ? "ok" : "MISMATCH");
    } catch (const UserError& e) {
      std::snprintf(buf, sizeof buf, "failed: %.120s", e.what());
    }
    rows.push_back({r.strategy, r.batch, buf});
    failed += !ok;
  }
  std::printf("\n%-20s %8s  %s\n", "strategy", vary_seq ? "seq" : vary == "input" ? "input" : "batch",
              "verified (2 steps)");
  for (const Row& r : rows)
    std::printf("%-20s %8lld  %s\n", r.strategy.c_str(), static_cast<long long>(r.batch),
                r.outcome.c_str());
  return failed;
}

// One row per strategy: its answer in the searched dimension, the bounds, the overhead at the
// answer (0: no schedule kept), the status and the time; empty size cells where it does not apply.
void write_csv(const std::vector<MaxBatchResult>& results, const char* size_name, int64_t budget,
               int micro_batches, const std::string& path) {
  std::string f = "strategy,dimension,size,upper_bound,working_set_bound,overhead,status,"
                  "solve_seconds,budget_bytes,micro_batches\n";
  char buf[512];
  for (const MaxBatchResult& r : results) {
    const bool applies = r.status != kNotApplicable;
    const std::string size = applies ? std::to_string(r.batch) : "";
    const std::string bound = applies ? std::to_string(r.upper_bound) : "";
    const std::string ws = r.working_set_bound > 0 ? std::to_string(r.working_set_bound) : "";
    std::snprintf(buf, sizeof buf, "%s,%s,%s,%s,%s,%.6g,\"%s\",%.3f,%lld,%d\n",
                  r.strategy.c_str(), size_name, size.c_str(), bound.c_str(), ws.c_str(),
                  r.overhead, r.status.c_str(), r.solve_seconds, static_cast<long long>(budget),
                  micro_batches);
    f += buf;
  }
  write_file_atomic(path, f);
}

// One strategy's answer: a table row, or a JSON line.
void print_row(const MaxBatchResult& r, const char* size_name, bool json, int micro_batches,
               bool batches) {
  const bool applies = r.status != kNotApplicable;
  if (json) {
    nlohmann::json j = {{"strategy", r.strategy},
                        {size_name, applies ? nlohmann::json(r.batch) : nlohmann::json()},
                        {"micro_batches", micro_batches},
                        {"upper_bound", applies ? nlohmann::json(r.upper_bound) : nlohmann::json()},
                        {"solve_seconds", r.solve_seconds},
                        {"status", r.status}};
    if (!r.bound_source.empty()) j["bound_source"] = r.bound_source;
    if (r.overhead > 0) j["overhead"] = r.overhead;
    if (r.working_set_bound > 0) j["working_set_bound"] = r.working_set_bound;
    std::printf("%s\n", j.dump().c_str());
  } else if (!applies) {
    std::printf("%-20s %10s %12s %9s  %s\n", r.strategy.c_str(), "n/a", "n/a", "-",
                r.status.c_str());
  } else {
    std::string status = r.status;
    if (micro_batches > 1 && batches && r.batch > 0)
      status += " (" + std::to_string(r.batch * micro_batches) + " samples per step)";
    std::printf("%-20s %10lld %12lld %9.3f  %s\n", r.strategy.c_str(),
                static_cast<long long>(r.batch), static_cast<long long>(r.upper_bound),
                r.solve_seconds, status.c_str());
  }
  std::fflush(stdout);
}

// The size a search varies other than the batch: a token model's sequence length, or an image
// model's square input (Note [input-size search]).
struct OtherSize {
  std::string vary = "batch";  // batch | seq | input
  SizeFamily family;
  InputSizes inputs;           // --vary input
  std::string described;       // the line saying what varies, "" for the batch
};

OtherSize other_size(const FlagParser& flags, int64_t budget, int64_t batch) {
  OtherSize o;
  o.vary = flags.get_choice("vary", {"batch", "seq", "input"});
  if (!flags.has("vary") && flags.has("input-step"))
    throw UsageError("maxbatch: --input-step goes with --vary input");
  if (o.vary == "batch") return o;
  const std::string what = "maxbatch: --vary " + o.vary;
  if (model_file_flag(flags, "maxbatch").empty())
    throw UsageError(what + " needs --config or --onnx (" +
                     (o.vary == "seq" ? "a token model)" : "an image model)"));
  if (flags.get("cost-model") != "flops")
    throw UsageError(what + " needs --cost-model flops (a cost table holds one size)");
  if (o.vary == "seq" && flags.has("seq"))
    throw UsageError("maxbatch: --vary seq searches the sequence length; drop --seq");
  if (o.vary == "input" && flags.has("input"))
    throw UsageError("maxbatch: --vary input searches the input size; drop --input");
  if (o.vary == "seq" && flags.has("input-step"))
    throw UsageError("maxbatch: --input-step goes with --vary input");
  ConfigProblem c = with_loaded_config(config_problem_from_flags(flags));
  if (flags.has("batch")) c.batch = flags.get_int("batch", 1, int64_t(1) << 40);
  char line[320];
  if (o.vary == "seq") {
    o.family.at = [c](int64_t t) {
      ConfigProblem at = c;
      at.sequence = t;
      return problem_from_config(at);
    };
    o.family.max_size = max_buildable_sequence(c);
    std::snprintf(line, sizeof line,
                  "varying the sequence length (1 to %lld, the model's position table) at batch %lld",
                  static_cast<long long>(o.family.max_size), static_cast<long long>(batch));
  } else {
    std::optional<int64_t> step;
    if (flags.has("input-step")) step = flags.get_int("input-step", 1, kMaxInputSide);
    o.inputs = input_sizes(c, budget, step);
    o.family = input_size_family(c, o.inputs);
    const InputSizes& in = o.inputs;
    std::snprintf(line, sizeof line,
                  "varying the square input H = W in steps of %lld (%lld to %lld: %zu sizes "
                  "build, %zu refused) at batch %lld; the sizes end where %s",
                  static_cast<long long>(in.step), static_cast<long long>(in.sizes.front()),
                  static_cast<long long>(in.sizes.back()), in.sizes.size(), in.refused.size(),
                  static_cast<long long>(batch), in.end.c_str());
  }
  o.described = line;
  return o;
}

// Note [smallest batch]
// A model may refuse batch 1: a batch norm in training mode over one value per channel (DeepLabV3's
// image-pooling branch, PSPNet's 1 x 1 pyramid level) has no variance to normalize by, and
// PyTorch refuses it too. The search counts batches from 1, so where the model's graph does not
// build at batch 1 it searches from the smallest of 2, 4, 8, 16 that builds: its index k stands
// for batch k + offset (offset = that batch - 1), and the answers are shifted back. Where none
// of them builds, batch 1's error is the answer.
// `at` with the problems it has built kept: the smallest batch's is built twice otherwise.
ProblemAtBatch remembered(ProblemAtBatch at) {
  if (!at) return at;
  auto built = std::make_shared<std::map<int64_t, Problem>>();
  return [at, built](int64_t b) {
    auto it = built->find(b);
    if (it == built->end()) it = built->emplace(b, at(b)).first;
    return it->second;
  };
}

// The offset, and batch 1's error in *why when it is not 0.
int64_t smallest_batch_offset(const ProblemAtBatch& at_batch, std::string* why) {
  if (!at_batch) return 0;
  for (int64_t b = 1; b <= 16; b *= 2) {
    try {
      at_batch(b);
      return b - 1;
    } catch (const UserError& e) {
      if (why->empty()) *why = e.what();
    }
  }
  at_batch(1);  // rethrows batch 1's error
  return 0;
}

MaxBatchResult shifted(MaxBatchResult r, int64_t offset) {
  return with_sizes(std::move(r), [offset](int64_t k) { return k + offset; });
}

int run(int argc, char** argv) {
  FlagParser flags("maxbatch", "Find the largest batch (or sequence, or input size) that trains "
                               "within a memory budget.");
  add_problem_flags(flags);
  flags.add("budget", "BYTES", "memory budget, constant bytes included (e.g. 16GB)")
      .add("vary", "batch|seq|input", "the size to maximise: the batch, a token model's sequence "
                                      "length, or an image model's square input H = W (--config "
                                      "or --onnx; the batch stays fixed)", "batch")
      .add("input-step", "N", "--vary input: sizes are multiples of N (default: the model's "
                              "stride product)");
  add_solve_flags(flags);
  flags.add("json", "", "one JSON object per strategy instead of a table")
      .add("svg", "FILE", "write a bar chart of the max batch per strategy")
      .add("csv", "FILE", "write one CSV row per strategy (its answer, bounds, overhead, status)")
      .add("verify", "", "--config or --onnx: train two steps at each found size under the "
                         "budget")
      .add("device", "cpu|cuda", "where --verify trains", "cpu");
  if (!flags.parse(argc, argv)) return 0;
  if (!flags.has("budget")) throw UsageError("maxbatch: --budget is required");
  if (flags.has("svg")) check_output_file(flags.get("svg"), "maxbatch: --svg");
  if (flags.has("csv")) check_output_file(flags.get("csv"), "maxbatch: --csv");
  const Problem p = problem_from_flags(flags);
  const int64_t budget = flags.get_bytes("budget");
  const OtherSize other = other_size(flags, budget, p.batch);
  const bool vary_seq = other.vary == "seq", vary_input = other.vary == "input";
  const char* size_name = vary_seq ? "seq" : vary_input ? "input" : "batch";
  tune_allocator_for_solving();  // Note [allocator for solving]
  SolveOptions opt = solve_options_from_flags(flags);
  const bool json = flags.has("json");
  if (json && !flags.has("log-level")) opt.log_level = 0;
  ProgressLine line;
  line.size_word = size_name;
  line.size_values = other.inputs.sizes;  // --vary input: indices stand for these sides
  progress_line_attach(opt, &line);
  ProgressTicker ticker(&line);  // Note [progress ticker]
  // Note [gradient accumulation]: the batch searched is a micro-batch; a step takes K of them.
  const int micro_batches = micro_batches_from_flags(flags);
  const ProblemAtBatch at_batch = remembered(problem_at_batch_from_flags(flags));
  // Note [smallest batch]: index k of the search stands for batch k + offset.
  std::string batch_one_error;
  const int64_t offset =
      other.vary == "batch" ? smallest_batch_offset(at_batch, &batch_one_error) : 0;
  SizeFamily from_smallest;
  if (offset > 0) {
    from_smallest.at = [at_batch, offset](int64_t k) { return at_batch(k + offset); };
    from_smallest.max_size = (int64_t{1} << 40) - offset;
    line.size_offset = offset;
  }
  if (!json) {
    std::printf("problem %s: %d nodes, costs at batch %lld, constant %s, budget %s\n",
                p.name.c_str(), p.size(), static_cast<long long>(p.batch),
                format_bytes(p.constant_bytes).c_str(), format_bytes(budget).c_str());
    if (micro_batches > 1)
      std::printf("accumulating %d micro-batches per step: the %s is a micro-batch's, a step "
                  "takes %d times its samples\n",
                  micro_batches, other.vary != "batch" ? "size applies to each" : "batch",
                  micro_batches);
    if (!other.described.empty()) std::printf("%s\n", other.described.c_str());
    if (offset > 0)
      std::printf("batch 1 does not build (%s); the search starts at batch %lld\n",
                  batch_one_error.c_str(), static_cast<long long>(offset + 1));
    std::printf("%-20s %10s %12s %9s  %s\n", "strategy", size_name, "upper bound", "time(s)",
                "status");
  }
  std::vector<MaxBatchResult> results, searched;  // searched: in the search's units (indices)
  // checkmate runs last, from the best answer before it (Note [max-batch bisection]), and
  // checkmate-offload after it, from the best of all of them.
  std::vector<std::string> names = strategies_from_flags(flags);
  auto rank = [](const std::string& n) {
    return n == "checkmate" ? 1 : n == "checkmate-offload" ? 2 : 0;
  };
  std::stable_sort(names.begin(), names.end(),
                   [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
  for (const std::string& name : names) {
    MaxBatchResult r;
    if (name == "griewank" && !problem_is_chain(p)) {
      r.strategy = name;
      r.status = kNotApplicable;
    } else {
      progress_line_next(&line, name);
      r = offset > 0              ? max_size(from_smallest, name, budget, opt, searched)
          : other.vary == "batch" ? max_batch(p, name, budget, opt, at_batch, searched)
                                  : max_size(other.family, name, budget, opt, searched);
      searched.push_back(r);
      if (vary_input) r = as_input_sizes(r, other.inputs);
      if (offset > 0) r = shifted(r, offset);
      progress_line_next(&line, "");
    }
    if (r.status.empty())
      r.status = r.batch > 0                ? "ok"
                 : other.vary == "batch" ? "does not fit at batch " + std::to_string(offset + 1)
                                         : "does not fit at the smallest size";
    print_row(r, size_name, json, micro_batches, other.vary == "batch");
    results.push_back(std::move(r));
  }
  if (flags.has("svg")) {
    svg_save(maxbatch_svg(p, budget,
                          vary_seq ? "sequence length" : vary_input ? "input side" : "batch size",
                          results),
             flags.get("svg"));
    if (!json) std::printf("wrote %s\n", flags.get("svg").c_str());
  }
  if (flags.has("csv")) {
    write_csv(results, size_name, budget, micro_batches, flags.get("csv"));
    if (!json) std::printf("wrote %s\n", flags.get("csv").c_str());
  }
  if (flags.has("verify")) {
    const int failed = verify(flags, budget, other.vary, results, other.inputs.channels);
    if (failed > 0)
      REMAT_USER_ERROR("maxbatch --verify: " << plural(failed, "row") << " failed (see the table "
                                                                       "above)");
  }
  return 0;
}

}  // namespace
}  // namespace remat

int main(int argc, char** argv) {
  return remat::run_main([&] { return remat::run(argc, argv); });
}
