// bfloat16 on the host: conversion from FP32 with round-to-nearest-even (what CUDA's
// __float2bfloat16_rn does), exact widening back to FP32, and the same over arrays. The CPU
// reference of every bf16 op computes in FP32 and stores through bf16_from_float.
#pragma once

#include <cstdint>
#include <cstring>

namespace remat {

// Unit roundoff of bf16 (8 significand bits with the implicit one): |rne(x) - x| <= 2^-8 |x|
// for every x in the normal range. The bound every bf16 tolerance in the tests starts from.
constexpr double kBf16UnitRoundoff = 1.0 / 256;

// Round to nearest, ties to even; overflow goes to +-inf as in IEEE arithmetic; NaN stays a
// (quiet) NaN.
inline uint16_t bf16_from_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// x rounded to the nearest bf16 value, as an FP32 number.
inline float bf16_round(float f) { return bf16_to_float(bf16_from_float(f)); }

inline void bf16_widen(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
}
inline void bf16_narrow(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_from_float(in[i]);
}
inline void bf16_round_in_place(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = bf16_round(x[i]);
}

}  // namespace remat
