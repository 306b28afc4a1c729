// CPU kernels templated on their tensors' storage type: float (F32) or uint16_t (BF16). A kernel
// loads every element as a float, computes in FP32 (or double) exactly as its F32 version, and
// stores through store(), which rounds to nearest even into bf16: the same arithmetic as the
// backend's staging (Note [bf16 execution]) without FP32 copies of whole tensors.
#pragma once

#include <cstdint>

#include "runtime/core/bf16.h"
#include "runtime/core/check.h"
#include "runtime/core/tensor.h"

namespace remat {

inline float load(const float* p, int64_t i) { return p[i]; }
inline float load(const uint16_t* p, int64_t i) { return bf16_to_float(p[i]); }
inline void store(float* p, int64_t i, float v) { p[i] = v; }
inline void store(uint16_t* p, int64_t i, float v) { p[i] = bf16_from_float(v); }

// The typed data of a float tensor view as T* (T = float for F32, uint16_t for BF16).
template <typename T>
T* storage(const TensorView& v);
template <>
inline float* storage<float>(const TensorView& v) { return v.f32(); }
template <>
inline uint16_t* storage<uint16_t>(const TensorView& v) { return v.bf16(); }

// Calls f(float{}) or f(uint16_t{}) for an F32 or BF16 tensor: a generic lambda then names its
// storage type as decltype(tag).
template <typename F>
void with_storage(DType t, F&& f) {
  REMAT_CHECK(dtype_is_float(t), "a float kernel on " << dtype_name(t) << " data");
  if (t == DType::BF16) f(uint16_t{});
  else f(float{});
}

// out[j] = the sum of column j of the [rows, cols] matrix x, in double, rows in order: the
// bias gradients of dense and of channels-last convolutions (F32 or bf16 data).
template <typename T>
void column_sums_cpu(const T* x, int64_t rows, int64_t cols, float* out) {
  for (int64_t j = 0; j < cols; ++j) {
    double s = 0;
    for (int64_t i = 0; i < rows; ++i) s += load(x, i * cols + j);
    out[j] = static_cast<float>(s);
  }
}

// column_sums_cpu over the rows of the last dimension of a float tensor, into an F32 output.
inline void column_sums_cpu(const TensorView& x, const TensorView& out) {
  const int64_t cols = x.shape().back();
  const int64_t rows = cols > 0 ? x.numel() / cols : 0;
  with_storage(x.desc->dtype, [&](auto tag) {
    column_sums_cpu(storage<decltype(tag)>(x), rows, cols, out.f32());
  });
}

}  // namespace remat
