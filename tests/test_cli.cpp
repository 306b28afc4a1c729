// Tests for the tools' shared command-line helpers: byte sizes and flag errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/core/check.h"
#include "tools/common/cli.h"

namespace remat {
namespace {

TEST(ParseBytes, UnitsAreDecimalOrBinary) {
  EXPECT_EQ(parse_bytes("15GB"), 15000000000LL);
  EXPECT_EQ(parse_bytes("15GiB"), 15LL << 30);
  EXPECT_EQ(parse_bytes("1.5MB"), 1500000);
  EXPECT_EQ(parse_bytes("512"), 512);
  EXPECT_EQ(parse_bytes("2 kib"), 2048);
  EXPECT_EQ(parse_bytes("16e9"), 16000000000LL);
}

TEST(ParseBytes, BadInputNamesTheFlag) {
  try {
    parse_bytes("15XB", "--budget");
    FAIL() << "no throw";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--budget"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("XB"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_bytes("GB"), UserError);
  EXPECT_THROW(parse_bytes("-5GB"), UserError);
  // At most 2^62 bytes (Note [checked sizes]): a budget plus a shortfall still fits in int64.
  EXPECT_EQ(parse_bytes("4000000TB"), 4000000000000000000LL);
  EXPECT_THROW(parse_bytes("5000000TB"), UserError);
  EXPECT_THROW(parse_bytes("1e300"), UserError);
}

TEST(FlagParser, ParsesAndRejects) {
  FlagParser f("train", "trains");
  f.add("steps", "N", "steps", "10").add("verbose", "", "chatty").alias("-n", "steps");
  const char* argv[] = {"train", "--steps=5", "--verbose"};
  ASSERT_TRUE(f.parse(3, const_cast<char**>(argv)));
  EXPECT_EQ(f.get_int("steps", 1, 100), 5);
  EXPECT_TRUE(f.has("verbose"));

  FlagParser g("train", "trains");
  g.add("steps", "N", "steps", "10");
  const char* bad[] = {"train", "--stepz", "3"};
  EXPECT_THROW(g.parse(3, const_cast<char**>(bad)), UserError);
  const char* missing[] = {"train", "--steps"};
  FlagParser h("train", "trains");
  h.add("steps", "N", "steps", "10");
  EXPECT_THROW(h.parse(2, const_cast<char**>(missing)), UserError);
  const char* range[] = {"train", "--steps", "0"};
  FlagParser k("train", "trains");
  k.add("steps", "N", "steps", "10");
  ASSERT_TRUE(k.parse(3, const_cast<char**>(range)));
  EXPECT_THROW(k.get_int("steps", 1, 100), UserError);
}

// A mistyped flag names the closest one; the synopsis wraps at 100 columns.
TEST(FlagParser, MistypedFlagsAndTheUsageText) {
  FlagParser f("train", "trains");
  f.add("steps", "N", "steps", "10").add("save", "FILE", "checkpoint").add("save-every", "N", "");
  for (int i = 0; i < 20; ++i) f.add("flag-number-" + std::to_string(i), "VALUE", "filler");
  const char* typo[] = {"train", "--step", "3"};
  try {
    f.parse(3, const_cast<char**>(typo));
    FAIL() << "--step accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown flag '--step' (did you mean '--steps'?)"),
              std::string::npos)
        << e.what();
  }
  const std::string u = f.usage();
  size_t start = 0, lines = 0;
  while (start < u.size()) {
    const size_t nl = u.find('\n', start);
    const size_t len = (nl == std::string::npos ? u.size() : nl) - start;
    EXPECT_LE(len, 100u) << u.substr(start, len);
    ++lines;
    start = nl == std::string::npos ? u.size() : nl + 1;
  }
  EXPECT_GT(lines, 25u);
  EXPECT_EQ(u.rfind("usage: train [--steps N]", 0), 0u) << u;
}

// A stray word names the flag before it when it is most likely the rest of that flag's value:
// `--budget 9 MB` said "override 'MB': expected KEY=VALUE" and never named --budget.
TEST(FlagParser, AStrayWordNamesTheFlagBeforeIt) {
  auto error_of = [](std::vector<const char*> argv, bool overrides) {
    FlagParser f("train", "trains");
    f.add("budget", "BYTES", "budget").add("steps", "N", "steps");
    if (overrides) f.allow_positional("KEY=VALUE", "config overrides");
    try {
      f.parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(error_of({"train", "--budget", "9", "MB", "--steps", "3"}, true)
                .rfind("train: --budget 9: 'MB' is neither a flag nor KEY=VALUE (did you mean "
                       "--budget 9MB?)",
                       0),
            0u)
      << error_of({"train", "--budget", "9", "MB"}, true);
  EXPECT_NE(error_of({"train", "--budget", "9", "MB"}, false)
                .find("train: --budget 9: unexpected argument 'MB' (did you mean --budget 9MB?)"),
            std::string::npos);
  EXPECT_EQ(error_of({"train", "--budget=9", "lr"}, true)
                .rfind("train: 'lr' is neither a flag nor KEY=VALUE\n", 0),
            0u)
      << error_of({"train", "--budget=9", "lr"}, true);
  EXPECT_EQ(error_of({"train", "--budget", "9MB", "optimizer.lr=0.1"}, true), "(accepted)");
  // Words that do not read as a number and its unit are not offered joined.
  EXPECT_EQ(error_of({"train", "--budget", "9MB", "lr"}, true)
                .rfind("train: --budget 9MB: 'lr' is neither a flag nor KEY=VALUE\n", 0),
            0u)
      << error_of({"train", "--budget", "9MB", "lr"}, true);
}

}  // namespace
}  // namespace remat
