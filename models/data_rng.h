// The data generators' random numbers: a splitmix64 stream, identical on every platform (no
// <random> distributions), and the per-sample stream of (seed, step, sample).
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/graph/init.h"  // mix64

namespace remat {

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() { return mix64(s_++); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
  double normal() {  // Box-Muller
    double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }

 private:
  uint64_t s_;
};

// The stream of sample i of step `step`: batches depend only on (seed, step, i).
inline Rng sample_rng(uint64_t seed, int64_t step, int64_t i) {
  return Rng(mix64(mix64(mix64(seed) ^ static_cast<uint64_t>(step)) ^ static_cast<uint64_t>(i)));
}

// x[0, n) = n draws of N(0, 1) by table (Note [table normals]), four from each of r's words.
void fill_normal(Rng& r, float* x, int64_t n);

// The table: entry i the normal quantile of (i + 1/2) / 65536, from -4.32 to 4.32.
const float* normal_quantiles();
constexpr int kNormalQuantiles = 1 << 16;

}  // namespace remat
