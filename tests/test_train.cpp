// End to end on the CPU: the small CNN's loss falls over a few dozen steps on the synthetic
// task, and the keep-everything plan's predicted peak equals the executor's measured peak.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <utility>
#include <vector>
#include <nlohmann/json.hpp>

#include "tests/source_dir.h"
#include "tools/training/training.h"

namespace remat {
namespace {

TEST(TrainEndToEnd, SmallCnnLossFalls) {
  TrainOptions opt;
  opt.config = test_source_dir() + "/configs/small_cnn.yaml";
  opt.steps = 40;
  opt.log_every = 10;
  TrainSummary s = run_training(opt);
  ASSERT_EQ(s.losses.size(), 40u);
  for (float l : s.losses) ASSERT_TRUE(std::isfinite(l));
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += s.losses[i] / 5.0, last += s.losses[35 + i] / 5.0;
  EXPECT_LT(last, 0.6 * first) << "mean loss of the first 5 steps " << first << ", last 5 " << last;
  EXPECT_GT(s.peak_bytes, 0);
}

// Float inputs other than images: configs/mlp.yaml's feature vectors [N, 64] learn the synthetic
// task, and under a budget below keeping everything the plan recomputes and is the memory.
TEST(TrainEndToEnd, FeatureMlpLearnsAndRunsItsPlanExactly) {
  TrainOptions opt;
  opt.config = test_source_dir() + "/configs/mlp.yaml";
  opt.steps = 30;
  TrainSummary s = run_training(opt);
  ASSERT_EQ(s.losses.size(), 30u);
  EXPECT_LT(s.losses.back(), 0.5 * s.losses.front());
  EXPECT_EQ(s.peak_bytes, s.predicted_peak);
  opt.steps = 2;
  opt.plan.budget = 2500000;  // keeping everything takes 2.71 MB, the least any schedule 2.32 MB
  opt.plan.strategy = "checkmate";
  s = run_training(opt);
  EXPECT_GT(s.recomputes_per_step, 0);
  EXPECT_EQ(s.peak_bytes, s.predicted_peak);
  EXPECT_LE(s.reserved_peak_bytes, *opt.plan.budget);
}

// A budgeted run with a recomputing plan writes a Chrome trace of its last step: one span per
// executed node (compute and recompute categories), free instants and a memory counter.
TEST(TrainEndToEnd, BudgetedRunWritesChromeTrace) {
  TrainOptions opt;
  opt.config = test_source_dir() + "/configs/small_cnn.yaml";
  opt.batch = 8;
  opt.steps = 2;
  opt.plan.budget = 4000000;
  opt.plan.strategy = "chen-sqrtn";
  opt.trace_file = ::testing::TempDir() + "trace.json";
  TrainSummary s = run_training(opt);
  EXPECT_LE(s.reserved_peak_bytes, *opt.plan.budget);
  EXPECT_EQ(s.peak_bytes, s.predicted_peak);
  ASSERT_GT(s.recomputes_per_step, 0);
  std::ifstream f(opt.trace_file);
  nlohmann::json t = nlohmann::json::parse(f);
  int compute = 0, recompute = 0, frees = 0, counters = 0;
  for (const auto& e : t.at("traceEvents")) {
    const std::string ph = e.at("ph"), cat = e.value("cat", "");
    compute += ph == "X" && cat == "compute";
    recompute += ph == "X" && cat == "recompute";
    frees += ph == "i" && cat == "free";
    counters += ph == "C";
  }
  EXPECT_EQ(recompute, s.recomputes_per_step);
  EXPECT_GT(compute, 20);
  EXPECT_GT(frees, 10);
  EXPECT_GT(counters, 20);
}

// --trace-steps K: the last K steps end to end on one timeline, each inside a "step k" span;
// node spans carry their op, output, shape, bytes and whether they recompute; a budget counter
// runs beside the memory counter.
TEST(TrainEndToEnd, TraceHoldsTheLastStepsWithArgsAndTheBudget) {
  TrainOptions opt;
  opt.config = test_source_dir() + "/configs/small_cnn.yaml";
  opt.batch = 8;
  opt.steps = 3;
  opt.plan.budget = 4000000;
  opt.plan.strategy = "chen-sqrtn";
  opt.trace_file = ::testing::TempDir() + "trace2.json";
  opt.trace_steps = 2;
  TrainSummary s = run_training(opt);
  ASSERT_GT(s.recomputes_per_step, 0);
  std::ifstream f(opt.trace_file);
  nlohmann::json t = nlohmann::json::parse(f);
  int recompute = 0, budget = 0, with_args = 0;
  std::vector<std::pair<double, double>> steps;  // start, end
  for (const auto& e : t.at("traceEvents")) {
    const std::string ph = e.at("ph"), cat = e.value("cat", "");
    if (ph == "X" && cat == "step")
      steps.emplace_back(e.at("ts").get<double>(), e.at("ts").get<double>() + e.at("dur").get<double>());
    if (ph == "X" && cat == "recompute") {
      ++recompute;
      EXPECT_EQ(e.at("args").at("recompute"), "yes") << e;
    }
    if (ph == "X" && (cat == "compute" || cat == "recompute")) {
      const auto& a = e.at("args");
      with_args += a.contains("bytes") && a.contains("shape") && a.contains("op");
    }
    if (ph == "C" && e.at("name") == "budget") {
      ++budget;
      EXPECT_DOUBLE_EQ(e.at("args").at("budget MB").get<double>(), 4.0);
    }
  }
  EXPECT_EQ(recompute, 2 * s.recomputes_per_step);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_LE(steps[0].second, steps[1].first) << "the steps follow one another";
  EXPECT_GT(with_args, 40);
  EXPECT_GT(budget, 20);
}

}  // namespace
}  // namespace remat
