// Token data for token models (formats in data.h): llm.c / nanoGPT token files and byte-level
// text, read whole and checked once, served as windows of T + 1 tokens; and synthetic token
// patterns with a learnable signal.
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "models/data.h"
#include "models/data_rng.h"
#include "runtime/core/check.h"

namespace remat {

namespace {

std::vector<unsigned char> read_bytes(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) REMAT_USER_ERROR("cannot open " << what << " '" << path << "'");
  return std::vector<unsigned char>((std::istreambuf_iterator<char>(f)),
                                    std::istreambuf_iterator<char>());
}

// Little-endian int32 / uint16 at byte `at` (the file formats are little-endian).
int32_t le_i32(const unsigned char* p) {
  return static_cast<int32_t>(static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                              static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24);
}
uint16_t le_u16(const unsigned char* p) {
  return static_cast<uint16_t>(p[0] | p[1] << 8);
}

// Serves window k = (s * G + shard.first + i) mod W of the tokens (Note in data.h).
class TokenWindowSource : public DataSource {
 public:
  TokenWindowSource(std::vector<uint16_t> tokens, std::string what, const TensorDesc& input,
                    const DataShard& shard)
      : tokens_(std::move(tokens)), what_(std::move(what)), shard_(shard), n_(input.shape.at(0)),
        t_(input.shape.at(1)) {
    const int64_t count = static_cast<int64_t>(tokens_.size());
    if (count < t_ + 1)
      REMAT_USER_ERROR(what_ << " has " << count << " tokens, too few for one sequence of T + 1 = "
                             << t_ + 1 << " tokens");
    windows_ = (count - 1) / t_;
  }

  void next_batch(int64_t step, void* input, int32_t* labels) override {
    auto* ids = static_cast<int32_t*>(input);
    const uint64_t w = static_cast<uint64_t>(windows_);
    const uint64_t global =
        static_cast<uint64_t>(shard_.global_batch > 0 ? shard_.global_batch : n_);
    const uint64_t first = ((static_cast<uint64_t>(step) % w) * (global % w) +
                            static_cast<uint64_t>(shard_.first)) % w;
    for (int64_t i = 0; i < n_; ++i) {
      const int64_t k = static_cast<int64_t>((first + static_cast<uint64_t>(i)) % w);
      const uint16_t* src = tokens_.data() + k * t_;
      for (int64_t j = 0; j < t_; ++j) {
        ids[i * t_ + j] = src[j];
        labels[i * t_ + j] = src[j + 1];
      }
    }
  }

  std::string describe() const override {
    std::ostringstream os;
    os << what_ << ": " << tokens_.size() << " tokens, " << windows_ << " sequences of "
       << t_ << " + 1" << data_shard_describe(shard_, n_);
    return os.str();
  }

 private:
  std::vector<uint16_t> tokens_;
  std::string what_;
  DataShard shard_;
  int64_t n_, t_, windows_ = 0;
};

class SyntheticTokenSource : public DataSource {
 public:
  SyntheticTokenSource(const SyntheticSeed& seed, int64_t vocab, const TensorDesc& input,
                       const DataShard& shard)
      : seed_(seed), vocab_(vocab), shard_(shard), n_(input.shape.at(0)), t_(input.shape.at(1)) {
    REMAT_CHECK(vocab_ >= 1, "synthetic tokens: vocab " << vocab_);
    Rng r(mix64(seed.task ^ 0x70CE45ull));  // Note [synthetic splits] in synthetic.cpp
    constexpr int64_t kAlphabet = 16;
    std::vector<int32_t> alphabet(kAlphabet);
    for (auto& a : alphabet) a = static_cast<int32_t>(r.below(vocab_));
    patterns_.resize(kSyntheticTokenPatterns * kSyntheticTokenPeriod);
    for (auto& p : patterns_) p = alphabet[static_cast<size_t>(r.below(kAlphabet))];
  }

  void next_batch(int64_t step, void* input, int32_t* labels) override {
    auto* ids = static_cast<int32_t*>(input);
    std::vector<int32_t> w(static_cast<size_t>(t_ + 1));
    for (int64_t i = 0; i < n_; ++i) {
      Rng r = sample_rng(stream_, step, shard_.first + i);  // i in the global batch
      const int32_t* pattern = patterns_.data() + r.below(kSyntheticTokenPatterns) * kSyntheticTokenPeriod;
      const int64_t phase = r.below(kSyntheticTokenPeriod);
      for (int64_t j = 0; j <= t_; ++j) {
        const bool noise = r.below(16) == 0;
        const int32_t random = static_cast<int32_t>(r.below(vocab_));
        w[static_cast<size_t>(j)] = noise ? random : pattern[(phase + j) % kSyntheticTokenPeriod];
      }
      std::memcpy(ids + i * t_, w.data(), static_cast<size_t>(t_) * sizeof(int32_t));
      std::memcpy(labels + i * t_, w.data() + 1, static_cast<size_t>(t_) * sizeof(int32_t));
    }
  }

  std::string describe() const override {
    std::ostringstream os;
    os << "synthetic tokens (" << seed_.describe() << ", " << kSyntheticTokenPatterns
       << " patterns of period " << kSyntheticTokenPeriod << ", vocab " << vocab_
       << data_shard_describe(shard_, n_) << ")";
    return os.str();
  }

 private:
  SyntheticSeed seed_;
  uint64_t stream_ = seed_.sample_stream();
  int64_t vocab_;
  DataShard shard_;
  int64_t n_, t_;
  std::vector<int32_t> patterns_;  // [pattern][period]
};

}  // namespace

std::vector<uint16_t> read_token_file(const std::string& path, int64_t vocab) {
  const std::vector<unsigned char> bytes = read_bytes(path, "token file");
  const int64_t size = static_cast<int64_t>(bytes.size());
  constexpr int64_t kHeaderBytes = kTokenFileHeaderInts * 4;
  if (size < kHeaderBytes)
    REMAT_USER_ERROR("token file '" << path << "' has " << size << " bytes, less than the "
                                    << kHeaderBytes << "-byte header (256 int32) of llm.c's format");
  const int32_t magic = le_i32(bytes.data()), version = le_i32(bytes.data() + 4);
  const int64_t count = le_i32(bytes.data() + 8);
  if (magic != kTokenFileMagic)
    REMAT_USER_ERROR("token file '" << path << "': magic " << magic << ", expected "
                                    << kTokenFileMagic
                                    << " (llm.c / nanoGPT .bin: 256 int32 header, uint16 tokens)");
  if (version != kTokenFileVersion)
    REMAT_USER_ERROR("token file '" << path << "': version " << version << ", only version "
                                    << kTokenFileVersion << " (uint16 tokens) is supported");
  if (count < 0)
    REMAT_USER_ERROR("token file '" << path << "': negative token count " << count << " in the header");
  const int64_t want = kHeaderBytes + 2 * count;  // count < 2^31: no overflow
  if (size < want)
    REMAT_USER_ERROR("token file '" << path << "' is truncated: the header declares " << count
                                    << " tokens (" << want << " bytes with the header), the file has "
                                    << size << " bytes (" << (size - kHeaderBytes) / 2 << " tokens)");
  if (size > want)
    REMAT_USER_ERROR("token file '" << path << "' has " << size - want
                                    << " bytes after the " << count
                                    << " tokens its header declares");
  std::vector<uint16_t> tokens(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) {
    tokens[static_cast<size_t>(k)] = le_u16(bytes.data() + kHeaderBytes + 2 * k);
    if (tokens[static_cast<size_t>(k)] >= vocab)
      REMAT_USER_ERROR("token file '" << path << "': token " << tokens[static_cast<size_t>(k)]
                                      << " at position " << k << " (byte "
                                      << kHeaderBytes + 2 * k << ") is outside the vocabulary [0, "
                                      << vocab << ")");
  }
  return tokens;
}

std::vector<uint16_t> read_text_file(const std::string& path) {
  const std::vector<unsigned char> bytes = read_bytes(path, "text file");
  return std::vector<uint16_t>(bytes.begin(), bytes.end());
}

std::unique_ptr<DataSource> make_token_window_source(std::vector<uint16_t> tokens,
                                                     const std::string& what,
                                                     const TensorDesc& input,
                                                     const DataShard& shard) {
  REMAT_CHECK(input.shape.size() == 2 && input.dtype == DType::I32,
              "token data: input must be int32 [N, T], got " << shape_str(input.shape));
  return std::make_unique<TokenWindowSource>(std::move(tokens), what, input, shard);
}

std::unique_ptr<DataSource> make_synthetic_token_source(const SyntheticSeed& seed, int64_t vocab,
                                                        const TensorDesc& input,
                                                        const DataShard& shard) {
  REMAT_CHECK(input.shape.size() == 2 && input.dtype == DType::I32,
              "token data: input must be int32 [N, T], got " << shape_str(input.shape));
  return std::make_unique<SyntheticTokenSource>(seed, vocab, input, shard);
}

}  // namespace remat
