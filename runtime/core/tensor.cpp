// Tensor descriptor helpers: dtype names and shape printing.
#include "runtime/core/tensor.h"

#include <sstream>

#include "runtime/core/check.h"

namespace remat {

const char* dtype_name(DType t) { return t == DType::F32 ? "f32" : "i32"; }

DType dtype_from_name(const std::string& name) {
  if (name == "f32") return DType::F32;
  if (name == "i32") return DType::I32;
  REMAT_USER_ERROR("unknown dtype '" << name << "' (known: f32, i32)");
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

}  // namespace remat
