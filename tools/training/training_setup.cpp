// The setup half of `train` (training_setup.h): backend, plan and executor, header lines.
#include "tools/training/training_setup.h"

#include <algorithm>
#include <climits>
#include <cstdio>

#include "runtime/core/check.h"
#include "tools/common/cli.h"
#include "tools/common/progress.h"

namespace remat {

namespace {

// The most workspace one convolution may use: an eighth of what the budget leaves after the
// persistent values (so that a tight budget is not made infeasible by one hungry algorithm;
// Note [conv algorithm choice] then takes smaller batch chunks or slower algorithms), and
// 4 GiB when there is no budget.
int64_t workspace_limit_for(const Graph& g, const TrainOptions& opt) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  if (!opt.plan.budget) return 4096 * kMiB;
  const int64_t room = *opt.plan.budget - g.persistent_bytes();
  return std::clamp<int64_t>(room / 8, 0, 4096 * kMiB);
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
  std::printf("\n");
}

// One line on how the ranks share the work and the memory (Note [gradient buckets]).
void print_parallel(const ParallelJob& job, int64_t step_batch, const PersistentLayout& L,
                    const Communicator& grads) {
  int64_t largest = 0;
  for (const auto& b : L.buckets) largest = std::max(largest, b.bytes);
  std::printf("data parallel: %d ranks x batch %lld = global batch %lld; gradients in %zu buckets "
              "(largest %s, in place, padding %s) averaged with %s while the backward runs; "
              "optimizer state %s per rank%s\n",
              job.world, static_cast<long long>(step_batch),
              static_cast<long long>(step_batch * job.world), L.buckets.size(),
              format_bytes(largest).c_str(), format_bytes(L.padding_bytes).c_str(),
              grads.name().c_str(), format_bytes(L.state_kinds * L.state_block_bytes).c_str(),
              L.parallel.shard_optimizer
                  ? (" (sharded: 1/" + std::to_string(job.world) + " of " +
                     format_bytes(L.state_kinds * L.flat_bytes) + ")").c_str()
                  : "");
}

}  // namespace remat
