// plan: solves a rematerialization problem (a problem file or a model config) at a budget with
// one or more strategies, prints a comparison table (or JSON lines), and optionally writes the
// chosen schedule, the problem, and SVG figures of each feasible schedule.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/io/atomic_file.h"
#include "runtime/core/check.h"
#include "solver/baselines.h"
#include "solver/strategies.h"
#include "tools/common/cli.h"
#include "tools/planning/problem_flags.h"
#include "tools/planning/svg.h"

namespace remat {
namespace {

std::string status_of(const SolveResult& r) {
  if (!r.feasible) return r.message.empty() ? "infeasible" : r.message;
  return r.schedule.status.empty() ? "ok" : r.schedule.status;
}

// The paper's schedule figure: R (computed cells; first computation vs recomputation) and S
// (values held entering each stage), stage rows x node columns, with every k-th node's name and
// stage number as ticks and the forward/backward boundary (the loss) marked.
std::string schedule_svg(const Problem& p, const Schedule& s, const std::string& title) {
  const int T = s.R.rows(), n = s.R.cols();
  SvgHeatmap r{"R: computed in stage", "stage t", "node i", T, n, std::vector<int>(size_t(T) * n), {}, {}, -1, -1, ""};
  SvgHeatmap k{"S: held entering stage", "stage t", "node i", T, n, std::vector<int>(size_t(T) * n), {}, {}, -1, -1, ""};
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < n; ++i) {
      if (s.R(t, i)) r.cells[size_t(t) * n + i] = seen[size_t(i)] ? 2 : 1, seen[size_t(i)] = true;
      if (s.S(t, i)) k.cells[size_t(t) * n + i] = 3;
    }
  // Labels at least 14 units apart at the cell size svg_heatmaps picks.
  const double cell = std::max(2.0, std::min(14.0, 560.0 / std::max(1, std::max(T, n))));
  const int every = std::max(1, static_cast<int>(std::ceil(14.0 / cell)));
  int loss = -1;
  for (int i = 0; i < n && i < p.size(); ++i)
    if (loss < 0 && p.nodes[size_t(i)].kind == ProblemNodeKind::Loss) loss = i;
  for (SvgHeatmap* m : {&r, &k}) {
    for (int i = 0; i < n; i += every)
      m->col_ticks.emplace_back(i, i < p.size() ? p.nodes[size_t(i)].name : std::to_string(i));
    for (int t = 0; t < T; t += every) m->row_ticks.emplace_back(t, std::to_string(t));
    m->col_mark = loss;
    m->row_mark = loss < T ? loss : -1;
    m->mark_label = "loss";
    m->col_label = "node i (forward | backward)";
  }
  return svg_heatmaps(title, {r, k},
                      {{"computed (first time)", "#1f77b4"},
                       {"recomputed", "#ff7f0e"},
                       {"kept in memory", "#2ca02c"}});
}

// Bytes in use over the simulator's steps, with the budget and the constant bytes.
std::string memory_svg(const Problem& p, const SimResult& sim, int64_t budget,
                       const std::string& title) {
  const auto unit = svg_byte_unit(static_cast<double>(std::max(budget, sim.peak_bytes)));
  SvgSeries mem;
  mem.name = "bytes in use";
  mem.markers = false;
  mem.step = true;
  for (size_t i = 0; i < sim.steps.size(); ++i) {
    const SimStep& st = sim.steps[i];
    if (st.kind == StepKind::Compute) {
      mem.x.push_back(static_cast<double>(i));
      mem.y.push_back(static_cast<double>(st.bytes_during) / unit.second);
    }
    mem.x.push_back(static_cast<double>(i) + 0.5);
    mem.y.push_back(static_cast<double>(st.bytes_after) / unit.second);
  }
  SvgLineChart c;
  c.title = title;
  c.x_label = "schedule step (compute / free, in schedule order)";
  c.y_label = "memory (" + unit.first + ")";
  c.y_break = true;  // a large model's steps all happen just above its constant bytes
  c.series.push_back(std::move(mem));
  if (sim.offloads > 0) {  // the host copies' bytes beside the device's (Note [offload semantics])
    SvgSeries host;
    host.name = "host copies";
    host.markers = false;
    host.step = true;
    host.dash = 1;
    int64_t held = 0;
    for (size_t i = 0; i < sim.steps.size(); ++i) {
      const SimStep& st = sim.steps[i];
      const int64_t b = p.nodes[static_cast<size_t>(st.node)].bytes;
      held += st.kind == StepKind::Offload ? b : st.kind == StepKind::HostFree ? -b : 0;
      host.x.push_back(static_cast<double>(i) + 0.5);
      host.y.push_back(static_cast<double>(held) / unit.second);
    }
    c.series.push_back(std::move(host));
    c.y_break = false;  // the host line starts at zero
  }
  char budget_tick[32];
  std::snprintf(budget_tick, sizeof budget_tick, "%.2f", static_cast<double>(budget) / unit.second);
  c.hlines.push_back({static_cast<double>(budget) / unit.second,
                      "budget " + format_bytes(budget), "#d62728", budget_tick});
  c.hlines.push_back({static_cast<double>(sim.peak_bytes) / unit.second,
                      "peak " + format_bytes(sim.peak_bytes), "#9467bd", ""});
  c.hlines.push_back({static_cast<double>(p.constant_bytes) / unit.second,
                      "constant " + format_bytes(p.constant_bytes), "#7f7f7f", ""});
  return svg_line_chart(c);
}

// Returns what it wrote, for the "wrote ..." line the tools print.
std::string write_svgs(const std::string& dir, const Problem& p, const SolveResult& r,
                       int64_t budget) {
  const std::string base = dir + "/" + r.strategy;
  const std::string head = p.name + " / " + r.strategy + " at " + format_bytes(budget);
  svg_save(schedule_svg(p, r.schedule, head + ": schedule"), base + "-schedule.svg");
  svg_save(memory_svg(p, r.sim, budget,
                      head + ": memory (peak " + format_bytes(r.sim.peak_bytes) + ")"),
           base + "-memory.svg");
  return base + "-schedule.svg and " + base + "-memory.svg";
}

int run(int argc, char** argv) {
  FlagParser flags("plan", "Solve a rematerialization problem at a memory budget.");
  add_problem_flags(flags);
  flags.add("budget", "BYTES", "memory budget, constant bytes included (e.g. 15GB)");
  add_solve_flags(flags);
  flags.add("output", "FILE", "write the chosen schedule (remat-schedule/1 JSON)")
      .alias("-o", "output")
      .add("json", "", "one JSON object per strategy instead of a table")
      .add("write-problem", "FILE", "write the problem (remat-problem/1 JSON); --budget optional")
      .add("svg", "DIR", "write <strategy>-schedule.svg and <strategy>-memory.svg per feasible "
                         "strategy into DIR");
  if (!flags.parse(argc, argv)) return 0;
  for (const char* out : {"output", "write-problem"})
    if (flags.has(out)) check_output_file(flags.get(out), std::string("plan: --") + out);
  const Problem p = problem_from_flags(flags);
  if (flags.has("write-problem")) {
    problem_save(p, flags.get("write-problem"));
    if (!flags.has("json"))
      std::printf("wrote %s (%d nodes, batch %lld)\n", flags.get("write-problem").c_str(),
                  p.size(), static_cast<long long>(p.batch));
    if (!flags.has("budget")) return 0;
  }
  if (!flags.has("budget")) throw UsageError("plan: --budget is required");
  const int64_t budget = flags.get_bytes("budget");
  const std::vector<std::string> strategies = strategies_from_flags(flags);
  tune_allocator_for_solving();  // Note [allocator for solving]
  SolveOptions opt = solve_options_from_flags(flags);
  const bool json = flags.has("json");
  if (json && !flags.has("log-level")) opt.log_level = 0;
  ProgressLine line;
  progress_line_attach(opt, &line);
  ProgressTicker ticker(&line);  // Note [progress ticker]
  solve_check_budget(p, budget);
  const std::string svg_dir = flags.has("svg") ? flags.get("svg") : "";
  if (!svg_dir.empty()) svg_make_dir(svg_dir);
  const SimResult keep = simulate(p, all_keep_schedule(p));
  const double keep_cost = keep.total_cost;

  if (!json) {
    std::printf("problem %s: %d nodes, constant %s, minimum budget %s, budget %s\n",
                p.name.c_str(), p.size(), format_bytes(p.constant_bytes).c_str(),
                format_bytes(problem_min_budget(p)).c_str(), format_bytes(budget).c_str());
    std::printf("%-20s %-8s %14s %9s %12s %9s %8s  %s\n", "strategy", "feasible", "cost",
                "overhead", "peak", "time(s)", "gap", "status");
  }
  std::optional<SolveResult> chosen;
  std::vector<std::string> figures;  // --svg: what was written, said after the table
  const auto started = std::chrono::steady_clock::now();
  std::vector<Schedule> earlier;  // what the offload strategies start from (Note [checkmate-offload])
  for (const std::string& name : strategies) {
    progress_line_next(&line, name);
    SolveOptions o = opt;
    if (name == "checkmate-offload" || name == "lp-offload") o.candidates = &earlier;
    SolveResult r = solve(p, name, budget, o);
    if (r.feasible) earlier.push_back(r.schedule);
    progress_line_next(&line, "");
    const double cost = r.feasible ? r.sim.total_cost : 0;
    const double overhead = r.feasible && keep_cost > 0 ? cost / keep_cost : 0;
    // A gap needs a proven lower bound: exact strategies and the MILP/LP have one.
    const bool has_bound = r.feasible && (r.schedule.lower_bound > 0 || r.schedule.status == "optimal");
    if (json) {
      nlohmann::json j = {{"strategy", name},          {"feasible", r.feasible},
                          {"cost", cost},              {"overhead", overhead},
                          {"peak_bytes", r.feasible ? r.sim.peak_bytes : 0},
                          {"solve_seconds", r.solve_seconds},
                          {"gap", nullptr},            {"status", status_of(r)}};
      if (has_bound) {
        j["gap"] = r.gap;
        j["lower_bound"] = r.schedule.lower_bound;
        j["bound_source"] = r.schedule.bound_source;
      }
      if (!r.schedule.models.empty()) j["models"] = r.schedule.models;
      if (r.feasible && r.schedule.has_copies())
        j["copies"] = {{"offloads", r.sim.offloads},   {"prefetches", r.sim.prefetches},
                       {"bytes", r.sim.copied_bytes}, {"host_peak_bytes", r.sim.host_peak_bytes},
                       {"cost", r.sim.copy_cost}};
      if (r.feasible && !r.message.empty()) j["note"] = r.message;
      std::printf("%s\n", j.dump().c_str());
    } else if (r.feasible) {
      char gap[32] = "-";
      if (has_bound) std::snprintf(gap, sizeof gap, "%.2f%%", 100 * r.gap);
      std::printf("%-20s %-8s %14.6g %8.3fx %12s %9.3f %8s  %s\n", name.c_str(), "yes", cost,
                  overhead, format_bytes(r.sim.peak_bytes).c_str(), r.solve_seconds, gap,
                  status_of(r).c_str());
      if (!r.message.empty()) std::printf("  note: %s\n", r.message.c_str());
      if (r.schedule.has_copies())
        std::printf("  copies: %d offloads, %d prefetches, %s moved, host peak %s, cost %.6g\n",
                    r.sim.offloads, r.sim.prefetches, format_bytes(r.sim.copied_bytes).c_str(),
                    format_bytes(r.sim.host_peak_bytes).c_str(), r.sim.copy_cost);
      if (has_bound && !r.schedule.bound_source.empty())
        std::printf("  bound: %.6g from %s\n", r.schedule.lower_bound,
                    r.schedule.bound_source.c_str());
    } else if (name == "all-keep" && keep.valid && keep.peak_bytes > budget) {
      // What keeping everything needs, marked as over the budget (README: choosing a budget).
      std::printf("%-20s %-8s %14s %9s %12s %9.3f %8s  * over the budget %s\n", name.c_str(),
                  "no", "-", "-", (format_bytes(keep.peak_bytes) + "*").c_str(), r.solve_seconds,
                  "-", format_bytes(budget).c_str());
    } else {
      std::printf("%-20s %-8s %14s %9s %12s %9.3f %8s  %s\n", name.c_str(), "no", "-", "-", "-",
                  r.solve_seconds, "-", status_of(r).c_str());
    }
    std::fflush(stdout);
    if (!svg_dir.empty() && r.feasible) figures.push_back(write_svgs(svg_dir, p, r, budget));
    bool better = r.feasible && (!chosen || r.sim.total_cost < chosen->sim.total_cost);
    if (better || (strategies.size() == 1 && !chosen)) chosen = std::move(r);
  }
  if (!json && strategies.size() > 1)  // --time-limit is each strategy's
    std::printf("total %.1f s for %zu strategies (--time-limit %s s each)\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
                strategies.size(), flags.get("time-limit").c_str());
  if (!json)
    for (const std::string& f : figures) std::printf("wrote %s\n", f.c_str());
  if (flags.has("output")) {
    if (!chosen || !chosen->feasible)
      REMAT_USER_ERROR("plan: no feasible schedule at budget " << format_bytes(budget)
                                                              << "; nothing written to "
                                                              << flags.get("output"));
    schedule_save(chosen->schedule, flags.get("output"), &chosen->sim, &p);
    if (!json)
      std::printf("wrote %s (%s)\n", flags.get("output").c_str(), chosen->strategy.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace remat

int main(int argc, char** argv) {
  return remat::run_main([&] { return remat::run(argc, argv); });
}
