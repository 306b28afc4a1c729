// Tests for the tools' shared command-line helpers: byte sizes and flag errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "runtime/core/check.h"
#include "tools/common/cli.h"
#include "tools/common/progress.h"

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

// Everything written to `f` since it was opened.
std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  for (int c; (c = std::fgetc(f)) != EOF;) s += static_cast<char>(c);
  return s;
}

TEST(ProgressLine, LogModeWritesPlainLinesAtAnInterval) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ProgressLine line;
  line.out = f;
  line.terminal = false;
  double t = 0;
  line.clock = [&] { return t; };
  progress_line_next(&line, "checkmate");
  for (int k = 0; k <= 60; ++k) {  // 30 s, twice a second
    t = 0.5 * k;
    progress_solve(-1, -1, 10, &line);
  }
  const std::string s = contents(f);
  std::fclose(f);
  EXPECT_EQ(s.find('\r'), std::string::npos) << s;
  int lines = 0;
  for (char c : s) lines += c == '\n';
  EXPECT_EQ(lines, 4) << s;  // at 0, 10, 20 and 30 s
  EXPECT_NE(s.find("checkmate:"), std::string::npos) << s;
}

TEST(ProgressLine, NeverGoesBackToNoIncumbent) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ProgressLine line;
  line.out = f;
  line.terminal = false;
  line.log_interval = 0;
  double t = 0;
  line.clock = [&] { return t; };
  progress_line_next(&line, "checkmate");
  t = 1, progress_solve(0, -1, 5, &line);
  t = 2, progress_solve(0, 12, 6, &line);
  t = 3, progress_solve(0, 1e50, 7, &line);  // a later sub-solve without one: the best is kept
  t = 4, progress_solve(0, -1, 8, &line);
  const std::string s = contents(f);
  std::fclose(f);
  const size_t first = s.find("incumbent 12");
  ASSERT_NE(first, std::string::npos) << s;
  EXPECT_EQ(s.find("no incumbent", first), std::string::npos) << s;
  EXPECT_NE(s.find("4.0s  incumbent 12  bound 8  gap 33.33%"), std::string::npos) << s;
}

// The time is the line's own (a sub-solver restarting its clock does not show), a proven bound
// never goes down (a later model's weaker bound is not shown), and a new phase shows at once in
// a log, between the interval's lines.
TEST(ProgressLine, OwnClockRisingBoundAndPhases) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ProgressLine line;
  line.out = f;
  line.terminal = false;
  double t = 100;
  line.clock = [&] { return t; };
  progress_line_next(&line, "checkmate");
  t = 100.2, progress_phase("baselines", &line);
  t = 101, progress_phase("LP relaxation and rounding", &line);
  t = 103, progress_solve(0.1, 50, 3.94796e9, &line);  // 0.1: the sub-solver's own clock
  t = 120, progress_solve(0.2, 50, 3.94495e9, &line);
  const std::string s = contents(f);
  std::fclose(f);
  EXPECT_NE(s.find("checkmate:     0.2s  [baselines]  no incumbent yet"), std::string::npos) << s;
  EXPECT_NE(s.find("checkmate:     1.0s  [LP relaxation and rounding]"), std::string::npos) << s;
  EXPECT_NE(s.find("checkmate:    20.0s  [LP relaxation and rounding]  incumbent 50  bound "
                   "3.94796e+09"),
            std::string::npos)
      << s;
  EXPECT_EQ(s.find("3.94495e+09"), std::string::npos) << s;
}

TEST(ProgressLine, TerminalModeRedrawsOneLine) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ProgressLine line;
  line.out = f;
  line.terminal = true;
  progress_line_next(&line, "lp");
  progress_solve(1, 3, 2, &line);
  progress_solve(2, 3, 2.5, &line);
  progress_line_next(&line, "");
  const std::string s = contents(f);
  std::fclose(f);
  EXPECT_EQ(std::count(s.begin(), s.end(), '\r'), 2) << s;
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 1) << s;
}

}  // namespace
}  // namespace remat
