// A class at each position of a float sequence (Note [per-position labels] in
// models/synthetic.cpp): `loss: token_xent` over an input [T, F], the labels [N, T'] the graph
// gets, the synthetic data that carries them, training and validation as a user runs them, and
// the errors of losses and shapes that do not fit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/build.h"
#include "models/config.h"
#include "models/data.h"
#include "ops/registry.h"
#include "tests/model_test_util.h"
#include "tests/tool_runner.h"

namespace remat {
namespace {

using ::testing::HasSubstr;

// Eight features at 32 positions, a linear tagger and a 1-D stride-2 convolution's worth of
// downsampling left out: the labels are as long as the output's positions.
std::string tagger_yaml(const std::string& last = "  - {name: fc2, op: dense, units: 5}\n",
                        const std::string& input = "[32, 8]") {
  return "name: tagger\ninput: " + input +
         "\nclasses: 5\nbatch: 16\nloss: token_xent\noptimizer: {op: adam, lr: 0.01}\n"
         "layers:\n"
         "  - {name: fc1, op: dense, units: 32, activation: relu}\n"
         "  - {name: ln, op: layernorm}\n" +
         last;
}

Graph build(const std::string& text) {
  return build_forward_graph(parse_model_config(text, "t.yaml"), make_builtin_registry());
}

TEST(SequenceLabels, TheGraphTakesALabelPerPosition) {
  const Graph g = build(tagger_yaml());
  EXPECT_EQ(g.value(g.label).desc.shape, (Shape{16, 32}));
  EXPECT_EQ(g.value(g.label).desc.dtype, DType::I32);
}

TEST(SequenceLabels, LossesAndShapesThatDoNotFitAreNamed) {
  const std::string four = tagger_yaml("  - {name: fc2, op: dense, units: 4}\n");
  EXPECT_THAT(test::user_error([&] { build(four); }),
              HasSubstr("t.yaml:10:5: layer 'fc2': output [16, 32, 4] does not fit loss "
                        "'token_xent' with classes 5 (t.yaml:3:1): the last layer must output "
                        "[16, T, 5] [N, T, K]"));
  std::string per_sample = tagger_yaml();
  per_sample.replace(per_sample.find("token_xent"), 10, "softmax_xent");
  EXPECT_THAT(test::user_error([&] { build(per_sample); }),
              HasSubstr("output [16, 32, 5] does not fit loss 'softmax_xent'"));
  EXPECT_THAT(test::user_error([] { build(tagger_yaml("", "[3, 8, 8]")); }),
              HasSubstr("t.yaml:5:1: model: field 'loss': 'token_xent' is not one of: "
                        "softmax_xent, softmax_xent_pixel (token_xent: a token model, or a float "
                        "sequence, input [T, F])"));
}

// Per-class feature means from batch 0 label the positions of batch 1: the labels carry the
// signal, also where the labels are shorter than the input (10 label positions over 20).
void check_position_signal(int64_t t, int64_t lt) {
  const int64_t n = 8, f = 4, classes = 4;
  const TensorDesc in{{n, t, f}, DType::F32}, lab{{n, lt}, DType::I32};
  auto d = make_synthetic_source(5, classes, in, lab, {}, 1);
  EXPECT_THAT(d->describe(), HasSubstr("per-position labels"));
  auto batch = [&](int64_t step, std::vector<float>& x, std::vector<int32_t>& y) {
    x.assign(static_cast<size_t>(in.numel()), 0);
    y.assign(static_cast<size_t>(lab.numel()), -1);
    d->next_batch(step, x.data(), y.data());
  };
  std::vector<float> x, x1;
  std::vector<int32_t> y, y1;
  batch(0, x, y);
  int nonzero = 0;
  for (int32_t l : y) {
    ASSERT_GE(l, 0);
    ASSERT_LT(l, classes);
    nonzero += l != 0;
  }
  EXPECT_GT(nonzero, 0);
  auto label_of = [&](const std::vector<int32_t>& ys, int64_t i, int64_t p) {
    return ys[static_cast<size_t>(i * lt + p * lt / t)];
  };
  std::vector<double> mean(static_cast<size_t>(classes * f), 0.0);
  std::vector<int> count(static_cast<size_t>(classes), 0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < t; ++p) {
      const int k = label_of(y, i, p);
      ++count[size_t(k)];
      for (int64_t c = 0; c < f; ++c) mean[size_t(k * f + c)] += x[size_t((i * t + p) * f + c)];
    }
  batch(1, x1, y1);
  int correct = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < t; ++p) {
      int best = 0;
      double best_d = 1e300;
      for (int k = 0; k < classes; ++k) {
        if (count[size_t(k)] == 0) continue;
        double dist = 0;
        for (int64_t c = 0; c < f; ++c) {
          const double e =
              x1[size_t((i * t + p) * f + c)] - mean[size_t(k * f + c)] / count[size_t(k)];
          dist += e * e;
        }
        if (dist < best_d) best_d = dist, best = k;
      }
      correct += best == label_of(y1, i, p);
    }
  EXPECT_GT(correct, n * t * 8 / 10) << correct << " of " << n * t;
  // The batch does not depend on the threads that fill it.
  auto three = make_synthetic_source(5, classes, in, lab, {}, 3);
  std::vector<float> x3(x.size());
  std::vector<int32_t> y3(y.size());
  three->next_batch(0, x3.data(), y3.data());
  EXPECT_EQ(x3, x);
  EXPECT_EQ(y3, y);
}

TEST(SequenceLabels, SyntheticPositionsCarryTheSignal) { check_position_signal(16, 16); }
TEST(SequenceLabels, SyntheticPositionsAtLowerResolution) { check_position_signal(20, 10); }

class SequenceLabelsRun : public ToolRunTest {};

// train learns the tags (a validation on held-out samples of the training task, Note [synthetic
// splits], reads nearly all positions right) and evaluate reports the same metrics from the
// checkpoint, counted in positions.
TEST_F(SequenceLabelsRun, TrainsAndValidatesPerPosition) {
  const std::string cfg = path("tagger.yaml");
  std::ofstream(cfg) << tagger_yaml() << "val: {source: synthetic, seed: 4}\n";
  RunResult r = run(TRAIN_EXE, "--config '" + cfg + "' --steps 60 --log-every 100 --save '" +
                                   path("ck.safetensors") + "' --summary '" + path("s.json") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("synthetic (seed 0, 5 classes, per-position labels)"));
  EXPECT_THAT(r.out, HasSubstr("synthetic (seed 4, held out, the task of seed 0, 5 classes"));
  const nlohmann::json s = nlohmann::json::parse(read_whole_file(path("s.json")));
  EXPECT_LT(s.at("last_loss").get<double>(), 0.5 * s.at("first_loss").get<double>()) << s.dump();
  EXPECT_EQ(s.at("val_count"), 16 * 32 * 20);  // 20 batches of 16 samples of 32 positions
  EXPECT_GT(s.at("val_top1").get<double>(), 0.9) << s.dump();
  EXPECT_THAT(r.out, HasSubstr("positions)"));
  RunResult e = run(EVALUATE_EXE, "--config '" + cfg + "' --checkpoint '" + path("ck.safetensors") +
                                      "' --json '" + path("e.json") + "'");
  ASSERT_EQ(e.code, 0) << e.err;
  const nlohmann::json ev = nlohmann::json::parse(read_whole_file(path("e.json")));
  for (const char* k : {"val_loss", "val_top1", "val_count"}) EXPECT_EQ(ev.at(k), s.at(k)) << k;
}

}  // namespace
}  // namespace remat
