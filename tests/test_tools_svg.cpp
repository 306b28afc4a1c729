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

// ---- label placement, read back from the SVG ------------------------------------------------
struct TextItem {
  double x, y;
  std::string anchor, text;
};
struct Segment {
  double x0, y0, x1, y1;
};
std::string attr(const std::string& tag, const std::string& name) {
  const size_t at = tag.find(" " + name + "=\"");
  if (at == std::string::npos) return "";
  const size_t b = at + name.size() + 3;
  return tag.substr(b, tag.find('"', b) - b);
}
std::vector<std::string> elements(const std::string& svg, const std::string& name) {
  std::vector<std::string> out;
  for (size_t at = svg.find("<" + name + " "); at != std::string::npos;
       at = svg.find("<" + name + " ", at + 1))
    out.push_back(svg.substr(at, svg.find('\n', at) - at));
  return out;
}
std::vector<TextItem> texts(const std::string& svg) {
  std::vector<TextItem> out;
  for (const std::string& e : elements(svg, "text")) {
    const size_t b = e.find('>') + 1;
    out.push_back({std::stod(attr(e, "x")), std::stod(attr(e, "y")), attr(e, "text-anchor"),
                   e.substr(b, e.find("</text>") - b)});
  }
  return out;
}
// The dashed reference lines and every polyline's segments.
std::vector<Segment> dashed_lines(const std::string& svg) {
  std::vector<Segment> out;
  for (const std::string& e : elements(svg, "line"))
    if (e.find("stroke-dasharray") != std::string::npos)
      out.push_back({std::stod(attr(e, "x1")), std::stod(attr(e, "y1")), std::stod(attr(e, "x2")),
                     std::stod(attr(e, "y2"))});
  return out;
}
std::vector<std::vector<std::pair<double, double>>> polylines(const std::string& svg) {
  std::vector<std::vector<std::pair<double, double>>> out;
  for (const std::string& e : elements(svg, "polyline")) {
    out.emplace_back();
    std::istringstream in(attr(e, "points"));
    double x, y;
    char comma;
    while (in >> x >> comma >> y) out.back().emplace_back(x, y);
  }
  return out;
}
// Whether a segment meets the box, by sampling it densely (independent of the writer's clipping).
bool meets(double bx0, double by0, double bx1, double by1, const Segment& s) {
  const int n = 400;
  for (int i = 0; i <= n; ++i) {
    const double t = static_cast<double>(i) / n;
    const double x = s.x0 + (s.x1 - s.x0) * t, y = s.y0 + (s.y1 - s.y0) * t;
    if (x > bx0 && x < bx1 && y > by0 && y < by1) return true;
  }
  return false;
}
// What the label starting with `prefix` crosses: other dashed lines, curves and other labels
// of the chart (a 12-unit label's box: 0.8 em above the baseline, 0.25 em below).
std::vector<std::string> label_crossings(const std::string& svg, const std::string& prefix) {
  std::vector<std::string> hits;
  const std::vector<TextItem> all = texts(svg);
  auto box = [](const TextItem& t, double* b) {
    const double w = svg_text_width(t.text, 12);
    b[0] = t.anchor == "end" ? t.x - w : t.anchor == "middle" ? t.x - w / 2 : t.x;
    b[1] = t.y - 9.6, b[2] = b[0] + w, b[3] = t.y + 3;
  };
  for (const TextItem& t : all) {
    if (t.text.rfind(prefix, 0) != 0) continue;
    double b[4];
    box(t, b);
    for (const Segment& s : dashed_lines(svg))
      if (meets(b[0], b[1], b[2], b[3], s)) hits.push_back("a dashed line at y " + std::to_string(s.y0));
    for (const auto& pts : polylines(svg))
      for (size_t i = 1; i < pts.size(); ++i)
        if (meets(b[0], b[1], b[2], b[3], {pts[i - 1].first, pts[i - 1].second, pts[i].first, pts[i].second})) {
          hits.push_back("a curve at x " + std::to_string(pts[i].first));
          break;
        }
    for (const TextItem& o : all) {
      if (&o == &t || (o.text.rfind("budget", 0) != 0 && o.text.rfind("peak", 0) != 0 &&
                           o.text.rfind("constant", 0) != 0))
        continue;
      double c[4];
      box(o, c);
      if (b[0] < c[2] && c[0] < b[2] && b[1] < c[3] && c[1] < b[3]) hits.push_back("label " + o.text);
    }
  }
  return hits;
}

TEST(SvgLabels, TheCheckerSeesACrossing) {
  SvgLineChart c;
  c.series.push_back({"s", {0, 10}, {0, 10}, false, false});
  c.hlines.push_back({5, "budget x", "#d62728", ""});
  std::string svg = svg_line_chart(c);
  EXPECT_TRUE(label_crossings(svg, "budget").empty()) << svg;
  // Move the label onto the curve's middle by hand: the checker must object.
  const size_t at = svg.find(">budget x<");
  const size_t tag = svg.rfind("<text", at);
  const std::string moved = "<text x=\"400\" y=\"" +
                            attr(svg.substr(tag, at - tag), "y") + "\" font-size=\"12\" text-anchor=\"middle\"";
  svg.replace(tag, svg.find(" fill=", tag) - tag, moved);
  EXPECT_FALSE(label_crossings(svg, "budget").empty()) << svg;
}

TEST(SvgLabels, ALabelMovesOffACurveThatRunsThroughItsFirstPlace) {
  // The curve climbs through the right end just above the line and its middle just below it:
  // every label must find a place where it crosses nothing.
  SvgLineChart c;
  c.series.push_back({"s", {0, 40, 50, 60, 97, 100}, {9, 9, 4.8, 9, 9, 5.2}, false, false});
  c.hlines.push_back({5, "budget 5 MB", "#d62728", ""});
  c.hlines.push_back({5.1, "peak 5.1 MB", "#9467bd", ""});
  c.hlines.push_back({0.2, "constant 0.2 MB", "#7f7f7f", ""});
  const std::string svg = svg_line_chart(c);
  EXPECT_EQ(xml_check(svg), "");
  for (const char* label : {"budget", "peak", "constant"}) {
    const std::vector<std::string> hits = label_crossings(svg, label);
    EXPECT_TRUE(hits.empty()) << label << " crosses " << (hits.empty() ? "" : hits[0]) << "\n" << svg;
  }
}

// ---- SVG writer -----------------------------------------------------------------------------
TEST(Svg, ChartsAreWellFormedAndEscapeText) {
  SvgLineChart c;
  c.title = "a <b> & \"c\"";
  c.x_label = "x";
  c.y_label = "y";
  c.series.push_back({"s<1>", {0, 1, 2}, {1, 3, 2}, true, false});
  c.series.push_back({"empty", {}, {}, true, false});
  c.hlines.push_back({2.5, "budget & more", "#d62728", ""});
  const std::string line = svg_line_chart(c);
  EXPECT_EQ(xml_check(line), "") << line;
  EXPECT_NE(line.find("viewBox=\"0 0 "), std::string::npos);
  EXPECT_NE(line.find("<title>a &lt;b&gt; &amp; &quot;c&quot;</title>"), std::string::npos);
  EXPECT_NE(line.find("<polyline"), std::string::npos);

  SvgBarChart b{"bars", "batch", {"all-keep", "checkmate"}, {3, 7}, {}};
  EXPECT_EQ(xml_check(svg_bar_chart(b)), "");

  SvgHeatmap h{"R", "stage", "node", 2, 3, {1, 0, 0, 2, 1, 3}, {}, {}, -1, -1, ""};
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

// The issue's picture: ResNet-50 at 3x32x32, batch 8, under 313 MB lives between its constant
// (307 MB) and the budget. The axis starts near the data (with a break), so the curve uses the
// plot's height, and no label crosses another line, the curve or another label.
TEST_F(ToolsTest, AMemoryFigureAboveALargeConstantUsesItsHeight) {
  const std::string resnet = test_source_dir() + "/configs/resnet50.yaml";
  RunResult r = run(PLAN_EXE, "--config '" + resnet + "' --input 3x32x32 --batch 8 --budget 313MB"
                                  " --strategies chen-greedy,checkmate --time-limit 3 --log-level 0 --svg '" +
                                  path("figs") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* strategy : {"chen-greedy", "checkmate"}) {  // said, as the other tools do
    const std::string base = path("figs") + "/" + strategy;
    EXPECT_NE(r.out.find("wrote " + base + "-schedule.svg and " + base + "-memory.svg\n"),
              std::string::npos)
        << r.out;
  }
  for (const char* strategy : {"chen-greedy", "checkmate"}) {
    const std::string mem = read_whole_file(path("figs/") + strategy + "-memory.svg");
    ASSERT_FALSE(mem.empty()) << strategy << ": " << r.out;
    EXPECT_EQ(xml_check(mem), "");
    const auto curves = polylines(mem);
    ASSERT_FALSE(curves.empty());
    double lo = 1e9, hi = -1e9;
    for (const auto& p : curves[0]) lo = std::min(lo, p.second), hi = std::max(hi, p.second);
    EXPECT_GT(hi - lo, 250) << strategy << ": the curve spans " << hi - lo << " of 410 units";
    for (const char* label : {"budget", "peak", "constant"}) {
      const std::vector<std::string> hits = label_crossings(mem, label);
      EXPECT_TRUE(hits.empty()) << strategy << ": '" << label << "' crosses " << hits.size()
                                << " things, first " << (hits.empty() ? "" : hits[0]);
    }
  }
}

}  // namespace
}  // namespace remat
