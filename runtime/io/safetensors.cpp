// safetensors reading and writing: header JSON via nlohmann_json, atomic replace with fsync.
// The format stores data little-endian; remat runs on little-endian hosts only (checked).
#include "runtime/io/safetensors.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <set>
#include <nlohmann/json.hpp>

#include "runtime/io/atomic_file.h"
#include "runtime/core/check.h"
#include "runtime/core/checked.h"
#include "runtime/io/crc32c.h"
#include "runtime/io/input_file.h"

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

// Note [tensor checksums]: each tensor's CRC-32C is metadata "checksum.<name>" = "crc32c:<8 hex
// digits>". Other readers see ordinary string metadata; safetensors_load verifies and removes
// the entries.
constexpr const char* kChecksumPrefix = "checksum.";

std::string checksum_text(const std::vector<uint8_t>& data) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "crc32c:%08x", crc32c(data.data(), data.size()));
  return buf;
}

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

namespace {
// Note [tensor checksums]: checks and removes the checksum entries of `f.metadata`; tensors
// without one are listed in f.unverified.
void verify_checksums(const std::string& path, SafeTensorFile& f) {
  std::set<std::string> verified;
  for (auto it = f.metadata.begin(); it != f.metadata.end();) {
    if (it->first.rfind(kChecksumPrefix, 0) != 0) {
      ++it;
      continue;
    }
    const std::string name = it->first.substr(std::char_traits<char>::length(kChecksumPrefix));
    const SafeTensor* t = f.find(name);
    if (!t)
      REMAT_USER_ERROR(path << ": metadata '" << it->first << "' is the checksum of tensor '"
                            << name << "', which is not in the file");
    const std::string& stored = it->second;
    bool form = stored.size() == 15 && stored.rfind("crc32c:", 0) == 0;
    for (size_t k = 7; form && k < stored.size(); ++k)
      form = std::isdigit(static_cast<unsigned char>(stored[k])) || (stored[k] >= 'a' && stored[k] <= 'f');
    if (!form)
      REMAT_USER_ERROR(path << ": tensor '" << name << "': checksum '" << stored
                            << "' is not of the form crc32c:<8 lowercase hex digits>");
    const std::string actual = checksum_text(t->data);
    if (actual != stored)
      REMAT_USER_ERROR(path << ": tensor '" << name << "': checksum mismatch (stored " << stored
                            << ", the data has " << actual << "): the file is corrupt");
    verified.insert(name);
    it = f.metadata.erase(it);
  }
  for (const auto& t : f.tensors)
    if (!verified.count(t.name)) f.unverified.push_back(t.name);
}
}  // namespace

const SafeTensor* SafeTensorFile::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

void safetensors_save(const std::string& path, const std::vector<SafeTensor>& tensors,
                      const std::map<std::string, std::string>& metadata, bool checksums) {
  REMAT_CHECK(host_is_little_endian(), "safetensors needs a little-endian host");
  Json header = Json::object();
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    REMAT_CHECK(t.name != kMetadataKey, "tensor name '" << kMetadataKey << "' is reserved");
    REMAT_CHECK(names.insert(t.name).second, "duplicate tensor name '" << t.name << "'");
    for (int64_t d : t.shape) REMAT_CHECK(d >= 0, "tensor '" << t.name << "' has negative shape");
    const int64_t want = checked_tensor_bytes({t.shape, t.dtype}, "tensor '" + t.name + "'", "shape");
    REMAT_CHECK(static_cast<int64_t>(t.data.size()) == want,
                "tensor '" << t.name << "' has " << t.data.size() << " bytes, shape "
                           << shape_str(t.shape) << " needs " << want);
    header[t.name] = Json{{"dtype", st_dtype_name(t.dtype)},
                          {"shape", t.shape},
                          {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  Json meta = Json::object();
  for (const auto& [k, v] : metadata) {
    REMAT_CHECK(k.rfind(kChecksumPrefix, 0) != 0,
                "metadata key '" << k << "' is reserved for checksums (Note [tensor checksums])");
    meta[k] = v;
  }
  if (checksums)
    for (const auto& t : tensors) meta[kChecksumPrefix + t.name] = checksum_text(t.data);
  if (!meta.empty()) header[kMetadataKey] = meta;
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
  return safetensors_parse(read_file(path, "safetensors file", kMaxCount), path);
}

SafeTensorFile safetensors_parse(std::string_view file, const std::string& path) {
  REMAT_CHECK(host_is_little_endian(), "safetensors needs a little-endian host");
  const auto* bytes = reinterpret_cast<const uint8_t*>(file.data());
  const uint64_t file_size = file.size();
  if (file_size < 8)
    REMAT_USER_ERROR(path << ": not a safetensors file (" << file_size << " bytes, the header length alone is 8)");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  if (n > kMaxHeaderBytes || n > file_size - 8)
    REMAT_USER_ERROR(path << ": header length " << n << " runs past the end of the file ("
                          << file_size << " bytes)");
  const char* hbegin = file.data() + 8;

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
  const uint8_t* data = bytes + 8 + n;
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
  verify_checksums(path, out);
  return out;
}

}  // namespace remat
