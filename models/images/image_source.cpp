// Image folders and segmentation pairs: scanning, the epoch order, and the threaded batch fill.
#include "models/images/image_source.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

#include "models/data_rng.h"
#include "models/epoch_order.h"
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

// Note [links in image folders]
// Symbolic links are followed, to files and to folders anywhere, with two exceptions that are
// named rather than passed over. A link to a folder that contains it (`up -> ..`), or a chain of
// links back to a folder the walk is inside, would list the same images again and again: the
// scan refuses it, naming the link and the folder it leads back to. A folder reached twice by
// different routes (two links to one folder) is no cycle and is listed twice. An image link
// that cannot be followed (its target is missing, or it is a loop of links) stays a sample that
// carries the reason: a source refuses it at the start, or with --skip-bad-samples counts and
// skips it like any unreadable image.

// A folder's identity on disk, whatever the path: (st_dev, st_ino).
using FolderId = std::pair<uint64_t, uint64_t>;

// The folders a walk is inside: their real ancestors and the folders it descended through,
// each with the path an error names it by.
using OpenFolders = std::map<FolderId, std::string>;

struct FoundImage {
  std::string path;
  std::string unreadable;  // why the link at `path` cannot be followed; "" for a file
};

bool folder_id(const fs::path& p, FolderId* id) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return false;
  *id = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  return true;
}

std::string broken_link(const fs::path& p, int err) {
  std::error_code ec;
  const fs::path target = fs::read_symlink(p, ec);
  const std::string to = ec ? "" : " (" + target.string() + ")";
  if (err == ENOENT || err == ENOTDIR) return p.string() + ": is a symbolic link to a missing file" + to;
  if (err == ELOOP) return p.string() + ": is a symbolic link loop" + to + ": it never reaches a file";
  return p.string() + ": is a symbolic link that cannot be followed" + to + ": " +
         std::error_code(err, std::generic_category()).message();
}

// Adds the images under `dir` to `out` (Note [links in image folders]); `open` holds `dir`.
void walk_folder(const fs::path& dir, OpenFolders* open, std::vector<FoundImage>* out) {
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const fs::path& p = it->path();
    std::error_code ignored;  // a directory entry's cached type needs no system call
    const bool link = it->is_symlink(ignored);
    if (!link && it->is_regular_file(ignored)) {
      if (has_image_extension(p)) out->push_back({p.string(), ""});
      continue;
    }
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) {
      const int err = errno;
      if (link && has_image_extension(p)) out->push_back({p.string(), broken_link(p, err)});
      continue;
    }
    if (S_ISREG(st.st_mode) && has_image_extension(p)) out->push_back({p.string(), ""});
    if (!S_ISDIR(st.st_mode)) continue;
    const FolderId id{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
    const auto again = open->find(id);
    if (again != open->end())
      REMAT_USER_ERROR(p.string() << ": " << (link ? "a symbolic link that leads" : "leads")
                                  << " back to " << again->second
                                  << ", a folder that contains it: its images would be listed "
                                     "again and again (a cycle of folders)");
    open->emplace(id, p.string());
    walk_folder(p, open, out);
    open->erase(id);
  }
  if (ec) REMAT_USER_ERROR(dir.string() << ": cannot list the folder: " << ec.message());
}

// Every image file under `dir`, at any depth, in sorted order.
std::vector<FoundImage> images_under(const std::string& dir) {
  std::error_code ec;
  const fs::path real = fs::canonical(dir, ec);
  if (ec) REMAT_USER_ERROR(dir << ": cannot list the folder: " << ec.message());
  OpenFolders open;  // `dir` under its own name, then its real ancestors up to /
  for (fs::path p = real;; p = p.parent_path()) {
    FolderId id;
    if (folder_id(p, &id)) open.emplace(id, p == real ? dir : p.string());
    if (!p.has_relative_path()) break;
  }
  std::vector<FoundImage> out;
  walk_folder(dir, &open, &out);
  std::sort(out.begin(), out.end(),
            [](const FoundImage& a, const FoundImage& b) { return a.path < b.path; });
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
    const std::vector<FoundImage> files = images_under(dir);
    if (files.empty())
      REMAT_USER_ERROR(dir << ": class folder '" << names[c] << "' has no image (.jpg, .jpeg, .png)");
    for (const FoundImage& f : files) samples.push_back({f.path, "", static_cast<int32_t>(c), f.unreadable});
  }
  if (classes) *classes = names;
  return samples;
}

std::vector<ImageSample> scan_segmentation_folders(const std::string& images, const std::string& labels) {
  require_dir(images, "the images folder");
  require_dir(labels, "the label maps folder");
  std::map<std::string, FoundImage> by_stem;
  for (const FoundImage& f : images_under(images)) {
    const std::string stem = fs::relative(fs::path(f.path), images).replace_extension().string();
    if (!by_stem.emplace(stem, f).second)
      REMAT_USER_ERROR(f.path << ": a second image named '" << stem << "' (its label map would be ambiguous)");
  }
  std::vector<ImageSample> samples;
  for (const FoundImage& l : images_under(labels)) {
    if (fs::path(l.path).extension() != ".png") continue;
    const std::string stem = fs::relative(fs::path(l.path), labels).replace_extension().string();
    auto it = by_stem.find(stem);
    if (it == by_stem.end())
      REMAT_USER_ERROR(l.path << ": no image for this label map (looked for " << images << "/" << stem
                              << ".jpg, .jpeg or .png)");
    const FoundImage& image = it->second;
    samples.push_back({image.path, l.path, 0, image.unreadable.empty() ? l.unreadable : image.unreadable});
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
    samples.push_back({resolve(image), resolve(label), 0, ""});
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
        w_(input.shape.at(3)), pixel_labels_(labels.shape.size() == 3),
        order_(static_cast<int64_t>(samples_.size()), d.seed,
               !opt.evaluation && d.transform.augment) {
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
    for (const ImageSample& s : samples_)  // Note [links in image folders]
      if (!opt_.skip_bad_samples && !s.unreadable.empty())
        REMAT_USER_ERROR(what_ << ": " << s.unreadable << " (--skip-bad-samples skips such samples)");
  }

  void next_batch(int64_t step, void* input, int32_t* labels) override {
    auto* x = static_cast<float*>(input);
    const int64_t global = shard_.global_batch > 0 ? shard_.global_batch : n_;
    std::vector<int64_t> index(static_cast<size_t>(n_));
    for (int64_t i = 0; i < n_; ++i) index[static_cast<size_t>(i)] = order_.at(step * global + shard_.first + i);
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
    if (!s.unreadable.empty()) throw UserError(s.unreadable);
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
  EpochOrder order_;  // shuffled per epoch in training
  std::mutex mu_;
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
