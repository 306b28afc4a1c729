// Counter-based random numbers: a pure hash of (seed, step, index), so any element's value can
// be regenerated anywhere, in any order, on the host or the device (dropout masks replay under
// recomputation and match between the CPU reference and a CUDA kernel bit for bit).
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define REMAT_RNG_FN __host__ __device__ __forceinline__
#else
#define REMAT_RNG_FN inline
#endif

namespace remat {

// Note [step source]
// The step a dropout mask is drawn for. Launched eagerly, a kernel takes it by value; inside a
// captured CUDA graph (Note [step graphs] in runtime/backends/backend.h) the launch is replayed
// every step with the arguments of the capture, so the kernel reads the step from `device`,
// which the backend rewrites before each replay. Each kernel reads it once, first.
struct StepSource {
  constexpr StepSource(uint64_t v = 0, const uint64_t* d = nullptr) : value(v), device(d) {}
  uint64_t value;
  const uint64_t* device;  // when set, the step is *device
#ifdef __CUDACC__
  __device__ __forceinline__ uint64_t get() const { return device ? *device : value; }
#endif
};

// SplitMix64's finaliser: a bijection on 64 bits with full avalanche.
REMAT_RNG_FN uint64_t rng_mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// 64 random bits for element `index` of the stream (seed, step). Each key is mixed in
// separately so that nearby seeds, steps and indices give unrelated values.
REMAT_RNG_FN uint64_t rng_hash(uint64_t seed, uint64_t step, uint64_t index) {
  uint64_t h = rng_mix64(seed);
  h = rng_mix64(h ^ step);
  return rng_mix64(h ^ index);
}

// Uniform float in [0, 1) with 24 random bits (every value exactly representable, so host and
// device compute the same float).
REMAT_RNG_FN float rng_uniform(uint64_t seed, uint64_t step, uint64_t index) {
  return static_cast<float>(rng_hash(seed, step, index) >> 40) * (1.0f / 16777216.0f);
}

// Inverted dropout's factor for element `index`: 0 when dropped (u < rate, so with probability
// `rate`), else keep_scale = 1 / (1 - rate); exactly 1 when rate is 0. The fused attention's
// CPU reference and its kernels both draw their masks here.
REMAT_RNG_FN double rng_dropout_factor(float rate, double keep_scale, uint64_t seed, uint64_t step,
                                       uint64_t index) {
  if (rate == 0.0f) return 1.0;
  return rng_uniform(seed, step, index) >= rate ? keep_scale : 0.0;
}

// 1 / (1 - rate) in double, the scale of rng_dropout_factor.
REMAT_RNG_FN double rng_keep_scale(float rate) { return 1.0 / (1.0 - static_cast<double>(rate)); }

}  // namespace remat
