// sweep (the paper's Figure 4): solves every strategy at K budgets evenly spaced from the
// problem's minimum budget to the all-keep peak, writes sweep.csv and sweep.svg (compute
// overhead vs budget, one line per strategy), and prints the table.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/io/atomic_file.h"
#include "runtime/core/check.h"
#include "solver/baselines.h"
#include "solver/strategies.h"
#include "tools/common/cli.h"
#include "tools/planning/problem_flags.h"
#include "tools/planning/svg.h"

namespace remat {
namespace {

struct SweepPoint {
  std::string strategy;
  int64_t budget = 0;
  bool feasible = false;
  double cost = 0, overhead = 0;
  int64_t peak = 0;
  double seconds = 0, gap = 0;
  std::string status;
};

// K budgets from lo to hi inclusive (K = 1: just hi).
std::vector<int64_t> sweep_budgets(int64_t lo, int64_t hi, int k) {
  if (k == 1) return {hi};
  std::vector<int64_t> b;
  for (int i = 0; i < k; ++i)
    b.push_back(lo + static_cast<int64_t>(std::llround(static_cast<double>(hi - lo) * i / (k - 1))));
  return b;
}

void write_csv(const std::vector<SweepPoint>& pts, const std::string& path) {
  std::string f = "strategy,budget_bytes,feasible,cost,overhead,peak_bytes,solve_seconds,gap\n";
  char buf[256];
  for (const SweepPoint& q : pts) {
    if (q.feasible)
      std::snprintf(buf, sizeof buf, "%s,%lld,1,%.17g,%.9g,%lld,%.4f,%.6g\n", q.strategy.c_str(),
                    static_cast<long long>(q.budget), q.cost, q.overhead,
                    static_cast<long long>(q.peak), q.seconds, q.gap);
    else
      std::snprintf(buf, sizeof buf, "%s,%lld,0,,,,%.4f,\n", q.strategy.c_str(),
                    static_cast<long long>(q.budget), q.seconds);
    f += buf;
  }
  write_file_atomic(path, f);
}

std::string sweep_svg(const Problem& p, const std::vector<std::string>& strategies,
                      const std::vector<SweepPoint>& pts, int64_t lo, int64_t hi) {
  const auto unit = svg_byte_unit(static_cast<double>(hi));
  SvgLineChart c;
  c.x_min = static_cast<double>(lo) / unit.second;
  c.x_max = static_cast<double>(hi) / unit.second;
  c.title = p.name + " (batch " + std::to_string(p.batch) + "): compute overhead vs memory budget";
  c.x_label = "memory budget (" + unit.first + ", constant " + format_bytes(p.constant_bytes) +
              " included)";
  c.y_label = std::string("compute overhead (cost / all-keep cost, ") +
              (p.cost_unit == "ms" ? "measured ms" : "FLOPs") + ")";
  c.y_from_zero = false;
  for (const std::string& s : strategies) {
    SvgSeries line;
    line.name = s;
    line.dash = static_cast<int>(c.series.size()) % 3;  // overlapping strategies stay visible
    for (const SweepPoint& q : pts)
      if (q.strategy == s && q.feasible) {
        line.x.push_back(static_cast<double>(q.budget) / unit.second);
        line.y.push_back(q.overhead);
      }
    c.series.push_back(std::move(line));
  }
  return svg_line_chart(c);
}

// Overhead matrix: one row per budget, one column per strategy ("-" where infeasible).
void print_summary(const std::vector<std::string>& strategies, const std::vector<int64_t>& budgets,
                   const std::vector<SweepPoint>& pts) {
  std::printf("\noverhead (cost / all-keep cost) by budget:\n%12s", "budget");
  for (const auto& s : strategies) std::printf(" %*s", std::max<int>(9, int(s.size())), s.c_str());
  std::printf("\n");
  for (size_t b = 0; b < budgets.size(); ++b) {
    std::printf("%12s", format_bytes(budgets[b]).c_str());
    for (size_t k = 0; k < strategies.size(); ++k) {
      const SweepPoint& q = pts[k * budgets.size() + b];
      const int w = std::max<int>(9, int(strategies[k].size()));
      if (q.feasible) std::printf(" %*.3fx", w - 1, q.overhead);
      else std::printf(" %*s", w, "-");
    }
    std::printf("\n");
  }
}

int run(int argc, char** argv) {
  FlagParser flags("sweep", "Solve every strategy over a range of budgets (Figure 4).");
  add_problem_flags(flags);
  add_solve_flags(flags);
  flags.add("points", "K", "budgets from the minimum to the all-keep peak, inclusive", "8")
      .add("output", "DIR", "folder for sweep.csv and sweep.svg (created if missing)")
      .alias("-o", "output");
  if (!flags.parse(argc, argv)) return 0;
  if (!flags.has("output")) throw UsageError("sweep: -o DIR is required");
  const Problem p = problem_from_flags(flags);
  const int k = static_cast<int>(flags.get_int("points", 1, 1000));
  const std::vector<std::string> strategies = strategies_from_flags(flags);
  tune_allocator_for_solving();  // Note [allocator for solving]
  SolveOptions opt = solve_options_from_flags(flags);
  ProgressLine line;
  progress_line_attach(opt, &line);
  ProgressTicker ticker(&line);  // Note [progress ticker]
  const std::string dir = flags.get("output");
  svg_make_dir(dir);

  const int64_t lo = problem_min_budget(p);
  const SimResult keep = simulate(p, all_keep_schedule(p));
  REMAT_CHECK(keep.valid, "all-keep schedule invalid: " << keep.error);
  const int64_t hi = std::max(lo, keep.peak_bytes);
  const std::vector<int64_t> budgets = sweep_budgets(lo, hi, k);
  std::printf("problem %s: %d nodes, batch %lld, constant %s, minimum budget %s, all-keep peak "
              "%s, all-keep cost %.6g %s\n",
              p.name.c_str(), p.size(), static_cast<long long>(p.batch),
              format_bytes(p.constant_bytes).c_str(), format_bytes(lo).c_str(),
              format_bytes(hi).c_str(), keep.total_cost, p.cost_unit.c_str());
  std::printf("%-20s %14s %-8s %14s %9s %12s %9s %8s  %s\n", "strategy", "budget", "feasible",
              "cost", "overhead", "peak", "time(s)", "gap", "status");
  std::vector<SweepPoint> pts;
  std::vector<Schedule> everything;  // every strategy's answers so far (Note [checkmate-offload])
  for (const std::string& s : strategies) {
    std::vector<Schedule> found;  // this strategy's answers at the smaller budgets
    const bool offload = s == "checkmate-offload" || s == "lp-offload";
    for (int64_t budget : budgets) {
      progress_line_next(&line, s + " @ " + format_bytes(budget));
      SolveOptions at = opt;
      // Note [monotone sweeps]: checkmate starts from the best of them; checkmate-offload and
      // lp-offload from the best of every strategy's before it, at this budget and the smaller
      // ones.
      at.candidates = offload ? &everything : &found;
      SolveResult r = solve(p, s, budget, at);
      if (r.feasible) found.push_back(r.schedule), everything.push_back(r.schedule);
      progress_line_next(&line, "");
      SweepPoint q;
      q.strategy = s;
      q.budget = budget;
      q.feasible = r.feasible;
      q.seconds = r.solve_seconds;
      q.status = r.feasible ? (r.schedule.status.empty() ? "ok" : r.schedule.status)
                            : (r.message.empty() ? "infeasible" : r.message);
      if (r.feasible) {
        q.cost = r.sim.total_cost;
        q.overhead = keep.total_cost > 0 ? q.cost / keep.total_cost : 0;
        q.peak = r.sim.peak_bytes;
        q.gap = r.gap;
        std::printf("%-20s %14s %-8s %14.6g %8.3fx %12s %9.3f %7.2f%%  %s\n", s.c_str(),
                    format_bytes(budget).c_str(), "yes", q.cost, q.overhead,
                    format_bytes(q.peak).c_str(), q.seconds, 100 * q.gap, q.status.c_str());
      } else {
        std::printf("%-20s %14s %-8s %14s %9s %12s %9.3f %8s  %s\n", s.c_str(),
                    format_bytes(budget).c_str(), "no", "-", "-", "-", q.seconds, "-",
                    q.status.c_str());
      }
      std::fflush(stdout);
      pts.push_back(std::move(q));
    }
  }
  print_summary(strategies, budgets, pts);
  write_csv(pts, dir + "/sweep.csv");
  svg_save(sweep_svg(p, strategies, pts, lo, hi), dir + "/sweep.svg");
  std::printf("wrote %s/sweep.csv and %s/sweep.svg\n", dir.c_str(), dir.c_str());
  return 0;
}

}  // namespace
}  // namespace remat

int main(int argc, char** argv) {
  return remat::run_main([&] { return remat::run(argc, argv); });
}
