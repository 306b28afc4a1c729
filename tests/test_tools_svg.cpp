// The SVG writer and the figures `plan --svg` draws, checked with a minimal XML well-formedness
// checker (tests/tools_test_util.h) that is itself tested to fail on broken documents.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/source_dir.h"
#include "tests/tool_runner.h"
#include "tests/tools_test_util.h"
#include "models/build.h"
#include "models/config.h"
#include "ops/registry.h"
#include "runtime/graph/autodiff.h"
#include "solver/baselines.h"
#include "solver/chain.h"
#include "solver/from_graph.h"
#include "solver/problem.h"
#include "solver/schedule.h"
#include "tools/planning/problem_flags.h"
#include "tools/planning/svg.h"

namespace remat {
namespace {

// ---- the checker itself can fail ------------------------------------------------------------
TEST(XmlCheck, AcceptsWellFormedAndRejectsBroken) {
  EXPECT_EQ(xml_check("<?xml version=\"1.0\"?>\n<svg a=\"1\"><g><t>x &amp; y</t></g><r/></svg>\n"), "");
  EXPECT_NE(xml_check("<svg><g></svg></g>"), "");
  EXPECT_NE(xml_check("<svg><g></svg>"), "");
  EXPECT_NE(xml_check("<svg a=1></svg>"), "");
  EXPECT_NE(xml_check("<svg a=\"1\" a=\"2\"></svg>"), "");
  EXPECT_NE(xml_check("<svg><t>a & b</t></svg>"), "");
  EXPECT_NE(xml_check("<svg></svg><svg></svg>"), "");
  EXPECT_NE(xml_check("<svg a=\"<\"></svg>"), "");
}

// ---- SVG writer -----------------------------------------------------------------------------
TEST(Svg, ChartsAreWellFormedAndEscapeText) {
  SvgLineChart c;
  c.title = "a <b> & \"c\"";
  c.x_label = "x";
  c.y_label = "y";
  c.series.push_back({"s<1>", {0, 1, 2}, {1, 3, 2}, true, false});
  c.series.push_back({"empty", {}, {}, true, false});
  c.hlines.push_back({2.5, "budget & more", "#d62728"});
  const std::string line = svg_line_chart(c);
  EXPECT_EQ(xml_check(line), "") << line;
  EXPECT_NE(line.find("viewBox=\"0 0 "), std::string::npos);
  EXPECT_NE(line.find("<title>a &lt;b&gt; &amp; &quot;c&quot;</title>"), std::string::npos);
  EXPECT_NE(line.find("<polyline"), std::string::npos);

  SvgBarChart b{"bars", "batch", {"all-keep", "checkmate"}, {3, 7}, {}};
  EXPECT_EQ(xml_check(svg_bar_chart(b)), "");

  SvgHeatmap h{"R", "stage", "node", 2, 3, {1, 0, 0, 2, 1, 3}};
  const std::string hm = svg_heatmaps("maps", {h, h}, {{"a", "#000"}, {"b", "#111"}, {"c", "#222"}});
  EXPECT_EQ(xml_check(hm), "");
  // Row 1 is three different categories -> three cells; row 0 one cell; two maps; 3 legend keys
  // + background + 2 frames.
  size_t rects = 0;
  for (size_t k = hm.find("<rect"); k != std::string::npos; k = hm.find("<rect", k + 1)) ++rects;
  EXPECT_EQ(rects, 2u * 4u + 3u + 1u + 2u);
}

TEST(Svg, NiceTicksCoverTheRange) {
  for (auto [lo, hi] : std::vector<std::pair<double, double>>{{0, 1}, {0.013, 0.047}, {3, 1700}, {-2, 2}}) {
    std::vector<double> t = svg_nice_ticks(lo, hi);
    ASSERT_GE(t.size(), 2u) << lo << " " << hi;
    EXPECT_LE(t.size(), 15u);
    EXPECT_GE(t.front(), lo - 1e-12);
    EXPECT_LE(t.back(), hi + 1e-12);
    EXPECT_LE(t.front() - lo, (t[1] - t[0]) + 1e-12);  // no gap bigger than a step at the ends
    EXPECT_LE(hi - t.back(), (t[1] - t[0]) + 1e-12);
  }
}

TEST_F(ToolsTest, PlanSvgWritesWellFormedFigures) {
  const Problem p = small_cnn_problem();
  const int64_t budget = problem_min_budget(p) + (all_keep_peak(p) - problem_min_budget(p)) / 2;
  RunResult r = run(PLAN_EXE, "--config '" + kSmallCnn + "' --budget " + std::to_string(budget) +
                                  " --strategies all-keep,chen-greedy,chen-sqrtn-linear --json --svg '" +
                                  path("figs") + "' -o '" + path("plan.json") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  int drawn = 0;
  for (const std::string& l : lines_of(r.out)) {
    nlohmann::json j = nlohmann::json::parse(l);
    const std::string s = j.at("strategy");
    const std::string sched = read_whole_file(path("figs/") + s + "-schedule.svg");
    const std::string mem = read_whole_file(path("figs/") + s + "-memory.svg");
    if (!j.at("feasible").get<bool>()) {
      EXPECT_TRUE(sched.empty() && mem.empty()) << s << " is infeasible: nothing to draw";
      continue;
    }
    ++drawn;
    EXPECT_EQ(xml_check(sched), "") << s;
    EXPECT_EQ(xml_check(mem), "") << s;
    EXPECT_NE(sched.find("recomputed"), std::string::npos);
    EXPECT_NE(mem.find(">budget " + format_bytes(budget) + "<"), std::string::npos) << mem;
    EXPECT_NE(mem.find(">schedule step (compute / free"), std::string::npos);
    // The budget's own tick on the y axis, bold in the budget's colour.
    EXPECT_NE(mem.find("fill=\"#d62728\" font-weight=\"bold\">"), std::string::npos);
    // Node names and stage numbers as ticks, the loss marked between forward and backward.
    EXPECT_NE(sched.find(">conv1<"), std::string::npos);
    EXPECT_NE(sched.find(">loss<"), std::string::npos);
    EXPECT_NE(sched.find("node i (forward | backward)"), std::string::npos);
    EXPECT_NE(mem.find("<polyline"), std::string::npos);
  }
  EXPECT_GE(drawn, 1) << r.out;
  const Schedule s = schedule_load(path("plan.json"));
  const SimResult sim = simulate(p, s);
  EXPECT_TRUE(sim.valid) << sim.error;
  EXPECT_LE(sim.peak_bytes, budget);
}


}  // namespace
}  // namespace remat
