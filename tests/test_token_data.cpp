// Token data (models/tokens.cpp): llm.c / nanoGPT token files and byte-level text, good and
// broken, written by the test; the windows every source serves; synthetic token patterns.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <unistd.h>

#include "models/data.h"
#include "tests/data_files.h"
#include "tests/model_test_util.h"

namespace remat {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using test::user_error;

struct Batch {
  std::vector<int32_t> x, y;
};

Batch next(DataSource& d, const TensorDesc& in, int64_t step) {
  Batch b{std::vector<int32_t>(static_cast<size_t>(in.numel())),
          std::vector<int32_t>(static_cast<size_t>(in.numel()))};
  d.next_batch(step, b.x.data(), b.y.data());
  return b;
}

class TokenFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("remat_tokens_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void write_bytes(const std::string& name, const std::vector<unsigned char>& bytes) {
    std::ofstream o(dir_ / name, std::ios::binary);
    o.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  void write_tokens(const std::string& name, const std::vector<uint16_t>& tokens,
                    int32_t magic = kTokenFileMagic, int32_t version = kTokenFileVersion,
                    int64_t declared = -1) {
    test::write_llmc_tokens((dir_ / name).string(), tokens, magic, version, declared);
  }
  // A token model of sequence T reading `data` (a YAML map).
  ModelConfig config(const std::string& data, int64_t vocab = 50257) {
    return parse_model_config("name: m\nsequence: 4\nvocab: " + std::to_string(vocab) +
                                  "\nbatch: 2\ndata: " + data +
                                  "\nlayers:\n  - {name: e, op: embedding, vocab: 8, dim: 2}\n",
                              "m.yaml");
  }
  std::unique_ptr<DataSource> open(const ModelConfig& cfg) {
    return make_data_source(cfg, kIn, kIn, dir_.string());
  }
  std::string open_error(const ModelConfig& cfg) { return user_error([&] { open(cfg); }); }

  const TensorDesc kIn{{2, 4}, DType::I32};
  std::filesystem::path dir_;
};

std::vector<uint16_t> iota_tokens(int n, int base = 0) {
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<uint16_t>(base + i);
  return t;
}

// 100 tokens, T = 4: W = 24 disjoint windows; step s, sample i reads window (2 s + i) mod 24.
TEST_F(TokenFiles, WindowsInFileOrderWithWrapAround) {
  write_tokens("train.bin", iota_tokens(100, 1000));
  auto src = open(config("{source: tokens, path: train.bin}"));
  EXPECT_THAT(src->describe(), HasSubstr("100 tokens, 24 sequences"));
  Batch b0 = next(*src, kIn, 0);
  EXPECT_EQ(b0.x, (std::vector<int32_t>{1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007}));
  EXPECT_EQ(b0.y, (std::vector<int32_t>{1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008}));
  Batch b11 = next(*src, kIn, 11);  // windows 22, 23
  EXPECT_EQ(b11.x[0], 1088);
  EXPECT_EQ(b11.y[7], 1096);  // window 23 ends at token 96, the last one a window may use
  Batch b12 = next(*src, kIn, 12);  // wraps: windows 0, 1
  EXPECT_EQ(b12.x, b0.x);
  EXPECT_EQ(b12.y, b0.y);
}

// Data parallel: 3 ranks of batch 2 read the slices of one process's batch of 6, at every step,
// from files (windows, wrapping at different places) and synthetic patterns.
TEST_F(TokenFiles, ShardsSliceTheGlobalBatch) {
  write_tokens("train.bin", iota_tokens(70, 1000));  // T = 4: 17 windows
  const ModelConfig file = config("{source: tokens, path: train.bin}");
  const ModelConfig synthetic = config("{source: synthetic, seed: 5}", 300);
  const TensorDesc global{{6, 4}, DType::I32};
  for (const ModelConfig* cfg : {&file, &synthetic}) {
    auto whole = make_data_source(*cfg, global, global, dir_.string());
    for (int64_t step : {0, 2, 5}) {
      const Batch g = next(*whole, global, step);
      for (int r = 0; r < 3; ++r) {
        auto part = make_data_source(*cfg, kIn, kIn, dir_.string(), DataShard{2 * r, 6});
        const Batch b = next(*part, kIn, step);
        EXPECT_EQ(b.x, std::vector<int32_t>(g.x.begin() + 8 * r, g.x.begin() + 8 * (r + 1)))
            << cfg->data.source << " rank " << r << " step " << step;
        EXPECT_EQ(b.y, std::vector<int32_t>(g.y.begin() + 8 * r, g.y.begin() + 8 * (r + 1)));
        EXPECT_THAT(part->describe(), HasSubstr("of each global batch of 6"));
      }
    }
  }
}

TEST_F(TokenFiles, BrokenFilesNameTheFileAndTheConfigField) {
  const ModelConfig cfg = config("{source: tokens, path: bad.bin}", 50);
  const std::string at = "m.yaml:5:24: data: field 'path': token file '";
  write_tokens("bad.bin", iota_tokens(10), 12345);
  std::string e = open_error(cfg);
  EXPECT_THAT(e, StartsWith(at));
  EXPECT_THAT(e, HasSubstr("magic 12345, expected 20240520"));
  write_tokens("bad.bin", iota_tokens(10), kTokenFileMagic, 2);
  EXPECT_THAT(open_error(cfg), HasSubstr("version 2, only version 1 (uint16 tokens)"));
  write_tokens("bad.bin", iota_tokens(10), kTokenFileMagic, kTokenFileVersion, 20);
  EXPECT_THAT(open_error(cfg), HasSubstr("truncated: the header declares 20 tokens (1064 bytes "
                                         "with the header), the file has 1044 bytes (10 tokens)"));
  write_tokens("bad.bin", iota_tokens(10), kTokenFileMagic, kTokenFileVersion, 8);
  EXPECT_THAT(open_error(cfg), HasSubstr("4 bytes after the 8 tokens its header declares"));
  write_tokens("bad.bin", iota_tokens(60));  // tokens 50.. are outside vocab 50
  EXPECT_THAT(open_error(cfg), HasSubstr("token 50 at position 50 (byte 1124) is outside the "
                                         "vocabulary [0, 50)"));
  write_bytes("bad.bin", std::vector<unsigned char>(100, 0));
  EXPECT_THAT(open_error(cfg), HasSubstr("has 100 bytes, less than the 1024-byte header"));
  write_tokens("bad.bin", iota_tokens(4));  // T + 1 = 5 needed
  EXPECT_THAT(open_error(cfg), HasSubstr("has 4 tokens, too few for one sequence of T + 1 = 5"));
  std::filesystem::remove(dir_ / "bad.bin");
  EXPECT_THAT(open_error(cfg), HasSubstr("cannot open token file"));
}

TEST_F(TokenFiles, TextIsBytes) {
  const std::string text = "hello, tokens\n";
  write_bytes("in.txt", std::vector<unsigned char>(text.begin(), text.end()));
  auto src = open(config("{source: text, path: in.txt}", 256));
  Batch b = next(*src, kIn, 0);
  EXPECT_EQ(b.x, (std::vector<int32_t>{'h', 'e', 'l', 'l', 'o', ',', ' ', 't'}));
  EXPECT_EQ(b.y[7], 'o');
  // 14 bytes, T = 4: 3 windows; step 1 reads windows 2, 0.
  Batch b1 = next(*src, kIn, 1);
  EXPECT_EQ(b1.x[0], 'o');
  EXPECT_EQ(b1.x[4], 'h');
  // A vocabulary below the byte range is an error at `vocab`.
  EXPECT_THAT(open_error(config("{source: text, path: in.txt}", 100)),
              HasSubstr("m.yaml:3:1: model: field 'vocab': 100 is below 256"));
}

// The share of `b`'s tokens that occur somewhere in `a`.
double shared_tokens(const Batch& a, const Batch& b) {
  const std::set<int32_t> seen(a.x.begin(), a.x.end());
  int64_t in = 0;
  for (int32_t t : b.x) in += seen.count(t) > 0;
  return static_cast<double>(in) / static_cast<double>(b.x.size());
}

// Note [synthetic splits]: a validation source's samples differ from the training source's at
// the same seed, and follow its patterns (their tokens come from its 16-token alphabet but for
// the 1/16 noise) unless the task differs (another alphabet of the 300 tokens).
TEST(SyntheticTokens, HeldOutSamplesOfTheTrainingTask) {
  const TensorDesc in{{16, 48}, DType::I32};
  const Batch train = next(*make_synthetic_token_source(7, 300, in), in, 3);
  const Batch same = next(*make_synthetic_token_source(SyntheticSeed(7, 7), 300, in), in, 3);
  const Batch other = next(*make_synthetic_token_source(SyntheticSeed(2, 7), 300, in), in, 3);
  const Batch task = next(*make_synthetic_token_source(SyntheticSeed(2, 9), 300, in), in, 3);
  EXPECT_NE(same.x, train.x);
  EXPECT_GT(shared_tokens(train, same), 0.9);
  EXPECT_GT(shared_tokens(train, other), 0.9);
  EXPECT_LT(shared_tokens(train, task), 0.5);
  EXPECT_THAT(make_synthetic_token_source(SyntheticSeed(2, 7), 300, in)->describe(),
              HasSubstr("synthetic tokens (seed 2, held out, the task of seed 7, "));
}

TEST(SyntheticTokens, DeterministicShiftedAndLearnable) {
  const TensorDesc in{{16, 48}, DType::I32};
  auto a = make_synthetic_token_source(7, 300, in);
  auto b = make_synthetic_token_source(7, 300, in);
  Batch a3 = next(*a, in, 3);
  next(*b, in, 0);
  EXPECT_EQ(next(*b, in, 3).x, a3.x);
  EXPECT_NE(next(*a, in, 4).x, a3.x);
  EXPECT_NE(next(*make_synthetic_token_source(8, 300, in), in, 3).x, a3.x);
  int periodic = 0, total = 0;
  for (int64_t i = 0; i < 16; ++i)
    for (int64_t j = 0; j < 48; ++j) {
      const int32_t x = a3.x[static_cast<size_t>(i * 48 + j)], y = a3.y[static_cast<size_t>(i * 48 + j)];
      ASSERT_GE(x, 0);
      ASSERT_LT(x, 300);
      if (j + 1 < 48) {
        EXPECT_EQ(y, a3.x[static_cast<size_t>(i * 48 + j + 1)]);  // next token
      }
      if (j + 1 >= kSyntheticTokenPeriod) {  // the target repeats the token one period back
        periodic += y == a3.x[static_cast<size_t>(i * 48 + j + 1 - kSyntheticTokenPeriod)];
        ++total;
      }
    }
  // Two independent 1/16 noise draws: about (15/16)^2 = 88 % of targets are predictable.
  EXPECT_GT(periodic, total * 8 / 10) << periodic << " of " << total;
  EXPECT_LT(periodic, total);
}

}  // namespace
}  // namespace remat
