// Images on disk (models/images/): decoding JPEG (RGB, grey, CMYK) and PNG (RGB, grey, palette
// label maps) with every bad file a clear error; the transforms against references computed
// here; class-folder and segmentation scanning; and the image source's batches — the same for
// any thread count, split exactly between data-parallel ranks, shuffled once per epoch, and
// with --skip-bad-samples a deterministic replacement.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "models/config.h"
#include "models/data.h"
#include "models/data_rng.h"
#include "models/images/image_decode.h"
#include "models/images/image_source.h"
#include "models/images/transforms.h"
#include "runtime/core/check.h"
#include "tests/tool_runner.h"

namespace remat {
namespace {

namespace fs = std::filesystem;

// A w x h RGB image of a smooth pattern with some noise (JPEG-friendly), seeded.
std::vector<uint8_t> pattern(int64_t w, int64_t h, int channels, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint8_t> px(static_cast<size_t>(w * h * channels));
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int c = 0; c < channels; ++c)
        px[static_cast<size_t>((y * w + x) * channels + c)] = static_cast<uint8_t>(
            std::clamp<double>(128 + 90 * std::sin(0.3 * x + 0.2 * y + c) + 8 * rng.normal(), 0, 255));
  return px;
}

std::string user_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

// ---- decoding --------------------------------------------------------------------------------
TEST(ImageDecode, PngRoundTripsExactlyAndGreyBecomesThreeChannels) {
  const auto rgb = pattern(7, 5, 3, 1);
  const Image a = decode_image(encode_png(rgb.data(), 7, 5, 3), "a.png");
  EXPECT_EQ(a.width, 7);
  EXPECT_EQ(a.height, 5);
  EXPECT_EQ(a.rgb, rgb);
  const auto grey = pattern(4, 3, 1, 2);
  const Image g = decode_image(encode_png(grey.data(), 4, 3, 1), "g.png");
  for (size_t p = 0; p < grey.size(); ++p)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(g.rgb[3 * p + c], grey[p]);
}

TEST(ImageDecode, JpegRgbGreyAndCmyk) {
  const auto rgb = pattern(33, 17, 3, 3);  // odd sizes: partial MCUs
  const Image a = decode_image(encode_jpeg(rgb.data(), 33, 17, 3, 95), "a.jpg");
  ASSERT_EQ(a.rgb.size(), rgb.size());
  double err = 0;
  for (size_t i = 0; i < rgb.size(); ++i) err += std::fabs(a.rgb[i] - rgb[i]);
  EXPECT_LT(err / static_cast<double>(rgb.size()), 6.0) << "mean absolute error of quality 95";
  const auto grey = pattern(9, 9, 1, 4);
  const Image g = decode_image(encode_jpeg(grey.data(), 9, 9, 1, 95), "g.jpg");
  for (size_t p = 0; p < grey.size(); ++p) {
    EXPECT_EQ(g.rgb[3 * p], g.rgb[3 * p + 1]);
    EXPECT_EQ(g.rgb[3 * p], g.rgb[3 * p + 2]);
  }
  // CMYK (Adobe's inverted form): a flat colour decodes to R = C K / 255 per channel.
  std::vector<uint8_t> cmyk;
  for (int p = 0; p < 16 * 16; ++p) cmyk.insert(cmyk.end(), {200, 100, 50, 128});
  const Image k = decode_image(encode_jpeg(cmyk.data(), 16, 16, 4, 100), "k.jpg");
  const int want[3] = {200 * 128 / 255, 100 * 128 / 255, 50 * 128 / 255};
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(k.rgb[3 * 40 + c], want[c], 3) << "channel " << c;
}

TEST(ImageDecode, BadFilesAreErrorsNamingTheFile) {
  const auto rgb = pattern(32, 32, 3, 5);
  const std::string jpg = encode_jpeg(rgb.data(), 32, 32, 3, 90);
  const std::string png = encode_png(rgb.data(), 32, 32, 3);
  EXPECT_HAS(user_error_of([&] { decode_image(jpg.substr(0, jpg.size() * 4 / 5), "cut.jpg"); }),
             "cut.jpg: corrupt or truncated JPEG: Premature end of JPEG file");
  EXPECT_HAS(user_error_of([&] { decode_image(jpg.substr(0, 100), "head.jpg"); }),
             "head.jpg: not a readable JPEG");
  EXPECT_HAS(user_error_of([&] { decode_image(png.substr(0, png.size() / 2), "cut.png"); }),
             "cut.png: corrupt or truncated PNG");
  std::string flipped = png;
  flipped[png.size() / 2] ^= 0x55;  // inside the compressed data: a CRC or zlib error
  EXPECT_HAS(user_error_of([&] { decode_image(flipped, "bit.png"); }), "bit.png: ");
  EXPECT_HAS(user_error_of([&] { decode_image("GIF89a....", "x.gif"); }), "x.gif: not a JPEG or PNG file");
  EXPECT_HAS(user_error_of([&] { decode_image("", "empty.jpg"); }), "empty.jpg: not a JPEG or PNG file (0 bytes");
  EXPECT_HAS(user_error_of([&] { load_image("/nonexistent/a.jpg"); }), "/nonexistent/a.jpg");
}

TEST(ImageDecode, LabelMapsKeepTheirIndices) {
  std::vector<uint8_t> idx(6 * 4);
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<uint8_t>(i % 3 == 0 ? 255 : i);
  const LabelMap m = decode_label_map(encode_palette_png(idx.data(), 6, 4), "voc.png");
  ASSERT_EQ(m.labels.size(), idx.size());
  for (size_t i = 0; i < idx.size(); ++i) EXPECT_EQ(m.labels[i], idx[i]) << "pixel " << i;
  const LabelMap g = decode_label_map(encode_png(idx.data(), 6, 4, 1), "grey.png");
  for (size_t i = 0; i < idx.size(); ++i) EXPECT_EQ(g.labels[i], idx[i]);
  const auto rgb = pattern(3, 3, 3, 6);
  EXPECT_HAS(user_error_of([&] { decode_label_map(encode_png(rgb.data(), 3, 3, 3), "rgb.png"); }),
             "rgb.png: a label map must be a palette or grey-scale PNG");
  const std::string jpg = encode_jpeg(rgb.data(), 3, 3, 3, 90);
  EXPECT_HAS(user_error_of([&] { decode_label_map(jpg, "l.jpg"); }), "l.jpg: a label map must be a PNG");
  const std::string png = encode_palette_png(idx.data(), 6, 4);
  EXPECT_HAS(user_error_of([&] { decode_label_map(png.substr(0, png.size() - 20), "cut.png"); }),
             "cut.png: ");
}

// ---- transforms ------------------------------------------------------------------------------
// PIL's antialiased bilinear resampling, written out directly in double: the reference.
std::vector<double> reference_resample(const Image& img, const CropBox& b, int64_t ow, int64_t oh,
                                       int c) {
  auto weights = [](double x0, double extent, int64_t out, int64_t size, int64_t i) {
    const double s = extent / out, f = std::max(s, 1.0), centre = x0 + (i + 0.5) * s;
    std::vector<std::pair<int64_t, double>> w;
    double sum = 0;
    for (int64_t j = 0; j < size; ++j) {
      const double d = std::fabs((j + 0.5 - centre) / f);
      if (d < 1) w.emplace_back(j, 1 - d), sum += 1 - d;
    }
    for (auto& p : w) p.second /= sum;
    return w;
  };
  std::vector<double> out(static_cast<size_t>(ow * oh));
  for (int64_t y = 0; y < oh; ++y)
    for (int64_t x = 0; x < ow; ++x) {
      double v = 0;
      for (auto [sy, wy] : weights(b.y0, b.h, oh, img.height, y))
        for (auto [sx, wx] : weights(b.x0, b.w, ow, img.width, x))
          v += wy * wx * img.rgb[static_cast<size_t>((sy * img.width + sx) * 3 + c)];
      out[static_cast<size_t>(y * ow + (b.flip ? ow - 1 - x : x))] = v;
    }
  return out;
}

TEST(ImageTransforms, ResamplingMatchesTheReference) {
  Image img;
  img.width = 37, img.height = 23;
  img.rgb = pattern(37, 23, 3, 7);
  ImageTransformConfig t;
  for (const CropBox& b : {CropBox{0, 0, 37, 23, false}, CropBox{3, 2, 20, 15, true},
                           CropBox{10.5, 4.25, 8, 6, false}}) {
    for (auto [ow, oh] : {std::pair<int64_t, int64_t>{16, 12}, {37, 23}, {50, 31}}) {
      std::vector<float> out(static_cast<size_t>(3 * ow * oh));
      resample_image(img, b, ow, oh, t, out.data());
      for (int c = 0; c < 3; ++c) {
        const std::vector<double> ref = reference_resample(img, b, ow, oh, c);
        for (size_t p = 0; p < ref.size(); ++p) {
          const double want = (ref[p] / 255 - t.mean[c]) / t.std[c];
          // float accumulation of at most ~(2 s + 2)^2 taps of <= 255: well within 1e-4 here
          EXPECT_NEAR(out[c * ow * oh + p], want, 1e-4) << "box " << b.x0 << " out " << ow << " c " << c;
        }
      }
    }
  }
  // An image of the output's size through the identity box is the normalised image itself.
  std::vector<float> same(3 * 37 * 23);
  resample_image(img, CropBox{0, 0, 37, 23, false}, 37, 23, t, same.data());
  EXPECT_FLOAT_EQ(same[5], static_cast<float>((img.rgb[15] / 255.0 - t.mean[0]) / t.std[0]));
}

TEST(ImageTransforms, CropsAsTorchvisionDrawsThem) {
  ImageTransformConfig t;
  Rng rng(11);
  for (int i = 0; i < 500; ++i) {
    const CropBox b = train_crop(t, 120, 80, rng);
    EXPECT_GE(b.x0, 0);
    EXPECT_GE(b.y0, 0);
    EXPECT_LE(b.x0 + b.w, 120);
    EXPECT_LE(b.y0 + b.h, 80);
    EXPECT_EQ(b.w, std::round(b.w));
    const double area = b.w * b.h / (120.0 * 80.0);
    EXPECT_LE(area, 1.0 + 1e-9);
  }
  ImageTransformConfig whole = t;
  whole.scale[0] = whole.scale[1] = 1.0;
  whole.ratio[0] = whole.ratio[1] = 1.5;  // 120 / 80
  whole.flip = false;
  const CropBox full = train_crop(whole, 120, 80, rng);
  EXPECT_EQ(full.w, 120);
  EXPECT_EQ(full.h, 80);
  EXPECT_FALSE(full.flip);
  ImageTransformConfig narrow = t;  // no crop of ratio 4..5 fits 10 tries: the central crop
  narrow.ratio[0] = 4, narrow.ratio[1] = 5, narrow.scale[0] = 0.9;
  const CropBox c = train_crop(narrow, 100, 100, rng);
  EXPECT_EQ(c.w, 100);
  EXPECT_EQ(c.h, 25);
  EXPECT_EQ(c.y0, 37);
  // Evaluation: Resize(256) of 512 x 384 -> 341 x 256, CenterCrop(224) at (58, 16): Python's
  // round(58.5) is 58 (half to even).
  const CropBox e = eval_crop(t, 512, 384, 224, 224);
  EXPECT_NEAR(e.x0, 58 * 512.0 / 341, 1e-9);
  EXPECT_NEAR(e.y0, 16 * 384.0 / 256, 1e-9);
  EXPECT_NEAR(e.w, 224 * 512.0 / 341, 1e-9);
}

TEST(ImageTransforms, LabelsTakeTheNearestPixelAndFlipWithTheImage) {
  LabelMap m;
  m.width = 4, m.height = 2;
  m.labels = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<int32_t> out(2);
  resample_labels(m, CropBox{0, 0, 4, 2, false}, 4, 2, 2, 1, out.data());
  // Centres of a 2 x 1 output over 4 x 2: x = 1, 3 (floor of 1.0 and 3.0), y = 1.
  EXPECT_EQ(out, (std::vector<int32_t>{5, 7}));
  resample_labels(m, CropBox{0, 0, 4, 2, true}, 4, 2, 2, 1, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{7, 5}));
  // A label map of half the image's size covers the same area.
  resample_labels(m, CropBox{0, 0, 8, 4, false}, 8, 4, 2, 1, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{5, 7}));
}

}  // namespace
}  // namespace remat
