// The closing report of a `train` run: its lines, its JSON summary, --compare.
#include "tools/training/run_summary.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "runtime/core/check.h"
#include "runtime/io/atomic_file.h"
#include "runtime/io/input_file.h"
#include "tools/common/cli.h"
#include "tools/training/train_log.h"

namespace remat {

namespace {

// Samples per optimizer step over all ranks (Note [gradient accumulation]: K micro-batches each).
int64_t global_batch_of(const Graph& g, const TrainSummary& sum) {
  return g.batch * g.micro_batches * sum.world;
}

}  // namespace

void write_summary(const std::string& path, const Graph& g, const TrainOptions& opt,
                   const StepPlan& sp, const TrainSummary& sum) {
  nlohmann::ordered_json j;
  j["format"] = "remat-train-summary/1";
  j["model"] = g.name;
  j["batch"] = g.batch;
  j["micro_batches"] = g.micro_batches;
  j["device"] = opt.device;
  j["world"] = sum.world;
  j["global_batch"] = global_batch_of(g, sum);
  // On the CPU only the storage differs: tf32 and tf32-all run as fp32.
  j["precision"] = opt.device == "cpu" && sum.precision != "bf16" ? "fp32" : sum.precision;
  j["steps"] = sum.losses.size();
  j["strategy"] = sp.plan.strategy;
  j["budget_bytes"] = opt.plan.budget ? nlohmann::ordered_json(*opt.plan.budget) : nullptr;
  j["persistent_bytes"] = sum.constant_bytes;
  j["predicted_peak_bytes"] = sum.predicted_peak;
  j["measured_peak_bytes"] = sum.peak_bytes;
  j["reserved_peak_bytes"] = sum.reserved_peak_bytes;
  j["recomputes_per_step"] = sum.recomputes_per_step;
  j["samples_per_second"] = sum.samples_per_second;
  j["ms_per_step"] = sum.samples_per_second > 0
                         ? 1000.0 * static_cast<double>(global_batch_of(g, sum)) /
                               sum.samples_per_second
                         : 0.0;
  // The plan's time with measured costs (computes and the copies they wait for); null with
  // FLOPs costs.
  j["predicted_ms_per_step"] = sp.cost_unit == "ms"
                                   ? nlohmann::ordered_json(sp.cost * g.micro_batches)
                                   : nlohmann::ordered_json(nullptr);
  j["comm_wait_ms_per_step"] = sum.comm_wait_ms;
  j["first_loss"] = sum.first_loss;
  j["last_loss"] = sum.last_loss;
  j["data_wait_ms_per_step"] = sum.data_wait_ms;
  j["skipped_samples"] = sum.skipped_samples;
  j["step_graph"] = sum.step_graph;
  if (sum.val) {  // the last validation
    const nlohmann::ordered_json v = nlohmann::ordered_json::parse("{" + sum.val->json_fields() + "}");
    for (auto it = v.begin(); it != v.end(); ++it) j[it.key()] = it.value();
  }
  write_file_atomic(path, j.dump(2) + "\n");
}

double compared_ms_per_step(const Graph& g, const TrainOptions& opt) {
  const nlohmann::json j = json_parse(read_file(opt.compare_file, "summary"), opt.compare_file);
  auto field = [&](const char* k) -> const nlohmann::json& {
    if (!j.is_object() || !j.contains(k))
      REMAT_USER_ERROR(opt.compare_file << ": field '" << k << "' is missing (expected a "
                                           "remat-train-summary/1 from train --summary)");
    return j[k];
  };
  if (field("format") != "remat-train-summary/1")
    REMAT_USER_ERROR(opt.compare_file << ": not a remat-train-summary/1 (train --summary)");
  const std::string model = field("model").get<std::string>();
  const std::string device = field("device").get<std::string>();
  const int64_t batch = field("batch").get<int64_t>();
  const int micro = j.value("micro_batches", 1);
  auto batch_words = [](int64_t n, int k) {
    return "batch " + std::to_string(n) +
           (k > 1 ? " x " + std::to_string(k) + " micro-batches" : std::string());
  };
  if (model != g.name || batch != g.batch || micro != g.micro_batches || device != opt.device)
    REMAT_USER_ERROR(opt.compare_file << ": a run of '" << model << "' at "
                                      << batch_words(batch, micro) << " on " << device
                                      << ", not of this one ('" << g.name << "' at "
                                      << batch_words(g.batch, g.micro_batches) << " on "
                                      << opt.device << ")");
  if (field("strategy") != "all-keep")
    REMAT_USER_ERROR(opt.compare_file << ": the compared run must keep everything (strategy "
                                         "all-keep, train without --budget); it ran "
                                      << field("strategy").dump());
  const double base_ms = field("ms_per_step").get<double>();
  if (!(base_ms > 0)) REMAT_USER_ERROR(opt.compare_file << ": field 'ms_per_step' is not positive");
  return base_ms;
}

void print_run_summary(const Graph& g, const TrainOptions& opt, const StepPlan& sp, Executor& ex,
                       const TrainSummary& sum, double base_ms) {
  if (sum.losses.empty()) {  // stopped before the first step
    std::printf("stopped: no steps run\n");
    return;
  }
  std::printf("%s: %s, loss %.4f -> %.4f, %.1f samples/s\n",
              sum.stop_signal ? "stopped" : "done", plural(sum.losses.size(), "step").c_str(),
              sum.first_loss, sum.last_loss, sum.samples_per_second);
  std::printf("memory: predicted peak %s, measured peak %s (%s), %s %s",
              format_bytes(sp.plan.predicted_peak).c_str(), format_bytes(sum.peak_bytes).c_str(),
              sum.peak_bytes == sp.plan.predicted_peak ? "exact match" : "MISMATCH",
              format_bytes(sum.reserved_peak_bytes).c_str(),
              ex.memory_mode() == MemoryMode::Arena  ? "arena region (persistent + packed activations)"
              : ex.memory_mode() == MemoryMode::Pool ? "pool blocks at the peak"
                                                     : "allocated at the peak");
  if (ex.memory_mode() == MemoryMode::Pool)
    std::printf(", fragmentation at the peak %.1f%%", 100 * sum.fragmentation);
  if (opt.plan.budget) std::printf(", budget %s", format_bytes(*opt.plan.budget).c_str());
  if (sum.world > 1) std::printf(" (largest of %d ranks)", sum.world);
  std::printf("\n");
  const double global_batch = static_cast<double>(global_batch_of(g, sum));
  if (sp.cost_unit == "ms" && sum.samples_per_second > 0)  // the plan runs once per micro-batch
    std::printf("time: predicted %.2f ms per step (%s), measured %.2f ms per step\n",
                sp.cost * g.micro_batches,
                sp.plan.has_copies() ? "computes and the copies they wait for" : "computes",
                1000.0 * global_batch / sum.samples_per_second);
  std::printf("data: waited %.2f ms per step for its batch (%s)", sum.data_wait_ms,
              sum.data_wait_ms < 0.5 ? "prefetched in time" : "the step waited on data");
  if (sum.skipped_samples > 0)
    std::printf(", %lld unreadable samples replaced (--skip-bad-samples)",
                static_cast<long long>(sum.skipped_samples));
  std::printf("\n");
  if (sum.world > 1)
    std::printf("ranks: weights identical on all %d ranks (checksum %016llx), waiting for "
                "gradient collectives %.2f ms per step\n",
                sum.world, static_cast<unsigned long long>(sum.weights_checksum), sum.comm_wait_ms);
  if (base_ms > 0 && sum.samples_per_second > 0) {
    const double ms = 1000.0 * global_batch / sum.samples_per_second;
    std::printf("slowdown: %.3fx against keep-everything (%.2f ms per step here, %.2f ms in %s)\n",
                ms / base_ms, ms, base_ms, opt.compare_file.c_str());
  }
}

}  // namespace remat
