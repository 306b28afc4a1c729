// safetensors tests: round trip, the on-disk layout parsed by hand, atomic replace, and one
// case per kind of corrupt file (each error must name the file and the tensor).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "runtime/core/check.h"
#include "runtime/io/crc32c.h"
#include "runtime/io/safetensors.h"
#include "tests/tool_runner.h"

namespace remat {
namespace {

class SafetensorsTest : public ScratchDirTest {
 protected:
  // Writes an 8-byte length (header.size() unless `length` is given), the header, the data.
  std::string raw_file(const std::string& name, const std::string& header, size_t data_bytes,
                       int64_t length = -1) {
    std::string p = path(name);
    std::ofstream out(p, std::ios::binary);
    uint64_t n = length < 0 ? header.size() : static_cast<uint64_t>(length);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
    out << header << std::string(data_bytes, '\x01');
    return p;
  }
};

std::vector<uint8_t> read_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool file_exists(const std::string& p) { return ::access(p.c_str(), F_OK) == 0; }

std::vector<SafeTensor> sample_tensors() {
  return {safetensor_f32("conv1.weight", {2, 3}, {1.5f, -2.f, 3.25f, 0.f, 1e-30f, -7.f}),
          safetensor_i32("step", {}, {42}),
          safetensor_f32("empty", {0, 5}, {}),
          safetensor_i32("labels", {4}, {0, 9, -1, 2147483647})};
}

TEST_F(SafetensorsTest, RoundTrip) {
  const std::string p = path("w.safetensors");
  auto tensors = sample_tensors();
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "12"}, {"quote", "a \"b\"\n"}};
  safetensors_save(p, tensors, meta);
  SafeTensorFile f = safetensors_load(p);
  ASSERT_EQ(f.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(f.tensors[i].name, tensors[i].name);
    EXPECT_EQ(f.tensors[i].dtype, tensors[i].dtype);
    EXPECT_EQ(f.tensors[i].shape, tensors[i].shape);
    EXPECT_EQ(f.tensors[i].data, tensors[i].data);
  }
  EXPECT_EQ(f.metadata, meta);
  ASSERT_NE(f.find("conv1.weight"), nullptr);
  EXPECT_EQ(f.find("conv1.weight")->f32(), (std::vector<float>{1.5f, -2.f, 3.25f, 0.f, 1e-30f, -7.f}));
  EXPECT_EQ(f.find("labels")->i32(), (std::vector<int32_t>{0, 9, -1, 2147483647}));
  EXPECT_EQ(f.find("nope"), nullptr);
}

TEST_F(SafetensorsTest, LayoutParsedByHand) {
  const std::string p = path("w.safetensors");
  auto tensors = sample_tensors();
  safetensors_save(p, tensors, {{"format", "pt"}});
  std::vector<uint8_t> b = read_bytes(p);
  ASSERT_GE(b.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(b[static_cast<size_t>(i)]) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_LE(8 + n, b.size());
  std::string text(b.begin() + 8, b.begin() + 8 + static_cast<long>(n));
  // Padding is trailing spaces only.
  size_t last = text.find_last_not_of(' ');
  ASSERT_NE(last, std::string::npos);
  EXPECT_EQ(text[last], '}');
  EXPECT_LT(text.size() - last - 1, 8u);
  nlohmann::json h = nlohmann::json::parse(text);  // throws on invalid JSON
  ASSERT_TRUE(h.is_object());
  EXPECT_EQ(h["__metadata__"]["format"], "pt");
  const uint8_t* data = b.data() + 8 + n;
  uint64_t expect_begin = 0;
  for (const auto& t : tensors) {
    ASSERT_TRUE(h.contains(t.name)) << t.name;
    const auto& e = h[t.name];
    EXPECT_EQ(e["dtype"], t.dtype == DType::F32 ? "F32" : "I32");
    EXPECT_EQ(e["shape"].get<std::vector<int64_t>>(), t.shape);
    uint64_t begin = e["data_offsets"][0], end = e["data_offsets"][1];
    EXPECT_EQ(begin, expect_begin) << t.name << ": data is contiguous in save order";
    EXPECT_EQ(end - begin, static_cast<uint64_t>(shape_numel(t.shape) * 4)) << t.name;
    // memcmp must not see the null data() of an empty tensor (undefined behaviour).
    if (!t.data.empty()) {
      EXPECT_EQ(0, std::memcmp(data + begin, t.data.data(), t.data.size())) << t.name;
    }
    expect_begin = end;
  }
  EXPECT_EQ(8 + n + expect_begin, b.size()) << "no bytes after the last tensor";
}

TEST_F(SafetensorsTest, AtomicReplaceLeavesNoTemporary) {
  const std::string p = path("ckpt.safetensors");
  safetensors_save(p, {safetensor_f32("a", {1}, {1.f})}, {});
  EXPECT_FALSE(file_exists(p + ".tmp"));
  safetensors_save(p, {safetensor_f32("b", {2}, {2.f, 3.f})}, {{"k", "v"}});
  EXPECT_FALSE(file_exists(p + ".tmp"));
  SafeTensorFile f = safetensors_load(p);
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].name, "b");
  EXPECT_EQ(f.metadata.at("k"), "v");
}

TEST_F(SafetensorsTest, SaveErrors) {
  const std::string bad_dir = dir_ + "/no/such/dir/x.safetensors";
  try {
    safetensors_save(bad_dir, {safetensor_f32("a", {1}, {1.f})}, {});
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(bad_dir), std::string::npos) << e.what();
  }
  const std::string p = path("x.safetensors");
  EXPECT_THROW(safetensors_save(p, {safetensor_f32("a", {1}, {1.f}), safetensor_f32("a", {1}, {2.f})}, {}), Error);
  EXPECT_THROW(safetensors_save(p, {safetensor_f32("__metadata__", {1}, {1.f})}, {}), Error);
  SafeTensor wrong{"w", DType::F32, {3}, std::vector<uint8_t>(8)};
  EXPECT_THROW(safetensors_save(p, {wrong}, {}), Error);
  EXPECT_FALSE(file_exists(p));
  EXPECT_FALSE(file_exists(p + ".tmp"));
}

// Loads `p` and expects a UserError whose message contains every string in `parts`.
void expect_load_error(const std::string& p, const std::vector<std::string>& parts) {
  try {
    safetensors_load(p);
    FAIL() << "expected UserError loading " << p;
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(p), std::string::npos) << m;
    for (const auto& s : parts) EXPECT_NE(m.find(s), std::string::npos) << "missing '" << s << "' in: " << m;
  }
}

TEST_F(SafetensorsTest, CorruptFiles) {
  const std::string ok = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  // Sanity: the helper makes a loadable file from a valid header.
  EXPECT_EQ(safetensors_load(raw_file("ok", ok, 8)).tensors.size(), 1u);

  {
    std::string p = path("short");
    std::ofstream(p, std::ios::binary) << "abc";
    expect_load_error(p, {"not a safetensors file"});
  }
  expect_load_error(path("missing_file"), {"cannot open"});
  expect_load_error(raw_file("len", ok, 8, 100000), {"header length 100000"});
  expect_load_error(raw_file("json", R"({"t":{"dtype":"F32",)", 8), {"not valid JSON"});
  expect_load_error(raw_file("array", "[1, 2]", 0), {"not a JSON object"});
  expect_load_error(raw_file("dtype", R"({"half":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", 4),
                    {"'half'", "F16"});
  expect_load_error(raw_file("range", R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
                    {"'t'", "out of range"});
  expect_load_error(raw_file("reversed", R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8),
                    {"'t'", "out of range"});
  expect_load_error(raw_file("size", R"({"t":{"dtype":"I32","shape":[3],"data_offsets":[0,8]}})", 8),
                    {"'t'", "needs 12"});
  expect_load_error(raw_file("huge", R"({"t":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", 8),
                    {"'t'", "needs more than the file"});
  expect_load_error(raw_file("overlap", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
                    {"'b'", "overlaps tensor 'a'"});
  expect_load_error(raw_file("dup", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                    R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
                    {"'a'", "appears twice"});
  expect_load_error(raw_file("negshape", R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
                    {"'t'", "shape"});
  expect_load_error(raw_file("missing", R"({"t":{"dtype":"F32","data_offsets":[0,8]}})", 8),
                    {"'t'", "missing field 'shape'"});
  expect_load_error(raw_file("offs", R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8),
                    {"'t'", "data_offsets"});
  expect_load_error(raw_file("meta", R"({"__metadata__":{"step":12}})", 0), {"'step'", "not a string"});
}

TEST(Crc32c, KnownVectorsAndUnalignedTails) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the standard check value
  EXPECT_EQ(crc32c("", 0), 0u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
  // Every length and offset gives the bytewise reference result (the word loop and its tail).
  std::string text = "the quick brown fox jumps over the lazy dog, twice over";
  for (size_t off = 0; off < 8; ++off)
    for (size_t len = 0; off + len <= text.size(); len += 3) {
      uint32_t ref = 0xFFFFFFFFu;
      for (size_t i = off; i < off + len; ++i) {
        ref ^= static_cast<unsigned char>(text[i]);
        for (int k = 0; k < 8; ++k) ref = (ref >> 1) ^ ((ref & 1u) ? 0x82F63B78u : 0u);
      }
      EXPECT_EQ(crc32c(text.data() + off, len), ref ^ 0xFFFFFFFFu) << off << " " << len;
    }
}

// Note [tensor checksums]: every tensor's CRC-32C is in the metadata, verified on load and not
// returned as metadata; a flipped bit anywhere in a tensor's data is an error naming it.
TEST_F(SafetensorsTest, ChecksumsDetectEveryFlippedDataBit) {
  const std::string p = path("c.safetensors");
  safetensors_save(p, sample_tensors(), {{"format", "pt"}});
  const std::vector<uint8_t> good = read_bytes(p);
  uint64_t n = 0;
  std::memcpy(&n, good.data(), 8);
  nlohmann::json h = nlohmann::json::parse(good.begin() + 8, good.begin() + 8 + static_cast<long>(n));
  EXPECT_EQ(h["__metadata__"]["checksum.step"], "crc32c:" + [] {
    char buf[9];
    const int32_t v = 42;
    std::snprintf(buf, sizeof buf, "%08x", crc32c(&v, 4));
    return std::string(buf);
  }());
  SafeTensorFile f = safetensors_load(p);
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_TRUE(f.unverified.empty());
  for (size_t byte = 8 + n; byte < good.size(); ++byte)
    for (int bit = 0; bit < 8; bit += 3) {
      std::vector<uint8_t> bad = good;
      bad[byte] ^= static_cast<uint8_t>(1u << bit);
      const std::string q = path("flip.safetensors");
      std::ofstream(q, std::ios::binary).write(reinterpret_cast<const char*>(bad.data()),
                                               static_cast<std::streamsize>(bad.size()));
      expect_load_error(q, {"checksum mismatch", "the file is corrupt"});
    }
}

TEST_F(SafetensorsTest, FilesWithoutChecksumsLoadAndListTheirTensors) {
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
                         R"("__metadata__":{"checksum.b":"crc32c:c7be2e91"}})";
  // b's checksum is wrong for its bytes (\x01 x 4): an error; without it both load unverified.
  expect_load_error(raw_file("wrong", ok, 12), {"tensor 'b'", "checksum mismatch"});
  SafeTensorFile f = safetensors_load(raw_file(
      "none", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8));
  EXPECT_EQ(f.unverified, (std::vector<std::string>{"a"}));
  expect_load_error(raw_file("form", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                     R"("__metadata__":{"checksum.a":"md5:00"}})", 8),
                    {"tensor 'a'", "not of the form crc32c:"});
  expect_load_error(raw_file("orphan", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                       R"("__metadata__":{"checksum.z":"crc32c:00000000"}})", 8),
                    {"checksum of tensor 'z', which is not in the file"});
  EXPECT_THROW(safetensors_save(path("r"), {}, {{"checksum.a", "x"}}), Error);
}

TEST_F(SafetensorsTest, DirectoryIsNamed) {
  expect_load_error(dir_, {"is a directory"});
}

}  // namespace
}  // namespace remat
