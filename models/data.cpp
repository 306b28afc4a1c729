// make_data_source: picks the data source named in the config and checks that it can serve the
// graph's input and labels. The sources live in synthetic.cpp, cifar10.cpp, tokens.cpp and
// images/image_source.cpp.
#include "models/data.h"

#include <algorithm>
#include <filesystem>
#include <thread>

#include "models/images/image_source.h"
#include "models/sample_threads.h"
#include "runtime/core/bf16.h"
#include "runtime/core/check.h"

namespace remat {

namespace {

std::string resolve_path(const std::string& path, const std::string& config_dir) {
  std::filesystem::path p = path;
  if (p.is_relative() && !config_dir.empty()) p = std::filesystem::path(config_dir) / p;
  return p.string();
}

// Note [synthetic splits] (synthetic.cpp): a synthetic val section validates on held-out samples
// of the training data's task.
SyntheticSeed synthetic_seed(const ModelConfig& cfg, const DataConfig& d) {
  if (d.section != "val") return SyntheticSeed(d.seed);
  return SyntheticSeed(d.seed, cfg.data.source == "synthetic" ? cfg.data.seed : d.seed);
}

// Token models: synthetic patterns, a text file or a token file.
std::unique_ptr<DataSource> make_token_source(const ModelConfig& cfg, const DataConfig& d,
                                              const TensorDesc& input, const TensorDesc& labels,
                                              const std::string& config_dir,
                                              const DataShard& shard) {
  REMAT_CHECK(input.dtype == DType::I32 && input.shape.size() == 2 && labels.shape == input.shape &&
                  labels.dtype == DType::I32,
              "data: a token model's input and labels must be int32 [N, T], got "
                  << shape_str(input.shape) << " and " << shape_str(labels.shape));
  if (d.source == "synthetic")
    return make_synthetic_token_source(synthetic_seed(cfg, d), cfg.vocab, input, shard);
  if (d.source == "text" && cfg.vocab < 256)
    REMAT_USER_ERROR(cfg.where_vocab << ": model: field 'vocab': " << cfg.vocab
                                     << " is below 256, the byte tokens of data source text ("
                                     << d.where << ")");
  const std::string path = resolve_path(d.path, config_dir);
  try {
    if (d.source == "text")
      return make_token_window_source(read_text_file(path), "text " + path, input, shard);
    if (d.source == "tokens")
      return make_token_window_source(read_token_file(path, cfg.vocab), "tokens " + path, input,
                                      shard);
  } catch (const UserError& e) {
    throw UserError(d.path_where + ": " + d.section + ": field 'path': " + e.what());
  }
  REMAT_USER_ERROR(d.where << ": data: unknown source '" << d.source << "' for a token model");
}

// Image folders and segmentation pairs (models/images/image_source.h).
std::unique_ptr<DataSource> make_image_data(const ModelConfig& cfg, const DataConfig& d,
                                            const TensorDesc& input, const TensorDesc& labels,
                                            const std::string& config_dir, const DataShard& shard,
                                            const LoaderOptions& opt) {
  std::vector<ImageSample> samples;
  std::string what;
  std::string where = d.where;
  try {
    if (d.source == "folder") {
      where = d.path_where + ": " + d.section + ": field 'path'";
      what = "folder " + resolve_path(d.path, config_dir);
      samples = scan_image_folder(resolve_path(d.path, config_dir), nullptr);
    } else if (!d.list.empty()) {
      where = d.list_where + ": " + d.section + ": field 'list'";
      what = "segmentation list " + resolve_path(d.list, config_dir);
      samples = read_segmentation_list(resolve_path(d.list, config_dir));
    } else {
      where = d.labels_where + ": " + d.section + ": field 'labels'";
      what = "segmentation " + resolve_path(d.images, config_dir);
      samples = scan_segmentation_folders(resolve_path(d.images, config_dir),
                                          resolve_path(d.labels, config_dir));
    }
  } catch (const UserError& e) {
    throw UserError(where + ": " + e.what());
  }
  const int64_t ignore = loss_ignore_index(cfg);
  if (d.source == "segmentation" && labels.shape.size() != 3)
    REMAT_USER_ERROR(d.where << ": " << d.section << ": source segmentation needs a per-pixel loss "
                                "(loss: softmax_xent_pixel), got " << cfg.loss);
  if (d.source == "folder" && labels.shape.size() != 1)
    REMAT_USER_ERROR(d.where << ": " << d.section << ": source folder serves one class per image; loss "
                             << cfg.loss << " needs label maps (source segmentation)");
  return make_image_source(std::move(samples), what, d, cfg.classes, ignore, input, labels, shard,
                           opt);
}

// Note [bf16 input batch] (models/build.cpp): a BF16 image batch is the F32 batch of the same
// source rounded to nearest even, pixel by pixel, as the cast node it replaces would round it.
// The samples are rounded on the source's threads (a 224 x 224 batch of 64 takes 8 ms on one).
class Bf16Batch final : public DataSource {
 public:
  Bf16Batch(std::unique_ptr<DataSource> inner, const TensorDesc& input, int threads)
      : inner_(std::move(inner)), f32_(static_cast<size_t>(input.numel())),
        samples_(input.shape.at(0)), threads_(threads) {}
  void next_batch(int64_t step, void* input, int32_t* labels) override {
    inner_->next_batch(step, f32_.data(), labels);
    const int64_t per = static_cast<int64_t>(f32_.size()) / std::max<int64_t>(samples_, 1);
    fill_samples(samples_, threads_, [&](int64_t i) {
      bf16_narrow(f32_.data() + i * per, static_cast<uint16_t*>(input) + i * per, per);
    });
  }
  std::string describe() const override { return inner_->describe() + ", rounded to bf16"; }
  int64_t size() const override { return inner_->size(); }
  int64_t skipped_samples() const override { return inner_->skipped_samples(); }

 private:
  std::unique_ptr<DataSource> inner_;
  std::vector<float> f32_;
  int64_t samples_;
  int threads_;
};

std::unique_ptr<DataSource> make_image_source_f32(const ModelConfig& cfg, const DataConfig& d,
                                                  const TensorDesc& input,
                                                  const TensorDesc& labels,
                                                  const std::string& config_dir,
                                                  const DataShard& shard, const LoaderOptions& opt);

}  // namespace

int default_loader_threads() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) - 1);
}

std::unique_ptr<DataSource> make_data_source(const ModelConfig& cfg, const TensorDesc& input,
                                             const TensorDesc& labels,
                                             const std::string& config_dir,
                                             const DataShard& shard, const LoaderOptions& opt,
                                             const DataConfig* section) {
  REMAT_CHECK(shard.first >= 0 && (shard.global_batch == 0 ||
                                    shard.first + input.shape.at(0) <= shard.global_batch),
              "data: shard of samples " << shard.first << ".." << shard.first + input.shape.at(0)
                                        << " outside the global batch " << shard.global_batch);
  const DataConfig& d = section ? *section : cfg.data;
  if (cfg.tokens()) return make_token_source(cfg, d, input, labels, config_dir, shard);
  REMAT_CHECK(input.dtype == DType::F32 || input.dtype == DType::BF16,
              "data: an image batch must be F32 or BF16, got " << dtype_name(input.dtype));
  if (input.dtype == DType::F32)
    return make_image_source_f32(cfg, d, input, labels, config_dir, shard, opt);
  const TensorDesc f32{input.shape, DType::F32};
  return std::make_unique<Bf16Batch>(
      make_image_source_f32(cfg, d, f32, labels, config_dir, shard, opt), input, opt.threads);
}

namespace {

std::unique_ptr<DataSource> make_image_source_f32(const ModelConfig& cfg, const DataConfig& d,
                                                  const TensorDesc& input,
                                                  const TensorDesc& labels,
                                                  const std::string& config_dir,
                                                  const DataShard& shard, const LoaderOptions& opt) {
  const std::string prefix = d.where + ": " + d.section + ": source " + d.source + ": ";
  REMAT_CHECK(input.shape.size() >= 2 && input.shape.size() <= 4,
              "data: input must be [N, C, H, W], [N, F] or [N, T, F], got "
                  << shape_str(input.shape));
  REMAT_CHECK(labels.dtype == DType::I32 && labels.shape.size() >= 1 &&
                  labels.shape.size() <= 3 && labels.shape[0] == input.shape[0] &&
                  (labels.shape.size() != 2 || input.shape.size() == 3),
              "data: labels must be I32 [N], [N, T] (of a sequence [N, T, F]) or [N, H, W], got "
                  << shape_str(labels.shape));
  if (d.source == "synthetic")
    return make_synthetic_source(synthetic_seed(cfg, d), cfg.classes, input, labels, shard,
                                 opt.threads);
  if (d.source == "npy") {
    const std::string inputs = resolve_path(d.inputs, config_dir);
    try {
      return make_npy_source(inputs, resolve_path(d.labels, config_dir), input, labels,
                             cfg.classes, loss_ignore_index(cfg), d.seed, shard, opt);
    } catch (const UserError& e) {
      throw UserError(prefix + e.what());
    }
  }
  if (input.shape.size() != 4)
    REMAT_USER_ERROR(prefix << "reads images, and the model's input is "
                            << shape_str(Shape(input.shape.begin() + 1, input.shape.end()))
                            << " per sample, not an image [C, H, W] (source synthetic serves any "
                               "input)");
  if (d.source == "folder" || d.source == "segmentation")
    return make_image_data(cfg, d, input, labels, config_dir, shard, opt);
  if (d.source != "cifar10") REMAT_USER_ERROR(prefix << "unknown data source");

  const Shape want = {input.shape[0], 3, 32, 32};
  if (input.shape != want || cfg.classes != 10 || labels.shape.size() != 1)
    REMAT_USER_ERROR(prefix << "needs input [3, 32, 32], classes 10 and loss softmax_xent; got "
                            << "input " << shape_str({input.shape[1], input.shape[2],
                                                      input.shape[3]})
                            << ", classes " << cfg.classes << ", loss " << cfg.loss
                            << " (set them in the config; --input overrides do not apply)");
  const std::filesystem::path dir = resolve_path(d.path, config_dir);
  std::vector<std::string> files;
  if (d.split == "test") {
    files.push_back((dir / "test_batch.bin").string());
  } else {
    for (int k = 1; k <= 5; ++k)
      files.push_back((dir / ("data_batch_" + std::to_string(k) + ".bin")).string());
  }
  try {
    return make_cifar10_source(files, input, shard);
  } catch (const UserError& e) {
    throw UserError(prefix + e.what());
  }
}

}  // namespace

}  // namespace remat

namespace remat {

std::string data_shard_describe(const DataShard& shard, int64_t batch) {
  if (shard.global_batch <= batch) return "";
  return ", samples " + std::to_string(shard.first) + "-" + std::to_string(shard.first + batch - 1) +
         " of each global batch of " + std::to_string(shard.global_batch);
}

}  // namespace remat
