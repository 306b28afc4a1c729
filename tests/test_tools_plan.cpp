// `plan` end to end as a process on the small configs (JSON lines, problem files, usage errors,
// solver logs kept off stdout) and the --config problem source it reads.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <regex>
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
#include "tools/planning/problem_flags.h"
#include "tools/planning/svg.h"

namespace remat {
namespace {

// ---- problems from configs ------------------------------------------------------------------
TEST(ProblemFromConfig, CostModelFileAndBatch) {
  Problem p = small_cnn_problem();
  EXPECT_EQ(p.batch, 32);
  EXPECT_GT(p.size(), 10);
  EXPECT_GT(p.constant_bytes, 0);
  // A cost table from a file (here the FLOPs table with every cost doubled) drives the costs;
  // with no --batch the graph is built at the table's batch.
  const ModelConfig cfg = load_model_config(kSmallCnn);
  const OpRegistry ops = make_builtin_registry();
  BuildOptions bo;
  bo.batch = 8;
  Graph g = make_training_graph(build_forward_graph(cfg, ops, bo), ops, cfg.optimizer.op,
                                cfg.optimizer.attrs);
  CostTable t = flops_costs(g, ops);
  for (auto& n : t.nodes) n.cost *= 2;
  t.link.to_host_bytes_per_second = 20e9;  // a measured link: the slower way sets the copy cost
  t.link.from_host_bytes_per_second = 10e9;
  const std::string file = "/tmp/remat_test_tools_costs_" + std::to_string(getpid()) + ".json";
  costs_save(t, file);
  Problem q = config_problem(kSmallCnn, std::nullopt, file);
  Problem f8 = config_problem(kSmallCnn, int64_t{8});
  std::remove(file.c_str());
  ASSERT_EQ(q.size(), f8.size());
  EXPECT_EQ(q.batch, 8);
  for (int i = 0; i < q.size(); ++i) {
    EXPECT_DOUBLE_EQ(q.nodes[i].cost, 2 * f8.nodes[i].cost) << q.nodes[i].name;
    EXPECT_EQ(q.nodes[i].bytes, f8.nodes[i].bytes);
  }
  EXPECT_DOUBLE_EQ(q.copy_cost_per_byte, 100e12 / 10e9);  // FLOPs at the default 100 TFLOP/s
  EXPECT_DOUBLE_EQ(f8.copy_cost_per_byte, 0);                // no table, no flag: no link
  // Forward activations are 4x smaller at batch 8 than at 32.
  ASSERT_EQ(p.nodes[0].name, "conv1");
  EXPECT_EQ(p.nodes[0].bytes, int64_t{32} * 16 * 32 * 32 * 4);
  EXPECT_EQ(p.nodes[0].bytes, 4 * f8.nodes[0].bytes);
}

// ---- plan -----------------------------------------------------------------------------------
TEST_F(ToolsTest, PlanConfigJsonLinesAreConsistent) {
  const Problem p = small_cnn_problem();
  const int64_t lo = problem_min_budget(p), hi = all_keep_peak(p);
  ASSERT_LT(lo, hi);
  const int64_t budget = lo + (hi - lo) / 2;
  const std::vector<std::string> strategies = {"all-keep", "chen-greedy", "griewank", "lp",
                                               "checkmate"};
  RunResult r = run(PLAN_EXE, "--config '" + kSmallCnn + "' --budget " + std::to_string(budget) +
                                  " --strategies all-keep,chen-greedy,griewank,lp,checkmate"
                                  " --time-limit 5 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> ls = lines_of(r.out);
  ASSERT_EQ(ls.size(), strategies.size()) << r.out;
  const double keep = all_keep_cost(p);
  std::map<std::string, double> cost;
  for (size_t k = 0; k < ls.size(); ++k) {
    nlohmann::json j = nlohmann::json::parse(ls[k]);
    EXPECT_EQ(j.at("strategy"), strategies[k]);
    if (j.at("feasible").get<bool>()) {
      EXPECT_LE(j.at("peak_bytes").get<int64_t>(), budget) << ls[k];
      EXPECT_GT(j.at("peak_bytes").get<int64_t>(), p.constant_bytes) << ls[k];
      EXPECT_GE(j.at("cost").get<double>(), keep * (1 - 1e-9)) << ls[k];
      EXPECT_NEAR(j.at("overhead").get<double>(), j.at("cost").get<double>() / keep, 1e-9);
      cost[strategies[k]] = j.at("cost").get<double>();
    }
  }
  EXPECT_FALSE(cost.count("all-keep")) << "all-keep peaks at " << hi << " > budget " << budget;
  ASSERT_TRUE(cost.count("checkmate")) << r.out;
  for (const auto& [name, c] : cost) EXPECT_LE(cost["checkmate"], c * (1 + 1e-4)) << name;
}

// The offload strategies: asked for by name (not in 'all'), never above the strategies run
// before them, their copies reported; the link written into a problem file; bad link flags.
TEST_F(ToolsTest, PlanOffloadStrategiesTakeTheLinkFlags) {
  const Problem p = small_cnn_problem();
  const int64_t budget = problem_min_budget(p) + (all_keep_peak(p) - problem_min_budget(p)) / 3;
  RunResult r = run(PLAN_EXE, "--config '" + kSmallCnn + "' --budget " + std::to_string(budget) +
                                  " --strategies checkmate,all-keep-offload,lp-offload,"
                                  "checkmate-offload --link-bandwidth 25 --device-tflops 0.01"
                                  " --time-limit 5 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> ls = lines_of(r.out);
  ASSERT_EQ(ls.size(), 4u) << r.out;
  nlohmann::json checkmate = nlohmann::json::parse(ls[0]), moved = nlohmann::json::parse(ls[1]);
  for (size_t k : {2, 3}) {
    nlohmann::json offload = nlohmann::json::parse(ls[k]);
    ASSERT_TRUE(checkmate.at("feasible").get<bool>() && offload.at("feasible").get<bool>())
        << r.out;
    EXPECT_LE(offload.at("cost").get<double>(), checkmate.at("cost").get<double>() * (1 + 1e-12))
        << ls[k];
    EXPECT_LE(offload.at("peak_bytes").get<int64_t>(), budget) << ls[k];
  }
  if (moved.at("feasible").get<bool>()) {
    ASSERT_TRUE(moved.contains("copies")) << ls[1];
    EXPECT_GT(moved["copies"].at("offloads").get<int>(), 0);
    EXPECT_GT(moved["copies"].at("host_peak_bytes").get<int64_t>(), 0);
  }
  // The memory figure draws the host copies beside the device's bytes.
  RunResult svg = run(PLAN_EXE, "--config '" + kSmallCnn + "' --batch 16 --budget 6.2MB "
                                "--strategies all-keep-offload --link-bandwidth 25 --svg '" +
                                    path("svg") + "'");
  ASSERT_EQ(svg.code, 0) << svg.err;
  std::ifstream mem(path("svg") + "/all-keep-offload-memory.svg");
  std::stringstream text;
  text << mem.rdbuf();
  EXPECT_NE(text.str().find("host copies"), std::string::npos);
  RunResult all = run(PLAN_EXE, "--config '" + kSmallCnn + "' --budget 20MB --strategies all --json");
  EXPECT_EQ(all.out.find("offload"), std::string::npos) << all.out;

  RunResult w = run(PLAN_EXE, "--config '" + kSmallCnn + "' --link-bandwidth 25 --write-problem '" +
                                  path("p.json") + "'");
  ASSERT_EQ(w.code, 0) << w.err;
  EXPECT_DOUBLE_EQ(problem_load(path("p.json")).copy_cost_per_byte, 100e12 / 25e9);
  EXPECT_EQ(problem_load(path("p.json")).copy_overlap, CopyOverlap::Stage);
  RunResult ws = run(PLAN_EXE, "--config '" + kSmallCnn + "' --link-bandwidth 25 --copy-overlap "
                               "stream --write-problem '" + path("p.json") + "'");
  ASSERT_EQ(ws.code, 0) << ws.err;
  EXPECT_EQ(problem_load(path("p.json")).copy_overlap, CopyOverlap::Stream);
  for (const char* bad : {"--link-bandwidth 0", "--link-bandwidth fast", "--host-budget lots",
                          "--device-tflops -1", "--copy-overlap async"}) {
    RunResult e = run(PLAN_EXE, "--config '" + kSmallCnn + "' --budget 20MB " + bad +
                                    " --strategies checkmate-offload");
    EXPECT_EQ(e.code, 2) << bad << ": " << e.err;
    EXPECT_NE(e.err.find(std::string(bad).substr(0, std::string(bad).find(' '))), std::string::npos)
        << bad << ": " << e.err;
  }
}

// The all-keep row shows what keeping everything needs even when it does not fit (the README's
// way of choosing a budget), marked as over the budget.
TEST_F(ToolsTest, PlanShowsKeepEverythingsPeakOverTheBudget) {
  RunResult r = run(PLAN_EXE, "--config '" + kSmallCnn + "' --budget 9MB --strategies "
                                  "all-keep,chen-greedy");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::regex row("\nall-keep +no +- +- +10\\.95 MB\\* +[0-9.]+ +-  \\* over the budget "
                       "9\\.00 MB\n");
  EXPECT_TRUE(std::regex_search(r.out, row)) << r.out;
  RunResult fits = run(PLAN_EXE, "--config '" + kSmallCnn + "' --budget 20MB --strategies all-keep");
  EXPECT_TRUE(std::regex_search(fits.out, std::regex("\nall-keep +yes .* 10\\.95 MB ")))
      << fits.out;
}

TEST_F(ToolsTest, PlanWriteProblemRoundTrips) {
  RunResult r = run(PLAN_EXE, "--config '" + kSmallDag + "' --batch 4 --write-problem '" +
                                  path("p.json") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  const Problem saved = problem_load(path("p.json"));
  const Problem built = config_problem(kSmallDag, int64_t{4});
  EXPECT_EQ(problem_to_json_text(saved), problem_to_json_text(built));
  EXPECT_EQ(saved.batch, 4);
  // The saved problem solves the same as the config.
  const int64_t budget = all_keep_peak(built);
  RunResult a = run(PLAN_EXE, "--problem '" + path("p.json") + "' --budget " +
                                  std::to_string(budget) + " --strategies all-keep,chen-greedy --json");
  RunResult b = run(PLAN_EXE, "--config '" + kSmallDag + "' --batch 4 --budget " +
                                  std::to_string(budget) + " --strategies all-keep,chen-greedy --json");
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  std::vector<std::string> la = lines_of(a.out), lb = lines_of(b.out);
  ASSERT_EQ(la.size(), 2u);
  ASSERT_EQ(lb.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    nlohmann::json ja = nlohmann::json::parse(la[k]), jb = nlohmann::json::parse(lb[k]);
    EXPECT_TRUE(ja.at("feasible").get<bool>()) << la[k];
    EXPECT_EQ(ja.at("cost"), jb.at("cost"));
    EXPECT_EQ(ja.at("peak_bytes"), jb.at("peak_bytes"));
  }
}

TEST_F(ToolsTest, UsageErrors) {
  RunResult both = run(PLAN_EXE, "--config '" + kSmallCnn + "' --problem x.json --budget 1GB");
  EXPECT_NE(both.code, 0);
  EXPECT_NE(both.err.find("exactly one"), std::string::npos) << both.err;
  RunResult neither = run(PLAN_EXE, "--budget 1GB");
  EXPECT_NE(neither.code, 0);
  EXPECT_NE(neither.err.find("--config"), std::string::npos) << neither.err;
  EXPECT_NE(neither.err.find("--problem"), std::string::npos) << neither.err;
  RunResult sweep = run(SWEEP_EXE, "-o '" + path("s") + "'");
  EXPECT_NE(sweep.code, 0);
  EXPECT_NE(sweep.err.find("--config"), std::string::npos) << sweep.err;
  RunResult mb = run(MAXBATCH_EXE, "--problem a.json --config b.yaml --budget 1GB");
  EXPECT_NE(mb.code, 0);
  EXPECT_NE(mb.err.find("exactly one"), std::string::npos) << mb.err;
  // Config-only flags with --problem, unknown strategies, missing config file.
  const Problem p = small_cnn_problem();
  problem_save(p, path("p.json"));
  RunResult cm = run(PLAN_EXE, "--problem '" + path("p.json") + "' --cost-model flops --budget 1GB");
  EXPECT_NE(cm.code, 0);
  EXPECT_NE(cm.err.find("--cost-model needs --config"), std::string::npos) << cm.err;
  RunResult bad = run(PLAN_EXE, "--problem '" + path("p.json") + "' --budget 1GB --strategies all-keep,nope");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("unknown strategy 'nope'"), std::string::npos) << bad.err;
  RunResult missing = run(PLAN_EXE, "--config '" + path("none.yaml") + "' --budget 1GB");
  EXPECT_NE(missing.code, 0);
  EXPECT_NE(missing.err.find("none.yaml"), std::string::npos) << missing.err;
}

TEST_F(ToolsTest, SolverLogsStayOffStdout) {
  const Problem p = small_cnn_problem();
  const int64_t budget = problem_min_budget(p) + (all_keep_peak(p) - problem_min_budget(p)) / 3;
  RunResult r = run(PLAN_EXE, "--config '" + kSmallCnn + "' --budget " + std::to_string(budget) +
                                  " --strategies lp,checkmate --time-limit 5 --json --log-level 2");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<std::string> ls = lines_of(r.out);
  ASSERT_EQ(ls.size(), 2u) << r.out;
  for (const std::string& l : ls) EXPECT_TRUE(nlohmann::json::accept(l)) << l;
  EXPECT_FALSE(r.err.empty());  // the logs went somewhere: stderr
}

// --verify trains two steps at each found batch: the measured peak equals the plan's and the
// memory held stays within the budget.

}  // namespace
}  // namespace remat
