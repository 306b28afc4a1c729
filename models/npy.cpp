// NumPy's .npy arrays: the header parsed strictly, the elements mapped read-only.
#include "models/npy.h"

#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <sstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/core/check.h"

namespace remat {

// Note [npy files]
// A .npy file (numpy.save; numpy's format.py defines it) is the magic "\x93NUMPY", a major and a
// minor version byte, the header's length (2 bytes little-endian in version 1, 4 in versions 2
// and 3), the header — a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (100, 16, 6), }
// padded with spaces and ending in a newline — then the elements, C order unless fortran_order.
// remat reads the dict exactly as numpy writes it (its three keys, each once; strings in either
// quote; True or False; a tuple of non-negative integers), little-endian (or single-byte)
// floats, integers and bools, C order, and requires the file to end where the elements do: a
// truncated or padded file is an error naming both sizes, not a short read.

int64_t NpyHeader::count() const { return shape_numel(shape); }

bool npy_is_float(NpyType t) {
  return t == NpyType::F16 || t == NpyType::F32 || t == NpyType::F64;
}

std::string npy_type_name(NpyType t) {
  switch (t) {
    case NpyType::F16: return "float16";
    case NpyType::F32: return "float32";
    case NpyType::F64: return "float64";
    case NpyType::I8: return "int8";
    case NpyType::I16: return "int16";
    case NpyType::I32: return "int32";
    case NpyType::I64: return "int64";
    case NpyType::U8: return "uint8";
    case NpyType::U16: return "uint16";
    case NpyType::U32: return "uint32";
    case NpyType::U64: return "uint64";
    case NpyType::Bool: return "bool";
  }
  return "?";
}

namespace {

// The header dict, read left to right; errors name the file and what was expected where.
class HeaderReader {
 public:
  HeaderReader(const std::string& text, const std::string& what) : s_(text), what_(what) {}

  NpyHeader read() {
    expect('{');
    bool descr = false, order = false, shape = false;
    for (;;) {
      if (peek() == '}') break;
      const std::string key = string("a key");
      expect(':');
      if (key == "descr" && !descr) {
        descr = true;
        if (peek() == '[') fail("field 'descr': structured arrays (a list of fields) are not supported");
        h_.descr = string("field 'descr': a type string such as '<f4'");
      } else if (key == "fortran_order" && !order) {
        order = true;
        if (word() != "False")
          fail("field 'fortran_order': Fortran-order arrays are not supported (save a C-order array: "
               "numpy.ascontiguousarray)");
      } else if (key == "shape" && !shape) {
        shape = true;
        read_shape();
      } else if (key == "descr" || key == "fortran_order" || key == "shape") {
        fail("key '" + key + "' given twice");
      } else {
        fail("unknown key '" + key + "' (known: descr, fortran_order, shape)");
      }
      if (peek() != ',') break;
      ++i_;
    }
    expect('}');
    peek();  // the padding
    if (i_ != s_.size()) fail("unexpected text after the header's dict");
    if (!descr || !order || !shape) fail("the header lacks 'descr', 'fortran_order' or 'shape'");
    set_type();
    return h_;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    REMAT_USER_ERROR(what_ << ": .npy header: " << why);
  }
  char peek() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n')) ++i_;
    return i_ < s_.size() ? s_[i_] : '\0';
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "' at byte " + std::to_string(i_));
    ++i_;
  }
  std::string string(const std::string& what) {
    const char q = peek();
    if (q != '\'' && q != '"') fail("expected " + what + " in quotes at byte " + std::to_string(i_));
    const size_t end = s_.find(q, i_ + 1);
    if (end == std::string::npos) fail("an unterminated string at byte " + std::to_string(i_));
    std::string out = s_.substr(i_ + 1, end - i_ - 1);
    i_ = end + 1;
    return out;
  }
  std::string word() {
    peek();
    const size_t start = i_;
    while (i_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[i_]))) ++i_;
    return s_.substr(start, i_ - start);
  }
  void read_shape() {
    expect('(');
    while (peek() != ')') {
      if (!std::isdigit(static_cast<unsigned char>(peek())))
        fail("field 'shape': expected a tuple of non-negative integers");
      int64_t d = 0;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
        if (d > (int64_t(1) << 50)) fail("field 'shape': a dimension too large");
        d = d * 10 + (s_[i_++] - '0');
      }
      h_.shape.push_back(d);
      if (peek() == ',') ++i_;
      else if (peek() != ')') fail("field 'shape': expected ',' or ')' at byte " + std::to_string(i_));
    }
    ++i_;
  }
  void set_type() {
    const std::string& d = h_.descr;
    static const struct { const char* code; NpyType type; int bytes; } kTypes[] = {
        {"f2", NpyType::F16, 2}, {"f4", NpyType::F32, 4}, {"f8", NpyType::F64, 8},
        {"i1", NpyType::I8, 1},  {"i2", NpyType::I16, 2}, {"i4", NpyType::I32, 4},
        {"i8", NpyType::I64, 8}, {"u1", NpyType::U8, 1},  {"u2", NpyType::U16, 2},
        {"u4", NpyType::U32, 4}, {"u8", NpyType::U64, 8}, {"b1", NpyType::Bool, 1}};
    for (const auto& t : kTypes) {
      if (d.size() != 3 || d.compare(1, 2, t.code) != 0) continue;
      if (d[0] == '>' && t.bytes > 1)
        fail("field 'descr': '" + d + "' is big-endian (save it little-endian: astype('<" +
             t.code + "'))");
      if (d[0] != '<' && d[0] != '|' && d[0] != '=' && d[0] != '>')
        fail("field 'descr': '" + d + "' has no byte order");
      h_.type = t.type;
      h_.elem_bytes = t.bytes;
      return;
    }
    fail("field 'descr': '" + d + "' is not a type remat reads (floats f2, f4, f8; integers i1 .. "
         "i8, u1 .. u8; b1)");
  }

  const std::string& s_;
  std::string what_;
  size_t i_ = 0;
  NpyHeader h_;
};

float half_to_float(uint16_t h) {
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -24);
  if (e == 31) return m ? NAN : sign * INFINITY;
  return sign * std::ldexp(static_cast<float>(m | 0x400), e - 25);
}

}  // namespace

NpyHeader parse_npy_header(const uint8_t* data, size_t size, const std::string& what) {
  static const uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (size == 0) REMAT_USER_ERROR(what << ": the file is empty (0 bytes), not a .npy file");
  if (size < 8 || std::memcmp(data, kMagic, 6) != 0)
    REMAT_USER_ERROR(what << ": not a .npy file (no \\x93NUMPY magic in its first bytes)");
  const int major = data[6];
  if (major < 1 || major > 3)
    REMAT_USER_ERROR(what << ": .npy format version " << major << "." << int(data[7])
                          << " (remat reads 1.0, 2.0 and 3.0)");
  const size_t len_bytes = major == 1 ? 2 : 4;
  if (size < 8 + len_bytes) REMAT_USER_ERROR(what << ": .npy file ends inside its header length");
  uint64_t len = 0;
  for (size_t k = 0; k < len_bytes; ++k) len |= uint64_t(data[8 + k]) << (8 * k);
  const uint64_t start = 8 + len_bytes;
  if (len > size - start)
    REMAT_USER_ERROR(what << ": .npy header of " << len << " bytes, but the file has "
                          << size - start << " after its header length");
  const std::string text(reinterpret_cast<const char*>(data + start), static_cast<size_t>(len));
  NpyHeader h = HeaderReader(text, what).read();
  h.offset = static_cast<int64_t>(start + len);
  return h;
}

NpyFile::NpyFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) REMAT_USER_ERROR("cannot open '" << path << "': " << std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    REMAT_USER_ERROR("'" << path << "' is not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      REMAT_USER_ERROR("cannot map '" << path << "': " << std::strerror(err));
    }
    map_ = static_cast<const uint8_t*>(m);
  }
  ::close(fd);
  try {
    view_ = NpyView(map_, size_, path);
  } catch (...) {
    if (map_) ::munmap(const_cast<uint8_t*>(map_), size_);
    throw;
  }
}

NpyView::NpyView(const uint8_t* data, size_t size, const std::string& what)
    : h_(parse_npy_header(data, size, what)), data_(data + h_.offset) {
  const int64_t bytes =
      checked_mul(checked_product(h_.shape, what, "shape"), h_.elem_bytes, what, "bytes");
  if (static_cast<uint64_t>(h_.offset) + static_cast<uint64_t>(bytes) != size)
    REMAT_USER_ERROR(what << ": the header says " << npy_type_name(h_.type) << " "
                          << shape_str(h_.shape) << " (" << bytes << " bytes after " << h_.offset
                          << " of header), the file has " << size << " bytes in all");
}

NpyFile::~NpyFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), size_);
}

double NpyView::real(int64_t i) const {
  const uint8_t* p = data_ + i * h_.elem_bytes;
  switch (h_.type) {
    case NpyType::F16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return half_to_float(v);
    }
    case NpyType::F32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case NpyType::F64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    default:
      return static_cast<double>(integer(i));
  }
}

void NpyView::floats(int64_t first, int64_t n, float* out) const {
  if (n <= 0) return;  // (an empty array's `out` may be null)
  const uint8_t* p = data_ + first * h_.elem_bytes;
  switch (h_.type) {
    case NpyType::F32:
      std::memcpy(out, p, static_cast<size_t>(n) * 4);
      return;
    case NpyType::F64:
      for (int64_t e = 0; e < n; ++e) {
        double v;
        std::memcpy(&v, p + 8 * e, 8);
        out[e] = static_cast<float>(v);
      }
      return;
    default:
      REMAT_CHECK(h_.type == NpyType::F16, "npy: floats() of " << npy_type_name(h_.type));
      for (int64_t e = 0; e < n; ++e) {
        uint16_t v;
        std::memcpy(&v, p + 2 * e, 2);
        out[e] = half_to_float(v);
      }
  }
}

int64_t NpyView::integer(int64_t i) const {
  const uint8_t* p = data_ + i * h_.elem_bytes;
  auto as = [p](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (h_.type) {
    case NpyType::I8: return as(int8_t{});
    case NpyType::I16: return as(int16_t{});
    case NpyType::I32: return as(int32_t{});
    case NpyType::I64: return as(int64_t{});
    case NpyType::U8: return as(uint8_t{});
    case NpyType::U16: return as(uint16_t{});
    case NpyType::U32: return as(uint32_t{});
    case NpyType::U64: {  // above int64's range: -1, which no label is
      const uint64_t v = as(uint64_t{});
      return v > uint64_t(INT64_MAX) ? -1 : static_cast<int64_t>(v);
    }
    case NpyType::Bool: return as(uint8_t{}) != 0;
    default: {
      const double v = real(i);
      return std::nearbyint(v) == v && std::fabs(v) < 9e18 ? static_cast<int64_t>(v) : -1;
    }
  }
}

std::string NpyFile::describe() const {
  std::ostringstream os;
  os << path_ << " (" << npy_type_name(header().type) << " " << shape_str(header().shape) << ")";
  return os.str();
}

}  // namespace remat
