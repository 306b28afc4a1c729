// Constant tensors read from an ONNX graph's TensorProtos (Note [ONNX constant folding] in
// onnx_const.h); their folding is onnx_const_fold.cpp's.
#include "models/onnx/onnx_const.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/core/check.h"

namespace remat {

std::string sym_str(const SymInt& v) {
  if (v.n == 0) return std::to_string(v.c);
  std::string s = v.n == 1 ? "N" : v.n == -1 ? "-N" : std::to_string(v.n) + "N";
  if (v.c > 0) s += "+" + std::to_string(v.c);
  if (v.c < 0) s += std::to_string(v.c);
  return s;
}

bool OnnxConst::is_symbolic() const {
  return std::any_of(i.begin(), i.end(), [](const SymInt& v) { return !v.is_const(); });
}

std::vector<int64_t> OnnxConst::ints(const std::string& what) const {
  if (is_float) REMAT_USER_ERROR(what << ": expected integers, got a float tensor");
  std::vector<int64_t> out;
  for (const SymInt& v : i) {
    if (!v.is_const())
      REMAT_USER_ERROR(what << ": the value " << sym_str(v)
                            << " depends on the batch N where a number is needed");
    out.push_back(v.c);
  }
  return out;
}

double OnnxConst::scalar(const std::string& what) const {
  if (numel() != 1)
    REMAT_USER_ERROR(what << ": expected one value, got a tensor " << shape_str(shape));
  if (is_float) return f[0];
  return static_cast<double>(ints(what)[0]);
}

OnnxConst const_ints(const std::vector<SymInt>& v, Shape shape) {
  OnnxConst c;
  c.is_float = false;
  c.shape = shape.empty() && v.size() != 1 ? Shape{static_cast<int64_t>(v.size())} : shape;
  c.i = v;
  return c;
}

OnnxConst const_floats(std::vector<double> v, Shape shape) {
  OnnxConst c;
  c.shape = std::move(shape);
  c.f = std::move(v);
  return c;
}

size_t onnx_element_bytes(int t) {
  switch (t) {
    case onnx::TensorProto::FLOAT: case onnx::TensorProto::INT32: case onnx::TensorProto::UINT32:
      return 4;
    case onnx::TensorProto::DOUBLE: case onnx::TensorProto::INT64: case onnx::TensorProto::UINT64:
      return 8;
    case onnx::TensorProto::FLOAT16: case onnx::TensorProto::BFLOAT16:
    case onnx::TensorProto::INT16: case onnx::TensorProto::UINT16:
      return 2;
    case onnx::TensorProto::INT8: case onnx::TensorProto::UINT8: case onnx::TensorProto::BOOL:
      return 1;
    default: return 0;
  }
}

bool onnx_is_float_type(int t) {
  return t == onnx::TensorProto::FLOAT || t == onnx::TensorProto::DOUBLE ||
         t == onnx::TensorProto::FLOAT16 || t == onnx::TensorProto::BFLOAT16;
}

namespace {

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      int e = -1;
      uint32_t m = man;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (m & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Element k of raw little-endian data of type t, as a double (floats) or int64 (integers).
double raw_float(const std::string& raw, int t, int64_t k) {
  const char* p = raw.data() + k * static_cast<int64_t>(onnx_element_bytes(t));
  switch (t) {
    case onnx::TensorProto::FLOAT: { float v; std::memcpy(&v, p, 4); return v; }
    case onnx::TensorProto::DOUBLE: { double v; std::memcpy(&v, p, 8); return v; }
    case onnx::TensorProto::FLOAT16: { uint16_t v; std::memcpy(&v, p, 2); return half_to_float(v); }
    default: { uint16_t v; std::memcpy(&v, p, 2); return bf16_to_float(v); }
  }
}

int64_t raw_int(const std::string& raw, int t, int64_t k) {
  const char* p = raw.data() + k * static_cast<int64_t>(onnx_element_bytes(t));
  switch (t) {
    case onnx::TensorProto::INT64: case onnx::TensorProto::UINT64: { int64_t v; std::memcpy(&v, p, 8); return v; }
    case onnx::TensorProto::INT32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case onnx::TensorProto::UINT32: { uint32_t v; std::memcpy(&v, p, 4); return v; }
    case onnx::TensorProto::INT16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case onnx::TensorProto::UINT16: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case onnx::TensorProto::INT8: return static_cast<int8_t>(*p);
    default: return static_cast<uint8_t>(*p);  // UINT8, BOOL
  }
}

// The element count a proto's dims give, after checking them; and where its values live.
int64_t checked_numel(const onnx::TensorProto& t, const std::string& what, Shape* shape) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    REMAT_USER_ERROR(what << ": its data is stored in an external file, which the importer does "
                             "not read (export the model in one file: it must be under 2 GB)");
  if (onnx_element_bytes(t.data_type()) == 0)
    REMAT_USER_ERROR(what << ": data type " << onnx::TensorProto::DataType_Name(
                                  static_cast<onnx::TensorProto::DataType>(t.data_type()))
                          << " is not supported (floats, integers and booleans are)");
  int64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0 || (d > 0 && n > (int64_t{1} << 40) / d))
      REMAT_USER_ERROR(what << ": dims hold " << d << ", out of range");
    n *= d;
    shape->push_back(d);
  }
  const int type = t.data_type();
  int64_t have;
  if (t.has_raw_data()) {
    const int64_t bytes = static_cast<int64_t>(t.raw_data().size());
    if (bytes != n * static_cast<int64_t>(onnx_element_bytes(type)))
      REMAT_USER_ERROR(what << ": " << bytes << " bytes of data disagree with its dims "
                            << shape_str(*shape) << " (" << n * onnx_element_bytes(type)
                            << " bytes of " << onnx_element_bytes(type) << "-byte elements)");
    return n;
  }
  switch (type) {
    case onnx::TensorProto::FLOAT: have = t.float_data_size(); break;
    case onnx::TensorProto::DOUBLE: have = t.double_data_size(); break;
    case onnx::TensorProto::INT64: have = t.int64_data_size(); break;
    case onnx::TensorProto::UINT32: case onnx::TensorProto::UINT64: have = t.uint64_data_size(); break;
    default: have = t.int32_data_size(); break;
  }
  if (have != n)
    REMAT_USER_ERROR(what << ": " << have << " values disagree with its dims " << shape_str(*shape)
                          << " (" << n << " elements)");
  return n;
}

double typed_float(const onnx::TensorProto& t, int64_t k) {
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT: return t.float_data(static_cast<int>(k));
    case onnx::TensorProto::DOUBLE: return t.double_data(static_cast<int>(k));
    case onnx::TensorProto::FLOAT16:
      return half_to_float(static_cast<uint16_t>(t.int32_data(static_cast<int>(k))));
    default: return bf16_to_float(static_cast<uint16_t>(t.int32_data(static_cast<int>(k))));
  }
}

int64_t typed_int(const onnx::TensorProto& t, int64_t k) {
  switch (t.data_type()) {
    case onnx::TensorProto::INT64: return t.int64_data(static_cast<int>(k));
    case onnx::TensorProto::UINT32: case onnx::TensorProto::UINT64:
      return static_cast<int64_t>(t.uint64_data(static_cast<int>(k)));
    default: return t.int32_data(static_cast<int>(k));
  }
}

}  // namespace

OnnxConst const_from_proto(const onnx::TensorProto& t, const std::string& what) {
  OnnxConst c;
  const int64_t n = checked_numel(t, what, &c.shape);
  c.is_float = onnx_is_float_type(t.data_type());
  for (int64_t k = 0; k < n; ++k) {
    if (c.is_float) c.f.push_back(t.has_raw_data() ? raw_float(t.raw_data(), t.data_type(), k)
                                                   : typed_float(t, k));
    else c.i.push_back({0, t.has_raw_data() ? raw_int(t.raw_data(), t.data_type(), k)
                                            : typed_int(t, k)});
  }
  return c;
}

std::vector<float> floats_from_proto(const onnx::TensorProto& t, const std::string& what) {
  Shape shape;
  const int64_t n = checked_numel(t, what, &shape);
  if (!onnx_is_float_type(t.data_type()))
    REMAT_USER_ERROR(what << ": a parameter must hold floats, it holds "
                          << onnx::TensorProto::DataType_Name(
                                 static_cast<onnx::TensorProto::DataType>(t.data_type())));
  std::vector<float> out(static_cast<size_t>(n));
  if (n == 0) return out;  // an empty tensor: no bytes to copy (memcpy needs real pointers)
  if (t.data_type() == onnx::TensorProto::FLOAT && t.has_raw_data()) {
    std::memcpy(out.data(), t.raw_data().data(), out.size() * 4);
  } else {
    for (int64_t k = 0; k < n; ++k)
      out[static_cast<size_t>(k)] = static_cast<float>(
          t.has_raw_data() ? raw_float(t.raw_data(), t.data_type(), k) : typed_float(t, k));
  }
  return out;
}

}  // namespace remat
