// `sweep` end to end as a process: its CSV is complete and the costs are monotone in the budget
// (small CNN and a linear chain).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/source_dir.h"
#include "tests/tool_runner.h"
#include "tests/tools_test_util.h"
#include "models/build.h"
#include "models/config.h"
#include "ops/registry.h"
#include "runtime/graph/autodiff.h"
#include "solver/baselines.h"
#include "solver/chain.h"
#include "solver/from_graph.h"
#include "solver/problem.h"
#include "solver/schedule.h"
#include "solver/strategies.h"
#include "tools/planning/problem_flags.h"
#include "tools/planning/svg.h"

namespace remat {
namespace {

// ---- sweep ----------------------------------------------------------------------------------
struct CsvRow {
  std::string strategy;
  int64_t budget = 0;
  bool feasible = false;
  double cost = 0, overhead = 0, gap = 0;
  int64_t peak = 0;
};

// Reads DIR/sweep.csv into rows per strategy (in file order); checks the header and fields.
std::map<std::string, std::vector<CsvRow>> read_sweep_csv(const std::string& path, size_t* count) {
  std::map<std::string, std::vector<CsvRow>> rows;
  std::vector<std::string> ls = lines_of(read_whole_file(path));
  EXPECT_FALSE(ls.empty()) << path;
  if (ls.empty()) return rows;
  EXPECT_EQ(ls[0], "strategy,budget_bytes,feasible,cost,overhead,peak_bytes,solve_seconds,gap");
  *count = ls.size() - 1;
  for (size_t i = 1; i < ls.size(); ++i) {
    std::vector<std::string> f = split(ls[i], ',');
    EXPECT_EQ(f.size(), 8u) << ls[i];
    if (f.size() != 8) continue;
    CsvRow row;
    row.strategy = f[0];
    row.budget = std::stoll(f[1]);
    EXPECT_TRUE(f[2] == "0" || f[2] == "1") << ls[i];
    row.feasible = f[2] == "1";
    EXPECT_GE(std::stod(f[6]), 0);
    if (row.feasible) {
      row.cost = std::stod(f[3]);
      row.overhead = std::stod(f[4]);
      row.peak = std::stoll(f[5]);
      row.gap = std::stod(f[7]);
      EXPECT_LE(row.peak, row.budget) << ls[i];
      EXPECT_GE(row.overhead, 1 - 1e-9) << ls[i];
    } else {
      EXPECT_TRUE(f[3].empty() && f[4].empty() && f[5].empty()) << ls[i];
    }
    rows[row.strategy].push_back(row);
  }
  return rows;
}

// More budget never costs more: for the budget-sweeping baselines, and for checkmate (a sweep
// offers it its answers at the smaller budgets: Note [monotone sweeps]). Checkmate is no worse
// than any strategy where it proved optimality.
void expect_monotone(std::map<std::string, std::vector<CsvRow>>& rows,
                     const std::vector<std::string>& monotone) {
  for (const std::string& s : monotone) {
    const std::vector<CsvRow>& r = rows[s];
    for (size_t i = 0; i + 1 < r.size(); ++i) {
      const CsvRow &a = r[i], &b = r[i + 1];
      if (!a.feasible) continue;
      EXPECT_TRUE(b.feasible) << s << ": feasible at " << a.budget << " but not at " << b.budget;
      EXPECT_LE(b.cost, a.cost * (1 + 1e-9)) << s << " at " << b.budget << " vs " << a.budget;
    }
  }
  if (!rows.count("checkmate")) return;
  for (size_t i = 0; i < rows["checkmate"].size(); ++i) {
    const CsvRow& c = rows["checkmate"][i];
    if (!c.feasible || c.gap > 1e-3) continue;
    for (auto& [s, r] : rows) {
      if (i < r.size() && r[i].feasible) {
        EXPECT_LE(c.cost, r[i].cost * (1 + 1e-3)) << s;
      }
    }
  }
}

TEST_F(ToolsTest, SweepCsvIsCompleteAndMonotone) {
  const Problem p = small_cnn_problem();
  const int k = 4;
  const std::vector<std::string> strategies = {"all-keep", "chen-greedy", "griewank", "lp",
                                               "checkmate"};
  RunResult r = run(SWEEP_EXE, "--config '" + kSmallCnn + "' --batch 32 --points 4 --strategies "
                               "all-keep,chen-greedy,griewank,lp,checkmate --time-limit 1 -o '" +
                                   path("sweep") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  size_t count = 0;
  auto rows = read_sweep_csv(path("sweep/sweep.csv"), &count);
  EXPECT_EQ(count, strategies.size() * k);
  const int64_t lo = problem_min_budget(p), hi = all_keep_peak(p);
  for (const std::string& s : strategies) {
    ASSERT_EQ(rows[s].size(), static_cast<size_t>(k)) << s;
    EXPECT_EQ(rows[s].front().budget, lo) << s;
    EXPECT_EQ(rows[s].back().budget, hi) << s;
    for (int i = 1; i < k; ++i) EXPECT_GT(rows[s][i].budget, rows[s][i - 1].budget);
    // At the all-keep peak every strategy that applies fits (griewank needs a chain).
    if (s != "griewank") {
      EXPECT_TRUE(rows[s].back().feasible) << s << " at the all-keep peak";
    }
  }
  // all-keep fits only at its own peak.
  for (int i = 0; i + 1 < k; ++i) EXPECT_FALSE(rows["all-keep"][i].feasible);
  expect_monotone(rows, {"all-keep", "chen-greedy", "griewank", "checkmate"});
  const std::string svg = read_whole_file(path("sweep/sweep.svg"));
  EXPECT_EQ(xml_check(svg), "");
  // One polyline per strategy with a feasible point; every strategy in the legend.
  size_t lines = 0, with_points = 0;
  for (size_t q = svg.find("<polyline"); q != std::string::npos; q = svg.find("<polyline", q + 1)) ++lines;
  for (const std::string& s : strategies)
    with_points += std::any_of(rows[s].begin(), rows[s].end(), [](const CsvRow& c) { return c.feasible; });
  EXPECT_GE(with_points, 4u);
  EXPECT_EQ(lines, with_points + strategies.size());  // and one per legend entry
  for (const std::string& s : strategies) EXPECT_NE(svg.find(">" + s), std::string::npos) << s;
  // Overlapping strategies stay visible (dash patterns, square markers); the cost model is named.
  EXPECT_NE(svg.find("stroke-dasharray=\"8,4\""), std::string::npos);
  EXPECT_NE(svg.find("<rect") , std::string::npos);
  EXPECT_NE(svg.find("cost / all-keep cost, FLOPs)"), std::string::npos);
  EXPECT_NE(r.out.find("overhead"), std::string::npos);
}

// A chain (where griewank applies) from a --problem file.
TEST_F(ToolsTest, SweepChainProblemIsMonotone) {
  const Problem p = make_chain_problem({3, 1, 4, 1, 5, 9, 2}, {40, 10, 30, 20, 50, 10, 60}, 100);
  problem_save(p, path("chain.json"));
  const int k = 6;
  RunResult r = run(SWEEP_EXE, "--problem '" + path("chain.json") + "' --points 6 --strategies "
                               "all-keep,chen-sqrtn,chen-greedy,griewank,checkmate --time-limit 2 "
                               "--log-level 0 -o '" + path("chain") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  size_t count = 0;
  auto rows = read_sweep_csv(path("chain/sweep.csv"), &count);
  EXPECT_EQ(count, 5u * k);
  for (const std::string s : {"griewank", "checkmate"}) {
    ASSERT_EQ(rows[s].size(), static_cast<size_t>(k));
    EXPECT_TRUE(rows[s].back().feasible) << s;
  }
  // griewank fits a chain at some budget below the all-keep peak.
  EXPECT_TRUE(rows["griewank"][k - 2].feasible);
  EXPECT_TRUE(rows["checkmate"].front().feasible) << "the MILP fits any budget >= the minimum";
  expect_monotone(rows, {"all-keep", "chen-greedy", "griewank", "checkmate"});
}

// Note [monotone sweeps]: checkmate given its answers at smaller budgets as candidates never
// answers a larger budget with a costlier schedule, at a time limit too short to prove
// anything on these graphs (their gaps stay open).
TEST(MonotoneSweep, CheckmateNeverCostsMoreAtALargerBudget) {
  for (const char* name : {"small_dag", "gpt2_tiny", "unet", "mobilenet"}) {
    SCOPED_TRACE(name);
    const Problem p = config_problem(test_source_dir() + "/configs/" + name + ".yaml",
                                     std::string(name) == "gpt2_tiny" ? 8 : 4);
    const int64_t lo = problem_min_budget(p), hi = all_keep_peak(p);
    SolveOptions opt;
    opt.time_limit_seconds = 0.5;
    std::vector<Schedule> found;
    opt.candidates = &found;
    double last = -1;
    for (int pct : {20, 35, 50, 65, 80, 95}) {
      const int64_t budget = lo + (hi - lo) * pct / 100;
      const SolveResult r = solve(p, "checkmate", budget, opt);
      if (!r.feasible) {
        EXPECT_TRUE(found.empty()) << "infeasible at " << budget << " after a smaller budget fit";
        continue;
      }
      for (const Schedule& c : found) {
        const SimResult sim = simulate(p, c);
        EXPECT_LE(r.sim.total_cost, sim.total_cost * (1 + 1e-12)) << pct << " %";
      }
      if (last >= 0) {
        EXPECT_LE(r.sim.total_cost, last * (1 + 1e-12)) << pct << " %";
      }
      last = r.sim.total_cost;
      found.push_back(r.schedule);
    }
    EXPECT_GE(found.size(), 4u);
  }
}

}  // namespace
}  // namespace remat
