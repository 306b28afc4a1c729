// The set-up of `train` (training_setup.h, training_run.h): config and graphs, backend, job,
// data, validation, plan and executor, and the header lines that say what was set up.
#include "tools/training/training_setup.h"

#include <algorithm>
#include <climits>
#include <cstdio>

#include "models/data.h"
#include "runtime/comm/mpi_session.h"
#include "runtime/core/check.h"
#include "runtime/core/checked.h"
#include "runtime/graph/autodiff.h"
#include "tools/common/cli.h"
#include "tools/common/progress.h"
#include "tools/training/run_summary.h"
#include "tools/training/training_run.h"

namespace remat {

namespace {

// The most workspace one convolution may use: --workspace-limit, else an eighth of what the
// budget leaves after the persistent values, in whole MiB (so that a tight budget is not made
// infeasible by one hungry algorithm; Note [conv algorithm choice] then takes smaller batch
// chunks or slower algorithms, which can cost a CNN several times its step: GPU_RESULTS.md,
// 2026-12-04), and 4 GiB when there is no budget.
int64_t workspace_limit_for(const Graph& g, const TrainOptions& opt) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  if (opt.workspace_limit) return *opt.workspace_limit;
  if (!opt.plan.budget) return 4096 * kMiB;
  const int64_t room = *opt.plan.budget - g.persistent_bytes();
  return std::clamp<int64_t>(room / 8 / kMiB * kMiB, 0, 4096 * kMiB);
}

}  // namespace

std::unique_ptr<Backend> make_backend(const Graph& g, const TrainOptions& opt,
                                      const std::string& precision, int device) {
  if (opt.device == "cpu") return make_cpu_backend();
  std::string why;
  CudaOptions co = cuda_precision_options(precision);
  co.workspace_limit = workspace_limit_for(g, opt);
  auto be = make_cuda_backend(device, &why, co);
  if (!be) REMAT_USER_ERROR("--device cuda: " << why);
  return be;
}

// The run header's words for a precision: what is stored in which dtype and, on the GPU, the math.
std::string precision_description(const std::string& precision, const std::string& device) {
  if (precision == "bf16")
    return "precision bf16 (activations in bfloat16, FP32 math and weights)";
  if (device == "cpu") return "precision fp32";
  if (precision == "fp32") return "precision fp32 (no TF32)";
  if (precision == "tf32-all") return "precision tf32-all (convolutions and GEMMs in TF32)";
  return "precision tf32 (convolutions in TF32, GEMMs in FP32)";
}

// Plans the step, ends the backend's setup (releasing algorithm-search memory), then creates
// the executor — whose single allocation is the budget — and shrinks the solver's budget until
// the plan also fits the real allocation: the arena's aligned, packed layout, or the pool's
// replayed requests with their fragmentation. Data parallel: rank 0 plans, every rank runs its
// plan, and a plan fits when it fits on every rank (each measures its own workspaces).
// Without a budget, the reservation also holds `eval_arena` bytes of activations past the
// persistent values: the validation plan's, which runs in the same memory (Note [borrowed memory]).
std::unique_ptr<Executor> executor_with_plan(const Graph& g, const OpRegistry& ops, Backend& be,
                                             const TrainOptions& opt, ExecutorOptions eo,
                                             ParallelJob* job, StepPlan* sp, int64_t eval_arena) {
  StepPlanOptions po = opt.plan;
  if (job) po.constant_bytes = persistent_layout(g, eo.parallel).constant_bytes;
  int64_t solver_budget = opt.plan.budget.value_or(0);
  auto decide = [&] {
    if (!job || job->rank == 0) *sp = make_step_plan(g, ops, be, po, solver_budget);
    if (job) sp->plan = share_plan(*job, sp->plan, g, po.constant_bytes);
  };
  auto on_all_ranks = [&](int64_t bytes) { return job ? max_over_ranks(*job, bytes) : bytes; };
  decide();
  be.end_setup();
  eo.check_finite = opt.check_finite;
  eo.step_graphs = opt.cuda_graph;
  if (opt.plan.budget) {
    eo.memory = memory_mode_from_name(opt.memory);
    eo.budget = *opt.plan.budget;
  } else {  // keep everything, in one reservation of exactly what the plan needs
    eo.memory = MemoryMode::Arena;
    eo.budget = on_all_ranks(std::max(Executor::arena_region_bytes(g, ops, be, sp->plan, eo.parallel),
                                      persistent_layout(g, eo.parallel).region_bytes + eval_arena));
  }
  auto ex = std::make_unique<Executor>(g, ops, be, eo);
  int64_t best_need = INT64_MAX;  // the smallest memory any plan tried needs
  for (int attempt = 0;; ++attempt) {
    const int64_t need = on_all_ranks(ex->prepare(sp->plan));
    if (!opt.plan.budget || need <= *opt.plan.budget) return ex;
    best_need = std::min(best_need, need);
    // Note [allocation size] makes the arena's lower bound the predicted peak, and the packings
    // nearly always reach it (arena_bench), so this loop is rare in arena mode; the pool's
    // fragmentation is what it is mostly for. Messages quote the budget the user gave.
    auto too_small = [&](const std::string& why) {
      return UserError("--budget " + format_bytes(*opt.plan.budget) + " is too small for '" +
                       g.name + "' with " + sp->plan.strategy + " in " +
                       memory_mode_name(ex->memory_mode()) + " memory: " + why +
                       "; the best plan found needs " + format_bytes(best_need) + " (try --budget " +
                       format_bytes(best_need) + (opt.memory == "pool" ? " or --memory arena)" : ")"));
    };
    if (attempt == 6 || !opt.plan.schedule_file.empty())
      throw too_small("its plans need more than the budget once aligned, packed or fragmented");
    solver_budget -= std::max(need - *opt.plan.budget, *opt.plan.budget / 100);
    std::printf("plan: %s memory needs %s > budget %s; re-solving with %s for the plan\n",
                memory_mode_name(ex->memory_mode()), format_bytes(need).c_str(),
                format_bytes(*opt.plan.budget).c_str(), format_bytes(solver_budget).c_str());
    try {
      decide();  // data parallel: rank 0's plan, on every rank
    } catch (const UserError&) {  // its message quotes the reduced budget, not the user's
      throw too_small("leaving room for that, no schedule fits");
    }
  }
}

void print_plan(const StepPlan& sp, const TrainOptions& opt, Executor& ex) {
  const ExecutionPlan& p = sp.plan;
  int recomputes = 0;
  for (const auto& s : p.steps) recomputes += s.kind == PlanStepKind::Compute && s.recompute;
  std::printf("plan %s: predicted peak %s", p.strategy.c_str(), format_bytes(p.predicted_peak).c_str());
  if (opt.plan.budget) {
    std::printf(" of budget %s (constant %s), %s", format_bytes(*opt.plan.budget).c_str(),
                format_bytes(p.constant_bytes).c_str(), plural(recomputes, "recompute").c_str());
    if (sp.all_keep_cost > 0)  // unknown for a loaded execution plan
      std::printf(", overhead %.3fx (%s), solve %.2f s", sp.cost / sp.all_keep_cost,
                  sp.cost_unit.c_str(), sp.solve_seconds);
    if (sp.gap > 0) std::printf(", gap %.2f%%", 100 * sp.gap);
    std::printf(", %s; memory %s", sp.status.c_str(), memory_mode_name(ex.memory_mode()));
    if (ex.memory_mode() == MemoryMode::Arena)
      std::printf(" (region %s)", format_bytes(ex.prepare(p)).c_str());
  }
  if (p.has_copies()) {
    int offloads = 0;
    for (const auto& s : p.steps) offloads += s.kind == PlanStepKind::Offload;
    std::printf("; %s to host memory (host peak %s)", plural(offloads, "offload").c_str(),
                format_bytes(p.predicted_host_peak).c_str());
  }
  std::printf("\n");
}

// One line on how the ranks share the work and the memory (Note [gradient buckets]).
void print_parallel(const ParallelJob& job, int64_t step_batch, const PersistentLayout& L,
                    const Communicator& grads) {
  int64_t largest = 0;
  for (const auto& b : L.buckets) largest = std::max(largest, b.bytes);
  std::printf("data parallel: %d ranks x batch %lld = global batch %lld; gradients in %s "
              "(largest %s, in place, padding %s) averaged with %s while the backward runs; "
              "optimizer state %s per rank%s\n",
              job.world, static_cast<long long>(step_batch),
              static_cast<long long>(step_batch * job.world),
              plural(static_cast<int64_t>(L.buckets.size()), "bucket").c_str(),
              format_bytes(largest).c_str(), format_bytes(L.padding_bytes).c_str(),
              grads.name().c_str(), format_bytes(L.state_kinds * L.state_block_bytes).c_str(),
              L.parallel.shard_optimizer
                  ? (" (sharded: 1/" + std::to_string(job.world) + " of " +
                     format_bytes(L.state_kinds * L.flat_bytes) + ")").c_str()
                  : "");
}

namespace {

// The config with the flags' overrides, and the training graph.
void build_run_graph(TrainingRun& run, const TrainOptions& opt) {
  run.cfg = load_model_config(opt.config, opt.overrides);
  const std::string overrides = describe_overrides(run.cfg);
  if (!overrides.empty()) std::printf("%s\n", overrides.c_str());
  if (opt.seed != 0) run.cfg.seed = opt.seed;
  if (opt.accumulate) run.cfg.accumulate = *opt.accumulate;
  run.ops = make_builtin_registry();
  run.precision = resolve_precision(opt.precision, run.cfg.precision);
  run.bo.batch = opt.batch;
  run.bo.input = opt.input;
  run.bo.sequence = opt.sequence;
  run.bo.precision = precision_storage(run.precision);
  Graph fwd = build_forward_graph(run.cfg, run.ops, run.bo);
  run.g = make_training_graph(fwd, run.ops, run.cfg.optimizer.op, run.cfg.optimizer.attrs,
                              run.cfg.accumulate);
}

// Note [ranks agree on the run]: the config's settings and the flags of the run, all but the
// host-local ones (--data-threads, --log-every), and --config's path (its settings count).
std::vector<std::string> run_settings(const TrainingRun& run, const TrainOptions& opt) {
  std::vector<std::string> s = run.cfg.settings;
  auto flag = [&](const char* name, const std::string& value) {
    s.push_back(std::string("--") + name + ": " + value);
  };
  auto optional = [](const auto& v) { return v ? std::to_string(*v) : std::string(); };
  flag("device", opt.device);
  flag("steps", std::to_string(opt.steps));
  flag("batch", optional(opt.batch));
  flag("accumulate", optional(opt.accumulate));
  flag("input", opt.input ? shape_str(*opt.input) : "");
  flag("seq", optional(opt.sequence));
  flag("seed", std::to_string(opt.seed));
  flag("budget", optional(opt.plan.budget));
  flag("strategy", opt.plan.strategy);
  flag("cost-model", opt.plan.cost_model);
  flag("plan", opt.plan.schedule_file);
  flag("time-limit", std::to_string(opt.plan.time_limit));
  flag("memory", opt.memory);
  flag("precision", opt.precision);
  flag("metrics", opt.metrics_file);
  flag("trace", opt.trace_file);
  flag("trace-steps", std::to_string(opt.trace_steps));
  flag("save-plan", opt.save_plan_file);
  flag("save", opt.save_file);
  flag("save-every", std::to_string(opt.save_every));
  flag("keep-last", std::to_string(opt.keep_last));
  flag("resume", opt.resume_file);
  flag("summary", opt.summary_file);
  flag("compare", opt.compare_file);
  flag("check-finite", opt.check_finite ? "on" : "off");
  flag("cuda-graph", opt.cuda_graph ? "on" : "off");
  flag("skip-bad-samples", opt.skip_bad_samples ? "on" : "off");
  flag("eval-every", std::to_string(opt.eval_every));
  flag("eval-batches", std::to_string(opt.eval_batches));
  flag("no-eval", opt.no_eval ? "on" : "off");
  flag("shard-optimizer", opt.shard_optimizer ? "on" : "off");
  flag("bucket-size", std::to_string(opt.bucket_bytes));
  flag("check-every", std::to_string(opt.check_every));
  return s;
}

// The backend, the data-parallel job (several ranks), and this rank's share of a step.
void open_backend_and_job(TrainingRun& run, const TrainOptions& opt, MpiSession* session) {
  const bool parallel = session && session->size() > 1;
  const Graph& g = run.g;
  run.base_ms = opt.compare_file.empty() ? 0 : compared_ms_per_step(g, opt);
  run.backend =
      make_backend(g, opt, run.precision, parallel ? parallel_cuda_device(*session) : 0);
  run.job = parallel ? make_parallel_job(*session, *run.backend, run_settings(run, opt)) : nullptr;
  ParallelJob* job = run.job.get();
  if (job) {
    check_same_graph(*job, g, opt.config);
    run.eo.parallel = ParallelConfig{job->world, job->rank, opt.shard_optimizer, opt.bucket_bytes};
    run.eo.grad_comm = job->grads.get();
    run.eo.op_comm = job->ops.get();
    run.eo.host_comm = job->host.get();  // the finite check's shared decision
  }
  // One step's samples on this rank: K micro-batches of N (Note [gradient accumulation]); the
  // ranks' together are the global batch.
  run.step_batch = checked_mul(g.batch, g.micro_batches, "--accumulate", "samples per step");
  run.layout = persistent_layout(g, run.eo.parallel);
  if (job && opt.save_every > 0)
    REMAT_USER_ERROR("--save-every is not available under mpirun with " << job->world
                     << " ranks yet (a checkpoint of several ranks is one collective write); "
                        "use --save, which writes at the end and when stopped");
  run.writer = !job || job->rank == 0;
}

LoaderOptions loader_options(const TrainOptions& opt) {
  LoaderOptions loader;
  loader.threads = opt.data_threads > 0 ? opt.data_threads : default_loader_threads();
  loader.skip_bad_samples = opt.skip_bad_samples;
  return loader;
}

// The training data, prefetched, and validation on the config's `val` data.
void open_data(TrainingRun& run, const TrainOptions& opt) {
  const Graph& g = run.g;
  ParallelJob* job = run.job.get();
  DataShard shard;
  if (job)
    shard = DataShard{job->rank * run.step_batch,
                      checked_mul(run.step_batch, job->world, "--accumulate", "global batch")};
  run.step_in = g.value(g.input).desc;
  run.step_labels = g.value(g.label).desc;
  run.step_in.shape[0] = run.step_labels.shape[0] = run.step_batch;
  const LoaderOptions loader = loader_options(opt);
  // The batches the step reads, in host memory the device reads without staging (pinned on the
  // GPU): the upload is asynchronous, and the step's final synchronize ends it before the next
  // acquire hands the slot back to the loader.
  Backend* host_mem = run.backend.get();
  const TensorDesc* step_in = &run.step_in;
  run.data = std::make_unique<PrefetchSource>(
      make_data_source(run.cfg, run.step_in, run.step_labels, run.cfg.dir, shard, loader),
      run.step_in.bytes(), run.step_labels.bytes(), 2,
      HostMemory{[host_mem, step_in](int64_t bytes) {
                   return backend_alloc(*host_mem, bytes, "a prefetched batch of " +
                                        shape_str(step_in->shape), /*host=*/true);
                 },
                 [host_mem](void* p) { host_mem->host_free(p); }});
  if (run.cfg.val && !opt.no_eval) {  // validation: its own plan, in the same budget
    EvalOptions eopt;
    eopt.plan = opt.plan;
    eopt.loader = loader;
    eopt.batches = opt.eval_batches;
    if (job) {
      eopt.shard = DataShard{job->rank * g.batch, job->world * g.batch};
      eopt.host_comm = job->host.get();
    }
    run.eval = std::make_unique<Evaluator>(run.cfg, run.bo, run.ops, *run.backend, eopt,
                                           persistent_layout(g, run.eo.parallel).constant_bytes);
  } else if (opt.eval_every > 0) {
    REMAT_USER_ERROR(opt.config << ": --eval-every needs a `val` section in the config (e.g. val: "
                                   "{source: folder, path: val})");
  }
}

// "model ...", "training graph ..." and, data parallel, how the ranks share the work.
void print_header(const TrainingRun& run, const TrainOptions& opt) {
  const Graph& g = run.g;
  const int64_t K = g.micro_batches;
  int params = 0;
  int64_t param_numel = 0;
  for (const auto& v : g.values)
    if (v.kind == ValueKind::Param) ++params, param_numel += v.desc.numel();
  const std::string batch_words =
      K == 1 ? "batch " + std::to_string(g.batch)
             : "batch " + std::to_string(run.step_batch) + " per step (" + std::to_string(K) +
                   " micro-batches of " + std::to_string(g.batch) + ", gradients accumulated)";
  std::printf("model %s: %zu layers, %d parameter tensors (%lld weights), %s, input %s\n",
              run.cfg.name.c_str(), run.cfg.layers.size(), params,
              static_cast<long long>(param_numel), batch_words.c_str(),
              shape_str(g.value(g.input).desc.shape).c_str());
  // "nodes" are the ones a plan orders (as plan and maxbatch count them); the optimizer's updates
  // run after every plan.
  std::printf("training graph: %s + %s, persistent %s; device %s, %s; data %s\n",
              plural(planned_nodes(g), "node").c_str(),
              plural(static_cast<int64_t>(g.nodes.size()) - planned_nodes(g), "optimizer update")
                  .c_str(),
              format_bytes(run.layout.constant_bytes).c_str(), run.backend->name().c_str(),
              precision_description(run.precision, opt.device).c_str(),
              run.data->describe().c_str());
  if (run.job) print_parallel(*run.job, run.step_batch, run.layout, *run.job->grads);
  std::fflush(stdout);
}

}  // namespace

std::unique_ptr<TrainingRun> training_set_up(const TrainOptions& opt, MpiSession* session) {
  auto run = std::make_unique<TrainingRun>();
  build_run_graph(*run, opt);
  open_backend_and_job(*run, opt, session);
  open_data(*run, opt);
  print_header(*run, opt);
  run->exec = executor_with_plan(run->g, run->ops, *run->backend, opt, run->eo, run->job.get(),
                                 &run->sp, run->eval ? run->eval->arena_bytes() : 0);
  if (run->eval) {
    run->eval->executor(run->exec.get());
    std::printf("%s\n", run->eval->describe().c_str());
  }
  return run;
}

}  // namespace remat
