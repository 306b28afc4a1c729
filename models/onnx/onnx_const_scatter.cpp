// ONNX's ScatterND over constants (Note [ONNX constant folding] in onnx_const.h).
#include <string>
#include <vector>

#include "models/onnx/onnx_const.h"
#include "runtime/core/check.h"

namespace remat {

OnnxConst fold_scatter_nd(const OnnxConst& data, const OnnxConst& indices, const OnnxConst& updates,
                          const std::string& what) {
  OnnxConst out = data;
  const std::vector<int64_t> at = indices.ints(what + ": indices");
  const auto r = static_cast<int64_t>(out.shape.size());
  const int64_t k = indices.shape.empty() ? 0 : indices.shape.back();
  if (k < 1 || k > r)
    REMAT_USER_ERROR(what << ": indices " << shape_str(indices.shape) << " for data "
                          << shape_str(out.shape) << " (the last dimension must be 1 .. "
                          << r << ")");
  int64_t slice = 1;  // elements per written slice: data's dims after the first k
  for (int64_t d = k; d < r; ++d) slice *= out.shape[static_cast<size_t>(d)];
  const int64_t writes = indices.numel() / k;
  Shape expect(indices.shape.begin(), indices.shape.end() - 1);
  expect.insert(expect.end(), out.shape.begin() + k, out.shape.end());
  if (updates.is_float != out.is_float || updates.shape != expect)
    REMAT_USER_ERROR(what << ": updates " << shape_str(updates.shape) << " where indices "
                          << shape_str(indices.shape) << " into data " << shape_str(out.shape)
                          << " need " << (out.is_float ? "floats " : "integers ")
                          << shape_str(expect));
  for (int64_t w = 0; w < writes; ++w) {
    int64_t offset = 0;
    for (int64_t d = 0; d < k; ++d) {
      const int64_t dim = out.shape[static_cast<size_t>(d)];
      const int64_t i = at[static_cast<size_t>(w * k + d)];
      if (i < -dim || i >= dim)
        REMAT_USER_ERROR(what << ": index " << i << " of a dimension of " << dim);
      offset = offset * dim + (i < 0 ? i + dim : i);
    }
    for (int64_t e = 0; e < slice; ++e) {
      const auto to = static_cast<size_t>(offset * slice + e);
      const auto from = static_cast<size_t>(w * slice + e);
      if (out.is_float) out.f[to] = updates.f[from];
      else out.i[to] = updates.i[from];
    }
  }
  return out;
}

}  // namespace remat
