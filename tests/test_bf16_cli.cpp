// bf16 as a user meets it, every case a process: --precision bf16, the config's precision key
// and its KEY=VALUE override; a bf16 plan trains under a budget no fp32 schedule fits; plan and
// maxbatch plan bf16; resuming in another precision says so; and bad precisions are clear errors.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/source_dir.h"
#include "tests/tool_runner.h"

namespace remat {
namespace {

const std::string kSmallCnn = test_source_dir() + "/configs/small_cnn.yaml";
const std::string kGpt2Tiny = test_source_dir() + "/configs/gpt2_tiny.yaml";

using Bf16Cli = ToolRunTest;

int64_t json_int(const std::string& text, const std::string& key) {
  return nlohmann::json::parse(text).at(key).get<int64_t>();
}

TEST_F(Bf16Cli, FlagOverrideAndSummaryAgree) {
  const std::string summary = path("s.json"), summary2 = path("s2.json");
  RunResult r = run(TRAIN_EXE, "--config '" + kSmallCnn + "' --steps 2 --precision bf16 "
                               "--summary '" + summary + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("precision bf16 (activations in bfloat16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(exact match)"), std::string::npos) << r.out;
  const nlohmann::json s = nlohmann::json::parse(read_whole_file(summary));
  EXPECT_EQ(s.at("precision"), "bf16");
  EXPECT_EQ(s.at("predicted_peak_bytes"), s.at("measured_peak_bytes"));
  // The config key through an override is the same run: the same losses to the digit.
  RunResult o = run(TRAIN_EXE, "--config '" + kSmallCnn + "' --steps 2 precision=bf16 "
                               "--summary '" + summary2 + "'");
  ASSERT_EQ(o.code, 0) << o.err;
  const nlohmann::json s2 = nlohmann::json::parse(read_whole_file(summary2));
  EXPECT_EQ(s2.at("last_loss"), s.at("last_loss"));
  EXPECT_EQ(s2.at("measured_peak_bytes"), s.at("measured_peak_bytes"));
  // --precision wins over the config's key.
  RunResult f = run(TRAIN_EXE, "--config '" + kSmallCnn + "' --steps 1 precision=bf16 "
                               "--precision fp32");
  ASSERT_EQ(f.code, 0) << f.err;
  EXPECT_NE(f.out.find("precision fp32"), std::string::npos) << f.out;
}

// small_cnn at batch 32 needs 8.33 MB for any fp32 schedule and 5.19 MB in bf16: at 7 MB fp32
// is refused and bf16 trains inside the budget, its measured peak the plan's.
TEST_F(Bf16Cli, Bf16TrainsUnderABudgetNoFp32ScheduleFits) {
  const std::string args = "--config '" + kSmallCnn + "' --steps 2 --budget 7MB ";
  RunResult f = run(TRAIN_EXE, args);
  EXPECT_EQ(f.code, 1);
  EXPECT_NE(f.err.find("below the minimum"), std::string::npos) << f.err;
  const std::string summary = path("s.json");
  RunResult b = run(TRAIN_EXE, args + "--precision bf16 --summary '" + summary + "'");
  ASSERT_EQ(b.code, 0) << b.err;
  const std::string s = read_whole_file(summary);
  EXPECT_LE(json_int(s, "measured_peak_bytes"), 7000000);
  EXPECT_EQ(json_int(s, "measured_peak_bytes"), json_int(s, "predicted_peak_bytes"));
}

// The planners see 2-byte activations: plan's keep-everything peak drops and maxbatch's batch
// grows (the FLOPs cost model; the constant, FP32, is the same).
TEST_F(Bf16Cli, PlanAndMaxBatchPlanBf16) {
  auto plan_peak = [&](const std::string& extra) {
    RunResult r = run(PLAN_EXE, "--config '" + kSmallCnn + "' --budget 20MB --strategies all-keep "
                                "--json " + extra);
    EXPECT_EQ(r.code, 0) << r.err;
    return json_int(r.out.substr(0, r.out.find('\n')), "peak_bytes");
  };
  const int64_t fp32 = plan_peak(""), bf16 = plan_peak("--precision bf16");
  EXPECT_LT(bf16, fp32);
  EXPECT_EQ(plan_peak("precision=bf16"), bf16);
  auto max_batch = [&](const std::string& extra) {
    RunResult r = run(MAXBATCH_EXE, "--config '" + kSmallCnn + "' --budget 40MB --strategies "
                                    "all-keep,chen-greedy --time-limit 5 --json " + extra);
    EXPECT_EQ(r.code, 0) << r.err;
    std::map<std::string, int64_t> batch;
    std::istringstream lines(r.out);
    for (std::string l; std::getline(lines, l);) {
      if (l.empty()) continue;
      const nlohmann::json j = nlohmann::json::parse(l);
      batch[j.at("strategy").get<std::string>()] = j.at("batch").get<int64_t>();
    }
    return batch;
  };
  auto b32 = max_batch(""), b16 = max_batch("--precision bf16");
  for (const char* s : {"all-keep", "chen-greedy"}) {
    EXPECT_GT(b32[s], 0) << s;
    EXPECT_GE(b16[s], b32[s] * 3 / 2) << s << ": fp32 " << b32[s] << ", bf16 " << b16[s];
  }
}

TEST_F(Bf16Cli, ResumingInAnotherPrecisionSaysSo) {
  const std::string ck = path("ck.safetensors");
  ASSERT_EQ(run(TRAIN_EXE, "--config '" + kSmallCnn + "' --batch 4 --steps 2 --precision bf16 "
                           "--save '" + ck + "'").code, 0);
  RunResult r = run(TRAIN_EXE, "--config '" + kSmallCnn + "' --batch 4 --steps 3 --resume '" +
                                   ck + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("a checkpoint of a bf16 run, resumed in fp32"), std::string::npos)
      << r.out;
  RunResult same = run(TRAIN_EXE, "--config '" + kSmallCnn + "' --batch 4 --steps 3 --precision "
                                  "bf16 --resume '" + ck + "'");
  ASSERT_EQ(same.code, 0) << same.err;
  EXPECT_EQ(same.out.find("resumed in"), std::string::npos) << same.out;
}

TEST_F(Bf16Cli, BadPrecisionsAreClearErrors) {
  RunResult flag = run(TRAIN_EXE, "--config '" + kSmallCnn + "' --precision fp16");
  EXPECT_EQ(flag.code, 2);
  EXPECT_NE(flag.err.find("--precision 'fp16' is not one of: fp32, tf32, tf32-all, bf16"),
            std::string::npos)
      << flag.err;
  RunResult key = run(TRAIN_EXE, "--config '" + kSmallCnn + "' precision=fp16");
  EXPECT_EQ(key.code, 1);
  EXPECT_NE(key.err.find("override 'precision=fp16': model: field 'precision': 'fp16' is not "
                         "one of: fp32, bf16"),
            std::string::npos)
      << key.err;
  // A layer asked to run in bf16 whose op has none (the embedding's output is the F32 table's
  // rows) is named with the override that asked for it.
  RunResult layer = run(TRAIN_EXE, "--config '" + kGpt2Tiny + "' layers.wte.precision=bf16");
  EXPECT_EQ(layer.code, 1);
  EXPECT_NE(layer.err.find("layer 'wte': field 'precision': op 'embedding' has no bf16 path"),
            std::string::npos)
      << layer.err;
  RunResult plan = run(PLAN_EXE, "--problem '" + path("none.json") + "' --budget 1MB "
                                 "--precision bf16");
  EXPECT_EQ(plan.code, 2);
  EXPECT_NE(plan.err.find("--precision needs --config"), std::string::npos) << plan.err;
}

}  // namespace
}  // namespace remat
