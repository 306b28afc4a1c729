// `evaluate` as a user runs it: a checkpoint trained on an image folder reports the metrics the
// training run's last validation reported, with and without a budget that makes its plan
// recompute; --data points it at another folder; a token model reports llm.c val files' loss
// and perplexity; wrong inputs are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/data_files.h"
#include "tests/source_dir.h"
#include "tests/tool_runner.h"

namespace remat {
namespace {

class Evaluate : public ToolRunTest {
 protected:
  nlohmann::json json_file(const std::string& name) {
    return nlohmann::json::parse(read_whole_file(path(name)));
  }
  // The colours dataset, trained 12 steps and saved; returns "--config ... --checkpoint ... ".
  // With a residual add, so that a forward-only plan has a value worth recomputing (conv's
  // output, held across conv2 and conv3 until `res`); a chain's forward never recomputes.
  std::string trained_colours() {
    const std::string cfg = path("residual.yaml");
    std::string text = read_whole_file(test::write_colours_dataset(dir_));
    const std::string gap = "  - {name: gap";
    text.insert(text.find(gap), "  - {name: res, op: add, inputs: [conv, conv3]}\n");
    std::ofstream(cfg) << text;
    RunResult r = run(TRAIN_EXE, "--config '" + cfg + "' --steps 12 --log-every 100 --save '" +
                                     path("ck.safetensors") + "' --summary '" + path("s.json") + "'");
    EXPECT_EQ(r.code, 0) << r.err;
    return "--config '" + cfg + "' --checkpoint '" + path("ck.safetensors") + "' ";
  }
};

TEST_F(Evaluate, ReportsWhatTheTrainingRunValidated) {
  const std::string model = trained_colours();
  RunResult r = run(EVALUATE_EXE, model + "--json '" + path("e.json") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("colours after step 12, batch 12, cpu, fp32"), std::string::npos) << r.out;
  const nlohmann::json train = json_file("s.json"), ev = json_file("e.json");
  // The same weights, data, batch and inference graph: the same sums, printed alike.
  for (const char* k : {"val_loss", "val_top1", "val_count"}) EXPECT_EQ(ev.at(k), train.at(k)) << k;
  // Three classes: every label is within the top 5, so top-5 is not reported.
  EXPECT_FALSE(ev.contains("val_top5")) << ev.dump();
  EXPECT_FALSE(train.contains("val_top5")) << train.dump();
  EXPECT_EQ(r.out.find("top-5"), std::string::npos) << r.out;
  EXPECT_EQ(ev.at("val_count"), 12);
  EXPECT_EQ(ev.at("step"), 12);
  EXPECT_EQ(ev.at("samples"), 12);
  EXPECT_EQ(ev.at("recomputes"), 0) << "no budget: keep everything";

  // Under a budget below keep-everything's forward peak the plan frees and recomputes; the
  // metrics stay the same (recomputation is bit-identical).
  const int64_t free_peak = ev.at("predicted_peak_bytes").get<int64_t>();
  bool recomputed = false;
  for (int pct = 95; pct >= 50 && !recomputed; pct -= 5) {
    const int64_t budget = free_peak * pct / 100;
    RunResult t = run(EVALUATE_EXE, model + "--budget " + std::to_string(budget) +
                                        " --time-limit 10 --json '" + path("t.json") + "'");
    if (t.code != 0) break;  // below the minimum
    const nlohmann::json tight = json_file("t.json");
    EXPECT_LE(tight.at("predicted_peak_bytes").get<int64_t>(), budget);
    for (const char* k : {"val_loss", "val_top1", "val_count"}) EXPECT_EQ(tight.at(k), ev.at(k)) << k;
    recomputed = tight.at("recomputes").get<int>() > 0;
  }
  EXPECT_TRUE(recomputed) << "no budget between 95 % and 50 % of the peak made the plan recompute";

  // --data: the training folder instead (36 images).
  RunResult d = run(EVALUATE_EXE, model + "--data '" + path("train") + "' --json '" + path("d.json") + "'");
  ASSERT_EQ(d.code, 0) << d.err;
  EXPECT_EQ(json_file("d.json").at("val_count"), 36);
  EXPECT_NE(d.out.find(path("train")), std::string::npos) << d.out;
}

TEST_F(Evaluate, TokenModelsReportPerplexityOnLlmcValFiles) {
  // gpt2_tiny on llm.c token files: a repeating sequence to train on, the same to validate.
  std::vector<uint16_t> tokens;
  for (int i = 0; i < 4000; ++i) tokens.push_back(static_cast<uint16_t>("abcdefghij"[i % 10]));
  test::write_llmc_tokens(path("tiny_train.bin"), tokens);
  test::write_llmc_tokens(path("tiny_val.bin"), std::vector<uint16_t>(tokens.begin(), tokens.begin() + 1000));
  std::string text = read_whole_file(test_source_dir() + "/configs/gpt2_tiny.yaml");
  const std::string synthetic = "data: {source: synthetic, seed: 7}";
  const size_t at = text.find(synthetic);
  ASSERT_NE(at, std::string::npos) << "configs/gpt2_tiny.yaml changed: update this test";
  text.replace(at, synthetic.size(), "data: {source: tokens, path: tiny_train.bin}\n"
                                     "val: {source: tokens, path: tiny_val.bin}");
  std::ofstream(path("tiny.yaml")) << text;
  RunResult tr = run(TRAIN_EXE, "--config '" + path("tiny.yaml") + "' --steps 30 --eval-every 15 "
                                "--eval-batches 2 --save '" + path("ck.safetensors") +
                                "' --summary '" + path("s.json") + "'");
  ASSERT_EQ(tr.code, 0) << tr.err;
  EXPECT_NE(tr.out.find("eval after step 15: val loss"), std::string::npos) << tr.out;
  const nlohmann::json train = json_file("s.json");
  RunResult r = run(EVALUATE_EXE, "--config '" + path("tiny.yaml") + "' --checkpoint '" +
                                      path("ck.safetensors") + "' --batches 2 --json '" +
                                      path("e.json") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json ev = json_file("e.json");
  EXPECT_EQ(ev.at("val_loss"), train.at("val_loss"));
  EXPECT_EQ(ev.at("val_count"), 2 * 8 * 64) << "2 batches of 8 sequences of 64 tokens";
  const double loss = ev.at("val_loss").get<double>();
  EXPECT_NEAR(ev.at("val_perplexity").get<double>(), std::exp(loss), 1e-6 * std::exp(loss));
  EXPECT_LT(loss, std::log(256.0) / 2) << "30 steps on a period-10 sequence learn something";
}

TEST_F(Evaluate, WrongInputsAreClearErrors) {
  const std::string model = trained_colours();
  RunResult none = run(EVALUATE_EXE, "--config '" + path("residual.yaml") + "'");
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("--checkpoint is required"), std::string::npos) << none.err;
  // A config without val data and no --data.
  std::string text = read_whole_file(path("residual.yaml"));
  text.erase(text.find("val: "), text.find('\n', text.find("val: ")) + 1 - text.find("val: "));
  std::ofstream(path("noval.yaml")) << text;
  RunResult noval = run(EVALUATE_EXE, "--config '" + path("noval.yaml") + "' --checkpoint '" +
                                          path("ck.safetensors") + "'");
  EXPECT_EQ(noval.code, 1);
  EXPECT_NE(noval.err.find("no `val` section"), std::string::npos) << noval.err;
  // A checkpoint of another model.
  RunResult other = run(EVALUATE_EXE, model + "layers.fc.units=4 classes=4");
  EXPECT_EQ(other.code, 1);
  EXPECT_NE(other.err.find("ck.safetensors"), std::string::npos) << other.err;
  // A folder that does not exist.
  RunResult missing = run(EVALUATE_EXE, model + "--data '" + path("nowhere") + "'");
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("nowhere"), std::string::npos) << missing.err;
  // A budget below the plan's minimum.
  RunResult tiny = run(EVALUATE_EXE, model + "--budget 1KB");
  EXPECT_EQ(tiny.code, 1);
  EXPECT_NE(tiny.err.find("budget"), std::string::npos) << tiny.err;
}

}  // namespace
}  // namespace remat
