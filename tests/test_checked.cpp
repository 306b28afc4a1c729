// The input-safety primitives: checked size arithmetic (Note [checked sizes]), and reading files
// and JSON fields with errors that name the file and the field.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <fstream>
#include <limits>
#include <string>

#include "runtime/core/check.h"
#include "runtime/core/checked.h"
#include "runtime/io/input_file.h"
#include "runtime/core/tensor.h"
#include "tests/model_test_util.h"
#include "tests/tool_runner.h"

namespace remat {
namespace {

using test::user_error;

constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();

TEST(Checked, AddAndMulWithinTheLimit) {
  EXPECT_EQ(checked_add(kMaxCount - 1, 1, "w", "f"), kMaxCount);
  EXPECT_EQ(checked_mul(int64_t{1} << 31, int64_t{1} << 31, "w", "f"), int64_t{1} << 62);
  EXPECT_EQ(checked_mul(0, kMaxCount, "w", "f"), 0);
  EXPECT_EQ(checked_product({}, "w", "f"), 1);
  EXPECT_EQ(checked_product({2, 0, kMaxCount}, "w", "f"), 0);
}

TEST(Checked, OutOfRangeNamesWhereAndField) {
  const std::string add = user_error([] { checked_add(kMaxCount, 1, "p.json: nodes[3] 'x'", "bytes"); });
  EXPECT_NE(add.find("p.json: nodes[3] 'x': field 'bytes': 4611686018427387904 + 1 is out of range"),
            std::string::npos)
      << add;
  // The signed overflow UBSan found: INT64_MAX-sized values never wrap.
  EXPECT_THROW(checked_add(kMax64, kMax64, "w", "f"), UserError);
  EXPECT_THROW(checked_mul(kMax64, 2, "w", "f"), UserError);
  EXPECT_THROW(checked_mul(int64_t{1} << 32, int64_t{1} << 31, "w", "f"), UserError);
  EXPECT_THROW(checked_add(-1, 5, "w", "f"), UserError);
  EXPECT_THROW(check_count(kMaxCount + 1, "w", "f"), UserError);
  EXPECT_NO_THROW(check_count(kMaxCount, "w", "f"));
  const std::string neg = user_error([] { checked_product({2, -3}, "layer 'c'", "output"); });
  EXPECT_NE(neg.find("layer 'c': field 'output': shape [2, -3] has a negative dimension"),
            std::string::npos)
      << neg;
}

TEST(Checked, TensorSizesAreChecked) {
  const TensorDesc huge{{int64_t{1} << 31, int64_t{1} << 31}, DType::F32};  // 2^62 elements
  EXPECT_EQ(shape_numel(huge.shape), int64_t{1} << 62);
  EXPECT_THROW(huge.bytes(), UserError);  // 2^64 bytes
  const std::string m = user_error([&] { checked_tensor_bytes(huge, "value 'x'", "shape"); });
  EXPECT_NE(m.find("value 'x': field 'shape'"), std::string::npos) << m;
  EXPECT_THROW(shape_numel({int64_t{1} << 40, int64_t{1} << 40}), UserError);
}

using InputFile = ScratchDirTest;

TEST_F(InputFile, ReadsAndNamesEveryFailure) {
  std::ofstream(dir_ + "/f") << "0123456789";
  EXPECT_EQ(read_file(dir_ + "/f", "thing"), "0123456789");
  const std::string big = user_error([&] { read_file(dir_ + "/f", "thing", 4); });
  EXPECT_NE(big.find(dir_ + "/f: thing of 10 bytes is larger than the 4-byte limit"),
            std::string::npos)
      << big;
  ASSERT_EQ(::mkdir((dir_ + "/d").c_str(), 0755), 0);
  EXPECT_NE(user_error([&] { read_file(dir_ + "/d", "thing"); })
                .find(dir_ + "/d: is a directory, expected a thing"),
            std::string::npos);
  EXPECT_NE(user_error([&] { read_file(dir_ + "/none", "thing"); })
                .find(dir_ + "/none: cannot open thing: No such file"),
            std::string::npos);
}

TEST(JsonRead, ParseErrorsAndOverflowNameTheSource) {
  EXPECT_NE(user_error([] { json_parse("{\"a\": 1e999}", "x.json"); }).find("x.json: invalid JSON"),
            std::string::npos);
  EXPECT_NE(user_error([] { json_parse("{", "x.json"); }).find("x.json: invalid JSON"),
            std::string::npos);
  EXPECT_EQ(json_parse("[1.5]", "x.json")[0], 1.5);
}

TEST(JsonRead, TypedFieldsNameWhereAndField) {
  const nlohmann::json j = nlohmann::json::parse(
      R"({"i": 7, "f": 2.0, "big": 18446744073709551615, "huge": 1e300, "s": "t", "b": true})");
  EXPECT_EQ(json_int64(j["i"], "w", "i"), 7);
  EXPECT_EQ(json_int64(j["f"], "w", "f"), 2);
  const std::string big = user_error([&] { json_int64(j["big"], "x.json: nodes[1]", "bytes"); });
  EXPECT_NE(big.find("x.json: nodes[1]: field 'bytes': expected an integer in int64's range, got "
                     "18446744073709551615"),
            std::string::npos)
      << big;
  EXPECT_THROW(json_int64(j["huge"], "w", "huge"), UserError);  // no UB cast
  EXPECT_THROW(json_int64(j["s"], "w", "s"), UserError);
  EXPECT_EQ(json_string(j["s"], "w", "s"), "t");
  EXPECT_TRUE(json_bool(j["b"], "w", "b"));
  EXPECT_THROW(json_bool(j["i"], "w", "i"), UserError);
  EXPECT_NE(user_error([&] { json_field(j, "x.json", "nope"); }).find("x.json: missing field 'nope'"),
            std::string::npos);
  EXPECT_NE(user_error([&] { json_reject_unknown_fields(j, "x.json", {"i"}); })
                .find("x.json: unknown field"),
            std::string::npos);
}

}  // namespace
}  // namespace remat
