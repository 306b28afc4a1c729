// safetensors reading and writing: header JSON via nlohmann_json, atomic replace with fsync.
// The format stores data little-endian; remat runs on little-endian hosts only (checked).
#include "runtime/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <nlohmann/json.hpp>

#include "runtime/atomic_file.h"
#include "runtime/check.h"

namespace remat {

namespace {

using Json = nlohmann::ordered_json;  // keeps the header in data order

constexpr const char* kMetadataKey = "__metadata__";
// The reference implementation refuses headers over 100 MB; so do we (a corrupt length
// field must not make us allocate gigabytes).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

bool host_is_little_endian() {
  const uint16_t one = 1;
  uint8_t first = 0;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

const char* st_dtype_name(DType t) { return t == DType::F32 ? "F32" : "I32"; }

}  // namespace

std::vector<float> SafeTensor::f32() const {
  REMAT_CHECK(dtype == DType::F32, "tensor '" << name << "' is not F32");
  std::vector<float> v(data.size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), data.data(), v.size() * sizeof(float));
  return v;
}

std::vector<int32_t> SafeTensor::i32() const {
  REMAT_CHECK(dtype == DType::I32, "tensor '" << name << "' is not I32");
  std::vector<int32_t> v(data.size() / sizeof(int32_t));
  if (!v.empty()) std::memcpy(v.data(), data.data(), v.size() * sizeof(int32_t));
  return v;
}

SafeTensor safetensor_f32(const std::string& name, const Shape& shape,
                          const std::vector<float>& values) {
  REMAT_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
              "tensor '" << name << "': " << values.size() << " values for shape "
                         << shape_str(shape));
  SafeTensor t{name, DType::F32, shape, std::vector<uint8_t>(values.size() * sizeof(float))};
  if (!values.empty()) std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

SafeTensor safetensor_i32(const std::string& name, const Shape& shape,
                          const std::vector<int32_t>& values) {
  REMAT_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
              "tensor '" << name << "': " << values.size() << " values for shape "
                         << shape_str(shape));
  SafeTensor t{name, DType::I32, shape, std::vector<uint8_t>(values.size() * sizeof(int32_t))};
  if (!values.empty()) std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

const SafeTensor* SafeTensorFile::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

void safetensors_save(const std::string& path, const std::vector<SafeTensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  REMAT_CHECK(host_is_little_endian(), "safetensors needs a little-endian host");
  Json header = Json::object();
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    REMAT_CHECK(t.name != kMetadataKey, "tensor name '" << kMetadataKey << "' is reserved");
    REMAT_CHECK(names.insert(t.name).second, "duplicate tensor name '" << t.name << "'");
    for (int64_t d : t.shape) REMAT_CHECK(d >= 0, "tensor '" << t.name << "' has negative shape");
    const int64_t want = shape_numel(t.shape) * dtype_size(t.dtype);
    REMAT_CHECK(static_cast<int64_t>(t.data.size()) == want,
                "tensor '" << t.name << "' has " << t.data.size() << " bytes, shape "
                           << shape_str(t.shape) << " needs " << want);
    header[t.name] = Json{{"dtype", st_dtype_name(t.dtype)},
                          {"shape", t.shape},
                          {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header[kMetadataKey] = meta;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));

  std::vector<std::string_view> parts;
  parts.emplace_back(reinterpret_cast<const char*>(len), 8);
  parts.emplace_back(text);
  for (const auto& t : tensors)
    parts.emplace_back(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  write_file_atomic(path, parts);
}

SafeTensorFile safetensors_load(const std::string& path) {
  REMAT_CHECK(host_is_little_endian(), "safetensors needs a little-endian host");
  std::ifstream in(path, std::ios::binary);
  if (!in) REMAT_USER_ERROR(path << ": cannot open: " << std::strerror(errno));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const uint64_t file_size = bytes.size();
  if (file_size < 8)
    REMAT_USER_ERROR(path << ": not a safetensors file (" << file_size << " bytes, the header length alone is 8)");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(bytes[static_cast<size_t>(i)]) << (8 * i);
  if (n > kMaxHeaderBytes || n > file_size - 8)
    REMAT_USER_ERROR(path << ": header length " << n << " runs past the end of the file ("
                          << file_size << " bytes)");
  const char* hbegin = reinterpret_cast<const char*>(bytes.data() + 8);

  // nlohmann keeps the last of duplicate keys; the callback spots them at the top level.
  std::set<std::string> seen;
  std::string duplicate;
  auto spot_duplicates = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::key && depth == 1) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  Json header;
  try {
    header = Json::parse(hbegin, hbegin + n, spot_duplicates);
  } catch (const Json::exception& e) {
    REMAT_USER_ERROR(path << ": header is not valid JSON: " << e.what());
  }
  if (!header.is_object()) REMAT_USER_ERROR(path << ": header is not a JSON object");
  if (!duplicate.empty()) REMAT_USER_ERROR(path << ": tensor '" << duplicate << "' appears twice in the header");

  const uint64_t data_size = file_size - 8 - n;
  const uint8_t* data = bytes.data() + 8 + n;
  SafeTensorFile out;
  struct Range { uint64_t begin, end; std::string name; };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : header.items()) {
    const std::string where = path + ": tensor '" + name + "'";
    if (name == kMetadataKey) {
      if (!entry.is_object()) REMAT_USER_ERROR(path << ": " << kMetadataKey << " is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) REMAT_USER_ERROR(path << ": " << kMetadataKey << " value '" << k << "' is not a string");
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object()) REMAT_USER_ERROR(where << ": entry is not an object");
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!entry.contains(field)) REMAT_USER_ERROR(where << ": missing field '" << field << "'");
    SafeTensor t;
    t.name = name;
    const Json& dt = entry["dtype"];
    if (!dt.is_string()) REMAT_USER_ERROR(where << ": dtype is not a string");
    const std::string dts = dt.get<std::string>();
    if (dts == "F32") t.dtype = DType::F32;
    else if (dts == "I32") t.dtype = DType::I32;
    else REMAT_USER_ERROR(where << ": unsupported dtype '" << dts << "' (supported: F32, I32)");

    const Json& shape = entry["shape"];
    if (!shape.is_array()) REMAT_USER_ERROR(where << ": shape is not an array");
    uint64_t numel = 1;
    bool too_big = false;
    for (const auto& d : shape) {
      if (!d.is_number_unsigned()) REMAT_USER_ERROR(where << ": shape " << shape.dump() << " has an entry that is not a non-negative integer");
      const uint64_t v = d.get<uint64_t>();
      if (v > static_cast<uint64_t>(INT64_MAX)) too_big = true;
      else if (v != 0 && numel > data_size / v) too_big = true;  // more elements than bytes
      numel = too_big ? numel : numel * v;
      t.shape.push_back(static_cast<int64_t>(std::min<uint64_t>(v, INT64_MAX)));
    }
    const Json& offs = entry["data_offsets"];
    if (!offs.is_array() || offs.size() != 2 || !offs[0].is_number_unsigned() || !offs[1].is_number_unsigned())
      REMAT_USER_ERROR(where << ": data_offsets " << offs.dump() << " is not a pair of non-negative integers");
    const uint64_t begin = offs[0].get<uint64_t>(), end = offs[1].get<uint64_t>();
    if (begin > end || end > data_size)
      REMAT_USER_ERROR(where << ": data_offsets [" << begin << ", " << end << "] out of range (data section is "
                             << data_size << " bytes)");
    const uint64_t elem = static_cast<uint64_t>(dtype_size(t.dtype));
    if (too_big || numel * elem != end - begin)
      REMAT_USER_ERROR(where << ": data_offsets [" << begin << ", " << end << "] hold " << end - begin
                             << " bytes but shape " << shape.dump() << " of " << dts << " needs "
                             << (too_big ? std::string("more than the file") : std::to_string(numel * elem)));
    t.data.assign(data + begin, data + end);
    ranges.push_back({begin, end, name});
    out.tensors.push_back(std::move(t));
  }
  // Overlap: sort by begin; each non-empty range must start at or after the previous end.
  std::vector<size_t> order(ranges.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a].begin < ranges[b].begin; });
  const Range* prev = nullptr;
  for (size_t i : order) {
    const Range& r = ranges[i];
    if (r.begin == r.end) continue;
    if (prev && r.begin < prev->end)
      REMAT_USER_ERROR(path << ": tensor '" << r.name << "' data [" << r.begin << ", " << r.end
                            << ") overlaps tensor '" << prev->name << "' [" << prev->begin << ", "
                            << prev->end << ")");
    prev = &r;
  }
  // Return in data order, as saved.
  std::vector<SafeTensor> sorted;
  sorted.reserve(order.size());
  for (size_t i : order) sorted.push_back(std::move(out.tensors[i]));
  out.tensors = std::move(sorted);
  return out;
}

}  // namespace remat
