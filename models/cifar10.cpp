// CIFAR-10 binary batches as a DataSource: files read and checked once, records served in order
// with wrap-around (format and normalisation in data.h).
#include <fstream>
#include <sstream>

#include "models/data.h"
#include "runtime/core/check.h"

namespace remat {

namespace {

constexpr int64_t kPlane = 32 * 32;

class Cifar10Source : public DataSource {
 public:
  Cifar10Source(const std::vector<std::string>& files, const TensorDesc& input,
                const DataShard& shard)
      : n_(input.shape.at(0)), shard_(shard) {
    REMAT_CHECK(input.shape == Shape({n_, 3, 32, 32}),
                "cifar10: input must be [N, 3, 32, 32], got " << shape_str(input.shape));
    for (const auto& f : files) load(f);
    if (records() == 0) REMAT_USER_ERROR("no records in " << files_);
  }

  void next_batch(int64_t step, void* input, int32_t* labels) override {
    auto* images = static_cast<float*>(input);
    const int64_t total = records();
    const int64_t global = shard_.global_batch > 0 ? shard_.global_batch : n_;
    for (int64_t i = 0; i < n_; ++i) {
      const int64_t rec = (step * global + shard_.first + i) % total;
      const uint8_t* p = bytes_.data() + rec * kCifarRecordBytes;
      labels[i] = p[0];
      float* x = images + i * 3 * kPlane;
      for (int c = 0; c < 3; ++c) {
        const float scale = 1.0f / (255.0f * kCifarStd[c]);
        const float shift = kCifarMean[c] / kCifarStd[c];
        for (int64_t q = 0; q < kPlane; ++q)
          x[c * kPlane + q] = static_cast<float>(p[1 + c * kPlane + q]) * scale - shift;
      }
    }
  }

  std::string describe() const override {
    std::ostringstream os;
    os << "cifar10: " << records() << " records from " << files_
       << data_shard_describe(shard_, n_);
    return os.str();
  }

 private:
  int64_t records() const { return static_cast<int64_t>(bytes_.size()) / kCifarRecordBytes; }

  void load(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) REMAT_USER_ERROR("cannot open CIFAR-10 file '" << path << "'");
    std::vector<uint8_t> data((std::istreambuf_iterator<char>(f)),
                              std::istreambuf_iterator<char>());
    const int64_t size = static_cast<int64_t>(data.size());
    if (size == 0 || size % kCifarRecordBytes != 0)
      REMAT_USER_ERROR("CIFAR-10 file '" << path << "' has " << size
                                         << " bytes, not a positive multiple of the record size "
                                         << kCifarRecordBytes << " (1 label + 3072 pixel bytes)");
    for (int64_t r = 0; r < size / kCifarRecordBytes; ++r) {
      const int label = data[static_cast<size_t>(r * kCifarRecordBytes)];
      if (label > 9)
        REMAT_USER_ERROR("CIFAR-10 file '" << path << "': record " << r << " (byte offset "
                                           << r * kCifarRecordBytes << ") has label " << label
                                           << ", expected 0..9");
    }
    bytes_.insert(bytes_.end(), data.begin(), data.end());
    files_ += (files_.empty() ? "" : ", ") + path;
  }

  int64_t n_;
  DataShard shard_;
  std::vector<uint8_t> bytes_;  // all records, back to back
  std::string files_;
};

}  // namespace

std::unique_ptr<DataSource> make_cifar10_source(const std::vector<std::string>& files,
                                                const TensorDesc& input, const DataShard& shard) {
  return std::make_unique<Cifar10Source>(files, input, shard);
}

}  // namespace remat
