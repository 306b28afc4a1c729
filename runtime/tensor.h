// Tensor descriptors: shape, dtype and byte size. Data lives elsewhere (backend memory);
// a TensorView pairs a descriptor with a pointer for the duration of one op call.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace remat {

// Dimension letters (README): N batch, C channels, H height, W width; K output channels,
// R x S filter size; T sequence length, V vocabulary. Image activations are NCHW, token models'
// [N, T, C]; conv weights KCRS, dense weights [out, in].
using Shape = std::vector<int64_t>;

enum class DType { F32, I32 };

inline int64_t dtype_size(DType) { return 4; }  // both F32 and I32 are 4 bytes
const char* dtype_name(DType t);
DType dtype_from_name(const std::string& name);  // throws UserError on an unknown name

inline int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}
std::string shape_str(const Shape& s);  // "[32, 3, 32, 32]"

struct TensorDesc {
  Shape shape;
  DType dtype = DType::F32;
  int64_t numel() const { return shape_numel(shape); }
  int64_t bytes() const { return numel() * dtype_size(dtype); }
  bool operator==(const TensorDesc& o) const { return shape == o.shape && dtype == o.dtype; }
};

// A non-owning view of tensor data in backend memory (host or device).
struct TensorView {
  const TensorDesc* desc = nullptr;
  void* data = nullptr;
  float* f32() const { return static_cast<float*>(data); }
  int32_t* i32() const { return static_cast<int32_t*>(data); }
  const Shape& shape() const { return desc->shape; }
  int64_t dim(int i) const { return desc->shape.at(static_cast<size_t>(i)); }
  int64_t numel() const { return desc->numel(); }
};

}  // namespace remat
