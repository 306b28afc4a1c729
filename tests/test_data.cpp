// models/data: synthetic source (deterministic, learnable) and the CIFAR-10 binary reader with
// its format errors, on tiny files written by the test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "models/data.h"
#include "models/data_rng.h"
#include "tests/model_test_util.h"

namespace remat {
namespace {

using ::testing::HasSubstr;
using test::user_error;

struct Batch {
  std::vector<float> x;
  std::vector<int32_t> y;
};

Batch next(DataSource& d, const TensorDesc& in, const TensorDesc& lab, int64_t step) {
  Batch b{std::vector<float>(static_cast<size_t>(in.numel())),
          std::vector<int32_t>(static_cast<size_t>(lab.numel()))};
  d.next_batch(step, b.x.data(), b.y.data());
  return b;
}

const TensorDesc kIn{{64, 3, 8, 8}, DType::F32};
const TensorDesc kLab{{64}, DType::I32};

TEST(Synthetic, DeterministicPerSeedAndStep) {
  auto a = make_synthetic_source(7, 10, kIn, kLab);
  auto b = make_synthetic_source(7, 10, kIn, kLab);
  auto c = make_synthetic_source(8, 10, kIn, kLab);
  Batch a3 = next(*a, kIn, kLab, 3);
  next(*b, kIn, kLab, 0);  // call order must not matter
  Batch b3 = next(*b, kIn, kLab, 3);
  EXPECT_EQ(a3.x, b3.x);
  EXPECT_EQ(a3.y, b3.y);
  EXPECT_NE(a3.x, next(*a, kIn, kLab, 4).x);
  EXPECT_NE(a3.x, next(*c, kIn, kLab, 3).x);
  std::vector<int> seen(10, 0);
  for (int32_t l : a3.y) {
    ASSERT_GE(l, 0);
    ASSERT_LT(l, 10);
    ++seen[static_cast<size_t>(l)];
  }
  int classes_seen = 0;
  for (int s : seen) classes_seen += s > 0;
  EXPECT_GE(classes_seen, 8);  // 64 uniform draws over 10 classes
  EXPECT_THAT(a->describe(), HasSubstr("seed 7"));
}

// The samples of a batch filled by several threads are the one-thread batch, bit for bit.
TEST(Synthetic, ThreadsDoNotChangeTheBatch) {
  const TensorDesc pix_lab{{64, 4, 4}, DType::I32};
  for (const TensorDesc& lab : {kLab, pix_lab}) {
    auto one = make_synthetic_source(7, 10, kIn, lab, {}, 1);
    auto four = make_synthetic_source(7, 10, kIn, lab, {}, 4);
    const Batch a = next(*one, kIn, lab, 5), b = next(*four, kIn, lab, 5);
    EXPECT_EQ(a.x, b.x);
    EXPECT_EQ(a.y, b.y);
  }
}

// Nearest class mean, fitted on one set of batches and scored on another (step 100 of `scored`,
// by default the same source): a learnable signal gives high accuracy, pure noise would give
// ~1/classes. Returns the correct of 64.
int nearest_mean_correct(const TensorDesc& in, const SyntheticSeed* scored = nullptr) {
  auto d = make_synthetic_source(3, 10, in, kLab);
  const size_t dim = static_cast<size_t>(in.numel() / 64);
  std::vector<double> mean(10 * dim, 0.0);
  std::vector<int> count(10, 0);
  for (int step = 0; step < 8; ++step) {
    Batch b = next(*d, in, kLab, step);
    for (size_t i = 0; i < 64; ++i) {
      const size_t k = static_cast<size_t>(b.y[i]);
      ++count[k];
      for (size_t j = 0; j < dim; ++j) mean[k * dim + j] += b.x[i * dim + j];
    }
  }
  for (size_t k = 0; k < 10; ++k)
    for (size_t j = 0; j < dim; ++j) mean[k * dim + j] /= std::max(1, count[k]);
  Batch t = next(scored ? *make_synthetic_source(*scored, 10, in, kLab) : *d, in, kLab, 100);
  int correct = 0;
  for (size_t i = 0; i < 64; ++i) {
    size_t best = 0;
    double best_d = 1e300;
    for (size_t k = 0; k < 10; ++k) {
      double dist = 0;
      for (size_t j = 0; j < dim; ++j) {
        const double e = t.x[i * dim + j] - mean[k * dim + j];
        dist += e * e;
      }
      if (dist < best_d) best_d = dist, best = k;
    }
    correct += static_cast<int32_t>(best) == t.y[i];
  }
  return correct;
}

TEST(Synthetic, ClassSignalIsLearnable) {
  EXPECT_GE(nearest_mean_correct(kIn), 58);  // >= 90%
  // Inputs that are not images: feature vectors [64] and sequences [16, 8].
  EXPECT_GE(nearest_mean_correct(TensorDesc{{64, 64}, DType::F32}), 58);
  EXPECT_GE(nearest_mean_correct(TensorDesc{{64, 16, 8}, DType::F32}), 58);
}

// Note [synthetic splits]: a validation source draws other samples than the training source
// (even at the same seed) of the same task, so what is fitted on the one scores on the other;
// with another task it scores chance.
TEST(Synthetic, HeldOutSamplesOfTheTrainingTask) {
  const SyntheticSeed same_seed(3, 3), other_seed(8, 3), other_task(8, 5);
  EXPECT_NE(next(*make_synthetic_source(same_seed, 10, kIn, kLab), kIn, kLab, 4).x,
            next(*make_synthetic_source(3, 10, kIn, kLab), kIn, kLab, 4).x);
  EXPECT_EQ(next(*make_synthetic_source(same_seed, 10, kIn, kLab), kIn, kLab, 4).x,
            next(*make_synthetic_source(same_seed, 10, kIn, kLab), kIn, kLab, 4).x);
  EXPECT_GE(nearest_mean_correct(kIn, &same_seed), 58);  // >= 90 %, as on training samples
  EXPECT_GE(nearest_mean_correct(kIn, &other_seed), 58);
  EXPECT_LE(nearest_mean_correct(kIn, &other_task), 25);  // chance: 6.4 of 64
  EXPECT_THAT(make_synthetic_source(other_seed, 10, kIn, kLab)->describe(),
              HasSubstr("synthetic (seed 8, held out, the task of seed 3, 10 classes"));
}

// Per-class mean of each channel from batch 0, then nearest mean per input pixel on batch 1,
// scored against the class of the label pixel it maps to (y * lh / 12, x * lw / 12).
void check_pixel_signal(int64_t lh, int64_t lw) {
  const int64_t h = 12, w = 12;
  const TensorDesc in{{8, 2, h, w}, DType::F32}, lab{{8, lh, lw}, DType::I32};
  auto d = make_synthetic_source(5, 4, in, lab);
  Batch b = next(*d, in, lab, 0);
  EXPECT_EQ(b.y, next(*d, in, lab, 0).y);
  int nonzero = 0;
  for (int32_t l : b.y) {
    ASSERT_GE(l, 0);
    ASSERT_LT(l, 4);
    nonzero += l != 0;
  }
  EXPECT_GT(nonzero, 0);
  auto class_at = [&](const Batch& bt, int64_t i, int64_t y, int64_t x) {
    return bt.y[static_cast<size_t>(i * lh * lw + (y * lh / h) * lw + x * lw / w)];
  };
  auto pixel = [&](const Batch& bt, int64_t i, int c, int64_t y, int64_t x) {
    return bt.x[static_cast<size_t>(((i * 2 + c) * h + y) * w + x)];
  };
  double mean[4][2] = {};
  int count[4] = {};
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        const int k = class_at(b, i, y, x);
        ++count[k];
        for (int c = 0; c < 2; ++c) mean[k][c] += pixel(b, i, c, y, x);
      }
  Batch t = next(*d, in, lab, 1);
  int correct = 0, total = 0, fg_correct = 0, fg_total = 0;  // fg: label != 0
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        int best = 0;
        double best_d = 1e300;
        for (int k = 0; k < 4; ++k) {
          if (!count[k]) continue;
          double dist = 0;
          for (int c = 0; c < 2; ++c) {
            const double e = pixel(t, i, c, y, x) - mean[k][c] / count[k];
            dist += e * e;
          }
          if (dist < best_d) best_d = dist, best = k;
        }
        const int truth = class_at(t, i, y, x);
        correct += best == truth;
        ++total;
        if (truth != 0) fg_correct += best == truth, ++fg_total;
      }
  EXPECT_GT(correct, total * 8 / 10) << correct << " of " << total;
  EXPECT_GT(fg_correct, fg_total / 2) << fg_correct << " of " << fg_total << " (foreground)";
}

TEST(Synthetic, PixelLabelsCarryTheSignal) { check_pixel_signal(12, 12); }
TEST(Synthetic, PixelLabelsAtLowerResolution) { check_pixel_signal(6, 4); }

// Note [table normals]: each entry is the normal quantile of its bin's middle probability to
// within its float rounding (which moves Phi by at most pdf(z) |z| 2^-24), increasing and
// symmetric; a few entries equal Python's statistics.NormalDist().inv_cdf (Wichura's AS241,
// another algorithm than the table's Newton steps on erfc).
TEST(Synthetic, TableNormalsAreTheQuantilesOfTheirBins) {
  const float* t = normal_quantiles();
  for (int i = 0; i < kNormalQuantiles; ++i) {
    const double z = t[i], p = (i + 0.5) / kNormalQuantiles;
    const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2.0 * M_PI);
    ASSERT_NEAR(0.5 * std::erfc(-z / std::sqrt(2.0)), p, pdf * std::fabs(z) * 0x1p-24 + 1e-15)
        << "entry " << i;
    ASSERT_EQ(t[i], -t[kNormalQuantiles - 1 - i]) << "entry " << i;
    if (i > 0) {
      ASSERT_LT(t[i - 1], t[i]) << "entry " << i;
    }
  }
  const std::pair<int, double> python[] = {{0, -4.324919040826044},
                                           {1, -4.076206516032617},
                                           {6553, -1.2815602601423814},
                                           {32767, -1.9124056051512083e-05},
                                           {55000, 0.9913433658721671}};
  for (const auto& [i, z] : python) EXPECT_NEAR(t[i], z, std::fabs(z) * 0x1p-24) << "entry " << i;
}

// 2^20 draws: mean 0, variance 1 and P(z < 1) = 0.841345 to within 5 standard errors; a count
// that is not a multiple of four takes the first values of the next word.
TEST(Synthetic, TableNormalDrawsAreStandardNormal) {
  const int64_t n = int64_t(1) << 20;
  std::vector<float> x(static_cast<size_t>(n));
  Rng r(11);
  fill_normal(r, x.data(), n);
  double sum = 0, sq = 0;
  int64_t below_one = 0;
  for (float v : x) sum += v, sq += double(v) * v, below_one += v < 1.0f;
  const double mean = sum / n, var = sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 5.0 / std::sqrt(double(n)));
  EXPECT_NEAR(var, 1.0, 5.0 * std::sqrt(2.0 / double(n)));
  const double p1 = 0.8413447460685429;
  EXPECT_NEAR(double(below_one) / n, p1, 5.0 * std::sqrt(p1 * (1 - p1) / double(n)));
  std::vector<float> seven(7), eight(8);
  Rng a(5), b(5);
  fill_normal(a, seven.data(), 7);
  fill_normal(b, eight.data(), 8);
  EXPECT_EQ(seven, std::vector<float>(eight.begin(), eight.begin() + 7));
  EXPECT_EQ(a.next(), b.next());  // both took two words
}

// --- CIFAR-10 -----------------------------------------------------------------------------

class Cifar : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("remat_cifar_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "d");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Record r of file f: label (f + r) % 10, pixel q of channel c = (7 * f + 3 * r + c + q) % 256.
  static std::vector<uint8_t> record(int f, int r, int label = -1) {
    std::vector<uint8_t> rec(kCifarRecordBytes);
    rec[0] = static_cast<uint8_t>(label >= 0 ? label : (f + r) % 10);
    for (int c = 0; c < 3; ++c)
      for (int q = 0; q < 1024; ++q)
        rec[1 + c * 1024 + q] = static_cast<uint8_t>((7 * f + 3 * r + c + q) % 256);
    return rec;
  }
  void write(const std::string& name, const std::vector<uint8_t>& bytes) {
    std::ofstream o(dir_ / "d" / name, std::ios::binary);
    o.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  }
  // data_batch_k.bin with `records[k-1]` records each.
  void write_train(const std::vector<int>& records) {
    for (int f = 1; f <= 5; ++f) {
      std::vector<uint8_t> bytes;
      for (int r = 0; r < records[static_cast<size_t>(f - 1)]; ++r) {
        auto rec = record(f, r);
        bytes.insert(bytes.end(), rec.begin(), rec.end());
      }
      write("data_batch_" + std::to_string(f) + ".bin", bytes);
    }
  }
  ModelConfig config(const std::string& extra = "") {
    return parse_model_config("name: c\ninput: [3, 32, 32]\nclasses: 10\nbatch: 4\n"
                              "data: {source: cifar10, path: d" + extra + "}\n"
                              "layers:\n  - {name: r, op: relu}\n", "c.yaml");
  }
  std::string open_error(const ModelConfig& cfg, const TensorDesc& in) {
    const TensorDesc labels{{in.shape[0]}, DType::I32};
    return user_error([&] { make_data_source(cfg, in, labels, dir_.string()); });
  }
  std::filesystem::path dir_;
};

const TensorDesc kCifarIn{{4, 3, 32, 32}, DType::F32};
const TensorDesc kCifarLab{{4}, DType::I32};

float expect_pixel(int byte, int c) { return (byte / 255.0f - kCifarMean[c]) / kCifarStd[c]; }

TEST_F(Cifar, DecodesInOrderWithWrapAround) {
  write_train({2, 1, 1, 1, 1});  // 6 records: (f1 r0) (f1 r1) (f2 r0) (f3 r0) (f4 r0) (f5 r0)
  auto d = make_data_source(config(), kCifarIn, kCifarLab, dir_.string());
  EXPECT_THAT(d->describe(), HasSubstr("6 records"));
  const int file_of[6] = {1, 1, 2, 3, 4, 5}, rec_of[6] = {0, 1, 0, 0, 0, 0};
  for (int step = 0; step < 3; ++step) {
    Batch b = next(*d, kCifarIn, kCifarLab, step);
    for (int i = 0; i < 4; ++i) {
      const int g = (step * 4 + i) % 6, f = file_of[g], r = rec_of[g];
      EXPECT_EQ(b.y[static_cast<size_t>(i)], (f + r) % 10) << "step " << step << " sample " << i;
      for (int c = 0; c < 3; ++c)
        for (int q : {0, 1, 517, 1023}) {
          const float got = b.x[static_cast<size_t>((i * 3 + c) * 1024 + q)];
          EXPECT_NEAR(got, expect_pixel((7 * f + 3 * r + c + q) % 256, c), 1e-5f)
              << "step " << step << " sample " << i << " channel " << c << " pixel " << q;
        }
    }
  }
}

TEST_F(Cifar, TestSplitAndAbsolutePath) {
  auto rec = record(9, 0, 3);
  write("test_batch.bin", rec);
  ModelConfig cfg = parse_model_config(
      "name: c\ninput: [3, 32, 32]\nclasses: 10\nbatch: 4\ndata: {source: cifar10, path: '" +
          (dir_ / "d").string() + "', split: test}\nlayers:\n  - {name: r, op: relu}\n",
      "c.yaml");
  auto d = make_data_source(cfg, kCifarIn, kCifarLab, "/elsewhere");
  Batch b = next(*d, kCifarIn, kCifarLab, 0);
  EXPECT_EQ(b.y, (std::vector<int32_t>{3, 3, 3, 3}));
  EXPECT_NEAR(b.x[1024 + 5], expect_pixel((63 + 1 + 5) % 256, 1), 1e-5f);
}

TEST_F(Cifar, MissingFileIsNamed) {
  write_train({1, 1, 1, 1, 1});
  std::filesystem::remove(dir_ / "d" / "data_batch_4.bin");
  std::string e = open_error(config(), kCifarIn);
  EXPECT_THAT(e, HasSubstr("c.yaml:5:7: data: source cifar10: "));
  EXPECT_THAT(e, HasSubstr("cannot open CIFAR-10 file '" +
                           (dir_ / "d" / "data_batch_4.bin").string()));
}

TEST_F(Cifar, BadSizeNamesFileAndSize) {
  write_train({1, 1, 1, 1, 1});
  auto rec = record(2, 0);
  rec.resize(3000);
  write("data_batch_2.bin", rec);
  std::string e = open_error(config(), kCifarIn);
  EXPECT_THAT(e, HasSubstr("data_batch_2.bin' has 3000 bytes, not a positive multiple of the "
                           "record size 3073"));
}

TEST_F(Cifar, BadLabelNamesFileAndRecord) {
  write_train({1, 1, 1, 1, 1});
  std::vector<uint8_t> bytes;
  for (int r = 0; r < 3; ++r) {
    auto rec = record(3, r, r == 2 ? 12 : 1);
    bytes.insert(bytes.end(), rec.begin(), rec.end());
  }
  write("data_batch_3.bin", bytes);
  std::string e = open_error(config(), kCifarIn);
  EXPECT_THAT(e, HasSubstr("data_batch_3.bin': record 2 (byte offset 6146) has label 12, "
                           "expected 0..9"));
}

TEST_F(Cifar, AnInputThatIsNotAnImageIsNamed) {
  write_train({1, 1, 1, 1, 1});
  EXPECT_THAT(open_error(config(), TensorDesc{{4, 20}, DType::F32}),
              HasSubstr("c.yaml:5:7: data: source cifar10: reads images, and the model's input "
                        "is [20] per sample, not an image [C, H, W] (source synthetic serves any "
                        "input)"));
}

TEST_F(Cifar, ShapeAndClassesMustMatch) {
  write_train({1, 1, 1, 1, 1});
  const TensorDesc small{{4, 3, 16, 16}, DType::F32};
  std::string e = open_error(config(), small);
  EXPECT_THAT(e, HasSubstr("c.yaml:5:7: data: source cifar10: needs input [3, 32, 32], classes "
                           "10"));
  EXPECT_THAT(e, HasSubstr("got input [3, 16, 16]"));
  ModelConfig cfg = config();
  cfg.classes = 5;
  e = open_error(cfg, kCifarIn);
  EXPECT_THAT(e, HasSubstr("classes 5"));
}

// Data parallel: the shards of N ranks are the slices of one process's global batch.
template <typename Make>
void expect_shards_slice_the_global_batch(Make make, const TensorDesc& global_in,
                                          const TensorDesc& global_lab, int ranks) {
  const int64_t n = global_in.shape[0] / ranks;
  const int64_t per = global_in.numel() / global_in.shape[0];
  TensorDesc in = global_in, lab = global_lab;
  in.shape[0] = n;
  lab.shape[0] = n;
  auto whole = make(global_in, DataShard{});
  for (int64_t step : {0, 3}) {
    const Batch g = next(*whole, global_in, global_lab, step);
    for (int r = 0; r < ranks; ++r) {
      auto part = make(in, DataShard{r * n, n * ranks});
      const Batch b = next(*part, in, lab, step);
      EXPECT_EQ(b.x, std::vector<float>(g.x.begin() + r * n * per, g.x.begin() + (r + 1) * n * per))
          << "rank " << r << " step " << step;
      EXPECT_EQ(b.y, std::vector<int32_t>(g.y.begin() + r * n, g.y.begin() + (r + 1) * n));
      if (step == 0) {
        EXPECT_THAT(part->describe(), HasSubstr("samples " + std::to_string(r * n) + "-"));
      }
    }
  }
}

TEST(DataShard, SyntheticShardsSliceTheGlobalBatch) {
  expect_shards_slice_the_global_batch(
      [](const TensorDesc& in, const DataShard& s) {
        TensorDesc lab{{in.shape[0]}, DType::I32};
        return make_synthetic_source(7, 10, in, lab, s);
      },
      kIn, kLab, 4);
}

TEST_F(Cifar, ShardsSliceTheGlobalBatch) {
  write_train({3, 2, 1, 1, 2});  // 9 records: batches wrap around at different places
  const TensorDesc in{{6, 3, 32, 32}, DType::F32}, lab{{6}, DType::I32};
  expect_shards_slice_the_global_batch(
      [&](const TensorDesc& i, const DataShard& s) {
        return make_data_source(config(), i, TensorDesc{{i.shape[0]}, DType::I32}, dir_.string(),
                                s);
      },
      in, lab, 3);
}

TEST(DataSource, SyntheticFromConfig) {
  ModelConfig cfg = parse_model_config(
      "name: s\ninput: [3, 8, 8]\nclasses: 10\nbatch: 64\ndata: {source: synthetic, seed: 7}\n"
      "layers:\n  - {name: r, op: relu}\n", "s.yaml");
  auto d = make_data_source(cfg, kIn, kLab, "");
  auto direct = make_synthetic_source(7, 10, kIn, kLab);
  EXPECT_EQ(next(*d, kIn, kLab, 2).x, next(*direct, kIn, kLab, 2).x);
}

}  // namespace
}  // namespace remat
