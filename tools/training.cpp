// run_training(): config -> forward graph -> training graph -> executor, one line per step.
#include "tools/training.h"

#include <cstdio>
#include <memory>
#include <vector>

#include "models/build.h"
#include "models/config.h"
#include "models/data.h"
#include "ops/registry.h"
#include "runtime/autodiff.h"
#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/executor.h"
#include "tools/cli.h"

namespace remat {

namespace {

std::unique_ptr<Backend> make_backend(const std::string& device) {
  if (device == "cpu") return make_cpu_backend();
  std::string why;
  auto be = make_cuda_backend(0, &why);
  if (!be) REMAT_USER_ERROR("--device cuda: " << why);
  return be;
}

}  // namespace

TrainSummary run_training(const TrainOptions& opt) {
  ModelConfig cfg = load_model_config(opt.config);
  if (opt.seed != 0) cfg.seed = opt.seed;
  const OpRegistry ops = make_builtin_registry();
  BuildOptions bo;
  bo.batch = opt.batch;
  bo.input = opt.input;
  Graph fwd = build_forward_graph(cfg, ops, bo);
  Graph g = make_training_graph(fwd, ops, cfg.optimizer.op, cfg.optimizer.attrs);

  std::unique_ptr<Backend> backend = make_backend(opt.device);
  Executor ex(g, ops, *backend);
  ex.init_parameters(cfg.seed);
  ExecutionPlan plan = plan_keep_all(g, [&](NodeId n) { return ex.workspace_bytes(n); });

  const TensorDesc& in_desc = g.value(g.input).desc;
  const TensorDesc& label_desc = g.value(g.label).desc;
  std::unique_ptr<DataSource> data = make_data_source(cfg, in_desc, label_desc, cfg.dir);
  std::vector<float> images(static_cast<size_t>(in_desc.numel()));
  std::vector<int32_t> labels(static_cast<size_t>(label_desc.numel()));

  int params = 0;
  int64_t param_numel = 0;
  for (const auto& v : g.values)
    if (v.kind == ValueKind::Param) ++params, param_numel += v.desc.numel();
  std::printf("model %s: %zu layers, %d parameter tensors (%lld weights), batch %lld, input %s\n",
              cfg.name.c_str(), cfg.layers.size(), params, static_cast<long long>(param_numel),
              static_cast<long long>(g.batch), shape_str(in_desc.shape).c_str());
  std::printf("training graph: %zu nodes, persistent %s; device %s; data %s\n", g.nodes.size(),
              format_bytes(g.persistent_bytes()).c_str(), backend->name().c_str(),
              data->describe().c_str());
  std::printf("plan %s: predicted peak %s\n", plan.strategy.c_str(),
              format_bytes(plan.predicted_peak).c_str());

  TrainSummary sum;
  double timed_seconds = 0;
  int64_t timed_samples = 0;
  for (int64_t step = 0; step < opt.steps; ++step) {
    data->next_batch(step, images.data(), labels.data());
    StepResult r = ex.run_step(plan, images.data(), labels.data(), step);
    if (step == 0) sum.first_loss = r.loss;
    sum.last_loss = r.loss;
    sum.losses.push_back(r.loss);
    sum.peak_bytes = std::max(sum.peak_bytes, r.peak_bytes);
    if (step > 0) timed_seconds += r.seconds, timed_samples += g.batch;
    const bool print = step == 0 || step + 1 == opt.steps || (step + 1) % opt.log_every == 0;
    if (print)
      std::printf("step %5lld  loss %.4f  %9.1f samples/s  peak %s\n",
                  static_cast<long long>(step + 1), r.loss,
                  static_cast<double>(g.batch) / r.seconds, format_bytes(r.peak_bytes).c_str());
    std::fflush(stdout);
  }
  sum.samples_per_second = timed_seconds > 0 ? static_cast<double>(timed_samples) / timed_seconds : 0;
  std::printf("done: %lld steps, loss %.4f -> %.4f, %.1f samples/s, measured peak %s (predicted %s)\n",
              static_cast<long long>(opt.steps), sum.first_loss, sum.last_loss,
              sum.samples_per_second, format_bytes(sum.peak_bytes).c_str(),
              format_bytes(plan.predicted_peak).c_str());
  return sum;
}

}  // namespace remat
