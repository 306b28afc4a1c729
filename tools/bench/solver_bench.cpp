// solver_bench: timing tables for the Checkmate MILP, the LP rounding and max batch on a
// VGG16-like chain (or --problem), a uniform chain near its minimum budget (tight vs the
// paper's formulation), and max batch.
#include <chrono>
#include <cmath>
#include <cstdio>

#include "runtime/core/check.h"
#include "solver/chain.h"
#include "solver/milp_model.h"
#include "solver/strategies.h"
#include "tools/common/cli.h"

namespace remat {
namespace {

// VGG16 at 224x224, float32: 13 conv3x3 (+ReLU folded in), 5 max-pools, 3 dense, softmax.
// cost = forward FLOPs, bytes = output activation bytes, both at `batch`; constant = params,
// grads and momentum (3 copies) plus the input batch.
Problem vgg16_chain(int64_t batch) {
  std::vector<double> cost;
  std::vector<int64_t> bytes;
  int64_t h = 224, c = 3;
  auto conv = [&](int64_t cout) {
    cost.push_back(2.0 * h * h * c * cout * 9 * batch);
    bytes.push_back(h * h * cout * 4 * batch);
    c = cout;
  };
  auto pool = [&] {
    h /= 2;
    cost.push_back(double(h * h * c * 4 * batch));
    bytes.push_back(h * h * c * 4 * batch);
  };
  int64_t params = 0, cin = 3;
  for (int64_t cout : {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0}) {
    if (cout == 0) {
      pool();
    } else {
      params += 9 * cin * cout + cout;
      cin = cout;
      conv(cout);
    }
  }
  int64_t in = h * h * c;
  for (int64_t out : {4096, 4096, 1000}) {
    cost.push_back(2.0 * in * out * batch);
    bytes.push_back(out * 4 * batch);
    params += in * out + out;
    in = out;
  }
  cost.push_back(5.0 * 1000 * batch);  // softmax
  bytes.push_back(1000 * 4 * batch);
  int64_t constant = params * 4 * 3 + batch * 224 * 224 * 3 * 4;
  Problem p = make_chain_problem(cost, bytes, constant);
  p.name = "vgg16-chain";
  p.batch = batch;
  return p;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int64_t all_keep_peak(const Problem& p) {
  auto s = solve_all_keep(p);
  return s ? simulate(p, *s).peak_bytes : problem_total_bytes(p);
}

// Table 1: MILP and LP rounding across a budget sweep.
void budget_sweep(const Problem& p, int budgets, const SolveOptions& opt) {
  const int64_t lo = problem_min_budget(p), hi = all_keep_peak(p);
  std::printf("\n%s: %d nodes, min budget %s, all-keep peak %s\n", p.name.c_str(), p.size(),
              format_bytes(lo).c_str(), format_bytes(hi).c_str());
  std::printf("%12s %12s %8s %9s %8s %10s | %9s %8s %8s\n", "budget", "milp cost/ak", "gap",
              "status", "time(s)", "cold(s)", "lp lb/ak", "lp rnd", "lp(s)");
  double all_cost = 0;
  for (const auto& nd : p.nodes) all_cost += nd.cost;
  for (int b = 0; b < budgets; ++b) {
    const int64_t budget = lo + (hi - lo) * b / (budgets - 1);
    auto t0 = std::chrono::steady_clock::now();
    SolveResult r = solve(p, "checkmate", budget, opt);
    double warm_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    auto cold = solve_checkmate_milp(p, budget, opt);
    double cold_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    double lp_bound = 0;
    auto lp = solve_lp_rounding(p, budget, opt, &lp_bound);
    double lp_s = seconds_since(t0);
    double lp_cost = lp ? simulate(p, *lp).total_cost / all_cost : -1;
    std::printf("%12s %12.4f %8.1e %9s %8.3f %10.3f | %9.4f %8.4f %8.3f\n",
                format_bytes(budget).c_str(), r.feasible ? r.sim.total_cost / all_cost : -1,
                r.gap, r.feasible ? r.schedule.status.c_str() : "none", warm_s,
                cold ? cold_s : -cold_s, lp_bound / all_cost, lp_cost, lp_s);
    std::fflush(stdout);
  }
}

// Table 2: tight formulation vs the paper's, same budgets, no warm start.
void formulation_compare(const Problem& p, int budgets, const SolveOptions& opt) {
  const int64_t lo = problem_min_budget(p);
  std::printf("\n%s (%d nodes) near the minimum budget: tight vs paper formulation\n",
              p.name.c_str(), p.size());
  std::printf("%8s | %8s %8s %9s %7s %7s | %8s %8s %9s %7s %7s\n", "budget", "cost", "lb",
              "status", "time", "cols", "cost", "lb", "status", "time", "cols");
  for (int b = 0; b < budgets; ++b) {
    const int64_t budget = lo + b;
    std::printf("%8lld |", static_cast<long long>(budget));
    for (bool paper : {false, true}) {
      MilpBuildOptions bo;
      bo.budget = budget;
      bo.paper_formulation = paper;
      MilpModel m = milp_build(p, bo);
      MilpRun run = milp_run_cbc(m, opt, nullptr, {});
      double cost = -1;
      if (run.has_solution) {
        Schedule s;
        s.S = schedule_repair_s(p, milp_s_from_solution(m, run.x.data(), 0.5), &s.R);
        SimResult sim = simulate(p, s);
        cost = sim.valid && sim.peak_bytes <= budget ? sim.total_cost : -2;
      }
      std::printf(" %8.1f %8.2f %9s %7.2f %7d |", cost, run.bound * m.cost_scale,
                  run.optimal ? "optimal" : run.has_solution ? "time-limit" : "none",
                  run.seconds, m.num_cols());
    }
    std::printf("\n");
    std::fflush(stdout);
  }
}

void max_batch_table(const Problem& p, int64_t budget, const SolveOptions& opt) {
  std::printf("\nmax batch on %s (batch %lld in file) at %s\n", p.name.c_str(),
              static_cast<long long>(p.batch), format_bytes(budget).c_str());
  std::printf("%-20s %8s %12s %9s  %s\n", "strategy", "batch", "upper bound", "time(s)",
              "status");
  for (const std::string& s : strategy_names()) {
    if (s == "lp") continue;
    MaxBatchResult r = max_batch(p, s, budget, opt);
    std::printf("%-20s %8lld %12lld %9.2f  %s\n", s.c_str(), static_cast<long long>(r.batch),
                static_cast<long long>(r.upper_bound), r.solve_seconds, r.status.c_str());
    std::fflush(stdout);
  }
}

void print_progress(double el, double inc, double bound, void*) {
  std::fprintf(stderr, "  [%6.1fs] incumbent %.6g bound %.6g\n", el, inc, bound);
}

int run(int argc, char** argv) {
  FlagParser flags("solver_bench", "Benchmark tables for the Checkmate MILP and LP rounding.");
  flags.add("problem", "FILE", "remat-problem/1 JSON (default: a VGG16-like chain, batch 256)")
      .add("bench", "NAME", "sweep, formulations, maxbatch or all", "all")
      .add("budgets", "N", "budgets in the sweep", "10")
      .add("chain", "N", "uniform chain layers for the formulation table", "16")
      .add("budget", "BYTES", "max-batch budget", "16GB")
      .add("time-limit", "SECONDS", "per MILP", "60")
      .add("threads", "N", "Cbc threads", "1")
      .add("progress", "", "print MILP progress to stderr");
  if (!flags.parse(argc, argv)) return 0;
  const Problem p = flags.has("problem") ? problem_load(flags.get("problem")) : vgg16_chain(256);
  SolveOptions opt;
  opt.time_limit_seconds = flags.get_double("time-limit", 0.01, 1e6);
  opt.threads = static_cast<int>(flags.get_int("threads", 1, 64));
  if (flags.has("progress")) opt.progress = print_progress;
  const std::string bench =
      flags.get_choice("bench", {"sweep", "formulations", "maxbatch", "all"});
  if (bench == "sweep" || bench == "all")
    budget_sweep(p, static_cast<int>(flags.get_int("budgets", 2, 1000)), opt);
  if (bench == "formulations" || bench == "all")
    formulation_compare(make_uniform_chain(static_cast<int>(flags.get_int("chain", 1, 1000))),
                        5, opt);
  if (bench == "maxbatch" || bench == "all") max_batch_table(p, flags.get_bytes("budget"), opt);
  return 0;
}

}  // namespace
}  // namespace remat

int main(int argc, char** argv) {
  return remat::run_main([&] { return remat::run(argc, argv); });
}
