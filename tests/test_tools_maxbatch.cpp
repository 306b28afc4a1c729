// `maxbatch` end to end as a process: the table and chart, agreement with `plan` at the batch it
// finds, --verify training at that batch, --vary seq on a token model and --vary input on an
// image model.
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
#include "tools/planning/problem_flags.h"
#include "tools/planning/svg.h"

namespace remat {
namespace {

// ---- maxbatch -------------------------------------------------------------------------------
TEST_F(ToolsTest, MaxBatchTableAndChart) {
  const Problem p = small_cnn_problem();
  // Twice the all-keep peak at batch 32: all-keep alone fits a batch of more than 32.
  const int64_t budget = 2 * all_keep_peak(p);
  RunResult r = run(MAXBATCH_EXE, "--config '" + kSmallCnn + "' --budget " + std::to_string(budget) +
                                      " --strategies all-keep,chen-sqrtn,chen-greedy,griewank,checkmate"
                                      " --time-limit 5 --svg '" + path("mb.svg") + "' --csv '" +
                                      path("mb.csv") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  std::map<std::string, int64_t> batch;
  for (const std::string& l : lines_of(r.out)) {
    std::istringstream is(l);
    std::string name, b, ub, secs;
    is >> name >> b >> ub >> secs;
    if (name == "griewank") {
      EXPECT_EQ(b, "n/a") << "small_cnn is not a chain: " << l;
    }
    if (name == "all-keep" || name == "chen-sqrtn" || name == "chen-greedy" ||
        name == "checkmate")
      batch[name] = std::stoll(b);
  }
  ASSERT_EQ(batch.size(), 4u) << r.out;
  EXPECT_GE(batch["all-keep"], 33);
  // all-keep's max batch: the largest batch whose all-keep peak fits, on the graph built at
  // that batch (Note [max-batch problems]).
  const int64_t b = batch["all-keep"];
  EXPECT_LE(all_keep_peak(config_problem(kSmallCnn, b)), budget);
  EXPECT_GT(all_keep_peak(config_problem(kSmallCnn, b + 1)), budget);
  for (const auto& [name, n] : batch) EXPECT_GE(batch["checkmate"], n) << name;
  const std::string svg = read_whole_file(path("mb.svg"));
  EXPECT_EQ(xml_check(svg), "");
  EXPECT_NE(svg.find(">checkmate<"), std::string::npos);
  // The CSV: a header and one row per strategy with the table's answers; griewank's size empty.
  const std::vector<std::string> rows = lines_of(read_whole_file(path("mb.csv")));
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows[0], "strategy,dimension,size,upper_bound,working_set_bound,overhead,status,"
                     "solve_seconds,budget_bytes,micro_batches");
  for (size_t k = 1; k < rows.size(); ++k) {
    std::vector<std::string> cells;
    std::stringstream is(rows[k]);
    for (std::string c; std::getline(is, c, ',');) cells.push_back(c);
    ASSERT_GE(cells.size(), 9u) << rows[k];
    EXPECT_EQ(cells[1], "batch");
    EXPECT_EQ(cells[8], std::to_string(budget));
    const std::string want = cells[0] == "griewank" ? "" : std::to_string(batch.at(cells[0]));
    EXPECT_EQ(cells[2], want) << rows[k];
    if (cells[0] == "checkmate") {
      EXPECT_NE(cells[4], "") << "checkmate's working-set bound";
    }
  }
}

// checkmate-offload runs after checkmate, whatever the order asked, and starts from its answer
// (Note [checkmate-offload]): its batch is never below checkmate's.
TEST_F(ToolsTest, MaxBatchRunsCheckmateOffloadLastFromTheBestAnswer) {
  RunResult r = run(MAXBATCH_EXE, "--config '" + kSmallCnn + "' --budget 20MB --strategies "
                                  "checkmate-offload,checkmate,chen-greedy --link-bandwidth 25 "
                                  "--time-limit 5 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> ls = lines_of(r.out);
  ASSERT_EQ(ls.size(), 3u) << r.out;
  std::vector<std::string> order;
  std::map<std::string, int64_t> batch;
  for (const std::string& l : ls) {
    nlohmann::json j = nlohmann::json::parse(l);
    order.push_back(j.at("strategy"));
    batch[order.back()] = j.at("batch").get<int64_t>();
    // Within the cost cap, one step plus a forward pass: at most 1.5x (a forward pass never
    // costs more than its backward pass in the FLOPs model).
    EXPECT_GE(j.at("overhead").get<double>(), 1.0) << l;
    EXPECT_LE(j.at("overhead").get<double>(), 1.5) << l;
  }
  EXPECT_EQ(order, (std::vector<std::string>{"chen-greedy", "checkmate", "checkmate-offload"}));
  EXPECT_GE(batch["checkmate-offload"], batch["checkmate"]);
  // Its upper bound is the working-set bound, which binds copies too, never its own answer.
  const nlohmann::json cm = nlohmann::json::parse(ls[1]), off = nlohmann::json::parse(ls[2]);
  EXPECT_EQ(off.at("upper_bound"), cm.at("working_set_bound"));
  EXPECT_EQ(off.at("working_set_bound"), cm.at("working_set_bound"));
  EXPECT_EQ(off.at("status") == "optimal", off.at("batch") == off.at("upper_bound")) << ls[2];
  EXPECT_GE(batch["checkmate"], batch["chen-greedy"]);
}

// The answer is self-consistent: `plan --config --batch B` finds a schedule at the batch B
// maxbatch reports, and at B + 1 the exact searches (the baselines) find none.
TEST_F(ToolsTest, MaxBatchAgreesWithPlanAtThatBatch) {
  const Problem p = small_cnn_problem();
  const int64_t budget = 2 * all_keep_peak(p);
  RunResult r = run(MAXBATCH_EXE, "--config '" + kSmallCnn + "' --budget " + std::to_string(budget) +
                                      " --strategies chen-greedy,checkmate --time-limit 10 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  std::map<std::string, int64_t> batch;
  for (const std::string& l : lines_of(r.out)) {
    nlohmann::json j = nlohmann::json::parse(l);
    batch[j.at("strategy")] = j.at("batch").get<int64_t>();
  }
  ASSERT_EQ(batch.size(), 2u) << r.out;
  auto plan_at = [&](const std::string& strategy, int64_t b) {
    RunResult pr = run(PLAN_EXE, "--config '" + kSmallCnn + "' --batch " + std::to_string(b) +
                                     " --budget " + std::to_string(budget) + " --strategies " +
                                     strategy + " --time-limit 10 --json");
    if (pr.code != 0) return false;  // the budget is below the minimum at b: no schedule
    return nlohmann::json::parse(lines_of(pr.out).at(0)).at("feasible").get<bool>();
  };
  for (const auto& [strategy, b] : batch) {
    ASSERT_GT(b, 0) << strategy;
    EXPECT_TRUE(plan_at(strategy, b)) << strategy << " at its max batch " << b;
  }
  EXPECT_FALSE(plan_at("chen-greedy", batch["chen-greedy"] + 1));
}

// Solver logs (--log-level 2: Clp and Cbc) go to stderr; stdout stays one JSON object a line.
TEST_F(ToolsTest, MaxBatchVerifyTrainsAtTheFoundBatch) {
  RunResult r = run(MAXBATCH_EXE, "--config '" + kSmallCnn + "' --budget 6MB"
                                  " --strategies all-keep,chen-greedy --verify");
  ASSERT_EQ(r.code, 0) << r.err;
  int ok = 0;
  for (const std::string& l : lines_of(r.out))
    if ((l.rfind("all-keep ", 0) == 0 || l.rfind("chen-greedy ", 0) == 0) &&
        l.find("verified") == std::string::npos && l.find("predicted") != std::string::npos) {
      EXPECT_NE(l.find(": ok"), std::string::npos) << l;
      ++ok;
    }
  EXPECT_EQ(ok, 2) << r.out;
}

// --vary seq: the longest sequence of a token model per strategy. all-keep's answer is exact:
// its plan fits at the length found and not one token longer (the graph rebuilt at each length,
// attention growing with T^2); a recomputing strategy reaches at least as far; the position
// table bounds the search; --verify trains at the found length.
TEST_F(ToolsTest, MaxBatchVariesTheSequenceLength) {
  const std::string tiny = test_source_dir() + "/configs/gpt2_tiny.yaml";
  auto at = [&](int64_t t) { return config_problem(tiny, int64_t{2}, "flops", t); };
  const int64_t budget = all_keep_peak(at(40));
  const std::string args = "--config '" + tiny + "' --vary seq --batch 2 --budget " + std::to_string(budget);
  RunResult r = run(MAXBATCH_EXE, args + " --strategies all-keep,chen-greedy");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("varying the sequence length (1 to 64"), std::string::npos) << r.out;
  std::map<std::string, int64_t> seq;
  for (const std::string& l : lines_of(r.out)) {
    std::istringstream is(l);
    std::string name, t;
    is >> name >> t;
    if (name == "all-keep" || name == "chen-greedy") seq[name] = std::stoll(t);
  }
  ASSERT_EQ(seq.size(), 2u) << r.out;
  EXPECT_GE(seq["all-keep"], 40);
  EXPECT_LE(all_keep_peak(at(seq["all-keep"])), budget);
  if (seq["all-keep"] < 64) {
    EXPECT_GT(all_keep_peak(at(seq["all-keep"] + 1)), budget);
  }
  EXPECT_GT(seq["chen-greedy"], seq["all-keep"]);
  // (all-keep's exact limit leaves no room for the arena's alignment: verify the recomputing one.)
  RunResult v = run(MAXBATCH_EXE, args + " --strategies chen-greedy --verify");
  ASSERT_EQ(v.code, 0) << v.err;
  EXPECT_NE(v.out.find(": ok"), std::string::npos) << v.out;
  // A budget above anything needed stops at the position table (max_len 64).
  SizeFamily family;
  family.at = at;
  family.max_size = 64;
  EXPECT_EQ(max_size(family, "all-keep", int64_t{1} << 40).batch, 64);
  RunResult image = run(MAXBATCH_EXE, "--config '" + kSmallCnn + "' --vary seq --budget 1GB");
  EXPECT_NE(image.code, 0);
  EXPECT_NE(image.err.find("not a token model"), std::string::npos) << image.err;
}

// Note [input-size search]: --vary input, the largest square input of an image model. A model
// whose skip connection needs H and W to be multiples of 4, searched in steps of 2: the sizes it
// refuses are skipped (counted, never answers); all-keep's answer is exact over the sizes that
// build; checkmate's is never below a baseline's; --verify trains at the answer with the
// predicted peak measured.
std::string skip_model(int64_t units) {
  return "name: sizes\ninput: [3, 16, 16]\nclasses: " + std::to_string(units) +
         "\nbatch: 2\noptimizer: {op: sgd, lr: 0.01}\n"
         "layers:\n"
         "  - {name: c1, op: conv2d, filters: 4, kernel: 3, padding: 1, activation: relu}\n"
         "  - {name: p1, op: maxpool, kernel: 2}\n"
         "  - {name: c2, op: conv2d, filters: 8, kernel: 3, padding: 1, activation: relu}\n"
         "  - {name: p2, op: maxpool, kernel: 2}\n"
         "  - {name: up, op: upsample, factor: 4}\n"
         "  - {name: cat, op: concat, inputs: [up, c1]}\n"
         "  - {name: c3, op: conv2d, filters: 4, kernel: 3, padding: 1, activation: relu}\n"
         "  - {name: flat, op: flatten}\n"
         "  - {name: fc, op: dense, units: " + std::to_string(units) + "}\n";
}

int64_t answer_of(const std::string& out, const std::string& strategy) {
  for (const std::string& l : lines_of(out)) {
    std::istringstream is(l);
    std::string name, value;
    is >> name >> value;
    if (name == strategy) return std::stoll(value);
  }
  return -1;
}

TEST_F(ToolsTest, MaxBatchVariesTheInputSize) {
  const std::string cfg = path("sizes.yaml");
  std::ofstream(cfg) << skip_model(4);
  auto at = [&](int64_t side) {
    ConfigProblem c;
    c.config = cfg;
    c.input = Shape{3, side, side};
    return problem_from_config(c);
  };
  const int64_t budget = all_keep_peak(at(48));
  const std::string args = "--config '" + cfg + "' --vary input --input-step 2 --budget " +
                           std::to_string(budget) + " --time-limit 10";
  RunResult r = run(MAXBATCH_EXE, args + " --strategies all-keep,chen-greedy,checkmate");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("varying the square input H = W in steps of 2 (4 to "), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(" refused) at batch 2"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(" 0 refused"), std::string::npos) << "odd multiples of 2 do not build";
  const int64_t keep = answer_of(r.out, "all-keep"), greedy = answer_of(r.out, "chen-greedy"),
                best = answer_of(r.out, "checkmate");
  EXPECT_EQ(keep % 4, 0) << r.out;
  EXPECT_GE(keep, 48);
  EXPECT_LE(all_keep_peak(at(keep)), budget);
  EXPECT_GT(all_keep_peak(at(keep + 4)), budget) << "the next size that builds does not fit";
  EXPECT_GE(best, std::max(keep, greedy)) << r.out;
  EXPECT_EQ(best % 4, 0) << r.out;
  RunResult j = run(MAXBATCH_EXE, args + " --strategies all-keep --json");
  ASSERT_EQ(j.code, 0) << j.err;
  EXPECT_EQ(nlohmann::json::parse(lines_of(j.out).at(0)).at("input"), keep) << j.out;
  RunResult v = run(MAXBATCH_EXE, args + " --strategies checkmate --verify");
  ASSERT_EQ(v.code, 0) << v.out << v.err;
  EXPECT_NE(v.out.find("--verify checkmate at input side " + std::to_string(best)),
            std::string::npos) << v.out;
  EXPECT_NE(v.out.find(": ok"), std::string::npos) << v.out;
}

// A size whose constant alone reaches the budget ends the search, and the line says so: here
// the dense layer's weights grow with H W.
TEST_F(ToolsTest, MaxBatchInputSearchEndsWhereTheConstantReachesTheBudget) {
  const std::string cfg = path("wide.yaml");
  std::ofstream(cfg) << skip_model(256);
  RunResult r = run(MAXBATCH_EXE, "--config '" + cfg + "' --vary input --budget 4MB "
                                  "--strategies all-keep,checkmate");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("in steps of 4 ("), std::string::npos) << "the stride product:\n" << r.out;
  EXPECT_NE(r.out.find("the sizes end where the constant ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(") reaches the budget at "), std::string::npos) << r.out;
  EXPECT_GT(answer_of(r.out, "all-keep"), 0) << r.out;
}

// A pyramid as PSPNet's (Note [size-relative attributes]): f (H / 4) pooled into 3 x 3 bins and
// upsampled back to f's size. The step is the stride product of the maps that scale with the
// input (4, from f), not of the bins' 3 x 3 map (which would give 8 and pass over sizes that
// build); the sizes whose f the bins do not divide are refused; all-keep's answer is exact over
// the sizes that build.
TEST_F(ToolsTest, MaxBatchInputStepComesFromTheMapsThatScale) {
  const std::string cfg = path("pyramid.yaml");
  std::ofstream(cfg) << "name: pyramid\ninput: [3, 24, 24]\nclasses: 4\nbatch: 2\n"
                        "layers:\n"
                        "  - {name: c1, op: conv2d, filters: 4, kernel: 3, padding: 1}\n"
                        "  - {name: p1, op: maxpool, kernel: 2}\n"
                        "  - {name: p2, op: maxpool, kernel: 2}\n"
                        "  - {name: bins, op: avgpool, bins: 3}\n"
                        "  - {name: up, op: upsample, size_of: p2}\n"
                        "  - {name: cat, op: concat, inputs: [p2, up]}\n"
                        "  - {name: gap, op: global_avgpool}\n"
                        "  - {name: fc, op: dense, units: 4}\n";
  auto at = [&](int64_t side) {
    ConfigProblem c;
    c.config = cfg;
    c.input = Shape{3, side, side};
    return problem_from_config(c);
  };
  const int64_t budget = all_keep_peak(at(60));
  RunResult r = run(MAXBATCH_EXE, "--config '" + cfg + "' --vary input --strategies all-keep "
                                  "--budget " + std::to_string(budget));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("in steps of 4 (12 to "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(" 0 refused"), std::string::npos) << "multiples of 4 not of 12 refuse";
  const int64_t keep = answer_of(r.out, "all-keep");
  EXPECT_GE(keep, 60) << r.out;
  EXPECT_EQ(keep % 12, 0) << r.out;
  EXPECT_LE(all_keep_peak(at(keep)), budget);
  EXPECT_GT(all_keep_peak(at(keep + 12)), budget) << "the next size that builds does not fit";
  // checkmate's working-set bound and the size its proof names are sides, not indices.
  RunResult j = run(MAXBATCH_EXE, "--config '" + cfg + "' --vary input --strategies checkmate "
                                  "--time-limit 5 --json --budget " + std::to_string(budget));
  ASSERT_EQ(j.code, 0) << j.err;
  const nlohmann::json cm = nlohmann::json::parse(lines_of(j.out).at(0));
  const int64_t ws = cm.at("working_set_bound"), bound = cm.at("upper_bound");
  EXPECT_EQ(ws % 12, 0) << j.out;
  EXPECT_GE(ws, bound) << j.out;
  const std::string proof = cm.at("bound_source");
  ASSERT_NE(proof.rfind(" at "), std::string::npos) << j.out;
  const int64_t named = std::stoll(proof.substr(proof.rfind(" at ") + 4));
  EXPECT_EQ(named % 12, 0) << j.out;
  EXPECT_GT(named, bound) << j.out;
  EXPECT_LE(named, bound + 12) << "the next size that builds, as a side: " << j.out;
}

// Note [smallest batch]: a model whose batch norm sees one value per channel at batch 1 (after
// global pooling) is searched from batch 2; all-keep's answer is exact there (it fits, the next
// batch does not), in the table, the JSON and under --verify.
TEST_F(ToolsTest, MaxBatchStartsAtTheSmallestBatchTheModelBuilds) {
  const std::string cfg = path("pooled_bn.yaml");
  std::ofstream(cfg) << "name: pooled_bn\ninput: [3, 16, 16]\nclasses: 10\nbatch: 2\n"
                        "optimizer: {op: sgd, lr: 0.01}\nlayers:\n"
                        "  - {name: c1, op: conv2d, filters: 8, kernel: 3, padding: 1, activation: relu}\n"
                        "  - {name: gap, op: global_avgpool}\n"
                        "  - {name: bn, op: batchnorm}\n"
                        "  - {name: fc, op: dense, units: 10}\n";
  const int64_t budget = 8000000;  // 8MB
  const std::string args = "--config '" + cfg + "' --budget 8MB --strategies all-keep,checkmate";
  RunResult r = run(MAXBATCH_EXE, args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("batch 1 does not build ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("more than 1 value per channel"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the search starts at batch 2"), std::string::npos) << r.out;
  const int64_t keep = answer_of(r.out, "all-keep");
  ASSERT_GE(keep, 2) << r.out;
  EXPECT_LE(all_keep_peak(config_problem(cfg, keep)), budget);
  EXPECT_GT(all_keep_peak(config_problem(cfg, keep + 1)), budget) << r.out;
  EXPECT_GE(answer_of(r.out, "checkmate"), keep) << r.out;
  RunResult j = run(MAXBATCH_EXE, args + " --json");
  ASSERT_EQ(j.code, 0) << j.err;
  EXPECT_EQ(nlohmann::json::parse(lines_of(j.out).at(0)).at("batch"), keep) << j.out;
  // checkmate's bounds and the batch its proof names are batches, not the search's indices.
  const nlohmann::json cm = nlohmann::json::parse(lines_of(j.out).at(1));
  const int64_t ws = cm.at("working_set_bound"), bound = cm.at("upper_bound");
  EXPECT_LE(problem_min_budget(config_problem(cfg, ws)), budget) << j.out;
  EXPECT_GT(problem_min_budget(config_problem(cfg, ws + 1)), budget) << j.out;
  const std::string proof = cm.at("bound_source");
  ASSERT_NE(proof.rfind(" at "), std::string::npos) << j.out;
  EXPECT_EQ(proof.substr(proof.rfind(" at ") + 4), std::to_string(bound + 1)) << j.out;
  RunResult v = run(MAXBATCH_EXE, "--config '" + cfg + "' --budget 8MB --strategies all-keep --verify");
  EXPECT_EQ(v.code, 0) << v.out << v.err;
}

TEST_F(ToolsTest, MaxBatchInputSearchRefusesWhatItCannotSearch) {
  const std::string gpt = "--config '" + test_source_dir() + "/configs/gpt2_tiny.yaml' ";
  RunResult tokens = run(MAXBATCH_EXE, gpt + "--vary input --budget 1GB");
  EXPECT_EQ(tokens.code, 1) << tokens.err;
  EXPECT_NE(tokens.err.find("a token model: its input size is the sequence length (--vary seq)"),
            std::string::npos) << tokens.err;
  const std::string cnn = "--config '" + kSmallCnn + "' --budget 1GB ";
  for (const std::string& bad : {cnn + "--vary input --input 3x64x64", cnn + "--input-step 8",
                                 cnn + "--vary inputs", cnn + "--vary seq --input-step 8"})
    EXPECT_EQ(run(MAXBATCH_EXE, bad).code, 2) << bad;
}

}  // namespace
}  // namespace remat
