// NumPy's .npy arrays (what numpy.save writes; format versions 1.0, 2.0 and 3.0): the header
// and a read-only view of the elements (Note [npy files] in npy.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/core/tensor.h"

namespace remat {

// The element types remat reads: floats (inputs) and integers (labels), little-endian.
enum class NpyType { F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, Bool };

struct NpyHeader {
  NpyType type = NpyType::F32;
  std::string descr;     // as written: "<f4", "|u1"
  Shape shape;           // C order; () is a scalar
  int64_t offset = 0;    // where the elements start
  int64_t elem_bytes = 0;
  int64_t count() const;  // elements (1 for a scalar)
};

// The header of the `size` bytes at `data` (at least the whole header). Throws UserError
// starting with `what` (the file's path) and naming the field for anything but a C-order,
// little-endian array of a type above whose elements fit in int64 bytes.
NpyHeader parse_npy_header(const uint8_t* data, size_t size, const std::string& what);

bool npy_is_float(NpyType t);
std::string npy_type_name(NpyType t);  // "float32", "int64", ...

// The elements of a whole .npy file's `size` bytes: the header parsed, and the file checked to
// end where the elements do.
class NpyView {
 public:
  NpyView() = default;
  NpyView(const uint8_t* data, size_t size, const std::string& what);
  const NpyHeader& header() const { return h_; }
  // Element i as a double (floats) or an int64 (integers and bools; a float's when it is an
  // integer, else -1).
  double real(int64_t i) const;
  int64_t integer(int64_t i) const;
  // Elements [first, first + n) of a float array rounded to float32 (a float32 array copied),
  // the type dispatched once for the run.
  void floats(int64_t first, int64_t n, float* out) const;

 private:
  NpyHeader h_;
  const uint8_t* data_ = nullptr;
};

// A .npy file mapped read-only, as a view.
class NpyFile {
 public:
  explicit NpyFile(const std::string& path);
  ~NpyFile();
  NpyFile(const NpyFile&) = delete;
  NpyFile& operator=(const NpyFile&) = delete;

  const std::string& path() const { return path_; }
  const NpyHeader& header() const { return view_.header(); }
  double real(int64_t i) const { return view_.real(i); }
  int64_t integer(int64_t i) const { return view_.integer(i); }
  void floats(int64_t first, int64_t n, float* out) const { view_.floats(first, n, out); }
  std::string describe() const;  // "x.npy (float32 [100, 16, 6])"

 private:
  std::string path_;
  NpyView view_;
  const uint8_t* map_ = nullptr;
  size_t size_ = 0;
};

}  // namespace remat
