// Image folders and segmentation pairs: scanning, the epoch order, and the threaded batch fill.
#include "models/images/image_source.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "models/data_rng.h"
#include "models/images/image_decode.h"
#include "models/images/transforms.h"
#include "models/sample_threads.h"
#include "runtime/core/check.h"

namespace remat {

namespace fs = std::filesystem;

namespace {

bool has_image_extension(const fs::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  return e == ".jpg" || e == ".jpeg" || e == ".png";
}

void require_dir(const std::string& dir, const std::string& what) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    REMAT_USER_ERROR(dir << ": " << what << " is not a readable folder");
}

// Every image file under `dir`, at any depth, in sorted order.
std::vector<std::string> images_under(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->is_regular_file(ec) && has_image_extension(it->path())) out.push_back(it->path().string());
  if (ec) REMAT_USER_ERROR(dir << ": cannot list the folder: " << ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<ImageSample> scan_image_folder(const std::string& root, std::vector<std::string>* classes) {
  require_dir(root, "the image folder's root");
  std::vector<std::string> names;
  std::error_code ec;
  for (auto it = fs::directory_iterator(root, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    if (it->is_directory(ec)) names.push_back(it->path().filename().string());
  if (ec) REMAT_USER_ERROR(root << ": cannot list the folder: " << ec.message());
  std::sort(names.begin(), names.end());
  if (names.empty())
    REMAT_USER_ERROR(root << ": no class folders (expected root/<class>/<image>, as ImageNet's "
                             "train/ and val/ folders)");
  std::vector<ImageSample> samples;
  for (size_t c = 0; c < names.size(); ++c) {
    const std::string dir = (fs::path(root) / names[c]).string();
    const std::vector<std::string> files = images_under(dir);
    if (files.empty())
      REMAT_USER_ERROR(dir << ": class folder '" << names[c] << "' has no image (.jpg, .jpeg, .png)");
    for (const std::string& f : files) samples.push_back({f, "", static_cast<int32_t>(c)});
  }
  if (classes) *classes = names;
  return samples;
}

std::vector<ImageSample> scan_segmentation_folders(const std::string& images, const std::string& labels) {
  require_dir(images, "the images folder");
  require_dir(labels, "the label maps folder");
  std::map<std::string, std::string> by_stem;
  for (const std::string& f : images_under(images)) {
    const std::string stem = fs::relative(fs::path(f), images).replace_extension().string();
    if (!by_stem.emplace(stem, f).second)
      REMAT_USER_ERROR(f << ": a second image named '" << stem << "' (its label map would be ambiguous)");
  }
  std::vector<ImageSample> samples;
  for (const std::string& l : images_under(labels)) {
    if (fs::path(l).extension() != ".png") continue;
    const std::string stem = fs::relative(fs::path(l), labels).replace_extension().string();
    auto it = by_stem.find(stem);
    if (it == by_stem.end())
      REMAT_USER_ERROR(l << ": no image for this label map (looked for " << images << "/" << stem
                         << ".jpg, .jpeg or .png)");
    samples.push_back({it->second, l, 0});
  }
  if (samples.empty()) REMAT_USER_ERROR(labels << ": no label maps (*.png)");
  return samples;
}

std::vector<ImageSample> read_segmentation_list(const std::string& list) {
  std::ifstream in(list);
  if (!in) REMAT_USER_ERROR(list << ": cannot open the list file");
  const fs::path dir = fs::path(list).parent_path();
  std::vector<ImageSample> samples;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::istringstream words(line);
    std::string image, label, extra;
    if (!(words >> image) || image[0] == '#') continue;
    if (!(words >> label) || (words >> extra))
      REMAT_USER_ERROR(list << ":" << n << ": expected 'image label' (two paths), got '" << line << "'");
    auto resolve = [&](const std::string& p) {
      return fs::path(p).is_relative() ? (dir / p).string() : p;
    };
    samples.push_back({resolve(image), resolve(label), 0});
  }
  if (samples.empty()) REMAT_USER_ERROR(list << ": no 'image label' lines");
  return samples;
}

namespace {

class ImageSource : public DataSource {
 public:
  ImageSource(std::vector<ImageSample> samples, std::string what, const DataConfig& d,
              int64_t classes, int64_t ignore, const TensorDesc& input, const TensorDesc& labels,
              const DataShard& shard, const LoaderOptions& opt)
      : samples_(std::move(samples)), what_(std::move(what)), d_(d), classes_(classes),
        ignore_(ignore), shard_(shard), opt_(opt), n_(input.shape.at(0)), h_(input.shape.at(2)),
        w_(input.shape.at(3)), pixel_labels_(labels.shape.size() == 3) {
    REMAT_CHECK(input.shape.at(1) == 3, "image data: input must be [N, 3, H, W], got " << shape_str(input.shape));
    if (pixel_labels_) lh_ = labels.shape[1], lw_ = labels.shape[2];
    for (const ImageSample& s : samples_)
      if (!s.label.empty() != pixel_labels_)
        REMAT_USER_ERROR(what_ << ": " << (pixel_labels_ ? "a per-pixel loss needs label maps "
                                                           "(data source segmentation)"
                                                         : "label maps need a per-pixel loss "
                                                           "(softmax_xent_pixel)"));
    for (const ImageSample& s : samples_)
      if (!pixel_labels_ && s.cls >= classes_)
        REMAT_USER_ERROR(what_ << ": " << s.cls + 1 << " class folders, but the model has "
                               << classes_ << " classes");
  }

  void next_batch(int64_t step, void* input, int32_t* labels) override {
    auto* x = static_cast<float*>(input);
    const int64_t global = shard_.global_batch > 0 ? shard_.global_batch : n_;
    std::vector<int64_t> index(static_cast<size_t>(n_));
    for (int64_t i = 0; i < n_; ++i) index[static_cast<size_t>(i)] = sample_at(step * global + shard_.first + i);
    fill_samples(n_, opt_.threads, [&](int64_t i) {  // the first bad sample, whatever the threads
      load(step, i, index[static_cast<size_t>(i)], x + i * 3 * h_ * w_,
           labels + (pixel_labels_ ? i * lh_ * lw_ : i));
    });
  }

  std::string describe() const override {
    std::ostringstream os;
    os << what_ << ": " << samples_.size() << (pixel_labels_ ? " image and label pairs" : " images");
    if (opt_.evaluation) os << ", evaluation crops " << w_ << "x" << h_ << " (crop_pct " << d_.transform.crop_pct << ")";
    else if (d_.transform.augment)
      os << ", training crops " << w_ << "x" << h_ << " (scale " << d_.transform.scale[0] << "-"
         << d_.transform.scale[1] << (d_.transform.flip ? ", flip" : "") << ")";
    else os << ", center crops " << w_ << "x" << h_;
    os << ", " << opt_.threads << (opt_.threads == 1 ? " decode thread" : " decode threads")
       << data_shard_describe(shard_, n_);
    return os.str();
  }

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  int64_t skipped_samples() const override { return skipped_; }

 private:
  // The sample at position p of the endless sequence of epochs (shuffled per epoch in training).
  int64_t sample_at(int64_t p) {
    const int64_t count = static_cast<int64_t>(samples_.size());
    if (opt_.evaluation || !d_.transform.augment) return p % count;
    const int64_t epoch = p / count;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = perms_.find(epoch);
    if (it == perms_.end()) {
      if (perms_.size() > 2) perms_.erase(perms_.begin());
      std::vector<int64_t> perm(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) perm[static_cast<size_t>(i)] = i;
      Rng rng(mix64(d_.seed ^ mix64(static_cast<uint64_t>(epoch) + 0x5eed)));
      for (int64_t i = count - 1; i > 0; --i) std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(rng.below(i + 1))]);
      it = perms_.emplace(epoch, std::move(perm)).first;
    }
    return it->second[static_cast<size_t>(p % count)];
  }

  // Sample `idx` into x (3 x H x W) and y (1 or Hl x Wl); with skip_bad_samples an unreadable
  // one is replaced by the next readable sample (a warning, once per file).
  void load(int64_t step, int64_t i, int64_t idx, float* x, int32_t* y) {
    const int64_t count = static_cast<int64_t>(samples_.size());
    for (int tries = 0;; ++tries) {
      try {
        load_one(step, i, samples_[static_cast<size_t>((idx + tries) % count)], x, y);
        return;
      } catch (const UserError& e) {
        if (!opt_.skip_bad_samples || tries == 15) throw;
        std::lock_guard<std::mutex> lock(mu_);
        ++skipped_;
        if (warned_.insert(samples_[static_cast<size_t>((idx + tries) % count)].image).second)
          std::fprintf(stderr, "warning: skipping a bad sample (--skip-bad-samples): %s\n", e.what());
      }
    }
  }

  void load_one(int64_t step, int64_t i, const ImageSample& s, float* x, int32_t* y) const {
    const Image img = load_image(s.image);
    Rng rng = sample_rng(d_.seed, step, shard_.first + i);
    const bool train = !opt_.evaluation && d_.transform.augment;
    const CropBox box = train ? train_crop(d_.transform, img.width, img.height, rng)
                              : eval_crop(d_.transform, img.width, img.height, w_, h_);
    resample_image(img, box, w_, h_, d_.transform, x);
    if (!pixel_labels_) {
      *y = s.cls;
      return;
    }
    const LabelMap map = load_label_map(s.label);
    if (map.width != img.width || map.height != img.height)
      REMAT_USER_ERROR(s.label << ": label map " << map.width << " x " << map.height
                               << " does not match its image " << s.image << " (" << img.width
                               << " x " << img.height << ")");
    for (size_t p = 0; p < map.labels.size(); ++p) {
      const int32_t v = map.labels[p];
      if ((v < 0 || v >= classes_) && v != ignore_)
        REMAT_USER_ERROR(s.label << ": label " << v << " at pixel (" << p / map.width << ", "
                                 << p % map.width << ") is outside [0, " << classes_ << ")"
                                 << (ignore_ == kNoIgnoreIndex
                                         ? std::string(" (give the loss an ignore_index for unlabelled pixels)")
                                         : " and is not the ignore_index " + std::to_string(ignore_)));
    }
    resample_labels(map, box, img.width, img.height, lw_, lh_, y);
  }

  const std::vector<ImageSample> samples_;
  const std::string what_;
  const DataConfig d_;
  const int64_t classes_, ignore_;
  const DataShard shard_;
  const LoaderOptions opt_;
  const int64_t n_, h_, w_;
  const bool pixel_labels_;
  int64_t lh_ = 0, lw_ = 0;
  std::mutex mu_;
  std::map<int64_t, std::vector<int64_t>> perms_;  // epoch -> its order (the last few)
  std::set<std::string> warned_;
  int64_t skipped_ = 0;
};

}  // namespace

std::unique_ptr<DataSource> make_image_source(std::vector<ImageSample> samples, std::string what,
                                              const DataConfig& d, int64_t classes,
                                              int64_t ignore_index, const TensorDesc& input,
                                              const TensorDesc& labels, const DataShard& shard,
                                              const LoaderOptions& opt) {
  return std::make_unique<ImageSource>(std::move(samples), std::move(what), d, classes,
                                       ignore_index, input, labels, shard, opt);
}

}  // namespace remat
