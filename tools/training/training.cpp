// run_training(): config -> training graph -> step plan -> executor; one line per step.
#include "tools/training/training.h"

#include <algorithm>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/build.h"
#include "models/initial_values.h"
#include "models/onnx/onnx_source.h"
#include "models/config.h"
#include "models/data.h"
#include "ops/registry.h"
#include "runtime/graph/autodiff.h"
#include "runtime/io/atomic_file.h"
#include "runtime/backends/backend.h"
#include "runtime/core/check.h"
#include "runtime/core/checked.h"
#include "runtime/checkpoint.h"
#include "runtime/executor.h"
#include "runtime/comm/mpi_session.h"
#include "runtime/memory/plan_io.h"
#include "runtime/replica_state.h"
#include "runtime/io/trace.h"
#include "ops/lr_schedule.h"
#include "tools/common/cli.h"
#include "models/prefetch.h"
#include "tools/training/data_parallel.h"
#include "tools/training/evaluation.h"
#include "tools/training/periodic_save.h"
#include "tools/common/progress.h"
#include "tools/training/run_summary.h"
#include "tools/training/stop_signal.h"
#include "tools/training/train_log.h"
#include "tools/training/training_setup.h"

namespace remat {

namespace {

// Note [side outputs]: says why on stderr, and the run ends with exit code 4.
void side_output_failed(StepLog& log, TrainSummary& sum, const std::string& why) {
  log.end_line();
  std::fflush(stdout);
  std::fprintf(stderr, "warning: %s\n", why.c_str());
  sum.side_output_failures.push_back(why);
}

// The optimizer's learning-rate schedule, for the step lines and --metrics (the optimizer op
// reads the same keys; they were validated when the graph was built).
LrSchedule optimizer_lr_schedule(const ModelConfig& cfg) {
  AttrReader r(cfg.optimizer.attrs);
  return parse_lr_schedule(r, 0.01);
}

const char* signal_name(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

}  // namespace

TrainSummary run_training(const TrainOptions& opt, MpiSession* session) {
  const bool parallel = session && session->size() > 1;
  ModelConfig cfg = load_model_config(opt.config, opt.overrides);
  if (opt.seed != 0) cfg.seed = opt.seed;
  if (opt.accumulate) cfg.accumulate = *opt.accumulate;
  const OpRegistry ops = make_builtin_registry();
  const std::string precision = resolve_precision(opt.precision, cfg.precision);
  BuildOptions bo;
  bo.batch = opt.batch;
  bo.input = opt.input;
  bo.sequence = opt.sequence;
  bo.precision = precision_storage(precision);
  Graph fwd = build_forward_graph(cfg, ops, bo);
  Graph g = make_training_graph(fwd, ops, cfg.optimizer.op, cfg.optimizer.attrs, cfg.accumulate);

  const double base_ms = opt.compare_file.empty() ? 0 : compared_ms_per_step(g, opt);
  std::unique_ptr<Backend> backend =
      make_backend(g, opt, precision, parallel ? parallel_cuda_device(*session) : 0);
  std::unique_ptr<ParallelJob> job = parallel ? make_parallel_job(*session, *backend) : nullptr;
  ExecutorOptions eo;
  DataShard shard;
  if (job) {
    check_same_graph(*job, g, opt.config);
    eo.parallel = ParallelConfig{job->world, job->rank, opt.shard_optimizer, opt.bucket_bytes};
    eo.grad_comm = job->grads.get();
    eo.op_comm = job->ops.get();
    eo.host_comm = job->host.get();  // the finite check's shared decision
  }
  // One step's samples on this rank: K micro-batches of N (Note [gradient accumulation]); the
  // ranks' together are the global batch.
  const int64_t K = g.micro_batches;
  const int64_t step_batch = checked_mul(g.batch, K, "--accumulate", "samples per step");
  if (job)
    shard = DataShard{job->rank * step_batch,
                      checked_mul(step_batch, job->world, "--accumulate", "global batch")};
  const PersistentLayout layout = persistent_layout(g, eo.parallel);
  if (job && opt.save_every > 0)
    REMAT_USER_ERROR("--save-every is not available under mpirun with " << job->world
                     << " ranks yet (a checkpoint of several ranks is one collective write); "
                        "use --save, which writes at the end and when stopped");
  const TensorDesc& in_desc = g.value(g.input).desc;
  const TensorDesc& label_desc = g.value(g.label).desc;
  TensorDesc step_in = in_desc, step_labels = label_desc;  // the K micro-batches, one after another
  step_in.shape[0] = step_labels.shape[0] = step_batch;
  LoaderOptions loader;
  loader.threads = opt.data_threads > 0 ? opt.data_threads : default_loader_threads();
  loader.skip_bad_samples = opt.skip_bad_samples;
  // The batches the step reads, in host memory the device reads without staging (pinned on the
  // GPU): the upload is asynchronous, and the step's final synchronize ends it before the next
  // acquire hands the slot back to the loader.
  Backend* host_mem = backend.get();
  auto data = std::make_unique<PrefetchSource>(
      make_data_source(cfg, step_in, step_labels, cfg.dir, shard, loader), step_in.bytes(),
      step_labels.bytes(), 2,
      HostMemory{[host_mem, &step_in](int64_t bytes) {
                   return backend_alloc(*host_mem, bytes, "a prefetched batch of " +
                                        shape_str(step_in.shape), /*host=*/true);
                 },
                 [host_mem](void* p) { host_mem->host_free(p); }});
  std::unique_ptr<Evaluator> eval;
  if (cfg.val && !opt.no_eval) {  // validation: its own plan, in the same budget
    EvalOptions eopt;
    eopt.plan = opt.plan;
    eopt.loader = loader;
    eopt.batches = opt.eval_batches;
    if (job) {
      eopt.shard = DataShard{job->rank * g.batch, job->world * g.batch};
      eopt.host_comm = job->host.get();
    }
    eval = std::make_unique<Evaluator>(cfg, bo, ops, *backend, eopt,
                                       persistent_layout(g, eo.parallel).constant_bytes);
  } else if (opt.eval_every > 0) {
    REMAT_USER_ERROR(opt.config << ": --eval-every needs a `val` section in the config (e.g. val: "
                                   "{source: folder, path: val})");
  }
  int params = 0;
  int64_t param_numel = 0;
  for (const auto& v : g.values)
    if (v.kind == ValueKind::Param) ++params, param_numel += v.desc.numel();
  const std::string batch_words =
      K == 1 ? "batch " + std::to_string(g.batch)
             : "batch " + std::to_string(step_batch) + " per step (" + std::to_string(K) +
                   " micro-batches of " + std::to_string(g.batch) + ", gradients accumulated)";
  std::printf("model %s: %zu layers, %d parameter tensors (%lld weights), %s, input %s\n",
              cfg.name.c_str(), cfg.layers.size(), params, static_cast<long long>(param_numel),
              batch_words.c_str(), shape_str(in_desc.shape).c_str());
  // "nodes" are the ones a plan orders (as plan and maxbatch count them); the optimizer's updates
  // run after every plan.
  std::printf("training graph: %s + %s, persistent %s; device %s, %s; data %s\n",
              plural(planned_nodes(g), "node").c_str(),
              plural(static_cast<int64_t>(g.nodes.size()) - planned_nodes(g), "optimizer update")
                  .c_str(),
              format_bytes(layout.constant_bytes).c_str(),
              backend->name().c_str(), precision_description(precision, opt.device).c_str(),
              data->describe().c_str());
  if (job) print_parallel(*job, step_batch, layout, *job->grads);
  std::fflush(stdout);
  StepPlan sp;
  std::unique_ptr<Executor> exec =
      executor_with_plan(g, ops, *backend, opt, eo, job.get(), &sp, eval ? eval->arena_bytes() : 0);
  Executor& ex = *exec;
  if (eval) {
    eval->executor(&ex);
    std::printf("%s\n", eval->describe().c_str());
  }
  ex.init_parameters(cfg.seed);
  if (write_initial_values(ex, cfg) > 0)
    std::printf("weights: %zu parameters and buffers from %s\n", cfg.initial_values->size(),
                cfg.onnx ? cfg.onnx->path.c_str() : "the model file");
  int64_t first_step = 0;
  if (!opt.resume_file.empty()) {
    const CheckpointInfo ck = job ? checkpoint_load_replicas(ex, *job->host, opt.resume_file)
                                  : checkpoint_load(ex, opt.resume_file);
    first_step = ck.step;
    // Nothing to train is an error, not a run of 0 steps that rewrites the checkpoint.
    if (first_step > opt.steps)
      REMAT_USER_ERROR(opt.resume_file << ": checkpoint after step " << first_step
                                       << ", beyond --steps " << opt.steps
                                       << " (the total number of steps, resumed ones included)");
    if (first_step == opt.steps)
      REMAT_USER_ERROR(opt.resume_file << ": checkpoint after step " << first_step
                                       << " has already done --steps " << opt.steps
                                       << ": nothing to train (--steps is the total, resumed "
                                          "steps included: give more to continue)");
    if (ck.unverified > 0)
      std::printf("note: %s: %d tensors have no checksum (a checkpoint from before checksums); "
                  "loaded without verifying them\n",
                  opt.resume_file.c_str(), ck.unverified);
    const std::string run_precision = checkpoint_precision_name(g.activation_precision());
    if (!ck.precision.empty() && ck.precision != run_precision)
      std::printf("note: %s: a checkpoint of a %s run, resumed in %s (weights, running "
                  "statistics and optimizer state are FP32 in both; the activations' dtype "
                  "changes from here on)\n",
                  opt.resume_file.c_str(), ck.precision.c_str(), run_precision.c_str());
  }
  if (job) check_replicas_identical(ex, *job->host, "before the first step");

  if (first_step > 0)
    std::printf("resumed from %s after step %lld\n", opt.resume_file.c_str(),
                static_cast<long long>(first_step));

  const bool writer = !job || job->rank == 0;  // rank 0 alone writes files
  print_plan(sp, opt, ex);
  if (writer && !opt.save_plan_file.empty()) {
    plan_save(sp.plan, g, opt.save_plan_file);
    std::printf("execution plan written to %s\n", opt.save_plan_file.c_str());
  }

  TrainSummary sum;
  sum.world = job ? job->world : 1;
  sum.precision = precision;
  sum.constant_bytes = layout.constant_bytes;
  sum.predicted_peak = sp.plan.predicted_peak;
  const int64_t global_batch = step_batch * sum.world;
  double timed_seconds = 0, comm_seconds = 0, recorded_seconds = 0;
  int64_t timed_samples = 0;
  StepLogOptions lo;
  lo.first_step = first_step;
  lo.total_steps = opt.steps;
  lo.log_every = opt.log_every;
  lo.metrics_file = writer ? opt.metrics_file : "";  // rank 0 alone writes files
  lo.terminal = stream_is_terminal(stdout);
  StepLog log(lo);
  PeriodicSave periodic(opt.save_file, opt.save_every, opt.keep_last);
  const LrSchedule lr = optimizer_lr_schedule(cfg);
  int64_t steps_done = first_step;
  TraceWriter trace;  // the last opt.trace_steps steps, laid end to end
  bool metrics_failed = false;
  int64_t traced = 0;
  double first_wait = 0;  // seconds the first step waited for its batch
  // Validation after `after` steps: one line, a --metrics line, the summary's last result.
  auto validate = [&](int64_t after) {
    log.end_line();
    double seconds = 0;
    const EvalMetrics m = eval->run(&seconds);
    std::printf("eval after step %lld: %s, %.1f s\n", static_cast<long long>(after),
                m.describe().c_str(), seconds);
    if (writer) log.record_metrics_line("{\"step\": " + std::to_string(after) + ", " + m.json_fields() + "}");
    sum.val = m;
  };
  for (int64_t step = first_step; step < opt.steps && !stop_signal_received(); ++step) {
    const PrefetchSource::Batch batch = data->acquire(step);
    const bool last = step + 1 == opt.steps;
    const bool traces =
        writer && !opt.trace_file.empty() && step >= opt.steps - opt.trace_steps;
    StepResult r;
    try {
      r = ex.run_step(sp.plan, batch.input, batch.labels, step, traces ? &trace : nullptr);
    } catch (const NonFiniteError& e) {
      log.end_line();
      throw NonFiniteError(std::string(e.what()) +
                           " (a lower learning rate may help; --no-check-finite trains on)");
    }
    if (job) {
      r.loss = static_cast<float>(mean_over_ranks(*job, r.loss));
      if (opt.check_every > 0 && (step + 1) % opt.check_every == 0 && !last)
        check_replicas_identical(ex, *job->host, "after step " + std::to_string(step + 1));
    }
    steps_done = step + 1;
    if (sum.losses.empty()) first_wait = data->wait_seconds();  // the cold start: not counted
    if (sum.losses.empty()) sum.first_loss = r.loss;
    sum.last_loss = r.loss;
    sum.losses.push_back(r.loss);
    sum.peak_bytes = std::max(sum.peak_bytes, r.peak_bytes);
    sum.reserved_peak_bytes = std::max(sum.reserved_peak_bytes, r.reserved_peak_bytes);
    sum.recomputes_per_step = r.recomputes;
    sum.fragmentation = std::max(sum.fragmentation, r.fragmentation);
    if (sum.step_graph != ex.graph_note() && opt.device != "cpu" && writer) {
      log.end_line();  // Note [step graphs]: what the GPU does with the plan, when it changes
      std::printf("cuda graph: %s\n", ex.graph_note().c_str());
    }
    sum.step_graph = ex.graph_note();
    if (step > first_step) {  // the first step warms up; recording a CUDA graph is one-time too
      if (r.recorded) recorded_seconds = r.seconds;
      else timed_seconds += r.seconds, timed_samples += global_batch;
      comm_seconds += r.comm_wait_seconds;
    }
    StepRecord rec;
    rec.step = steps_done;
    rec.loss = r.loss;
    rec.lr = lr_at(lr, step);
    rec.seconds = r.seconds;
    rec.batch = global_batch;
    rec.peak_bytes = r.peak_bytes;
    rec.recomputes = r.recomputes;
    log.record(rec);
    if (!log.failure().empty() && !metrics_failed) {
      metrics_failed = true;
      side_output_failed(log, sum, log.failure() + " after step " + std::to_string(steps_done) +
                                       "; the metrics stop here, training goes on");
    }
    if (!last) {
      try {
        const std::string written = periodic.after_step(ex, steps_done);
        if (!written.empty()) {
          log.end_line();
          std::printf("checkpoint after step %lld written to %s\n",
                      static_cast<long long>(steps_done), written.c_str());
        }
      } catch (const UserError& e) {
        side_output_failed(log, sum, std::string("periodic checkpoint after step ") +
                                         std::to_string(steps_done) + ": " + e.what() +
                                         "; training goes on");
      }
    }
    if (eval && opt.eval_every > 0 && steps_done % opt.eval_every == 0 && !last)
      validate(steps_done);
    std::fflush(stdout);
    if (traces) {  // the step as a span around its nodes; the next starts after a gap
      trace.span("step " + std::to_string(step + 1), "step", 0, r.seconds * 1e6, 1,
                 {{"loss", std::to_string(r.loss)}, {"peak_bytes", std::to_string(r.peak_bytes)},
                  {"recomputes", std::to_string(r.recomputes)}});
      trace.set_offset_us(trace.offset_us() + r.seconds * 1e6 + 100);
      ++traced;
    }
  }
  log.end_line();
  if (eval && steps_done > first_step && !stop_signal_received()) validate(steps_done);
  sum.data_wait_ms = steps_done > first_step + 1  // the steps after the first, as samples/s
                         ? 1000.0 * (data->wait_seconds() - first_wait) /
                               static_cast<double>(steps_done - first_step - 1)
                         : 0;
  sum.skipped_samples = data->skipped_samples();
  // The training state first (Note [side outputs]): a failed --save is an error.
  if (!opt.save_file.empty() && steps_done > first_step) {
    if (job) checkpoint_save_replicas(ex, *job->host, opt.save_file, steps_done);
    else checkpoint_save(ex, opt.save_file, steps_done);
    std::printf("checkpoint after step %lld written to %s\n", static_cast<long long>(steps_done),
                opt.save_file.c_str());
  }
  if (traced > 0) {
    trace.process_name("remat " + g.name + ", " + plural(traced, "step") + " to step " +
                       std::to_string(steps_done));
    trace.thread_name(1, backend->name());
    try {
      trace.save(opt.trace_file);
      std::printf("trace of %s (to step %lld) written to %s\n", plural(traced, "step").c_str(),
                  static_cast<long long>(steps_done), opt.trace_file.c_str());
    } catch (const UserError& e) {
      side_output_failed(log, sum, std::string("--trace: ") + e.what());
    }
  }
  sum.steps_done = steps_done;
  sum.stop_signal = stop_signal_received();
  if (sum.stop_signal != 0)
    std::printf("stopped by %s after step %lld of %lld\n", signal_name(sum.stop_signal),
                static_cast<long long>(steps_done), static_cast<long long>(opt.steps));
  if (timed_samples == 0 && recorded_seconds > 0)  // no other step to time: the recording one
    timed_seconds = recorded_seconds, timed_samples = global_batch;
  const int64_t timed_steps = timed_samples / std::max<int64_t>(global_batch, 1);
  sum.samples_per_second =
      timed_seconds > 0 ? static_cast<double>(timed_samples) / timed_seconds : 0;
  if (job) {
    check_replicas_identical(ex, *job->host, "at the end");
    sum.weights_checksum = replica_checksum(ex);
    sum.peak_bytes = max_over_ranks(*job, sum.peak_bytes);
    sum.reserved_peak_bytes = max_over_ranks(*job, sum.reserved_peak_bytes);
    sum.comm_wait_ms = timed_steps > 0 ? 1000.0 * mean_over_ranks(*job, comm_seconds) / timed_steps : 0;
  }
  print_run_summary(g, opt, sp, ex, sum, base_ms);
  if (writer && !opt.summary_file.empty()) {
    try {
      write_summary(opt.summary_file, g, opt, sp, sum);
    } catch (const UserError& e) {
      side_output_failed(log, sum, std::string("--summary: ") + e.what());
    }
  }
  return sum;
}

}  // namespace remat
