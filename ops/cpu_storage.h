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

}  // namespace remat
