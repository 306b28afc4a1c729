// Synthetic, learnable training data: per-class patterns plus noise (see data.h for the model).
// Every random number comes from a splitmix64 stream seeded by (seed, step, sample), so batches
// are identical across runs, platforms and thread counts; the samples of a batch are filled by
// `threads` threads. The noise is drawn by table (Note [table normals] in data_rng.cpp); the
// patterns by the task seed (Note [synthetic splits]).
#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "models/data.h"
#include "models/data_rng.h"
#include "models/sample_threads.h"
#include "runtime/core/check.h"

namespace remat {

namespace {

constexpr double kTwoPi = 2.0 * M_PI;

class SyntheticSource : public DataSource {
 public:
  SyntheticSource(const SyntheticSeed& seed, int64_t classes, const TensorDesc& input,
                  const TensorDesc& labels, const DataShard& shard, int threads)
      : seed_(seed), classes_(classes), shard_(shard), n_(input.shape[0]), c_(input.shape[1]),
        h_(axis(input, 2)), w_(axis(input, 3)), pixel_(labels.shape.size() == 3),
        position_(labels.shape.size() == 2), threads_(std::max(threads, 1)) {
    REMAT_CHECK(classes_ >= 1, "synthetic data: classes = " << classes_);
    if (pixel_) {
      lh_ = labels.shape[1];
      lw_ = labels.shape[2];
      REMAT_CHECK(lh_ >= 1 && lw_ >= 1, "synthetic data: labels " << shape_str(labels.shape));
    }
    if (position_) {  // Note [per-position labels]: input [N, T, F], so c_ = T and h_ = F
      lh_ = labels.shape[1];
      REMAT_CHECK(input.shape.size() == 3 && lh_ >= 1,
                  "synthetic data: labels " << shape_str(labels.shape) << " for input "
                                            << shape_str(input.shape));
    }
    Rng r(mix64(seed.task ^ 0x5EEDC1A55ull));
    a_.resize(static_cast<size_t>(classes_ * c_));
    b_ = phi_ = a_;
    fx_.resize(static_cast<size_t>(classes_));
    fy_ = fx_;
    for (int64_t k = 0; k < classes_; ++k) {
      fx_[k] = 0.2 + 1.3 * r.uniform();
      fy_[k] = 0.2 + 1.3 * r.uniform();
      for (int64_t c = 0; c < c_; ++c) {
        a_[k * c_ + c] = 0.5 * r.normal();
        b_[k * c_ + c] = 0.5 + 0.5 * r.uniform();
        phi_[k * c_ + c] = kTwoPi * r.uniform();
      }
    }
    if (position_) {
      v_.resize(static_cast<size_t>(classes_ * h_));
      for (double& v : v_) v = r.normal();
    }
  }

  void next_batch(int64_t step, void* input, int32_t* labels) override {
    const int64_t sample = c_ * h_ * w_, label_plane = lh_ * lw_;
    fill_samples(n_, threads_, [&](int64_t i) {
      Rng r = sample_rng(stream_, step, shard_.first + i);  // i in the global batch
      float* x = static_cast<float*>(input) + i * sample;
      if (pixel_) fill_pixel(r, x, labels + i * label_plane);
      else if (position_) fill_position(r, x, labels + i * lh_);
      else fill_class(r, x, labels + i);
    });
  }

  // A per-sample input [C, H, W], [F] or [T, F] as [C, H, W] with the missing sizes 1.
  static int64_t axis(const TensorDesc& input, size_t k) {
    return k < input.shape.size() ? input.shape[k] : 1;
  }

  std::string describe() const override {
    std::ostringstream os;
    os << "synthetic (" << seed_.describe() << ", " << classes_ << " classes"
       << (pixel_ ? ", per-pixel labels" : position_ ? ", per-position labels" : "")
       << data_shard_describe(shard_, n_) << ")";
    return os.str();
  }

 private:
  // The pattern's sin(fx w + fy h + phi) is sin(fx w) cos(fy h + phi) + cos(fx w) sin(fy h + phi):
  // 2 (W + C H) sines and cosines a sample rather than C H W.
  void fill_class(Rng& r, float* x, int32_t* label) const {
    const int64_t k = r.below(classes_);
    *label = static_cast<int32_t>(k);
    fill_normal(r, x, c_ * h_ * w_);
    std::vector<float> sx(static_cast<size_t>(w_)), cx(sx.size());
    for (int64_t xx = 0; xx < w_; ++xx) {
      sx[size_t(xx)] = static_cast<float>(std::sin(fx_[k] * xx));
      cx[size_t(xx)] = static_cast<float>(std::cos(fx_[k] * xx));
    }
    for (int64_t c = 0; c < c_; ++c) {
      const double a = a_[k * c_ + c], b = b_[k * c_ + c], phi = phi_[k * c_ + c];
      for (int64_t y = 0; y < h_; ++y, x += w_) {
        const double t = fy_[k] * y + phi;
        const float af = static_cast<float>(a), p = static_cast<float>(b * std::cos(t)),
                    q = static_cast<float>(b * std::sin(t));
        for (int64_t xx = 0; xx < w_; ++xx) x[xx] += af + p * sx[size_t(xx)] + q * cx[size_t(xx)];
      }
    }
  }

  // The label map has the loss's resolution (lh_, lw_); input pixel (y, x) carries the class
  // of label pixel (y * lh_ / h_, x * lw_ / w_), so a network that downsamples can still fit it.
  void fill_pixel(Rng& r, float* x, int32_t* label) const {
    for (int64_t p = 0; p < lh_ * lw_; ++p) label[p] = 0;
    const int64_t rects = 1 + r.below(3);
    for (int64_t q = 0; q < rects; ++q) {
      const int32_t k = static_cast<int32_t>(r.below(classes_));
      const int64_t y0 = r.below(lh_), x0 = r.below(lw_);
      const int64_t rh = 1 + r.below(std::max<int64_t>(1, lh_ / 2));
      const int64_t rw = 1 + r.below(std::max<int64_t>(1, lw_ / 2));
      for (int64_t y = y0; y < std::min(lh_, y0 + rh); ++y)
        for (int64_t xx = x0; xx < std::min(lw_, x0 + rw); ++xx) label[y * lw_ + xx] = k;
    }
    // a_ doubles as the per-class, per-channel pixel value v_kc = 2 a_kc.
    fill_normal(r, x, c_ * h_ * w_);
    for (int64_t c = 0; c < c_; ++c)
      for (int64_t y = 0; y < h_; ++y)
        for (int64_t xx = 0; xx < w_; ++xx, ++x) {
          const int32_t k = label[(y * lh_ / h_) * lw_ + xx * lw_ / w_];
          *x = static_cast<float>(2.0 * a_[k * c_ + c]) + 0.5f * *x;
        }
  }

  // Note [per-position labels]
  // A float sequence [T, F] whose loss is token_xent (a class at each position of [N, T', K])
  // gets labels [T'] the way a segmentation map is drawn, in one dimension: class 0 with 1-3 runs
  // of random classes painted over it, and at each input position t the features of the class
  // of label position t T' / T (v_kf + N(0, 0.5^2) in feature f, v ~ N(0, 1) per class and
  // feature), so a network that downsamples the sequence can still fit it.
  void fill_position(Rng& r, float* x, int32_t* label) const {
    for (int64_t p = 0; p < lh_; ++p) label[p] = 0;
    const int64_t runs = 1 + r.below(3);
    for (int64_t q = 0; q < runs; ++q) {
      const int32_t k = static_cast<int32_t>(r.below(classes_));
      const int64_t t0 = r.below(lh_), len = 1 + r.below(std::max<int64_t>(1, lh_ / 2));
      for (int64_t t = t0; t < std::min(lh_, t0 + len); ++t) label[t] = k;
    }
    fill_normal(r, x, c_ * h_);
    for (int64_t t = 0; t < c_; ++t) {
      const double* v = &v_[size_t(label[t * lh_ / c_] * h_)];
      for (int64_t f = 0; f < h_; ++f, ++x) *x = static_cast<float>(v[f]) + 0.5f * *x;
    }
  }

  SyntheticSeed seed_;
  uint64_t stream_ = seed_.sample_stream();
  int64_t classes_;
  DataShard shard_;
  int64_t n_, c_, h_, w_;
  int64_t lh_ = 0, lw_ = 0;  // per-pixel label map size; lh_ the positions per-position
  bool pixel_, position_;
  int threads_;
  std::vector<double> a_, b_, phi_, fx_, fy_;  // per class (and channel), see data.h
  std::vector<double> v_;                      // per class and feature, per-position labels
};

}  // namespace

// Note [synthetic splits]
// A synthetic source is a task, the patterns its classes (or tokens) follow, and a stream of
// samples of that task. Training data draws both from its `seed`. A synthetic `val` section
// draws the patterns from the training data's seed when that data is synthetic too (otherwise
// from its own) and its samples from its own `seed`, mixed with a tag first: validation sees
// held-out samples of the task training learns, whatever the two seeds, as a validation split
// of a dataset does: its accuracy measures what the model learnt of the patterns, not of the
// samples it trained on.
uint64_t SyntheticSeed::sample_stream() const {
  return held_out ? mix64(seed ^ 0x4E1D0C7A11ull) : seed;
}

std::string SyntheticSeed::describe() const {
  std::string s = "seed " + std::to_string(seed);
  if (held_out) s += ", held out, the task of seed " + std::to_string(task);
  return s;
}

std::unique_ptr<DataSource> make_synthetic_source(const SyntheticSeed& seed, int64_t classes,
                                                  const TensorDesc& input,
                                                  const TensorDesc& labels,
                                                  const DataShard& shard, int threads) {
  REMAT_CHECK(input.shape.size() >= 2 && input.shape.size() <= 4,
              "synthetic data: input " << shape_str(input.shape));
  return std::make_unique<SyntheticSource>(seed, classes, input, labels, shard, threads);
}

}  // namespace remat
