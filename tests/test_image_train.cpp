// Training and validation on image data the test writes: validation metrics on hand-computed
// batches (top-1 / top-5 with ties, loss, confusion matrix, mean IoU, ignored pixels, wrapped
// last batches); a small CNN learns colour classes from an image folder and its validation
// accuracy says so, with and without a budget (the validation plan runs in the same memory),
// and a resumed run sees the samples an uninterrupted one sees;
// a fully convolutional net learns a segmentation set and reports its mean IoU.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/data_rng.h"
#include "runtime/core/check.h"
#include "models/images/image_decode.h"
#include "runtime/io/safetensors.h"
#include "tests/data_files.h"
#include "tests/tool_runner.h"
#include "tools/training/metrics.h"
#include "tools/training/training.h"

namespace remat {
namespace {

namespace fs = std::filesystem;

// ---- metrics on hand-computed batches ---------------------------------------------------------
TEST(EvalMetrics, ClassificationByHand) {
  // Three samples of four classes. Sample 0: label 2 is the largest logit (top-1). Sample 1:
  // label 0 ties with class 3 for the largest; the argmax takes the first, class 0: top-1.
  // Sample 2: label 3 is the smallest of four: top-5 but not top-1.
  const float z[] = {0, 1, 3, 2, 5, 1, 1, 5, 4, 3, 2, 1};
  const int32_t y[] = {2, 0, 3};
  EvalMetrics m;
  add_classification(z, y, 3, 4, kNoIgnoreIndex, 3, &m);
  EXPECT_EQ(m.count, 3);
  EXPECT_EQ(m.top1, 2);
  EXPECT_EQ(m.top5, 3);
  auto lse = [](std::vector<double> v) {
    double s = 0;
    for (double x : v) s += std::exp(x);
    return std::log(s);
  };
  const double want = (lse({0, 1, 3, 2}) - 3) + (lse({5, 1, 1, 5}) - 5) + (lse({4, 3, 2, 1}) - 1);
  EXPECT_NEAR(m.loss(), want / 3, 1e-12);
  // A last batch that wraps around counts its first `valid` samples only.
  EvalMetrics part;
  add_classification(z, y, 3, 4, kNoIgnoreIndex, 1, &part);
  EXPECT_EQ(part.count, 1);
  EXPECT_EQ(part.top1, 1);
  // A row labelled with the ignore_index counts in nothing (token_xent's -100 at a position).
  const int32_t y_ignored[] = {2, -100, 3};
  EvalMetrics ignored;
  add_classification(z, y_ignored, 3, 4, -100, 3, &ignored);
  EXPECT_EQ(ignored.count, 2);
  EXPECT_EQ(ignored.top1, 1);
  EXPECT_NEAR(ignored.loss(), ((lse({0, 1, 3, 2}) - 3) + (lse({4, 3, 2, 1}) - 1)) / 2, 1e-12);
  // Ranks add their sums.
  EvalMetrics a = part;
  a.add_vector(m.to_vector());
  EXPECT_EQ(a.count, 4);
  EXPECT_NEAR(a.top1_rate(), 0.75, 1e-12);
  // Top-5 is reported only with more than 5 classes (with 4 it is always 100 %).
  m.classes = 4;
  EXPECT_EQ(m.describe().find("top-5"), std::string::npos) << m.describe();
  EXPECT_EQ(m.json_fields().find("val_top5"), std::string::npos) << m.json_fields();
  m.classes = 6;
  EXPECT_NE(m.describe().find("top-5 100.00%"), std::string::npos) << m.describe();
  EXPECT_NE(m.json_fields().find("\"val_top5\": 1,"), std::string::npos) << m.json_fields();
}

TEST(EvalMetrics, SegmentationByHand) {
  // One image of 2 x 2 pixels, 3 classes, logits [1, 3, 2, 2] (class planes). Predictions:
  // pixel 0 -> 0, 1 -> 1, 2 -> 1, 3 -> 2. Labels 0, 1, 2, 255 (ignored).
  const float z[] = {/*c0*/ 9, 0, 0, 0, /*c1*/ 0, 9, 9, 0, /*c2*/ 0, 0, 0, 9};
  const int32_t y[] = {0, 1, 2, 255};
  EvalMetrics m;
  m.kind = MetricKind::Segmentation;
  m.classes = 3;
  add_segmentation(z, y, 1, 3, 2, 2, 255, 1, &m);
  EXPECT_EQ(m.count, 3);
  EXPECT_NEAR(m.pixel_accuracy(), 2.0 / 3, 1e-12);
  // IoU: class 0 1/1, class 1 1/2 (one false positive), class 2 0/1 (one false negative).
  EXPECT_NEAR(m.mean_iou(), (1.0 + 0.5 + 0.0) / 3, 1e-12);
  const double l = std::log(std::exp(9.0) + 2) - 9;  // each counted pixel: its label has 9
  EXPECT_NEAR(m.loss(), (l + l + (std::log(std::exp(9.0) + 2) - 0)) / 3, 1e-9);
}

// ---- training on image files -----------------------------------------------------------------
class ImageTrain : public ScratchDirTest {
 protected:
  void write(const std::string& rel, const std::string& bytes) {
    test::write_file_bytes(path(rel), bytes);
  }
  std::string config() { return test::write_colours_dataset(dir_); }
};

TEST_F(ImageTrain, LearnsColoursAndValidatesEveryKSteps) {
  TrainOptions o;
  o.config = config();
  o.steps = 30;
  o.eval_every = 10;
  o.log_every = 100;
  o.data_threads = 2;
  o.metrics_file = path("m.jsonl");
  o.summary_file = path("s.json");
  const TrainSummary s = run_training(o);
  ASSERT_TRUE(s.val.has_value());
  EXPECT_EQ(s.val->count, 12) << "every validation image once";
  EXPECT_GE(s.val->top1_rate(), 0.9) << s.val->describe();
  EXPECT_EQ(s.val->top5_rate(), 1.0) << "3 classes: always within the top 5";
  int evals = 0;
  std::ifstream m(path("m.jsonl"));
  for (std::string line; std::getline(m, line);) evals += nlohmann::json::parse(line).contains("val_top1");
  EXPECT_EQ(evals, 3) << "after steps 10, 20 and at the end (30)";
  const nlohmann::json j = nlohmann::json::parse(read_whole_file(path("s.json")));
  EXPECT_NEAR(j.at("val_top1").get<double>(), s.val->top1_rate(), 1e-9);
  EXPECT_EQ(j.at("val_count"), 12);
  EXPECT_EQ(j.at("skipped_samples"), 0);
}

// Note [saving at an error]: an unreadable image met mid-run (without --skip-bad-samples) stops
// the run with an error naming it, and --save holds the steps trained before it.
TEST_F(ImageTrain, ABadImageMidRunSavesTheStepsBeforeIt) {
  TrainOptions o;
  o.config = config();
  write("train/r/zz_bad.jpg", "not a jpeg");
  o.batch = 1;  // sample i of the first epoch is read at step i + 1
  o.steps = 37;
  o.log_every = 100;
  o.data_threads = 1;
  o.save_file = path("ck.safetensors");
  std::string error;
  try {
    run_training(o);
  } catch (const UserError& e) {
    error = e.what();
  }
  ASSERT_NE(error.find("zz_bad.jpg"), std::string::npos) << error;
  ASSERT_TRUE(fs::exists(path("ck.safetensors"))) << "no checkpoint at the error: " << error;
  const SafeTensorFile ck = safetensors_load(path("ck.safetensors"));
  const int64_t saved = std::stoll(ck.metadata.at("step"));
  EXPECT_GE(saved, 1) << "the bad image is not the first sample of this seed's order";
  EXPECT_LT(saved, 37);
  // Resuming without the bad file trains on from that step.
  fs::remove(path("train/r/zz_bad.jpg"));
  o.resume_file = path("ck.safetensors");
  o.save_file.clear();
  const TrainSummary s = run_training(o);
  EXPECT_EQ(s.steps_done, 37);
  EXPECT_EQ(static_cast<int64_t>(s.losses.size()), 37 - saved);
}

// Under a budget below keep-everything the training recomputes, and the validation plan runs in
// the same memory, after the steps, with the same result as without a budget (recomputation
// and plans change no value).
TEST_F(ImageTrain, ValidationRunsInsideTheTrainingBudget) {
  TrainOptions o;
  o.config = config();
  o.steps = 6;
  o.log_every = 100;
  const TrainSummary free_run = run_training(o);
  o.plan.strategy = "checkmate";
  o.plan.time_limit = 10;
  o.memory = "pool";
  TrainSummary tight;
  for (int pct = 90; pct >= 50 && tight.recomputes_per_step == 0; pct -= 10) {  // until it recomputes
    o.plan.budget = free_run.predicted_peak * pct / 100;
    try {
      tight = run_training(o);
    } catch (const UserError&) {
      break;  // below the minimum
    }
  }
  EXPECT_GT(tight.recomputes_per_step, 0);
  EXPECT_LE(tight.reserved_peak_bytes, *o.plan.budget);
  ASSERT_TRUE(tight.val && free_run.val);
  EXPECT_EQ(tight.val->loss(), free_run.val->loss());
  EXPECT_EQ(tight.val->top1, free_run.val->top1);
}

// A resumed run trains on exactly the batches (crops, flips, epoch order) of an uninterrupted
// one: sample i of step s depends only on (seed, s, i). Bit-identical losses and validation.
TEST_F(ImageTrain, AResumedRunSeesTheSameSamples) {
  TrainOptions o;
  o.config = config();
  o.steps = 8;  // 96 samples: into the third epoch of 36 images
  o.log_every = 100;
  o.data_threads = 3;
  const TrainSummary whole = run_training(o);
  o.steps = 5;
  o.data_threads = 1;
  o.save_file = path("ck.safetensors");
  const TrainSummary first = run_training(o);
  o.steps = 8;
  o.save_file.clear();
  o.resume_file = path("ck.safetensors");
  const TrainSummary rest = run_training(o);
  std::vector<float> joined = first.losses;
  joined.insert(joined.end(), rest.losses.begin(), rest.losses.end());
  EXPECT_EQ(joined, whole.losses);
  ASSERT_TRUE(rest.val && whole.val);
  EXPECT_EQ(rest.val->loss_sum, whole.val->loss_sum);
}

TEST_F(ImageTrain, SegmentationReportsMeanIou) {
  // Images whose left part is red (class 1) and right part blue (class 2), the top third 255.
  Rng rng(3);
  std::string list;
  for (int i = 0; i < 8; ++i) {
    const int64_t w = 24 + rng.below(16), h = 20 + rng.below(16), edge = w / 3 + rng.below(w / 3);
    std::vector<uint8_t> px(static_cast<size_t>(w * h * 3)), lab(static_cast<size_t>(w * h));
    for (int64_t p = 0; p < w * h; ++p) {
      const bool left = p % w < edge;
      px[3 * p] = static_cast<uint8_t>(left ? 200 : 30), px[3 * p + 2] = static_cast<uint8_t>(left ? 30 : 200);
      lab[static_cast<size_t>(p)] = p / w < h / 3 ? 255 : left ? 1 : 2;
    }
    write("seg/" + std::to_string(i) + ".png", encode_png(px.data(), w, h, 3));
    write("seg/" + std::to_string(i) + "_label.png", encode_palette_png(lab.data(), w, h));
    list += std::to_string(i) + ".png " + std::to_string(i) + "_label.png\n";
  }
  write("seg/train.txt", list);
  const std::string yaml = path("seg.yaml");
  std::ofstream(yaml) << "name: seg\ninput: [3, 16, 16]\nclasses: 3\nbatch: 4\n"
                         "loss: {op: softmax_xent_pixel, ignore_index: 255}\n"
                         "optimizer: {op: sgd, lr: 0.5, momentum: 0.9}\n"
                         "data: {source: segmentation, list: seg/train.txt}\n"
                         "val: {source: segmentation, list: seg/train.txt}\n"
                         "layers:\n  - {name: c, op: conv2d, filters: 3, kernel: 1}\n";
  TrainOptions o;
  o.config = yaml;
  o.steps = 40;
  o.log_every = 100;
  const TrainSummary s = run_training(o);
  ASSERT_TRUE(s.val.has_value());
  EXPECT_EQ(s.val->kind, MetricKind::Segmentation);
  // 8 images of 16 x 16 pixels but for the rows of 255 the top third leaves after the crop.
  EXPECT_GT(s.val->count, 8 * 16 * 16 / 2);
  EXPECT_LT(s.val->count, 8 * 16 * 16);
  EXPECT_GE(s.val->mean_iou(), 0.6) << s.val->describe();  // classes 1, 2 well; 0 absent
}

}  // namespace
}  // namespace remat
