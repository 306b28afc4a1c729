// Live lines as a person at a terminal sees them (Note [live lines]): the tools run on a
// pseudo-terminal, and the screen their output leaves holds the tables and the log lines, with
// nothing left of the progress lines that were redrawn in place.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/source_dir.h"
#include "tests/terminal.h"
#include "tests/tool_runner.h"

namespace remat {
namespace {

const std::string kSmallCnn = test_source_dir() + "/configs/small_cnn.yaml";

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

bool has_line_starting(const std::vector<std::string>& lines, const std::string& start) {
  for (const std::string& l : lines)
    if (l.rfind(start, 0) == 0) return true;
  return false;
}

// Once maxbatch left "all-keep: 0.0s batch >= 25, < 26" above every row, plan "gap 2.46%
// gap 2.46%", and train "resumed from ck.safetensors after step 20 ... 6%" (a 104-character
// solver line cleared with 100 spaces). On an 80-column terminal (the solver's lines are wider:
// they are cut to fit, or they would wrap and could not be redrawn).
class LiveLines : public ScratchDirTest {};

TEST_F(LiveLines, PlanningToolsLeaveTheirTablesOnly) {
  const std::string common = "--config '" + kSmallCnn + "' --budget 9MB --time-limit 5 ";
  RunResult mb = run_in_terminal(std::string("'") + MAXBATCH_EXE + "' " + common +
                                     "--strategies all-keep,chen-greedy",
                                 80);
  ASSERT_EQ(mb.code, 0) << mb.out;
  const std::vector<std::string> rows = terminal_screen(mb.out, 80);
  EXPECT_TRUE(has_line_starting(rows, "all-keep  ")) << joined(rows);
  EXPECT_TRUE(has_line_starting(rows, "chen-greedy  ")) << joined(rows);
  for (const std::string& l : rows) EXPECT_EQ(l.find("batch >= "), std::string::npos) << joined(rows);
  RunResult plan = run_in_terminal(std::string("'") + PLAN_EXE + "' " + common +
                                       "--strategies chen-greedy,checkmate",
                                   80);
  ASSERT_EQ(plan.code, 0) << plan.out;
  const std::vector<std::string> table = terminal_screen(plan.out, 80);
  EXPECT_TRUE(has_line_starting(table, "checkmate  ")) << joined(table);
  for (const std::string& l : table) {
    EXPECT_EQ(l.find("incumbent"), std::string::npos) << joined(table);
    EXPECT_EQ(l.find("gap"), l.rfind("gap")) << joined(table);
  }
}

TEST_F(LiveLines, TrainErasesTheSolverLine) {
  const std::string ck = path("ck.safetensors");
  const std::string train = std::string("'") + TRAIN_EXE + "' --config '" + kSmallCnn +
                            "' --batch 4 --budget 9MB ";
  ASSERT_EQ(run_in_terminal(train + "--steps 2 --save '" + ck + "'").code, 0);
  RunResult r = run_in_terminal(train + "--steps 3 --resume '" + ck + "'", 80);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::vector<std::string> screen = terminal_screen(r.out, 80);
  EXPECT_TRUE(has_line_starting(screen, "resumed from ")) << joined(screen);
  for (const std::string& l : screen) {
    if (l.rfind("resumed from ", 0) == 0) {
      EXPECT_EQ(l, "resumed from " + ck + " after step 2");
    }
    EXPECT_EQ(l.find("solving:"), std::string::npos) << joined(screen);
  }
  EXPECT_TRUE(has_line_starting(screen, "step 3/3  ")) << joined(screen);
}

}  // namespace
}  // namespace remat
