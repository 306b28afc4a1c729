// The data generators' normal deviates by table (Note [table normals]).
#include "models/data_rng.h"

#include <vector>

namespace remat {
namespace {

// Note [table normals]
// A synthetic batch is mostly noise: 9.6 million N(0, 1) draws for 64 images of 224 x 224, which
// Box-Muller (a log, a square root and a cosine in double each) made in about 0.7 s on one core,
// longer than a GPU step. The draws come instead from 16 random bits each, by inverse transform
// over 65,536 equiprobable values: entry i of the table is the normal quantile of
// (i + 1/2) / 65536. Each bin's value is the quantile at its middle probability, so the draw is
// N(0, 1) to within a bin: mean 0 exactly (the table is symmetric), variance 0.99998 (the tails
// are cut at +-4.32, where each end bin's value stands for its probability 1.5e-5), about 1.5 ns
// a draw. The table is
// computed once per process, each entry by Newton's method on erfc from its neighbour, in double,
// then rounded to float.
std::vector<float> quantile_table() {
  std::vector<float> t(static_cast<size_t>(kNormalQuantiles));
  const int half = kNormalQuantiles / 2;
  double z = 0;  // the median; entries below it from the middle out, each from the one above
  for (int i = half - 1; i >= 0; --i) {
    const double p = (i + 0.5) / kNormalQuantiles;
    // Phi is convex below 0, so Newton's steps from a z above the root decrease to it.
    for (int it = 0; it < 100; ++it) {
      const double cdf = 0.5 * std::erfc(-z / std::sqrt(2.0));
      const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2.0 * M_PI);
      const double step = (cdf - p) / pdf;
      z -= step;
      if (std::fabs(step) < 1e-12) break;
    }
    t[static_cast<size_t>(i)] = static_cast<float>(z);
    t[static_cast<size_t>(kNormalQuantiles - 1 - i)] = static_cast<float>(-z);
  }
  return t;
}

}  // namespace

const float* normal_quantiles() {
  static const std::vector<float> table = quantile_table();
  return table.data();
}

void fill_normal(Rng& r, float* x, int64_t n) {
  const float* t = normal_quantiles();
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uint64_t bits = r.next();
    for (int k = 0; k < 4; ++k) x[i + k] = t[(bits >> (16 * k)) & 0xFFFF];
  }
  if (i < n) {
    const uint64_t bits = r.next();
    for (int k = 0; i < n; ++k, ++i) x[i] = t[(bits >> (16 * k)) & 0xFFFF];
  }
}

}  // namespace remat
