// Checkpoints: save after k steps, resume (in either precision or layout), and the result equals
// an uninterrupted run bit for bit (weights, running statistics, optimizer state); bad
// checkpoints are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/source_dir.h"
#include "runtime/core/check.h"
#include "runtime/io/safetensors.h"
#include "tools/training/training.h"

namespace remat {
namespace {

std::string tmp(const std::string& name) { return ::testing::TempDir() + name; }

TrainOptions options(int steps, const std::string& save, const std::string& resume) {
  TrainOptions o;
  o.config = test_source_dir() + "/configs/small_cnn.yaml";
  o.batch = 4;
  o.steps = steps;
  o.save_file = save;
  o.resume_file = resume;
  o.log_every = 100;
  o.plan.budget = 20000000;  // a budgeted, rematerializing run (arena memory)
  o.plan.strategy = "chen-greedy";
  return o;
}

TEST(Resume, SaveResumeEqualsUninterrupted) {
  run_training(options(4, tmp("straight.safetensors"), ""));
  run_training(options(2, tmp("half.safetensors"), ""));
  TrainSummary resumed = run_training(options(4, tmp("resumed.safetensors"), tmp("half.safetensors")));
  EXPECT_EQ(resumed.losses.size(), 2u);  // steps 3 and 4 only
  SafeTensorFile a = safetensors_load(tmp("straight.safetensors"));
  SafeTensorFile b = safetensors_load(tmp("resumed.safetensors"));
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  EXPECT_EQ(a.metadata.at("step"), "4");
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].name, b.tensors[i].name);
    EXPECT_TRUE(a.tensors[i].data == b.tensors[i].data) << a.tensors[i].name;
  }
  EXPECT_NE(a.find("conv1.weight"), nullptr);          // PyTorch-style names
  EXPECT_NE(a.find("bn1.running_mean"), nullptr);
  EXPECT_NE(a.find("conv1.weight.momentum"), nullptr);
}

// bf16 (the activations; weights and optimizer state stay FP32): a resumed bf16 run equals an
// uninterrupted one bit for bit, the file records the precision and holds F32 tensors only, and
// resuming it in fp32 (or an fp32 checkpoint in bf16) trains on, saying so.
TEST(Resume, Bf16SaveResumeEqualsUninterrupted) {
  auto bf16 = [](TrainOptions o) {
    o.precision = "bf16";
    return o;
  };
  run_training(bf16(options(4, tmp("b_straight.safetensors"), "")));
  run_training(bf16(options(2, tmp("b_half.safetensors"), "")));
  TrainSummary resumed =
      run_training(bf16(options(4, tmp("b_resumed.safetensors"), tmp("b_half.safetensors"))));
  EXPECT_EQ(resumed.precision, "bf16");
  SafeTensorFile a = safetensors_load(tmp("b_straight.safetensors"));
  SafeTensorFile b = safetensors_load(tmp("b_resumed.safetensors"));
  EXPECT_EQ(a.metadata.at("precision"), "bf16");
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].dtype, DType::F32) << a.tensors[i].name;
    EXPECT_TRUE(a.tensors[i].data == b.tensors[i].data) << a.tensors[i].name;
  }
  // Another precision: allowed, and the run goes on from the FP32 state.
  TrainSummary in_fp32 = run_training(options(3, "", tmp("b_half.safetensors")));
  EXPECT_EQ(in_fp32.precision, "tf32");
  EXPECT_EQ(in_fp32.losses.size(), 1u);
  EXPECT_TRUE(std::isfinite(in_fp32.last_loss));
  run_training(options(2, tmp("f_half.safetensors"), ""));
  EXPECT_EQ(safetensors_load(tmp("f_half.safetensors")).metadata.at("precision"), "fp32");
  TrainSummary in_bf16 = run_training(bf16(options(3, "", tmp("f_half.safetensors"))));
  EXPECT_TRUE(std::isfinite(in_bf16.last_loss));
}

// Checkpoints hold no layout (Note [channels-last layout]): a channels-first run resumed in a
// channels-last model (under the same budget, with its own plan) ends bit for bit where the
// uninterrupted channels-first run does, since on the CPU both layouts compute the same values.
TEST(Resume, ResumingInTheOtherLayoutEqualsUninterrupted) {
  run_training(options(4, tmp("l_straight.safetensors"), ""));
  run_training(options(2, tmp("l_half.safetensors"), ""));
  TrainOptions last = options(4, tmp("l_resumed.safetensors"), tmp("l_half.safetensors"));
  last.overrides = {"layout=channels_last"};
  EXPECT_EQ(run_training(last).losses.size(), 2u);
  SafeTensorFile a = safetensors_load(tmp("l_straight.safetensors"));
  SafeTensorFile b = safetensors_load(tmp("l_resumed.safetensors"));
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].name, b.tensors[i].name);
    EXPECT_TRUE(a.tensors[i].data == b.tensors[i].data) << a.tensors[i].name;
  }
}

TEST(Resume, WrongModelOrMissingTensorIsAClearError) {
  safetensors_save(tmp("alien.safetensors"), {safetensor_f32("w", {1}, {1.0f})},
                   {{"format", "remat-checkpoint/1"}, {"model", "other"}, {"step", "1"}});
  try {
    run_training(options(3, "", tmp("alien.safetensors")));
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("other"), std::string::npos) << e.what();
  }
  safetensors_save(tmp("partial.safetensors"), {safetensor_f32("w", {1}, {1.0f})},
                   {{"format", "remat-checkpoint/1"}, {"model", "small_cnn"}, {"step", "1"}});
  try {
    run_training(options(3, "", tmp("partial.safetensors")));
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("conv1.weight"), std::string::npos) << e.what();
  }
}

// `plan -o` writes a schedule that names its problem; `train --plan` runs it and rejects it for
// another batch.
TEST(PlanFile, TrainRunsASavedScheduleAndRejectsAnotherGraph) {
  const std::string schedule = tmp("small_cnn_b4.json");
  const std::string cmd = std::string(PLAN_EXE) + " --config " + test_source_dir() +
                          "/configs/small_cnn.yaml --batch 4 --budget 3MB --strategies chen-greedy -o " +
                          schedule + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  TrainOptions o = options(2, "", "");
  o.plan.budget = 3000000;
  o.plan.schedule_file = schedule;
  TrainSummary s = run_training(o);
  EXPECT_EQ(s.peak_bytes, s.predicted_peak);
  EXPECT_LE(s.reserved_peak_bytes, 3000000);
  // The lowered execution plan saved by one run is run as is by the next, with the same peak.
  o.save_plan_file = tmp("small_cnn_b4_plan.json");
  run_training(o);
  TrainOptions again = options(2, "", "");
  again.plan.budget = 3000000;
  again.plan.schedule_file = o.save_plan_file;
  TrainSummary t = run_training(again);
  EXPECT_EQ(t.predicted_peak, s.predicted_peak);
  EXPECT_EQ(t.peak_bytes, s.peak_bytes);
  EXPECT_EQ(t.losses, s.losses);
  o.save_plan_file.clear();
  o.batch = 8;
  try {
    run_training(o);
    FAIL() << "ran a batch-4 schedule on a batch-8 graph";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(schedule), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("batch"), std::string::npos) << e.what();
  }
  again.batch = 8;
  try {
    run_training(again);
    FAIL() << "ran a batch-4 execution plan on a batch-8 graph";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("batch"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace remat
