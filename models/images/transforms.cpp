// Crop boxes as torchvision draws them, and PIL's antialiased bilinear resampling of a box.
#include "models/images/transforms.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace remat {

CropBox train_crop(const ImageTransformConfig& t, int64_t width, int64_t height, Rng& rng) {
  CropBox b;
  const double area = static_cast<double>(width) * static_cast<double>(height);
  const double log_lo = std::log(t.ratio[0]), log_hi = std::log(t.ratio[1]);
  bool found = false;
  for (int attempt = 0; attempt < 10 && !found; ++attempt) {
    const double target = area * (t.scale[0] + (t.scale[1] - t.scale[0]) * rng.uniform());
    const double aspect = std::exp(log_lo + (log_hi - log_lo) * rng.uniform());
    const int64_t w = std::llround(std::sqrt(target * aspect));
    const int64_t h = std::llround(std::sqrt(target / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      b.y0 = static_cast<double>(rng.below(height - h + 1));
      b.x0 = static_cast<double>(rng.below(width - w + 1));
      b.w = static_cast<double>(w), b.h = static_cast<double>(h);
      found = true;
    }
  }
  if (!found) {  // the central crop within the ratio's bounds
    const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
    int64_t w = width, h = height;
    if (in_ratio < t.ratio[0]) h = std::llround(static_cast<double>(w) / t.ratio[0]);
    else if (in_ratio > t.ratio[1]) w = std::llround(static_cast<double>(h) * t.ratio[1]);
    b.x0 = static_cast<double>((width - w) / 2), b.y0 = static_cast<double>((height - h) / 2);
    b.w = static_cast<double>(w), b.h = static_cast<double>(h);
  }
  b.flip = t.flip && rng.uniform() < 0.5;
  return b;
}

CropBox eval_crop(const ImageTransformConfig& t, int64_t width, int64_t height, int64_t out_w,
                  int64_t out_h) {
  // torchvision: Resize(s) scales the shorter side to s and the longer to int(s * long / short);
  // CenterCrop offsets by Python's round((resized - crop) / 2), halves to even (nearbyint).
  const int64_t s = static_cast<int64_t>(std::floor(static_cast<double>(std::max(out_w, out_h)) / t.crop_pct));
  int64_t rw = s, rh = s;
  if (width <= height) rh = static_cast<int64_t>(static_cast<double>(s) * height / width);
  else rw = static_cast<int64_t>(static_cast<double>(s) * width / height);
  const double sx = static_cast<double>(width) / static_cast<double>(rw);
  const double sy = static_cast<double>(height) / static_cast<double>(rh);
  CropBox b;
  b.x0 = std::nearbyint((rw - out_w) / 2.0) * sx;
  b.y0 = std::nearbyint((rh - out_h) / 2.0) * sy;
  b.w = static_cast<double>(out_w) * sx, b.h = static_cast<double>(out_h) * sy;
  return b;
}

namespace {

// PIL's resampling weights along one axis: output i covers [x0 + i s, x0 + (i + 1) s) of the
// source (s = extent / out); source pixel j (centre j + 0.5) weighs triangle((j + 0.5 - c) / f)
// with c the output's centre and f = max(s, 1) (wider when shrinking: antialiasing); the
// weights of pixels inside the image are normalised to sum 1.
struct Taps {
  std::vector<int64_t> first;    // per output: first source index
  std::vector<std::vector<float>> w;
};

Taps taps(double x0, double extent, int64_t out, int64_t size) {
  Taps t;
  const double s = extent / static_cast<double>(out), f = std::max(s, 1.0);
  t.first.resize(static_cast<size_t>(out));
  t.w.resize(static_cast<size_t>(out));
  for (int64_t i = 0; i < out; ++i) {
    const double c = x0 + (static_cast<double>(i) + 0.5) * s;
    const int64_t lo = std::max<int64_t>(0, static_cast<int64_t>(std::floor(c - f)));
    const int64_t hi = std::min<int64_t>(size, static_cast<int64_t>(std::ceil(c + f)));
    std::vector<double> w;
    double sum = 0;
    for (int64_t j = lo; j < hi; ++j) {
      const double d = std::fabs((static_cast<double>(j) + 0.5 - c) / f);
      w.push_back(d < 1 ? 1 - d : 0);
      sum += w.back();
    }
    if (sum <= 0) {  // a centre outside the image: the nearest edge pixel
      const int64_t j = std::clamp<int64_t>(static_cast<int64_t>(std::floor(c)), 0, size - 1);
      t.first[static_cast<size_t>(i)] = j;
      t.w[static_cast<size_t>(i)] = {1.0f};
      continue;
    }
    t.first[static_cast<size_t>(i)] = lo;
    for (double x : w) t.w[static_cast<size_t>(i)].push_back(static_cast<float>(x / sum));
  }
  return t;
}

}  // namespace

void resample_image(const Image& img, const CropBox& box, int64_t out_w, int64_t out_h,
                    const ImageTransformConfig& t, float* out) {
  const Taps tx = taps(box.x0, box.w, out_w, img.width);
  const Taps ty = taps(box.y0, box.h, out_h, img.height);
  // Horizontal pass over the rows the vertical pass reads, then the vertical pass.
  const int64_t y_lo = ty.first.front();
  int64_t y_hi = 0;
  for (int64_t i = 0; i < out_h; ++i)
    y_hi = std::max<int64_t>(y_hi, ty.first[static_cast<size_t>(i)] +
                                       static_cast<int64_t>(ty.w[static_cast<size_t>(i)].size()));
  std::vector<float> rows(static_cast<size_t>((y_hi - y_lo) * out_w * 3));
  for (int64_t y = y_lo; y < y_hi; ++y)
    for (int64_t i = 0; i < out_w; ++i) {
      const std::vector<float>& w = tx.w[static_cast<size_t>(i)];
      const uint8_t* src = &img.rgb[static_cast<size_t>((y * img.width + tx.first[static_cast<size_t>(i)]) * 3)];
      float acc[3] = {0, 0, 0};
      for (size_t k = 0; k < w.size(); ++k)
        for (int c = 0; c < 3; ++c) acc[c] += w[k] * static_cast<float>(src[3 * k + c]);
      const int64_t x = box.flip ? out_w - 1 - i : i;
      for (int c = 0; c < 3; ++c) rows[static_cast<size_t>(((y - y_lo) * out_w + x) * 3 + c)] = acc[c];
    }
  float scale[3], shift[3];  // (v / 255 - mean) / std = v * scale + shift
  for (int c = 0; c < 3; ++c)
    scale[c] = static_cast<float>(1.0 / (255.0 * t.std[c])),
    shift[c] = static_cast<float>(-t.mean[c] / t.std[c]);
  const int64_t plane = out_w * out_h;
  for (int64_t j = 0; j < out_h; ++j) {
    const std::vector<float>& w = ty.w[static_cast<size_t>(j)];
    const int64_t first = ty.first[static_cast<size_t>(j)] - y_lo;
    for (int64_t x = 0; x < out_w; ++x) {
      float acc[3] = {0, 0, 0};
      for (size_t k = 0; k < w.size(); ++k)
        for (int c = 0; c < 3; ++c)
          acc[c] += w[k] * rows[static_cast<size_t>(((first + static_cast<int64_t>(k)) * out_w + x) * 3 + c)];
      for (int c = 0; c < 3; ++c)
        out[c * plane + j * out_w + x] = std::clamp(acc[c], 0.0f, 255.0f) * scale[c] + shift[c];
    }
  }
}

void resample_labels(const LabelMap& labels, const CropBox& box, int64_t image_w, int64_t image_h,
                     int64_t out_w, int64_t out_h, int32_t* out) {
  const double kx = static_cast<double>(labels.width) / static_cast<double>(image_w);
  const double ky = static_cast<double>(labels.height) / static_cast<double>(image_h);
  for (int64_t j = 0; j < out_h; ++j) {
    const double sy = (box.y0 + (static_cast<double>(j) + 0.5) * box.h / static_cast<double>(out_h)) * ky;
    const int64_t y = std::clamp<int64_t>(static_cast<int64_t>(std::floor(sy)), 0, labels.height - 1);
    for (int64_t i = 0; i < out_w; ++i) {
      const double sx = (box.x0 + (static_cast<double>(i) + 0.5) * box.w / static_cast<double>(out_w)) * kx;
      const int64_t x = std::clamp<int64_t>(static_cast<int64_t>(std::floor(sx)), 0, labels.width - 1);
      out[j * out_w + (box.flip ? out_w - 1 - i : i)] = labels.labels[static_cast<size_t>(y * labels.width + x)];
    }
  }
}

}  // namespace remat
