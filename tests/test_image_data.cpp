// Image datasets on disk as data sources (models/images/image_source.h), on trees the tests
// write: class folders sorted as torchvision's ImageFolder, batches equal for any thread count
// and split exactly between data-parallel ranks, one shuffle per epoch, evaluation order, bad
// files named (or skipped with a count), and segmentation pairs whose labels stay aligned with
// their pixels through crops and flips.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "models/config.h"
#include "models/data.h"
#include "models/data_rng.h"
#include "models/images/image_decode.h"
#include "models/images/image_source.h"
#include "models/prefetch.h"
#include "runtime/core/check.h"
#include "runtime/io/input_file.h"
#include "tests/tool_runner.h"

namespace remat {
namespace {

namespace fs = std::filesystem;

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

class ImageData : public ScratchDirTest {
 protected:
  void write(const std::string& rel, const std::string& bytes) {
    fs::create_directories(fs::path(path(rel)).parent_path());
    std::ofstream(path(rel), std::ios::binary) << bytes;
  }
  // A w x h RGB image of one colour plus a gradient, as PNG or JPEG by the name's extension.
  void image(const std::string& rel, int64_t w, int64_t h, uint8_t r, uint8_t g, uint8_t b) {
    std::vector<uint8_t> px(static_cast<size_t>(w * h * 3));
    for (int64_t p = 0; p < w * h; ++p) {
      const uint8_t d = static_cast<uint8_t>(p % w * 40 / w);
      px[3 * p] = static_cast<uint8_t>(r + d), px[3 * p + 1] = g, px[3 * p + 2] = b;
    }
    const bool jpg = rel.size() > 4 && rel.substr(rel.size() - 4) != ".png";
    write(rel, jpg ? encode_jpeg(px.data(), w, h, 3, 92) : encode_png(px.data(), w, h, 3));
  }
  // Ten images in classes cat (4), dog (3), eel (3): odd sizes, a grey and a CMYK JPEG.
  void classification_tree() {
    image("tree/cat/1.jpg", 40, 30, 200, 10, 10);
    image("tree/cat/2.png", 33, 47, 190, 20, 10);
    image("tree/cat/sub/3.jpeg", 64, 64, 180, 30, 10);
    std::vector<uint8_t> grey(50 * 20, 90);
    write("tree/cat/4.jpg", encode_jpeg(grey.data(), 50, 20, 1, 90));
    image("tree/dog/a.jpg", 31, 29, 10, 200, 10);
    image("tree/dog/b.png", 80, 45, 20, 190, 10);
    std::vector<uint8_t> cmyk;
    for (int p = 0; p < 24 * 24; ++p) cmyk.insert(cmyk.end(), {30, 200, 40, 255});
    write("tree/dog/c.jpg", encode_jpeg(cmyk.data(), 24, 24, 4, 95));
    image("tree/eel/x.png", 25, 60, 10, 10, 200);
    image("tree/eel/y.jpg", 70, 35, 10, 20, 190);
    image("tree/eel/z.jpg", 36, 36, 10, 30, 180);
    write("tree/eel/notes.txt", "not an image");
  }
  ModelConfig config(const std::string& data) {
    ModelConfig cfg = parse_model_config(
        "name: m\ninput: [3, 16, 16]\nclasses: 3\nbatch: 5\ndata: " + data +
            "\nlayers:\n  - {name: f, op: flatten}\n  - {name: d, op: dense, units: 3}\n",
        path("m.yaml"));
    cfg.dir = dir_;
    return cfg;
  }
  struct Batch {
    std::vector<float> x;
    std::vector<int32_t> y;
  };
  Batch batch(DataSource& src, int64_t n, int64_t step, int64_t label_pixels = 1) {
    Batch b{std::vector<float>(static_cast<size_t>(n * 3 * 16 * 16)),
            std::vector<int32_t>(static_cast<size_t>(n * label_pixels))};
    src.next_batch(step, b.x.data(), b.y.data());
    return b;
  }
  static TensorDesc images(int64_t n) { return {{n, 3, 16, 16}, DType::F32}; }
  static TensorDesc classes(int64_t n) { return {{n}, DType::I32}; }
};

TEST_F(ImageData, ClassFoldersAreSortedAndOnlyImagesCount) {
  classification_tree();
  image("tree/stray.png", 8, 8, 1, 2, 3);  // not in a class folder: not a sample
  std::vector<std::string> names;
  const std::vector<ImageSample> s = scan_image_folder(path("tree"), &names);
  EXPECT_EQ(names, (std::vector<std::string>{"cat", "dog", "eel"}));
  ASSERT_EQ(s.size(), 10u);
  EXPECT_EQ(s[0].image, path("tree/cat/1.jpg"));
  EXPECT_EQ(s[3].image, path("tree/cat/sub/3.jpeg"));  // sorted paths, any depth
  EXPECT_EQ(s[4].cls, 1);
  EXPECT_EQ(s[9].cls, 2);
  fs::create_directories(path("tree/fox"));
  EXPECT_HAS(error_of([&] { scan_image_folder(path("tree"), nullptr); }),
             "class folder 'fox' has no image");
  fs::create_directories(path("none"));
  EXPECT_HAS(error_of([&] { scan_image_folder(path("none"), nullptr); }), "no class folders");
  EXPECT_HAS(error_of([&] { scan_image_folder(path("missing"), nullptr); }), "is not a readable folder");
}

TEST_F(ImageData, BatchesDependOnlyOnTheStepNotOnThreadsOrRanks) {
  classification_tree();
  const ModelConfig cfg = config("{source: folder, path: tree, seed: 3}");
  LoaderOptions one, four;
  four.threads = 4;
  auto a = make_data_source(cfg, images(5), classes(5), dir_, {}, one);
  auto b = make_data_source(cfg, images(5), classes(5), dir_, {}, four);
  EXPECT_EQ(a->size(), 10);
  for (int64_t step : {0, 1, 2, 7, 1}) {
    const Batch x = batch(*a, 5, step), y = batch(*b, 5, step);
    EXPECT_EQ(x.x, y.x) << "step " << step;
    EXPECT_EQ(x.y, y.y) << "step " << step;
  }
  // Each epoch (2 steps of 5) sees each image once, in a new order.
  std::vector<int32_t> seen = batch(*a, 5, 0).y, second = batch(*a, 5, 1).y;
  seen.insert(seen.end(), second.begin(), second.end());
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 2, 2, 2}));
  EXPECT_NE(batch(*a, 5, 0).y, batch(*a, 5, 2).y) << "epoch 1 is shuffled again (very likely)";
  // Two ranks of 5 at a global batch of 10 are the halves of one process's batch of 10.
  auto whole = make_data_source(cfg, images(10), classes(10), dir_);
  auto r0 = make_data_source(cfg, images(5), classes(5), dir_, DataShard{0, 10});
  auto r1 = make_data_source(cfg, images(5), classes(5), dir_, DataShard{5, 10}, four);
  for (int64_t step : {0, 3}) {
    Batch w = batch(*whole, 10, step), h0 = batch(*r0, 5, step), h1 = batch(*r1, 5, step);
    h0.x.insert(h0.x.end(), h1.x.begin(), h1.x.end());
    h0.y.insert(h0.y.end(), h1.y.begin(), h1.y.end());
    EXPECT_EQ(w.x, h0.x);
    EXPECT_EQ(w.y, h0.y);
  }
}

// The prefetching loader gives the batches the source gives, in the order asked, across jumps
// (a resume), and a batch that fails fails at its own step.
TEST_F(ImageData, PrefetchingChangesNoBatch) {
  classification_tree();
  const ModelConfig cfg = config("{source: folder, path: tree, seed: 9}");
  LoaderOptions two;
  two.threads = 2;
  auto direct = make_data_source(cfg, images(5), classes(5), dir_, {}, two);
  PrefetchSource ahead(make_data_source(cfg, images(5), classes(5), dir_, {}, two),
                       5 * 3 * 16 * 16 * 4, 5 * 4, 3);
  for (int64_t step : {0, 1, 2, 3, 7, 8, 2, 3}) {
    const Batch a = batch(*direct, 5, step), b = batch(ahead, 5, step);
    EXPECT_EQ(a.x, b.x) << "step " << step;
    EXPECT_EQ(a.y, b.y) << "step " << step;
  }
  EXPECT_HAS(ahead.describe(), "3 batches prefetched");
  // The slots come from the caller's allocator (pinned memory on a device), depth + 1 of them
  // allocated once; acquire hands out one of them.
  std::vector<void*> given;
  int64_t freed = 0;
  HostMemory counting{[&](int64_t bytes) { given.push_back(std::malloc(static_cast<size_t>(bytes))); return given.back(); },
                      [&](void* p) { ++freed, std::free(p); }};
  {
    PrefetchSource pinned(make_data_source(cfg, images(5), classes(5), dir_, {}, two),
                          5 * 3 * 16 * 16 * 4, 5 * 4, 2, counting);
    EXPECT_EQ(given.size(), 6u) << "3 slots of input and labels";
    for (int64_t step = 0; step < 6; ++step) {
      const PrefetchSource::Batch held = pinned.acquire(step);
      EXPECT_NE(std::find(given.begin(), given.end(), held.input), given.end());
      const Batch a = batch(*direct, 5, step);
      EXPECT_EQ(std::memcmp(held.input, a.x.data(), a.x.size() * sizeof(float)), 0) << step;
      EXPECT_EQ(given.size(), 6u) << "no allocation per step";
    }
  }
  EXPECT_EQ(freed, 6);
  write("tree/dog/broken.jpg", "\xFF\xD8\xFF garbage");
  PrefetchSource failing(make_data_source(cfg, images(5), classes(5), dir_, {}, two),
                         5 * 3 * 16 * 16 * 4, 5 * 4);
  int failed = 0;
  for (int64_t step = 0; step < 4; ++step)  // an epoch of 11 samples: the broken one is in it
    failed += error_of([&] { batch(failing, 5, step); }).find("broken.jpg") != std::string::npos;
  EXPECT_GE(failed, 1);
}

TEST_F(ImageData, EvaluationServesTheSortedOrderWithCenterCrops) {
  classification_tree();
  const ModelConfig cfg = config("{source: folder, path: tree}");
  LoaderOptions eval;
  eval.evaluation = true;
  auto src = make_data_source(cfg, images(5), classes(5), dir_, {}, eval);
  EXPECT_EQ(batch(*src, 5, 0).y, (std::vector<int32_t>{0, 0, 0, 0, 1}));
  EXPECT_EQ(batch(*src, 5, 1).y, (std::vector<int32_t>{1, 1, 2, 2, 2}));
  EXPECT_EQ(batch(*src, 5, 0).x, batch(*src, 5, 2).x) << "no randomness: the same crops";
  EXPECT_HAS(src->describe(), "evaluation crops 16x16");
}

TEST_F(ImageData, BadImagesAreNamedOrSkippedWithACount) {
  classification_tree();
  write("tree/dog/broken.jpg", std::string("\xFF\xD8\xFF\xE0", 4) + std::string(200, 'x'));
  const ModelConfig cfg = config("{source: folder, path: tree, augment: false}");
  auto strict = make_data_source(cfg, images(11), classes(11), dir_);
  EXPECT_HAS(error_of([&] { batch(*strict, 11, 0); }), path("tree/dog/broken.jpg") + ": ");
  LoaderOptions skip;
  skip.skip_bad_samples = true;
  skip.threads = 3;
  auto lenient = make_data_source(cfg, images(11), classes(11), dir_, {}, skip);
  const Batch b = batch(*lenient, 11, 0);
  EXPECT_EQ(lenient->skipped_samples(), 1);
  // Sorted, broken.jpg is dog's third file (sample 6): replaced by the next sample, dog/c.jpg.
  EXPECT_EQ(b.y[6], 1);
  EXPECT_EQ(std::vector<float>(b.x.begin() + 6 * 768, b.x.begin() + 7 * 768),
            std::vector<float>(b.x.begin() + 7 * 768, b.x.begin() + 8 * 768));
}

// --skip-bad-samples counts the replacements in the batches the steps took: the prefetching
// loader makes batches ahead, and one that no step takes (past the last step) does not count.
TEST_F(ImageData, SkippedSamplesCountOnlyTheBatchesTaken) {
  classification_tree();
  write("tree/dog/broken.jpg", std::string("\xFF\xD8\xFF\xE0", 4) + std::string(200, 'x'));
  const ModelConfig cfg = config("{source: folder, path: tree, augment: false}");
  LoaderOptions skip;
  skip.skip_bad_samples = true;
  // Batches of 3 in sorted order: broken.jpg (sample 6) is in the third batch (step 2).
  PrefetchSource ahead(make_data_source(cfg, images(3), classes(3), dir_, {}, skip),
                       3 * 3 * 16 * 16 * 4, 3 * 4, 2);
  ahead.acquire(0);
  ahead.acquire(1);  // step 2 is being made ahead, or made
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(ahead.skipped_samples(), 0) << "step 2's batch was made, not taken";
  ahead.acquire(2);
  EXPECT_EQ(ahead.skipped_samples(), 1);
  ahead.acquire(3);
  EXPECT_EQ(ahead.skipped_samples(), 1);
}

// A segmentation pair whose colour says its label: red pixels are class 1, blue ones class 2
// (the left and right parts of the image at a slanted edge), a strip of 255 (unlabelled).
void pair(ImageData* t, const std::string& stem, int64_t w, int64_t h,
          const std::function<void(const std::string&, const std::string&)>& write) {
  std::vector<uint8_t> px(static_cast<size_t>(w * h * 3)), lab(static_cast<size_t>(w * h));
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      const bool left = x < w / 2 + y / 4;
      const size_t p = static_cast<size_t>(y * w + x);
      px[3 * p] = left ? 230 : 10, px[3 * p + 2] = left ? 10 : 230;
      lab[p] = y < 2 ? 255 : left ? 1 : 2;
    }
  (void)t;
  write("seg/img/" + stem + ".png", encode_png(px.data(), w, h, 3));
  write("seg/lbl/" + stem + ".png", encode_palette_png(lab.data(), w, h));
}

TEST_F(ImageData, SegmentationLabelsStayWithTheirPixels) {
  auto w = [&](const std::string& rel, const std::string& bytes) { write(rel, bytes); };
  pair(this, "a", 60, 40, w);
  pair(this, "b", 37, 53, w);
  pair(this, "c", 64, 64, w);
  image("seg/img/unlabelled.png", 10, 10, 1, 1, 1);  // an image without a label map: not a pair
  ModelConfig cfg = parse_model_config(
      "name: s\ninput: [3, 16, 16]\nclasses: 3\nbatch: 3\n"
      "loss: {op: softmax_xent_pixel, ignore_index: 255}\n"
      "data: {source: segmentation, images: seg/img, labels: seg/lbl, seed: 5}\n"
      "layers:\n  - {name: c, op: conv2d, filters: 3, kernel: 1}\n",
      path("s.yaml"));
  cfg.dir = dir_;
  const TensorDesc lab{{3, 16, 16}, DType::I32};
  auto src = make_data_source(cfg, images(3), lab, dir_);
  EXPECT_EQ(src->size(), 3);
  int checked = 0;
  for (int64_t step = 0; step < 6; ++step) {
    const Batch b = batch(*src, 3, step, 16 * 16);
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t p = 0; p < 256; ++p) {
        const int32_t y = b.y[static_cast<size_t>(i * 256 + p)];
        ASSERT_TRUE(y == 1 || y == 2 || y == 255) << y;
        const float red = b.x[static_cast<size_t>(i * 768 + p)];
        const float blue = b.x[static_cast<size_t>(i * 768 + 512 + p)];
        if (y == 255) continue;
        if (std::fabs(red - blue) < 2) continue;  // on the blended edge
        EXPECT_EQ(y, red > blue ? 1 : 2) << "step " << step << " sample " << i << " pixel " << p;
        ++checked;
      }
  }
  EXPECT_GT(checked, 3000);
  // A label outside [0, 3) that is not the ignore_index names the file and the pixel.
  std::vector<uint8_t> bad(60 * 40, 1);
  bad[5 * 60 + 7] = 9;
  write("seg/lbl/a.png", encode_palette_png(bad.data(), 60, 40));
  LoaderOptions eval;
  eval.evaluation = true;
  auto strict = make_data_source(cfg, images(3), lab, dir_, {}, eval);
  EXPECT_HAS(error_of([&] { batch(*strict, 3, 0, 256); }),
             path("seg/lbl/a.png") + ": label 9 at pixel (5, 7) is outside [0, 3) and is not the ignore_index 255");
  std::vector<uint8_t> small(10 * 10, 1);
  write("seg/lbl/a.png", encode_palette_png(small.data(), 10, 10));
  EXPECT_HAS(error_of([&] { batch(*strict, 3, 0, 256); }), "label map 10 x 10 does not match its image");
  write("seg/lbl/orphan.png", encode_palette_png(small.data(), 10, 10));
  EXPECT_HAS(error_of([&] { make_data_source(cfg, images(3), lab, dir_); }),
             "orphan.png: no image for this label map");
  write("list.txt", "# VOC-style pairs\nseg/img/b.png seg/lbl/b.png\n\nseg/img/c.png\n");
  EXPECT_HAS(error_of([&] { read_segmentation_list(path("list.txt")); }),
             "list.txt:4: expected 'image label' (two paths)");
}

// Links are followed, to folders outside the tree too; a link back to a folder that contains
// it (directly, or through a chain of links) is refused, naming the link and the folder.
TEST_F(ImageData, FolderLinksAreFollowedAndCyclesRefused) {
  classification_tree();
  image("outside/more/5.jpg", 20, 20, 150, 40, 40);
  fs::create_directory_symlink(path("outside/more"), path("tree/cat/more"));
  fs::create_directory_symlink(path("outside/more"), path("tree/eel/also"));  // no cycle: listed twice
  const std::vector<ImageSample> s = scan_image_folder(path("tree"), nullptr);
  ASSERT_EQ(s.size(), 12u);
  EXPECT_EQ(s[3].image, path("tree/cat/more/5.jpg"));
  EXPECT_EQ(s[3].cls, 0);
  EXPECT_EQ(s[8].image, path("tree/eel/also/5.jpg"));
  EXPECT_EQ(s[8].cls, 2);

  fs::create_directory_symlink("..", path("tree/dog/up"));
  EXPECT_HAS(error_of([&] { scan_image_folder(path("tree"), nullptr); }),
             path("tree/dog/up") + ": a symbolic link that leads back to " +
                 fs::canonical(path("tree")).string() + ", a folder that contains it");
  fs::remove(path("tree/dog/up"));
  // A chain: tree/cat/more -> outside/more, outside/more/back -> tree/cat.
  fs::create_directory_symlink(path("tree/cat"), path("outside/more/back"));
  EXPECT_HAS(error_of([&] { scan_image_folder(path("tree"), nullptr); }),
             path("tree/cat/more/back") + ": a symbolic link that leads back to " + path("tree/cat"));
  fs::remove(path("outside/more/back"));
  // The segmentation folders are walked the same way.
  image("seg/img/a.png", 8, 8, 1, 2, 3);
  fs::create_directories(path("seg/lbl"));
  fs::create_directory_symlink(path("seg"), path("seg/img/loop"));
  EXPECT_HAS(error_of([&] { scan_segmentation_folders(path("seg/img"), path("seg/lbl")); }),
             path("seg/img/loop") + ": a symbolic link that leads back to");
}

// An image link that cannot be followed is named: the source refuses it at the start, or with
// --skip-bad-samples counts it and serves the next sample as for any unreadable image.
TEST_F(ImageData, BrokenImageLinksAreNamedOrSkippedWithACount) {
  classification_tree();
  fs::create_symlink(path("nowhere/bb.jpg"), path("tree/dog/bb.jpg"));
  fs::create_symlink("w.jpg", path("tree/eel/w.jpg"));  // a link to itself
  const ModelConfig cfg = config("{source: folder, path: tree, augment: false}");
  EXPECT_HAS(error_of([&] { make_data_source(cfg, images(12), classes(12), dir_); }),
             path("tree/dog/bb.jpg") + ": is a symbolic link to a missing file (" +
                 path("nowhere/bb.jpg") + ") (--skip-bad-samples skips such samples)");
  LoaderOptions skip;
  skip.skip_bad_samples = true;
  auto lenient = make_data_source(cfg, images(12), classes(12), dir_, {}, skip);
  EXPECT_EQ(lenient->size(), 12);
  // Sorted: dog/bb.jpg is sample 6 (served as dog/c.jpg), eel/w.jpg sample 8 (eel/x.png).
  const Batch b = batch(*lenient, 12, 0);
  EXPECT_EQ(lenient->skipped_samples(), 2);
  EXPECT_EQ(b.y[6], 1);
  EXPECT_EQ(b.y[8], 2);
  fs::remove(path("tree/dog/bb.jpg"));
  EXPECT_HAS(error_of([&] { make_data_source(cfg, images(11), classes(11), dir_); }),
             path("tree/eel/w.jpg") + ": is a symbolic link loop (w.jpg)");

  // Segmentation: a broken link for an image (b), another for a label map (d).
  auto w = [&](const std::string& rel, const std::string& bytes) { write(rel, bytes); };
  pair(this, "a", 20, 20, w);
  pair(this, "c", 20, 20, w);
  write("seg/lbl/b.png", read_file(path("seg/lbl/a.png"), "label map"));
  fs::create_symlink(path("seg/gone.png"), path("seg/img/b.png"));
  write("seg/img/d.png", read_file(path("seg/img/a.png"), "image"));
  fs::create_symlink(path("seg/gone.png"), path("seg/lbl/d.png"));
  ModelConfig seg = parse_model_config(
      "name: s\ninput: [3, 16, 16]\nclasses: 3\nbatch: 4\n"
      "loss: {op: softmax_xent_pixel, ignore_index: 255}\n"
      "data: {source: segmentation, images: seg/img, labels: seg/lbl, augment: false}\n"
      "layers:\n  - {name: c, op: conv2d, filters: 3, kernel: 1}\n",
      path("s.yaml"));
  seg.dir = dir_;
  const TensorDesc lab{{4, 16, 16}, DType::I32};
  EXPECT_HAS(error_of([&] { make_data_source(seg, images(4), lab, dir_); }),
             path("seg/img/b.png") + ": is a symbolic link to a missing file");
  auto pairs = make_data_source(seg, images(4), lab, dir_, {}, skip);
  EXPECT_EQ(pairs->size(), 4);
  batch(*pairs, 4, 0, 16 * 16);  // a; b served as c; c; d served as a
  EXPECT_EQ(pairs->skipped_samples(), 2);
}

TEST_F(ImageData, ConfigErrorsNameTheField) {
  EXPECT_HAS(error_of([&] { config("{source: folder}"); }), "field 'path': is required for source folder");
  EXPECT_HAS(error_of([&] { config("{source: folder, path: t, mean: [0.5, 0.5]}"); }),
             "data: field 'mean': expected a list of 3 numbers");
  EXPECT_HAS(error_of([&] { config("{source: folder, path: t, scale: [0.9, 0.1]}"); }),
             "expects [min, max], min <= max");
  EXPECT_HAS(error_of([&] { config("{source: folder, path: t, flipp: true}"); }),
             "unknown field for data source 'folder' (did you mean 'flip'?)");
  EXPECT_HAS(error_of([&] { config("{source: segmentation, images: a}"); }),
             "either `images` and `labels`");
  EXPECT_HAS(error_of([&] { config("{source: cifar10, path: x, mean: [1, 2, 3]}"); }),
             "field 'mean': unknown field for data source 'cifar10'");
  const ModelConfig ok = config("{source: folder, path: t, mean: [0.5, 0.4, 0.3], crop_pct: 1}");
  EXPECT_DOUBLE_EQ(ok.data.transform.mean[1], 0.4);
  EXPECT_DOUBLE_EQ(ok.data.transform.crop_pct, 1.0);
  classification_tree();
  const ModelConfig wrong_loss = parse_model_config(
      "name: m\ninput: [3, 16, 16]\nclasses: 3\nbatch: 1\nloss: softmax_xent_pixel\n"
      "data: {source: folder, path: tree}\nlayers:\n  - {name: c, op: conv2d, filters: 3, kernel: 1}\n",
      path("w.yaml"));
  EXPECT_HAS(error_of([&] {
               make_data_source(wrong_loss, images(1), TensorDesc{{1, 16, 16}, DType::I32}, dir_);
             }),
             "source folder serves one class per image");
}

}  // namespace
}  // namespace remat
