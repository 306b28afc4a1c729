// Tensor descriptor helpers: dtype names and shape printing.
#include "runtime/core/tensor.h"

#include <sstream>

#include "runtime/core/check.h"

namespace remat {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::I32: return "i32";
    case DType::BF16: return "bf16";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  for (DType t : {DType::F32, DType::I32, DType::BF16})
    if (name == dtype_name(t)) return t;
  REMAT_USER_ERROR("unknown dtype '" << name << "' (known: f32, i32, bf16)");
}

void tensor_view_dtype_error(const TensorDesc& d, DType want) {
  REMAT_CHECK(false, "a kernel reads a " << dtype_name(d.dtype) << " " << shape_str(d.shape)
                                         << " tensor as " << dtype_name(want));
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

}  // namespace remat
