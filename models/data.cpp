// make_data_source: picks the data source named in the config and checks that it can serve the
// graph's input and labels. The sources live in synthetic.cpp and cifar10.cpp.
#include "models/data.h"

#include <filesystem>

#include "runtime/check.h"

namespace remat {

std::unique_ptr<DataSource> make_data_source(const ModelConfig& cfg, const TensorDesc& input,
                                             const TensorDesc& labels,
                                             const std::string& config_dir,
                                             const DataShard& shard) {
  const DataConfig& d = cfg.data;
  const std::string prefix = d.where + ": data: source " + d.source + ": ";
  REMAT_CHECK(input.shape.size() == 4, "data: input must be [N, C, H, W], got "
                                           << shape_str(input.shape));
  REMAT_CHECK(labels.dtype == DType::I32 && (labels.shape.size() == 1 || labels.shape.size() == 3)
                  && labels.shape[0] == input.shape[0],
              "data: labels must be I32 [N] or [N, H, W], got " << shape_str(labels.shape));
  REMAT_CHECK(shard.first >= 0 && (shard.global_batch == 0 ||
                                    shard.first + input.shape[0] <= shard.global_batch),
              "data: shard of samples " << shard.first << ".." << shard.first + input.shape[0]
                                        << " outside the global batch " << shard.global_batch);
  if (d.source == "synthetic")
    return make_synthetic_source(d.seed, cfg.classes, input, labels, shard);
  if (d.source != "cifar10") REMAT_USER_ERROR(prefix << "unknown data source");

  const Shape want = {input.shape[0], 3, 32, 32};
  if (input.shape != want || cfg.classes != 10 || labels.shape.size() != 1)
    REMAT_USER_ERROR(prefix << "needs input [3, 32, 32], classes 10 and loss softmax_xent; got "
                            << "input " << shape_str({input.shape[1], input.shape[2],
                                                      input.shape[3]})
                            << ", classes " << cfg.classes << ", loss " << cfg.loss
                            << " (set them in the config; --input overrides do not apply)");
  std::filesystem::path dir = d.path;
  if (dir.is_relative() && !config_dir.empty()) dir = std::filesystem::path(config_dir) / dir;
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

}  // namespace remat

namespace remat {

std::string data_shard_describe(const DataShard& shard, int64_t batch) {
  if (shard.global_batch <= batch) return "";
  return ", samples " + std::to_string(shard.first) + "-" + std::to_string(shard.first + batch - 1) +
         " of each global batch of " + std::to_string(shard.global_batch);
}

}  // namespace remat
