// run_training(): the set-up (training_setup.cpp), then the resume, the step loop and the finish;
// one line per step.
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
#include "tools/training/training_run.h"
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

// The resume: fresh weights, then the checkpoint's state when resuming. Returns the steps done
// before this run.
int64_t resume(TrainingRun& run, const TrainOptions& opt) {
  Executor& ex = *run.exec;
  ex.init_parameters(run.cfg.seed);
  if (write_initial_values(ex, run.cfg) > 0)  // an imported model's own weights
    std::printf("weights: %zu parameters and buffers from %s\n", run.cfg.initial_values->size(),
                run.cfg.onnx ? run.cfg.onnx->path.c_str() : "the model file");
  int64_t first_step = 0;
  if (!opt.resume_file.empty()) {
    const CheckpointInfo ck = run.job ? checkpoint_load_replicas(ex, *run.job->host, opt.resume_file)
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
    const std::string run_precision = checkpoint_precision_name(run.g.activation_precision());
    if (!ck.precision.empty() && ck.precision != run_precision)
      std::printf("note: %s: a checkpoint of a %s run, resumed in %s (weights, running "
                  "statistics and optimizer state are FP32 in both; the activations' dtype "
                  "changes from here on)\n",
                  opt.resume_file.c_str(), ck.precision.c_str(), run_precision.c_str());
  }
  if (run.job) check_replicas_identical(ex, *run.job->host, "before the first step");
  if (first_step > 0)
    std::printf("resumed from %s after step %lld\n", opt.resume_file.c_str(),
                static_cast<long long>(first_step));
  return first_step;
}

// The plan line, and --save-plan.
void announce_plan(TrainingRun& run, const TrainOptions& opt) {
  print_plan(run.sp, opt, *run.exec);
  if (run.writer && !opt.save_plan_file.empty()) {
    plan_save(run.sp.plan, run.g, opt.save_plan_file);
    std::printf("execution plan written to %s\n", opt.save_plan_file.c_str());
  }
}

// What the step loop keeps from step to step and hands to the finish.
struct LoopState {
  LoopState(const TrainingRun& run, const TrainOptions& opt, int64_t first)
      : first_step(first), steps_done(first), log(log_options(run, opt, first)),
        periodic(opt.save_file, opt.save_every, opt.keep_last),
        lr(optimizer_lr_schedule(run.cfg)) {
    sum.world = run.world();
    sum.precision = run.precision;
    sum.constant_bytes = run.layout.constant_bytes;
    sum.predicted_peak = run.sp.plan.predicted_peak;
  }
  static StepLogOptions log_options(const TrainingRun& run, const TrainOptions& opt,
                                    int64_t first) {
    StepLogOptions lo;
    lo.first_step = first;
    lo.total_steps = opt.steps;
    lo.log_every = opt.log_every;
    lo.metrics_file = run.writer ? opt.metrics_file : "";  // rank 0 alone writes files
    lo.terminal = stream_is_terminal(stdout);
    return lo;
  }

  TrainSummary sum;
  const int64_t first_step;
  int64_t steps_done;
  StepLog log;
  PeriodicSave periodic;
  const LrSchedule lr;
  TraceWriter trace;  // the last opt.trace_steps steps, laid end to end
  int64_t traced = 0;
  bool metrics_failed = false;
  // Speeds: the steps after this run's first (which warms up), but the one that recorded a
  // CUDA graph (one-time too).
  double timed_seconds = 0, comm_seconds = 0, recorded_seconds = 0;
  int64_t timed_samples = 0;
  double first_wait = 0;  // seconds the first step waited for its batch
  // The signal that ends the loop (Note [graceful stop]); data parallel, the one the ranks
  // agreed on after a step.
  int stop_signal = 0;
};

// Validation after `after` steps: one line, a --metrics line, the summary's last result.
void validate(TrainingRun& run, LoopState& st, int64_t after) {
  st.log.end_line();
  double seconds = 0;
  const EvalMetrics m = run.eval->run(&seconds);
  std::printf("eval after step %lld: %s, %.1f s\n", static_cast<long long>(after),
              m.describe().c_str(), seconds);
  if (run.writer)
    st.log.record_metrics_line("{\"step\": " + std::to_string(after) + ", " + m.json_fields() +
                               "}");
  st.sum.val = m;
}

// One step's result into the summary, the speeds and the step line (and --metrics).
void record_step(TrainingRun& run, const TrainOptions& opt, LoopState& st, int64_t step,
                 const StepResult& r) {
  TrainSummary& sum = st.sum;
  st.steps_done = step + 1;
  if (sum.losses.empty()) st.first_wait = run.data->wait_seconds();  // the cold start: not counted
  if (sum.losses.empty()) sum.first_loss = r.loss;
  sum.last_loss = r.loss;
  sum.losses.push_back(r.loss);
  sum.peak_bytes = std::max(sum.peak_bytes, r.peak_bytes);
  sum.reserved_peak_bytes = std::max(sum.reserved_peak_bytes, r.reserved_peak_bytes);
  sum.recomputes_per_step = r.recomputes;
  sum.fragmentation = std::max(sum.fragmentation, r.fragmentation);
  const Executor& ex = *run.exec;
  if (sum.step_graph != ex.graph_note() && opt.device != "cpu" && run.writer) {
    st.log.end_line();  // Note [step graphs]: what the GPU does with the plan, when it changes
    std::printf("cuda graph: %s\n", ex.graph_note().c_str());
  }
  sum.step_graph = ex.graph_note();
  if (step > st.first_step) {  // the first step warms up; recording a CUDA graph is one-time too
    if (r.recorded) st.recorded_seconds = r.seconds;
    else st.timed_seconds += r.seconds, st.timed_samples += run.global_batch();
    st.comm_seconds += r.comm_wait_seconds;
  }
  StepRecord rec;
  rec.step = st.steps_done;
  rec.loss = r.loss;
  rec.lr = lr_at(st.lr, step);
  rec.seconds = r.seconds;
  rec.batch = run.global_batch();
  rec.peak_bytes = r.peak_bytes;
  rec.recomputes = r.recomputes;
  st.log.record(rec);
  if (!st.log.failure().empty() && !st.metrics_failed) {
    st.metrics_failed = true;
    side_output_failed(st.log, sum, st.log.failure() + " after step " +
                                        std::to_string(st.steps_done) +
                                        "; the metrics stop here, training goes on");
  }
}

// Between steps: a periodic checkpoint, a validation, the step's span in the trace.
void after_step(TrainingRun& run, const TrainOptions& opt, LoopState& st, int64_t step,
                const StepResult& r, bool last, bool traces) {
  if (!last) {
    try {
      const std::string written = st.periodic.after_step(*run.exec, st.steps_done);
      if (!written.empty()) {
        st.log.end_line();
        std::printf("checkpoint after step %lld written to %s\n",
                    static_cast<long long>(st.steps_done), written.c_str());
      }
    } catch (const UserError& e) {
      side_output_failed(st.log, st.sum, std::string("periodic checkpoint after step ") +
                                             std::to_string(st.steps_done) + ": " + e.what() +
                                             "; training goes on");
    }
  }
  if (run.eval && opt.eval_every > 0 && st.steps_done % opt.eval_every == 0 && !last)
    validate(run, st, st.steps_done);
  std::fflush(stdout);
  if (traces) {  // the step as a span around its nodes; the next starts after a gap
    st.trace.span("step " + std::to_string(step + 1), "step", 0, r.seconds * 1e6, 1,
                  {{"loss", std::to_string(r.loss)}, {"peak_bytes", std::to_string(r.peak_bytes)},
                   {"recomputes", std::to_string(r.recomputes)}});
    st.trace.set_offset_us(st.trace.offset_us() + r.seconds * 1e6 + 100);
    ++st.traced;
  }
}

// One step: its batch, the plan, the ranks' agreement, the step line and what follows it.
void one_step(TrainingRun& run, const TrainOptions& opt, LoopState& st, int64_t step) {
  Executor& ex = *run.exec;
  ParallelJob* job = run.job.get();
  const PrefetchSource::Batch batch = run.data->acquire(step);
  const bool last = step + 1 == opt.steps;
  const bool traces = run.writer && !opt.trace_file.empty() && step >= opt.steps - opt.trace_steps;
  StepResult r;
  try {
    r = ex.run_step(run.sp.plan, batch.input, batch.labels, step, traces ? &st.trace : nullptr);
  } catch (const NonFiniteError& e) {
    throw NonFiniteError(std::string(e.what()) +
                         " (a lower learning rate may help; --no-check-finite trains on)");
  }
  if (job) {  // Note [stopping a data-parallel job]
    const StepAgreement agreed = agree_after_step(*job, r.loss, stop_signal_received());
    r.loss = static_cast<float>(agreed.loss);
    st.stop_signal = agreed.stop_signal;
    if (opt.check_every > 0 && (step + 1) % opt.check_every == 0 && !last)
      check_replicas_identical(ex, *job->host, "after step " + std::to_string(step + 1));
  }
  record_step(run, opt, st, step, r);
  after_step(run, opt, st, step, r, last, traces);
}

// Note [saving at an error]: a step that fails — a sample that cannot be read (without
// --skip-bad-samples), a non-finite loss or gradient (found before the optimizer update) —
// leaves the parameters and optimizer state of the last completed step. With --save they are
// written before the error is reported, so the run resumes from them (the bad file removed, a
// lower learning rate). The failing step's forward has already updated the batch-norm running
// statistics; where that made them non-finite (a diverging step usually does), they are reset
// to their initial values (mean 0, variance 1), named in a line, and re-converge within a few
// times 1 / momentum steps. A state that stays non-finite is not written (a checkpoint holds
// finite values only), and the line says why. Data parallel: the ranks agree on a non-finite
// step and save together; a sample error is one rank's and ends the job (Note [errors in a
// data-parallel job]), so nothing is saved.
std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

void save_after_failed_step(TrainingRun& run, const TrainOptions& opt, LoopState& st,
                            bool every_rank_failed) {
  if (opt.save_file.empty() || st.steps_done == st.first_step) return;
  if (run.job && !every_rank_failed) return;
  const std::vector<std::string> reset = reset_non_finite_buffers(*run.exec);
  const std::string bad = checkpoint_non_finite(*run.exec);
  const bool any_bad = run.job ? max_over_ranks(*run.job, bad.empty() ? 0 : 1) > 0 : !bad.empty();
  if (any_bad) {
    if (run.writer)
      std::fprintf(stderr, "no checkpoint written to %s: %s (a checkpoint holds finite values "
                           "only)\n", opt.save_file.c_str(),
                   bad.empty() ? "another rank's state is not finite" : bad.c_str());
    return;
  }
  try {
    if (run.job) checkpoint_save_replicas(*run.exec, *run.job->host, opt.save_file, st.steps_done);
    else checkpoint_save(*run.exec, opt.save_file, st.steps_done);
    if (run.writer) {
      std::printf("checkpoint after step %lld written to %s before the error below\n",
                  static_cast<long long>(st.steps_done), opt.save_file.c_str());
      if (!reset.empty())
        std::printf("  running statistics the failed step made non-finite, reset to their initial "
                    "values in it: %s\n", join_names(reset).c_str());
    }
  } catch (const UserError& e) {
    std::fprintf(stderr, "no checkpoint written at the error: %s\n", e.what());
  }
  std::fflush(stdout);
}

// The step loop: up to --steps, or until a stop signal ends it after a step.
void step_loop(TrainingRun& run, const TrainOptions& opt, LoopState& st) {
  stop_signals_graceful();  // Note [graceful stop]: from here a signal ends the running step
  // One process reads the flag before every step; ranks stop where they agreed to.
  auto stopped = [&] { return run.job ? st.stop_signal : stop_signal_received(); };
  for (int64_t step = st.first_step; step < opt.steps && !stopped(); ++step) {
    try {
      one_step(run, opt, st, step);
    } catch (const NonFiniteError&) {  // every rank's verdict (Note [finite check])
      st.log.end_line();
      save_after_failed_step(run, opt, st, true);
      throw;
    } catch (const UserError&) {
      st.log.end_line();
      save_after_failed_step(run, opt, st, false);
      throw;
    }
  }
  st.log.end_line();
}

// The --save checkpoint and the --trace file of the finish.
void write_outputs(TrainingRun& run, const TrainOptions& opt, LoopState& st) {
  // The training state first (Note [side outputs]): a failed --save is an error.
  if (!opt.save_file.empty() && st.steps_done > st.first_step) {
    if (run.job) checkpoint_save_replicas(*run.exec, *run.job->host, opt.save_file, st.steps_done);
    else checkpoint_save(*run.exec, opt.save_file, st.steps_done);
    std::printf("checkpoint after step %lld written to %s\n",
                static_cast<long long>(st.steps_done), opt.save_file.c_str());
  }
  if (st.traced > 0) {
    st.trace.process_name("remat " + run.g.name + ", " + plural(st.traced, "step") +
                          " to step " + std::to_string(st.steps_done));
    st.trace.thread_name(1, run.backend->name());
    st.trace.thread_name(kTraceCopyOutTrack, "copies to host");
    st.trace.thread_name(kTraceCopyInTrack, "copies from host");
    try {
      st.trace.save(opt.trace_file);
      std::printf("trace of %s (to step %lld) written to %s\n", plural(st.traced, "step").c_str(),
                  static_cast<long long>(st.steps_done), opt.trace_file.c_str());
    } catch (const UserError& e) {
      side_output_failed(st.log, st.sum, std::string("--trace: ") + e.what());
    }
  }
}

// The finish: the last validation, the checkpoint and trace, the speeds and peaks over the
// ranks, the summary (printed, and --summary).
TrainSummary finish(TrainingRun& run, const TrainOptions& opt, LoopState& st) {
  TrainSummary& sum = st.sum;
  const int64_t ran = st.steps_done - st.first_step;
  // One process also hears a signal that comes after the loop; ranks keep what they agreed.
  auto stop = [&] { return run.job ? st.stop_signal : stop_signal_received(); };
  if (run.eval && ran > 0 && !stop()) validate(run, st, st.steps_done);
  sum.data_wait_ms = ran > 1  // the steps after the first, as samples/s
                         ? 1000.0 * (run.data->wait_seconds() - st.first_wait) /
                               static_cast<double>(ran - 1)
                         : 0;
  sum.skipped_samples = run.data->skipped_samples();
  write_outputs(run, opt, st);
  sum.steps_done = st.steps_done;
  sum.stop_signal = stop();
  if (sum.stop_signal != 0)
    std::printf("stopped by %s after step %lld of %lld\n", stop_signal_name(sum.stop_signal),
                static_cast<long long>(st.steps_done), static_cast<long long>(opt.steps));
  const int64_t global_batch = run.global_batch();
  if (st.timed_samples == 0 && st.recorded_seconds > 0)  // no other step to time: the recording one
    st.timed_seconds = st.recorded_seconds, st.timed_samples = global_batch;
  const int64_t timed_steps = st.timed_samples / std::max<int64_t>(global_batch, 1);
  sum.samples_per_second =
      st.timed_seconds > 0 ? static_cast<double>(st.timed_samples) / st.timed_seconds : 0;
  if (ParallelJob* job = run.job.get()) {
    check_replicas_identical(*run.exec, *job->host, "at the end");
    sum.weights_checksum = replica_checksum(*run.exec);
    sum.peak_bytes = max_over_ranks(*job, sum.peak_bytes);
    sum.reserved_peak_bytes = max_over_ranks(*job, sum.reserved_peak_bytes);
    sum.comm_wait_ms =
        timed_steps > 0 ? 1000.0 * mean_over_ranks(*job, st.comm_seconds) / timed_steps : 0;
  }
  print_run_summary(run.g, opt, run.sp, *run.exec, sum, run.base_ms);
  if (run.writer && !opt.summary_file.empty()) {
    try {
      write_summary(opt.summary_file, run.g, opt, run.sp, sum);
    } catch (const UserError& e) {
      side_output_failed(st.log, sum, std::string("--summary: ") + e.what());
    }
  }
  return sum;
}

}  // namespace

// Four stages: the set-up (training_setup.cpp), the resume, the step loop and the finish.
TrainSummary run_training(const TrainOptions& opt, MpiSession* session) {
  std::unique_ptr<TrainingRun> run = training_set_up(opt, session);
  const int64_t first_step = resume(*run, opt);
  announce_plan(*run, opt);
  LoopState st(*run, opt, first_step);
  step_loop(*run, opt, st);
  return finish(*run, opt, st);
}

}  // namespace remat
