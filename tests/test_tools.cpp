// The planning tools end to end (plan, sweep, maxbatch run as processes on the small configs),
// the --config problem source, and the SVG writer checked with a minimal XML well-formedness
// checker.
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
#include "models/build.h"
#include "models/config.h"
#include "ops/registry.h"
#include "runtime/graph/autodiff.h"
#include "solver/baselines.h"
#include "solver/chain.h"
#include "solver/from_graph.h"
#include "solver/problem.h"
#include "solver/schedule.h"
#include "tools/problem_flags.h"
#include "tools/svg.h"

namespace remat {
namespace {

const std::string kSmallCnn = test_source_dir() + "/configs/small_cnn.yaml";
const std::string kSmallDag = test_source_dir() + "/configs/small_dag.yaml";

// ---- a minimal XML well-formedness checker --------------------------------------------------
// Accepts: an optional <?xml ...?> declaration, comments, one root element, nested elements
// with quoted attributes (unique names), self-closing tags, text whose '&' start one of the
// five predefined entities or a numeric reference. Returns "" if well formed, else why not.
std::string xml_check(const std::string& s) {
  size_t i = 0;
  std::vector<std::string> stack;
  int roots = 0;
  auto is_name = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == ':' ||
           c == '.';
  };
  auto check_text = [&](size_t a, size_t b) -> std::string {
    for (size_t k = a; k < b; ++k) {
      if (s[k] == '<') return "'<' in text at " + std::to_string(k);
      if (s[k] != '&') continue;
      size_t semi = s.find(';', k);
      if (semi == std::string::npos || semi > b) return "unterminated entity at " + std::to_string(k);
      std::string ent = s.substr(k + 1, semi - k - 1);
      static const std::set<std::string> kEnt = {"amp", "lt", "gt", "quot", "apos"};
      if (!kEnt.count(ent) && !(ent.size() > 1 && ent[0] == '#'))
        return "unknown entity &" + ent + "; at " + std::to_string(k);
    }
    return "";
  };
  while (i < s.size()) {
    size_t lt = s.find('<', i);
    if (lt == std::string::npos) lt = s.size();
    std::string err = check_text(i, lt);
    if (!err.empty()) return err;
    if (stack.empty()) {
      for (size_t k = i; k < lt; ++k)
        if (!std::isspace(static_cast<unsigned char>(s[k]))) return "text outside the root";
    }
    if (lt == s.size()) break;
    if (s.compare(lt, 5, "<?xml") == 0) {
      if (lt != 0) return "declaration not at the start";
      size_t e = s.find("?>", lt);
      if (e == std::string::npos) return "unterminated declaration";
      i = e + 2;
      continue;
    }
    if (s.compare(lt, 4, "<!--") == 0) {
      size_t e = s.find("-->", lt);
      if (e == std::string::npos) return "unterminated comment";
      i = e + 3;
      continue;
    }
    size_t k = lt + 1;
    const bool closing = k < s.size() && s[k] == '/';
    if (closing) ++k;
    size_t n0 = k;
    while (k < s.size() && is_name(s[k])) ++k;
    std::string name = s.substr(n0, k - n0);
    if (name.empty()) return "empty tag name at " + std::to_string(lt);
    if (closing) {
      while (k < s.size() && std::isspace(static_cast<unsigned char>(s[k]))) ++k;
      if (k >= s.size() || s[k] != '>') return "bad closing tag </" + name;
      if (stack.empty() || stack.back() != name)
        return "</" + name + "> does not match <" + (stack.empty() ? "" : stack.back()) + ">";
      stack.pop_back();
      i = k + 1;
      continue;
    }
    std::set<std::string> attrs;
    bool self_close = false;
    for (;;) {
      while (k < s.size() && std::isspace(static_cast<unsigned char>(s[k]))) ++k;
      if (k >= s.size()) return "unterminated tag <" + name;
      if (s[k] == '>') break;
      if (s[k] == '/') {
        if (k + 1 >= s.size() || s[k + 1] != '>') return "stray '/' in <" + name;
        self_close = true;
        ++k;
        break;
      }
      size_t a0 = k;
      while (k < s.size() && is_name(s[k])) ++k;
      std::string attr = s.substr(a0, k - a0);
      if (attr.empty()) return "bad attribute in <" + name + "> at " + std::to_string(k);
      if (!attrs.insert(attr).second) return "duplicate attribute " + attr;
      if (k >= s.size() || s[k] != '=') return "attribute " + attr + " without value";
      ++k;
      if (k >= s.size() || (s[k] != '"' && s[k] != '\'')) return "unquoted attribute " + attr;
      const char q = s[k];
      size_t e = s.find(q, k + 1);
      if (e == std::string::npos) return "unterminated attribute " + attr;
      err = check_text(k + 1, e);
      if (!err.empty()) return "attribute " + attr + ": " + err;
      k = e + 1;
    }
    if (stack.empty() && ++roots > 1) return "more than one root element";
    if (!self_close) stack.push_back(name);
    i = k + 1;
  }
  if (!stack.empty()) return "unclosed <" + stack.back() + ">";
  if (roots != 1) return "no root element";
  return "";
}

// ---- running the tools ----------------------------------------------------------------------
using ToolsTest = ToolRunTest;

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string cur;
  std::stringstream ss(s);
  while (std::getline(ss, cur, sep)) parts.push_back(cur);
  if (!s.empty() && s.back() == sep) parts.push_back("");
  return parts;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  for (const std::string& l : split(s, '\n'))
    if (!l.empty()) out.push_back(l);
  return out;
}

Problem small_cnn_problem() { return problem_from_config(kSmallCnn, std::nullopt, std::nullopt, "flops"); }

int64_t all_keep_peak(const Problem& p) { return simulate(p, all_keep_schedule(p)).peak_bytes; }
double all_keep_cost(const Problem& p) { return simulate(p, all_keep_schedule(p)).total_cost; }

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

// ---- problems from configs ------------------------------------------------------------------
TEST(ProblemFromConfig, CostModelFileAndBatch) {
  Problem p = small_cnn_problem();
  EXPECT_EQ(p.batch, 32);
  EXPECT_GT(p.size(), 10);
  EXPECT_GT(p.constant_bytes, 0);
  // A cost table from a file (here the FLOPs table with every cost doubled) drives the costs;
  // with no --batch the graph is built at the table's batch.
  const ModelConfig cfg = load_model_config(kSmallCnn);
  const OpRegistry ops = make_builtin_registry();
  BuildOptions bo;
  bo.batch = 8;
  Graph g = make_training_graph(build_forward_graph(cfg, ops, bo), ops, cfg.optimizer.op,
                                cfg.optimizer.attrs);
  CostTable t = flops_costs(g, ops);
  for (auto& n : t.nodes) n.cost *= 2;
  const std::string file = "/tmp/remat_test_tools_costs_" + std::to_string(getpid()) + ".json";
  costs_save(t, file);
  Problem q = problem_from_config(kSmallCnn, std::nullopt, std::nullopt, file);
  Problem f8 = problem_from_config(kSmallCnn, int64_t{8}, std::nullopt, "flops");
  std::remove(file.c_str());
  ASSERT_EQ(q.size(), f8.size());
  EXPECT_EQ(q.batch, 8);
  for (int i = 0; i < q.size(); ++i) {
    EXPECT_DOUBLE_EQ(q.nodes[i].cost, 2 * f8.nodes[i].cost) << q.nodes[i].name;
    EXPECT_EQ(q.nodes[i].bytes, f8.nodes[i].bytes);
  }
  // Forward activations are 4x smaller at batch 8 than at 32.
  ASSERT_EQ(p.nodes[0].name, "conv1");
  EXPECT_EQ(p.nodes[0].bytes, int64_t{32} * 16 * 32 * 32 * 4);
  EXPECT_EQ(p.nodes[0].bytes, 4 * f8.nodes[0].bytes);
}

// ---- plan -----------------------------------------------------------------------------------
TEST_F(ToolsTest, PlanConfigJsonLinesAreConsistent) {
  const Problem p = small_cnn_problem();
  const int64_t lo = problem_min_budget(p), hi = all_keep_peak(p);
  ASSERT_LT(lo, hi);
  const int64_t budget = lo + (hi - lo) / 2;
  const std::vector<std::string> strategies = {"all-keep", "chen-greedy", "griewank", "lp",
                                               "checkmate"};
  RunResult r = run(PLAN_EXE, "--config '" + kSmallCnn + "' --budget " + std::to_string(budget) +
                                  " --strategies all-keep,chen-greedy,griewank,lp,checkmate"
                                  " --time-limit 5 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> ls = lines_of(r.out);
  ASSERT_EQ(ls.size(), strategies.size()) << r.out;
  const double keep = all_keep_cost(p);
  std::map<std::string, double> cost;
  for (size_t k = 0; k < ls.size(); ++k) {
    nlohmann::json j = nlohmann::json::parse(ls[k]);
    EXPECT_EQ(j.at("strategy"), strategies[k]);
    if (j.at("feasible").get<bool>()) {
      EXPECT_LE(j.at("peak_bytes").get<int64_t>(), budget) << ls[k];
      EXPECT_GT(j.at("peak_bytes").get<int64_t>(), p.constant_bytes) << ls[k];
      EXPECT_GE(j.at("cost").get<double>(), keep * (1 - 1e-9)) << ls[k];
      EXPECT_NEAR(j.at("overhead").get<double>(), j.at("cost").get<double>() / keep, 1e-9);
      cost[strategies[k]] = j.at("cost").get<double>();
    }
  }
  EXPECT_FALSE(cost.count("all-keep")) << "all-keep peaks at " << hi << " > budget " << budget;
  ASSERT_TRUE(cost.count("checkmate")) << r.out;
  for (const auto& [name, c] : cost) EXPECT_LE(cost["checkmate"], c * (1 + 1e-4)) << name;
}

TEST_F(ToolsTest, PlanWriteProblemRoundTrips) {
  RunResult r = run(PLAN_EXE, "--config '" + kSmallDag + "' --batch 4 --write-problem '" +
                                  path("p.json") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  const Problem saved = problem_load(path("p.json"));
  const Problem built = problem_from_config(kSmallDag, int64_t{4}, std::nullopt, "flops");
  EXPECT_EQ(problem_to_json_text(saved), problem_to_json_text(built));
  EXPECT_EQ(saved.batch, 4);
  // The saved problem solves the same as the config.
  const int64_t budget = all_keep_peak(built);
  RunResult a = run(PLAN_EXE, "--problem '" + path("p.json") + "' --budget " +
                                  std::to_string(budget) + " --strategies all-keep,chen-greedy --json");
  RunResult b = run(PLAN_EXE, "--config '" + kSmallDag + "' --batch 4 --budget " +
                                  std::to_string(budget) + " --strategies all-keep,chen-greedy --json");
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  std::vector<std::string> la = lines_of(a.out), lb = lines_of(b.out);
  ASSERT_EQ(la.size(), 2u);
  ASSERT_EQ(lb.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    nlohmann::json ja = nlohmann::json::parse(la[k]), jb = nlohmann::json::parse(lb[k]);
    EXPECT_TRUE(ja.at("feasible").get<bool>()) << la[k];
    EXPECT_EQ(ja.at("cost"), jb.at("cost"));
    EXPECT_EQ(ja.at("peak_bytes"), jb.at("peak_bytes"));
  }
}

TEST_F(ToolsTest, UsageErrors) {
  RunResult both = run(PLAN_EXE, "--config '" + kSmallCnn + "' --problem x.json --budget 1GB");
  EXPECT_NE(both.code, 0);
  EXPECT_NE(both.err.find("exactly one"), std::string::npos) << both.err;
  RunResult neither = run(PLAN_EXE, "--budget 1GB");
  EXPECT_NE(neither.code, 0);
  EXPECT_NE(neither.err.find("--config"), std::string::npos) << neither.err;
  EXPECT_NE(neither.err.find("--problem"), std::string::npos) << neither.err;
  RunResult sweep = run(SWEEP_EXE, "-o '" + path("s") + "'");
  EXPECT_NE(sweep.code, 0);
  EXPECT_NE(sweep.err.find("--config"), std::string::npos) << sweep.err;
  RunResult mb = run(MAXBATCH_EXE, "--problem a.json --config b.yaml --budget 1GB");
  EXPECT_NE(mb.code, 0);
  EXPECT_NE(mb.err.find("exactly one"), std::string::npos) << mb.err;
  // Config-only flags with --problem, unknown strategies, missing config file.
  const Problem p = small_cnn_problem();
  problem_save(p, path("p.json"));
  RunResult cm = run(PLAN_EXE, "--problem '" + path("p.json") + "' --cost-model flops --budget 1GB");
  EXPECT_NE(cm.code, 0);
  EXPECT_NE(cm.err.find("--cost-model needs --config"), std::string::npos) << cm.err;
  RunResult bad = run(PLAN_EXE, "--problem '" + path("p.json") + "' --budget 1GB --strategies all-keep,nope");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("unknown strategy 'nope'"), std::string::npos) << bad.err;
  RunResult missing = run(PLAN_EXE, "--config '" + path("none.yaml") + "' --budget 1GB");
  EXPECT_NE(missing.code, 0);
  EXPECT_NE(missing.err.find("none.yaml"), std::string::npos) << missing.err;
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

// ---- sweep ----------------------------------------------------------------------------------
struct CsvRow {
  std::string strategy;
  int64_t budget = 0;
  bool feasible = false;
  double cost = 0, overhead = 0, gap = 0;
  int64_t peak = 0;
};

// Reads DIR/sweep.csv into rows per strategy (in file order); checks the header and fields.
std::map<std::string, std::vector<CsvRow>> read_sweep_csv(const std::string& path, size_t* count) {
  std::map<std::string, std::vector<CsvRow>> rows;
  std::vector<std::string> ls = lines_of(read_whole_file(path));
  EXPECT_FALSE(ls.empty()) << path;
  if (ls.empty()) return rows;
  EXPECT_EQ(ls[0], "strategy,budget_bytes,feasible,cost,overhead,peak_bytes,solve_seconds,gap");
  *count = ls.size() - 1;
  for (size_t i = 1; i < ls.size(); ++i) {
    std::vector<std::string> f = split(ls[i], ',');
    EXPECT_EQ(f.size(), 8u) << ls[i];
    if (f.size() != 8) continue;
    CsvRow row;
    row.strategy = f[0];
    row.budget = std::stoll(f[1]);
    EXPECT_TRUE(f[2] == "0" || f[2] == "1") << ls[i];
    row.feasible = f[2] == "1";
    EXPECT_GE(std::stod(f[6]), 0);
    if (row.feasible) {
      row.cost = std::stod(f[3]);
      row.overhead = std::stod(f[4]);
      row.peak = std::stoll(f[5]);
      row.gap = std::stod(f[7]);
      EXPECT_LE(row.peak, row.budget) << ls[i];
      EXPECT_GE(row.overhead, 1 - 1e-9) << ls[i];
    } else {
      EXPECT_TRUE(f[3].empty() && f[4].empty() && f[5].empty()) << ls[i];
    }
    rows[row.strategy].push_back(row);
  }
  return rows;
}

// More budget never costs more: for the budget-sweeping baselines, and for checkmate where both
// points are proven optimal. Checkmate is no worse than any strategy where it proved optimality.
void expect_monotone(std::map<std::string, std::vector<CsvRow>>& rows,
                     const std::vector<std::string>& monotone) {
  for (const std::string& s : monotone) {
    const std::vector<CsvRow>& r = rows[s];
    for (size_t i = 0; i + 1 < r.size(); ++i) {
      const CsvRow &a = r[i], &b = r[i + 1];
      if (!a.feasible) continue;
      EXPECT_TRUE(b.feasible) << s << ": feasible at " << a.budget << " but not at " << b.budget;
      if (s == "checkmate" && (a.gap > 1e-3 || b.gap > 1e-3)) continue;
      EXPECT_LE(b.cost, a.cost * (1 + 1e-9)) << s << " at " << b.budget << " vs " << a.budget;
    }
  }
  if (!rows.count("checkmate")) return;
  for (size_t i = 0; i < rows["checkmate"].size(); ++i) {
    const CsvRow& c = rows["checkmate"][i];
    if (!c.feasible || c.gap > 1e-3) continue;
    for (auto& [s, r] : rows) {
      if (i < r.size() && r[i].feasible) {
        EXPECT_LE(c.cost, r[i].cost * (1 + 1e-3)) << s;
      }
    }
  }
}

TEST_F(ToolsTest, SweepCsvIsCompleteAndMonotone) {
  const Problem p = small_cnn_problem();
  const int k = 4;
  const std::vector<std::string> strategies = {"all-keep", "chen-greedy", "griewank", "lp",
                                               "checkmate"};
  RunResult r = run(SWEEP_EXE, "--config '" + kSmallCnn + "' --batch 32 --points 4 --strategies "
                               "all-keep,chen-greedy,griewank,lp,checkmate --time-limit 1 -o '" +
                                   path("sweep") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  size_t count = 0;
  auto rows = read_sweep_csv(path("sweep/sweep.csv"), &count);
  EXPECT_EQ(count, strategies.size() * k);
  const int64_t lo = problem_min_budget(p), hi = all_keep_peak(p);
  for (const std::string& s : strategies) {
    ASSERT_EQ(rows[s].size(), static_cast<size_t>(k)) << s;
    EXPECT_EQ(rows[s].front().budget, lo) << s;
    EXPECT_EQ(rows[s].back().budget, hi) << s;
    for (int i = 1; i < k; ++i) EXPECT_GT(rows[s][i].budget, rows[s][i - 1].budget);
    // At the all-keep peak every strategy that applies fits (griewank needs a chain).
    if (s != "griewank") {
      EXPECT_TRUE(rows[s].back().feasible) << s << " at the all-keep peak";
    }
  }
  // all-keep fits only at its own peak.
  for (int i = 0; i + 1 < k; ++i) EXPECT_FALSE(rows["all-keep"][i].feasible);
  expect_monotone(rows, {"all-keep", "chen-greedy", "griewank", "checkmate"});
  const std::string svg = read_whole_file(path("sweep/sweep.svg"));
  EXPECT_EQ(xml_check(svg), "");
  // One polyline per strategy with a feasible point; every strategy in the legend.
  size_t lines = 0, with_points = 0;
  for (size_t q = svg.find("<polyline"); q != std::string::npos; q = svg.find("<polyline", q + 1)) ++lines;
  for (const std::string& s : strategies)
    with_points += std::any_of(rows[s].begin(), rows[s].end(), [](const CsvRow& c) { return c.feasible; });
  EXPECT_GE(with_points, 4u);
  EXPECT_EQ(lines, with_points + strategies.size());  // and one per legend entry
  for (const std::string& s : strategies) EXPECT_NE(svg.find(">" + s), std::string::npos) << s;
  // Overlapping strategies stay visible (dash patterns, square markers); the cost model is named.
  EXPECT_NE(svg.find("stroke-dasharray=\"8,4\""), std::string::npos);
  EXPECT_NE(svg.find("<rect") , std::string::npos);
  EXPECT_NE(svg.find("cost / all-keep cost, FLOPs)"), std::string::npos);
  EXPECT_NE(r.out.find("overhead"), std::string::npos);
}

// A chain (where griewank applies) from a --problem file.
TEST_F(ToolsTest, SweepChainProblemIsMonotone) {
  const Problem p = make_chain_problem({3, 1, 4, 1, 5, 9, 2}, {40, 10, 30, 20, 50, 10, 60}, 100);
  problem_save(p, path("chain.json"));
  const int k = 6;
  RunResult r = run(SWEEP_EXE, "--problem '" + path("chain.json") + "' --points 6 --strategies "
                               "all-keep,chen-sqrtn,chen-greedy,griewank,checkmate --time-limit 2 "
                               "--log-level 0 -o '" + path("chain") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  size_t count = 0;
  auto rows = read_sweep_csv(path("chain/sweep.csv"), &count);
  EXPECT_EQ(count, 5u * k);
  for (const std::string s : {"griewank", "checkmate"}) {
    ASSERT_EQ(rows[s].size(), static_cast<size_t>(k));
    EXPECT_TRUE(rows[s].back().feasible) << s;
  }
  // griewank fits a chain at some budget below the all-keep peak.
  EXPECT_TRUE(rows["griewank"][k - 2].feasible);
  EXPECT_TRUE(rows["checkmate"].front().feasible) << "the MILP fits any budget >= the minimum";
  expect_monotone(rows, {"all-keep", "chen-greedy", "griewank", "checkmate"});
}

// ---- maxbatch -------------------------------------------------------------------------------
TEST_F(ToolsTest, MaxBatchTableAndChart) {
  const Problem p = small_cnn_problem();
  // Twice the all-keep peak at batch 32: all-keep alone fits a batch of more than 32.
  const int64_t budget = 2 * all_keep_peak(p);
  RunResult r = run(MAXBATCH_EXE, "--config '" + kSmallCnn + "' --budget " + std::to_string(budget) +
                                      " --strategies all-keep,chen-sqrtn,chen-greedy,griewank,checkmate"
                                      " --time-limit 5 --svg '" + path("mb.svg") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  std::map<std::string, int64_t> batch;
  for (const std::string& l : lines_of(r.out)) {
    std::istringstream is(l);
    std::string name, b, ub, secs;
    is >> name >> b >> ub >> secs;
    if (name == "griewank") EXPECT_EQ(b, "n/a") << "small_cnn is not a chain: " << l;
    if (name == "all-keep" || name == "chen-sqrtn" || name == "chen-greedy" ||
        name == "checkmate")
      batch[name] = std::stoll(b);
  }
  ASSERT_EQ(batch.size(), 4u) << r.out;
  EXPECT_GE(batch["all-keep"], 33);
  // all-keep's max batch: the largest batch whose all-keep peak fits, on the graph built at
  // that batch (Note [max-batch problems]).
  const int64_t b = batch["all-keep"];
  EXPECT_LE(all_keep_peak(problem_from_config(kSmallCnn, b, std::nullopt, "flops")), budget);
  EXPECT_GT(all_keep_peak(problem_from_config(kSmallCnn, b + 1, std::nullopt, "flops")), budget);
  for (const auto& [name, n] : batch) EXPECT_GE(batch["checkmate"], n) << name;
  const std::string svg = read_whole_file(path("mb.svg"));
  EXPECT_EQ(xml_check(svg), "");
  EXPECT_NE(svg.find(">checkmate<"), std::string::npos);
}

// The answer is self-consistent: `plan --config --batch B` finds a schedule at the batch B
// maxbatch reports, and at B + 1 the exact searches (the baselines) find none.
TEST_F(ToolsTest, MaxBatchAgreesWithPlanAtThatBatch) {
  const Problem p = small_cnn_problem();
  const int64_t budget = 2 * all_keep_peak(p);
  RunResult r = run(MAXBATCH_EXE, "--config '" + kSmallCnn + "' --budget " + std::to_string(budget) +
                                      " --strategies chen-greedy,checkmate --time-limit 10 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  std::map<std::string, int64_t> batch;
  for (const std::string& l : lines_of(r.out)) {
    nlohmann::json j = nlohmann::json::parse(l);
    batch[j.at("strategy")] = j.at("batch").get<int64_t>();
  }
  ASSERT_EQ(batch.size(), 2u) << r.out;
  auto plan_at = [&](const std::string& strategy, int64_t b) {
    RunResult pr = run(PLAN_EXE, "--config '" + kSmallCnn + "' --batch " + std::to_string(b) +
                                     " --budget " + std::to_string(budget) + " --strategies " +
                                     strategy + " --time-limit 10 --json");
    if (pr.code != 0) return false;  // the budget is below the minimum at b: no schedule
    return nlohmann::json::parse(lines_of(pr.out).at(0)).at("feasible").get<bool>();
  };
  for (const auto& [strategy, b] : batch) {
    ASSERT_GT(b, 0) << strategy;
    EXPECT_TRUE(plan_at(strategy, b)) << strategy << " at its max batch " << b;
  }
  EXPECT_FALSE(plan_at("chen-greedy", batch["chen-greedy"] + 1));
}

// Solver logs (--log-level 2: Clp and Cbc) go to stderr; stdout stays one JSON object a line.
TEST_F(ToolsTest, SolverLogsStayOffStdout) {
  const Problem p = small_cnn_problem();
  const int64_t budget = problem_min_budget(p) + (all_keep_peak(p) - problem_min_budget(p)) / 3;
  RunResult r = run(PLAN_EXE, "--config '" + kSmallCnn + "' --budget " + std::to_string(budget) +
                                  " --strategies lp,checkmate --time-limit 5 --json --log-level 2");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<std::string> ls = lines_of(r.out);
  ASSERT_EQ(ls.size(), 2u) << r.out;
  for (const std::string& l : ls) EXPECT_NO_THROW((void)nlohmann::json::parse(l)) << l;
  EXPECT_FALSE(r.err.empty());  // the logs went somewhere: stderr
}

// --verify trains two steps at each found batch: the measured peak equals the plan's and the
// memory held stays within the budget.
TEST_F(ToolsTest, MaxBatchVerifyTrainsAtTheFoundBatch) {
  RunResult r = run(MAXBATCH_EXE, "--config '" + kSmallCnn + "' --budget 6MB"
                                  " --strategies all-keep,chen-greedy --verify");
  ASSERT_EQ(r.code, 0) << r.err;
  int ok = 0;
  for (const std::string& l : lines_of(r.out))
    if ((l.rfind("all-keep ", 0) == 0 || l.rfind("chen-greedy ", 0) == 0) &&
        l.find("verified") == std::string::npos && l.find("predicted") != std::string::npos) {
      EXPECT_NE(l.find(": ok"), std::string::npos) << l;
      ++ok;
    }
  EXPECT_EQ(ok, 2) << r.out;
}

// --vary seq: the longest sequence of a token model per strategy. all-keep's answer is exact:
// its plan fits at the length found and not one token longer (the graph rebuilt at each length,
// attention growing with T^2); a recomputing strategy reaches at least as far; the position
// table bounds the search; --verify trains at the found length.
TEST_F(ToolsTest, MaxBatchVariesTheSequenceLength) {
  const std::string tiny = test_source_dir() + "/configs/gpt2_tiny.yaml";
  auto at = [&](int64_t t) { return problem_from_config(tiny, int64_t{2}, std::nullopt, "flops", t); };
  const int64_t budget = all_keep_peak(at(40));
  const std::string args = "--config '" + tiny + "' --vary seq --batch 2 --budget " + std::to_string(budget);
  RunResult r = run(MAXBATCH_EXE, args + " --strategies all-keep,chen-greedy");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("varying the sequence length (1 to 64"), std::string::npos) << r.out;
  std::map<std::string, int64_t> seq;
  for (const std::string& l : lines_of(r.out)) {
    std::istringstream is(l);
    std::string name, t;
    is >> name >> t;
    if (name == "all-keep" || name == "chen-greedy") seq[name] = std::stoll(t);
  }
  ASSERT_EQ(seq.size(), 2u) << r.out;
  EXPECT_GE(seq["all-keep"], 40);
  EXPECT_LE(all_keep_peak(at(seq["all-keep"])), budget);
  if (seq["all-keep"] < 64) {
    EXPECT_GT(all_keep_peak(at(seq["all-keep"] + 1)), budget);
  }
  EXPECT_GT(seq["chen-greedy"], seq["all-keep"]);
  // (all-keep's exact limit leaves no room for the arena's alignment: verify the recomputing one.)
  RunResult v = run(MAXBATCH_EXE, args + " --strategies chen-greedy --verify");
  ASSERT_EQ(v.code, 0) << v.err;
  EXPECT_NE(v.out.find(": ok"), std::string::npos) << v.out;
  // A budget above anything needed stops at the position table (max_len 64).
  SizeFamily family;
  family.at = at;
  family.max_size = 64;
  EXPECT_EQ(max_size(family, "all-keep", int64_t{1} << 40).batch, 64);
  RunResult image = run(MAXBATCH_EXE, "--config '" + kSmallCnn + "' --vary seq --budget 1GB");
  EXPECT_NE(image.code, 0);
  EXPECT_NE(image.err.find("not a token model"), std::string::npos) << image.err;
}

}  // namespace
}  // namespace remat
