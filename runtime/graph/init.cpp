// Parameter initialisation with a platform-independent generator (no <random> distributions,
// whose output differs between standard libraries).
#include "runtime/graph/init.h"

#include <algorithm>
#include <cmath>

#include "runtime/core/check.h"

namespace remat {

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t hash_string(const std::string& s, uint64_t seed) {
  uint64_t h = mix64(seed);
  for (unsigned char c : s) h = mix64(h ^ c);
  return h;
}

namespace {
// Uniform in (0, 1) from the i-th draw of stream `key`.
double uniform01(uint64_t key, uint64_t i) {
  return (static_cast<double>(mix64(key ^ mix64(i)) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
}  // namespace

void init_values(const Value& v, uint64_t seed, float* out) {
  const int64_t n = v.desc.numel();
  const uint64_t key = hash_string(v.name, seed);
  switch (v.init) {
    case InitKind::None:
    case InitKind::Zeros:
      std::fill(out, out + n, 0.0f);
      break;
    case InitKind::Ones:
      std::fill(out, out + n, 1.0f);
      break;
    case InitKind::Normal: {
      REMAT_CHECK(v.init_std > 0, "normal init of '" << v.name << "' needs init_std > 0");
      // Box-Muller, both normals of each pair of uniforms (embedding tables are large).
      for (int64_t i = 0; i < n; i += 2) {
        const double u1 = uniform01(key, static_cast<uint64_t>(i));
        const double u2 = uniform01(key, static_cast<uint64_t>(i) + 1);
        const double r = v.init_std * std::sqrt(-2.0 * std::log(u1));
        out[static_cast<size_t>(i)] = static_cast<float>(r * std::cos(2 * M_PI * u2));
        if (i + 1 < n) out[static_cast<size_t>(i + 1)] = static_cast<float>(r * std::sin(2 * M_PI * u2));
      }
      break;
    }
    case InitKind::HeNormal: {
      REMAT_CHECK(v.fan_in > 0, "he_normal init of '" << v.name << "' needs fan_in");
      const double stddev = std::sqrt(2.0 / static_cast<double>(v.fan_in));
      for (int64_t i = 0; i < n; ++i) {  // Box-Muller, one normal per pair of uniforms
        double u1 = uniform01(key, 2 * static_cast<uint64_t>(i));
        double u2 = uniform01(key, 2 * static_cast<uint64_t>(i) + 1);
        out[static_cast<size_t>(i)] =
            static_cast<float>(stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * u2));
      }
      break;
    }
    case InitKind::GlorotUniform: {
      REMAT_CHECK(v.fan_in + v.fan_out > 0, "glorot init of '" << v.name << "' needs fans");
      const double limit = std::sqrt(6.0 / static_cast<double>(v.fan_in + v.fan_out));
      for (int64_t i = 0; i < n; ++i)
        out[static_cast<size_t>(i)] =
            static_cast<float>((2 * uniform01(key, static_cast<uint64_t>(i)) - 1) * limit);
      break;
    }
  }
}

std::vector<float> init_values(const Value& v, uint64_t seed) {
  std::vector<float> out(static_cast<size_t>(v.desc.numel()));
  init_values(v, seed, out.data());
  return out;
}

}  // namespace remat
