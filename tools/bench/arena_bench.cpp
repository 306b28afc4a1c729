// arena_bench: does the memory a plan predicts equal the memory the executor reserves? For each
// config, K budgets from the minimum to keep-everything (as `sweep` spaces them) and each
// strategy, it plans the training step, packs the plan's buffers into the arena exactly as
// `train --memory arena` does, and prints predicted peak, arena region and their ratio, the
// ratio the greedy packings alone give, and how long the packing took.
// Nothing is executed, so the whole zoo runs in minutes on a CPU (workspaces: CPU backend).
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "models/build.h"
#include "models/config.h"
#include "ops/registry.h"
#include "runtime/graph/autodiff.h"
#include "runtime/core/check.h"
#include "runtime/executor.h"
#include "runtime/io/atomic_file.h"
#include "runtime/memory/allocator.h"
#include "runtime/memory/arena.h"
#include "solver/from_graph.h"
#include "tools/common/cli.h"
#include "tools/planning/problem_flags.h"
#include "tools/training/step_plan.h"

namespace remat {
namespace {

struct Worst {
  double ratio = 0, greedy_ratio = 0;
  std::string where;
  double pack_ms = 0;  // the slowest packing
  std::string slowest;
};

// The arena requests of a plan whose region exceeds its predicted peak, as JSON lines
// {"bytes", "first", "last"}, for studying the packing offline.
void dump_requests(const std::string& dir, const Graph& g, const OpRegistry& ops, Backend& be,
                   const ExecutionPlan& plan, const std::string& tag) {
  const PlanBuffers pb =
      plan_buffers(g, plan, [&](NodeId n) { return node_workspace_bytes(g, ops, be, n); });
  std::string text;
  for (const ArenaRequest& r : pb.requests)
    text += "{\"bytes\": " + std::to_string(r.bytes) + ", \"first\": " + std::to_string(r.first) +
            ", \"last\": " + std::to_string(r.last) + "}\n";
  write_file_atomic(dir + "/" + tag + ".jsonl", text);
}

void bench_config(const std::string& path, const FlagParser& f,
                  const std::vector<std::string>& strategies, Worst* worst) {
  const OpRegistry ops = make_builtin_registry();
  ModelConfig cfg = load_model_config(path);
  BuildOptions bo;
  if (f.has("batch")) bo.batch = f.get_int("batch", 1, 1 << 20);
  Graph g = make_training_graph(build_forward_graph(cfg, ops, bo), ops, cfg.optimizer.op,
                                cfg.optimizer.attrs, cfg.accumulate);
  auto be = make_cpu_backend();
  auto workspace = [&](NodeId n) { return node_workspace_bytes(g, ops, *be, n); };
  GraphProblem gp = problem_from_graph(g, flops_costs(g, ops, workspace));
  const int64_t lo = problem_min_budget(gp.problem);
  const int64_t hi = std::max(lo, plan_keep_all(g, workspace).predicted_peak);
  const int points = static_cast<int>(f.get_int("points", 2, 100));
  for (int k = 0; k < points; ++k) {
    const int64_t budget = lo + (hi - lo) * k / (points - 1);
    for (const std::string& s : strategies) {
      StepPlanOptions po;
      po.budget = budget;
      po.strategy = s;
      po.time_limit = f.get_double("time-limit", 0.1, 1e6);
      po.log_level = 0;
      StepPlan sp;
      try {
        sp = make_step_plan(g, ops, *be, po, budget);
      } catch (const UserError&) {
        continue;  // no schedule at this budget: nothing to pack
      }
      const int64_t region = Executor::arena_region_bytes(g, ops, *be, sp.plan);
      if (f.has("dump") && region > sp.plan.predicted_peak) dump_requests(f.get("dump"), g, ops, *be, sp.plan, cfg.name + "-" + s + "-" + std::to_string(budget));
      // The same packing again, timed, and the greedy packings alone (no search) beside it.
      const PlanBuffers pb = plan_buffers(g, sp.plan, workspace);
      const auto t0 = std::chrono::steady_clock::now();
      const int64_t packed = plan_arena(pb.requests, kPoolAlignment).arena_bytes;
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const int64_t greedy = region - packed + plan_arena(pb.requests, kPoolAlignment, 0).arena_bytes;
      const double peak = static_cast<double>(sp.plan.predicted_peak);
      const double ratio = static_cast<double>(region) / peak, greedy_ratio = static_cast<double>(greedy) / peak;
      std::printf("%-14s %6lld %-20s %12s %12s %12s %8.4f %8.4f %8.1f %s\n", cfg.name.c_str(),
                  static_cast<long long>(g.batch), s.c_str(), format_bytes(budget).c_str(),
                  format_bytes(sp.plan.predicted_peak).c_str(), format_bytes(region).c_str(), ratio,
                  greedy_ratio, ms, region <= budget ? "fits" : "OVER");
      std::fflush(stdout);
      const std::string where = cfg.name + " " + s + " at " + format_bytes(budget);
      if (ratio > worst->ratio) worst->ratio = ratio, worst->where = where;
      worst->greedy_ratio = std::max(worst->greedy_ratio, greedy_ratio);
      if (ms > worst->pack_ms) worst->pack_ms = ms, worst->slowest = where + ", " + std::to_string(pb.requests.size()) + " buffers";
    }
  }
}

}  // namespace
}  // namespace remat

int main(int argc, char** argv) {
  return remat::run_main([&] {
    remat::FlagParser f("arena_bench",
                        "Arena region vs predicted peak for model configs at sweep budgets.\n"
                        "usage: arena_bench --configs A.yaml,B.yaml [flags]");
    f.add("configs", "LIST", "comma-separated model YAML files (required)")
        .add("points", "K", "budgets from the minimum to the all-keep peak, inclusive", "6")
        .add("strategies", "LIST", "comma-separated strategies", "checkmate,chen-greedy,griewank")
        .add("time-limit", "SEC", "solver time limit per plan", "10")
        .add("batch", "N", "override each config's batch size")
        .add("dump", "DIR", "write the arena requests of each plan above its predicted peak (JSON lines)");
    if (!f.parse(argc, argv)) return 0;
    if (!f.has("configs")) throw remat::UsageError("arena_bench: --configs is required\n" + f.usage());
    const auto strategies = remat::parse_strategy_list(f.get("strategies"), "arena_bench: --strategies");
    std::printf("%-14s %6s %-20s %12s %12s %12s %8s %8s %8s\n", "config", "batch", "strategy",
                "budget", "predicted", "region", "ratio", "greedy", "pack_ms");
    remat::Worst worst;
    std::string list = f.get("configs");
    for (size_t at = 0; at <= list.size();) {
      const size_t comma = std::min(list.find(',', at), list.size());
      if (comma > at) remat::bench_config(list.substr(at, comma - at), f, strategies, &worst);
      at = comma + 1;
    }
    std::printf("worst region/predicted: %.4f (%s); greedy packings alone: %.4f\n", worst.ratio,
                worst.where.c_str(), worst.greedy_ratio);
    std::printf("slowest packing: %.1f ms (%s)\n", worst.pack_ms, worst.slowest.c_str());
    return 0;
  });
}
