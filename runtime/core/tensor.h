// Tensor descriptors: shape, dtype and byte size. Data lives elsewhere (backend memory);
// a TensorView pairs a descriptor with a pointer for the duration of one op call.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/checked.h"

namespace remat {

// Dimension letters (README): N batch, C channels, H height, W width; K output channels,
// R x S filter size; T sequence length, V vocabulary. Image activations are NCHW, token models'
// [N, T, C]; conv weights KCRS, dense weights [out, in].
using Shape = std::vector<int64_t>;

// BF16: bfloat16 (1 sign, 8 exponent, 7 stored significand bits: FP32 with the low 16 bits
// rounded away), stored as uint16_t on the host and __nv_bfloat16 on the device; activations
// of bf16 models (Note [bf16 execution] in runtime/backends/bf16_staging.h).
enum class DType { F32, I32, BF16 };

inline int64_t dtype_size(DType t) { return t == DType::BF16 ? 2 : 4; }
inline bool dtype_is_float(DType t) { return t == DType::F32 || t == DType::BF16; }
const char* dtype_name(DType t);                 // "f32", "i32", "bf16"
DType dtype_from_name(const std::string& name);  // throws UserError on an unknown name

// Elements of a shape; a UserError when out of range (Note [checked sizes]: the builder and
// the readers check every shape with a name first, so this is the last line of defence).
inline int64_t shape_numel(const Shape& s) { return checked_product(s, "", "shape"); }
std::string shape_str(const Shape& s);  // "[32, 3, 32, 32]"

// Note [allocation size]
// Every buffer the runtime places (arena offsets, pool blocks, persistent values) starts on a
// kAllocAlignment boundary, so a value occupies alloc_bytes(bytes) of the budget. The memory
// plan (solver problems built from a graph), the executor's accounting and the arena all count
// that size, so the predicted peak is the arena's lower bound and the measured peak equals the
// prediction to the byte.
constexpr int64_t kAllocAlignment = 256;
inline int64_t alloc_bytes(int64_t bytes) {
  return (bytes + kAllocAlignment - 1) / kAllocAlignment * kAllocAlignment;
}

struct TensorDesc {
  Shape shape;
  DType dtype = DType::F32;
  int64_t numel() const { return shape_numel(shape); }
  int64_t bytes() const { return checked_mul(numel(), dtype_size(dtype), "", "bytes"); }
  int64_t alloc_bytes() const { return remat::alloc_bytes(bytes()); }  // Note [allocation size]
  bool operator==(const TensorDesc& o) const { return shape == o.shape && dtype == o.dtype; }
};

// Bytes of `d`, checked: a UserError "<where>: field '<field>': ..." when the shape has a
// negative dimension or its elements or bytes exceed kMaxCount.
inline int64_t checked_tensor_bytes(const TensorDesc& d, std::string_view where,
                                    std::string_view field) {
  return checked_mul(checked_product(d.shape, where, field), dtype_size(d.dtype), where, field);
}

[[noreturn]] void tensor_view_dtype_error(const TensorDesc& d, DType want);

// A non-owning view of tensor data in backend memory (host or device). The typed accessors
// check the dtype: a kernel never reads one dtype's bytes as another's.
struct TensorView {
  const TensorDesc* desc = nullptr;
  void* data = nullptr;
  float* f32() const { return typed<float>(DType::F32); }
  int32_t* i32() const { return typed<int32_t>(DType::I32); }
  uint16_t* bf16() const { return typed<uint16_t>(DType::BF16); }
  const Shape& shape() const { return desc->shape; }
  int64_t dim(int i) const { return desc->shape.at(static_cast<size_t>(i)); }
  int64_t numel() const { return desc->numel(); }

 private:
  template <typename T>
  T* typed(DType want) const {
    if (desc->dtype != want) tensor_view_dtype_error(*desc, want);
    return static_cast<T*>(data);
  }
};

}  // namespace remat
