// `evaluate`: a checkpoint's metrics on a dataset, as train's validation computes them
// (tools/training/evaluation.h): the model's forward graph in inference mode (batch norm from
// its running statistics, dropout off), its own plan under --budget, one pass over the config's
// `val` data — or over --data, the same source kind at another path. Prints one line of metrics
// and, with --json, writes them with the run's facts.
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "models/build.h"
#include "models/initial_values.h"
#include "models/config.h"
#include "ops/registry.h"
#include "runtime/backends/backend.h"
#include "runtime/checkpoint.h"
#include "runtime/core/check.h"
#include "runtime/io/atomic_file.h"
#include "solver/strategies.h"
#include "tools/common/cli.h"
#include "tools/training/evaluation.h"

namespace remat {
namespace {

// --data: the `val` section (or, without one, the training data's source) at another path.
void point_val_at(ModelConfig* cfg, const std::string& path) {
  if (!cfg->val) {
    cfg->val = cfg->data;
    cfg->val->section = "val";
  }
  DataConfig& v = *cfg->val;
  if (v.source == "segmentation")
    throw UsageError("evaluate: --data: segmentation data names its images and labels: override "
                     "val.list=FILE or val.images=DIR val.labels=DIR instead");
  if (v.source == "npy")
    throw UsageError("evaluate: --data: npy data names its inputs and labels: override "
                     "val.inputs=FILE val.labels=FILE instead");
  if (v.source == "synthetic")
    throw UsageError("evaluate: --data: the config's data is synthetic (no path); give a val "
                     "section, e.g. val={source: folder, path: DIR}");
  v.path = path;
  v.path_where = "--data";
  v.where = "--data";
}

int evaluate_main(int argc, char** argv) {
  FlagParser f("evaluate", "Reports a checkpoint's validation metrics (loss, top-1/top-5, mean IoU, "
                           "perplexity) on the config's val data or on --data.");
  f.add("config", "FILE", "model YAML of the checkpoint (or --onnx)")
      .add("onnx", "FILE", "an ONNX model (Note [--onnx]); without --checkpoint, its own weights")
      .add("checkpoint", "FILE", "a checkpoint from train --save (required, but for an ONNX model)")
      .add("data", "PATH", "evaluate on this folder or file (the val source kind; default the "
                           "config's val section)")
      .add("batch", "N", "samples per pass (default the config's batch)")
      .add("batches", "N", "batches to evaluate (default: the whole set; 20 for token files)")
      .add("device", "cpu|cuda", "where to run", "cpu")
      .add("precision", "fp32|tf32|tf32-all|bf16", "as train's (default the config's)")
      .add("budget", "BYTES", "memory budget (solved like train's: forward only)")
      .add("strategy", "S", "strategy under --budget", "checkmate")
      .add("time-limit", "SEC", "solver time limit", "60")
      .add("data-threads", "N", "image decode threads (default the cores less one)")
      .add("skip-bad-samples", "", "replace an image that cannot be decoded (say so) instead of "
                                   "stopping")
      .add("json", "FILE", "write the metrics and the run's facts as JSON")
      .allow_positional("KEY=VALUE", "override a config field, as train took them");
  if (!f.parse(argc, argv)) return 0;
  require_budget_for(f, "evaluate", {"strategy"});  // Note [flags that need --budget]
  const std::string model_file = model_file_flag(f, "evaluate");
  if (model_file.empty())
    throw UsageError("evaluate: --config (or --onnx) is required\n" + f.usage());
  if (f.has("json")) check_output_file(f.get("json"), "evaluate: --json");
  ModelConfig cfg = load_model_config(model_file, model_overrides(f, model_file));
  if (!f.has("checkpoint") && !cfg.initial_values)
    throw UsageError("evaluate: --checkpoint is required (a model without weights of its own)\n" +
                     f.usage());
  if (f.has("data")) point_val_at(&cfg, f.get("data"));
  const std::string precision = resolve_precision(
      f.has("precision") ? f.get_choice("precision", kPrecisionChoices) : "", cfg.precision);
  BuildOptions bo;
  if (f.has("batch")) bo.batch = f.get_int("batch", 1, int64_t{1} << 24);
  bo.precision = precision_storage(precision);

  std::unique_ptr<Backend> be;
  const bool on_cpu = f.get_choice("device", {"cpu", "cuda"}) == "cpu";  // no TF32 on the CPU
  if (on_cpu) {
    be = make_cpu_backend();
  } else {
    std::string why;
    be = make_cuda_backend(0, &why, cuda_precision_options(precision));
    if (!be) REMAT_USER_ERROR("evaluate: --device cuda: " << why);
  }
  const OpRegistry ops = make_builtin_registry();
  EvalOptions eo;
  if (f.has("budget")) eo.plan.budget = f.get_bytes("budget");
  eo.plan.strategy = f.get_choice("strategy", strategy_names());
  eo.plan.time_limit = f.get_double("time-limit", 0.1, 1e6);
  eo.loader.threads = f.has("data-threads")
                          ? static_cast<int>(f.get_int("data-threads", 1, 1024))
                          : default_loader_threads();
  eo.loader.skip_bad_samples = f.has("skip-bad-samples");
  if (f.has("batches")) eo.batches = f.get_int("batches", 1, int64_t{1} << 40);
  Evaluator ev(cfg, bo, ops, *be, eo, /*constant_bytes=*/-1);
  const Graph& g = ev.graph();
  be->end_setup();
  CheckpointInfo ck;
  if (f.has("checkpoint")) {
    ck = checkpoint_load(ev.executor(nullptr), f.get("checkpoint"));
  } else {  // an imported model's own weights (Note [ONNX import])
    ev.executor(nullptr).init_parameters(cfg.seed);
    write_initial_values(ev.executor(nullptr), cfg);
  }
  std::printf("evaluate: %s after step %lld, batch %lld, %s, %s\n", g.name.c_str(),
              static_cast<long long>(ck.step), static_cast<long long>(g.batch),
              be->name().c_str(), on_cpu && precision != "bf16" ? "fp32" : precision.c_str());
  std::printf("%s\n", ev.describe().c_str());
  std::fflush(stdout);
  double seconds = 0;
  const EvalMetrics m = ev.run(&seconds);
  std::printf("%s, %.1f s (%.1f samples/s)\n", m.describe().c_str(), seconds,
              seconds > 0 ? static_cast<double>(ev.samples()) / seconds : 0.0);
  if (f.has("json")) {
    nlohmann::json j = nlohmann::json::parse("{" + m.json_fields() + "}");
    j["model"] = g.name;
    j["config"] = model_file;
    j["checkpoint"] = f.get("checkpoint");
    j["step"] = ck.step;
    j["batch"] = g.batch;
    j["precision"] = on_cpu && precision != "bf16" ? "fp32" : precision;
    j["device"] = be->name();
    j["strategy"] = ev.plan().plan.strategy;
    j["predicted_peak_bytes"] = ev.plan().plan.predicted_peak;
    j["recomputes"] = ev.recomputes();
    j["seconds"] = seconds;
    j["samples"] = ev.samples();
    write_file_atomic(f.get("json"), j.dump(2) + "\n");
  }
  return 0;
}

}  // namespace
}  // namespace remat

int main(int argc, char** argv) {
  return remat::run_main([&] { return remat::evaluate_main(argc, argv); });
}
