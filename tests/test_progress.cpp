// The solver's live progress line (tools/common/progress.h): plain lines at an interval in a
// log, one line redrawn in place on a terminal with nothing left of a longer text, and the
// ticker that moves its clock while a stage reports nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <unistd.h>
#include <thread>
#include <vector>

#include "tests/terminal.h"
#include "tools/common/progress.h"

namespace remat {
namespace {

// Everything written to `f` since it was opened (read without moving its offset: the line
// writes with write(2)).
std::string contents(std::FILE* f) {
  std::fflush(f);
  std::string s;
  char buf[4096];
  off_t at = 0;
  for (ssize_t n; (n = ::pread(::fileno(f), buf, sizeof buf, at)) > 0; at += n)
    s.append(buf, static_cast<size_t>(n));
  return s;
}

// What a tool prints between live lines (a table row), as the terminal gets it.
void print(std::FILE* f, const std::string& text) {
  ASSERT_EQ(::write(::fileno(f), text.data(), text.size()), static_cast<ssize_t>(text.size()));
}

TEST(ProgressLine, LogModeWritesPlainLinesAtAnInterval) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ProgressLine line;
  line.out = f;
  line.terminal = false;
  line.log_interval = 10;
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

// Note [live lines]: on a terminal each redraw erases the rest of the line, so a shorter text
// leaves nothing of a longer one (`plan` showed "gap 2.46%      gap 2.46%"), and the next
// label or the output that replaces the line erases it whatever its width (`maxbatch` left
// "all-keep: 0.0s batch >= 25, < 26" above every row; `train` left "6%" of a 104-character line
// that 100 spaces had cleared).
TEST(ProgressLine, TerminalModeRedrawsOneLineAndLeavesNothing) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ProgressLine line;
  line.out = f;
  line.terminal = true;
  print(f, "strategy  feasible  cost\n");
  progress_line_next(&line, "checkmate");
  progress_phase("LP relaxation and rounding", &line);
  progress_solve(1, 3.5e9, 2.5e9, &line);  // the longest text
  progress_phase("held-set search", &line);
  const std::vector<std::string> mid = terminal_screen(contents(f));
  ASSERT_EQ(mid.size(), 2u) << contents(f);
  EXPECT_EQ(mid[1].find("  checkmate:"), 0u) << mid[1];
  EXPECT_EQ(mid[1].find("gap"), mid[1].rfind("gap")) << "residue of the longer text: " << mid[1];
  EXPECT_EQ(mid[1].substr(mid[1].size() - 6), "28.57%") << mid[1];
  progress_line_next(&line, "");  // the row takes the line's place
  print(f, "checkmate yes       3.5e9\n");
  progress_line_next(&line, "all-keep");
  progress_batch(0, 25, 26, &line);
  progress_line_next(&line, "");
  print(f, "all-keep  25\n");
  progress_line_next(&line, "x");
  progress_solve(1, 3, 2.5, &line);
  progress_line_clear(&line);  // output that replaces it, without a next label
  print(f, "done\n");
  const std::string s = contents(f);
  std::fclose(f);
  EXPECT_EQ(s.find(std::string(20, ' ')), std::string::npos) << "no blanking with spaces:\n" << s;
  const std::vector<std::string> screen = terminal_screen(s);
  EXPECT_EQ(screen, (std::vector<std::string>{"strategy  feasible  cost", "checkmate yes       3.5e9",
                                               "all-keep  25", "done"}))
      << s;
}

// A live line never wraps: cut to the terminal's width it can be redrawn in place.
TEST(ProgressLine, FitToColumnsLeavesTheLastColumnFree) {
  EXPECT_EQ(fit_to_columns("abcdef", 0), "abcdef");
  EXPECT_EQ(fit_to_columns("abcdef", 7), "abcdef");
  EXPECT_EQ(fit_to_columns("abcdef", 6), "abcde");
  std::FILE* plain = std::tmpfile();
  EXPECT_EQ(terminal_columns(plain), 0);
  std::fclose(plain);
}

// Note [progress ticker]: a stage that reports nothing for seconds (`plan --strategies
// checkmate` sat at "0.2s [held-set search]" for 3 s) still shows its clock move: on a
// terminal the line is redrawn with the current time; in a log a plain line is printed once
// the interval has passed without one. An idle line (no report under its label) is not drawn.
TEST(ProgressLine, TheTickerMovesTheClockWhileAStageRuns) {
  for (const bool terminal : {true, false}) {
    std::FILE* f = std::tmpfile();
    ASSERT_NE(f, nullptr);
    ProgressLine line;
    line.out = f;
    line.terminal = terminal;
    std::atomic<double> t{100};
    line.clock = [&] { return t.load(); };
    progress_line_next(&line, "checkmate");
    {
      ProgressTicker ticker(&line, 0.005);
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      EXPECT_EQ(contents(f), "") << "idle: nothing drawn";
      t = 100.2;
      progress_phase("held-set search", &line);
      // Seconds in the stage without a report: three on a terminal; in a log past the interval.
      t = terminal ? 103.2 : 106.2;
      const std::string later = terminal ? "3.2s  [held-set search]" : "6.2s  [held-set search]";
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (contents(f).find(later) == std::string::npos &&
             std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const std::string s = contents(f);
    EXPECT_NE(s.find(std::string("checkmate:     ") + (terminal ? "3.2s" : "6.2s") +
                     "  [held-set search]  no incumbent yet"),
              std::string::npos)
        << (terminal ? "terminal" : "log") << ":\n" << s;
    if (!terminal) {  // at most one line per interval (5 s), here: the phase's and the tick's
      EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 2) << s;
      EXPECT_EQ(s.find('\r'), std::string::npos) << s;
    }
    std::fclose(f);
  }
}
}  // namespace
}  // namespace remat
