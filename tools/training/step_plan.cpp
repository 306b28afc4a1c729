// make_step_plan(): costs -> problem -> schedule -> execution plan for `train --budget`.
#include "tools/training/step_plan.h"

#include <cstdio>
#include <optional>

#include "runtime/core/check.h"
#include "runtime/executor.h"
#include "runtime/io/input_file.h"
#include "runtime/memory/plan_io.h"
#include "runtime/profiler.h"
#include "solver/from_graph.h"
#include "solver/strategies.h"
#include "tools/common/cli.h"
#include "tools/common/progress.h"

namespace remat {

namespace {

// Note [workspaces from the backend]
// A plan's memory is exact only with the workspaces the executor will ask for. A cost table
// read from a file or the cache was measured on some backend under some workspace limit, and
// cuDNN's algorithm choice, with it a convolution's workspace, depends on that limit (train's
// follows the budget, profile's is the backend's default; Note [conv algorithm choice]). So
// every node's workspace is this backend's; where one differs from the table's, that node's
// time is the table's measurement of another algorithm, and train says how many differ.
void adopt_backend_workspaces(CostTable& t, const Graph& g, const OpRegistry& ops, Backend& be,
                              const std::string& source) {
  size_t i = 0, differ = 0;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    if (g.nodes[n].kind == NodeKind::Update) continue;
    NodeCost& c = t.nodes.at(i++);
    const int64_t live = node_workspace_bytes(g, ops, be, static_cast<NodeId>(n));
    if (c.workspace_bytes != live) ++differ, c.workspace_bytes = live;
  }
  if (differ > 0)
    std::printf("costs: %zu of %zu nodes need another workspace on %s than %s says (measured "
                "under another workspace limit or device); the plan takes %s's, and those "
                "nodes' times are the table's\n",
                differ, i, be.name().c_str(), source.c_str(), be.name().c_str());
}

CostTable cost_table(const Graph& g, const OpRegistry& ops, Backend& be, const std::string& model) {
  auto workspace = [&](NodeId n) { return node_workspace_bytes(g, ops, be, n); };
  if (model == "flops") return flops_costs(g, ops, workspace);
  if (model == "profile") {  // measured on this backend, cached like `profile` does
    std::string note;
    CostTable t = profile_graph_cached(g, ops, be, {}, /*refresh=*/false, &note);
    std::printf("profile: %s\n", note.c_str());
    adopt_backend_workspaces(t, g, ops, be, "the cached table");
    return t;
  }
  CostTable t = costs_load(model);
  std::string why;
  if (!costs_match_graph(t, g, &why)) REMAT_USER_ERROR(model << ": " << why);
  adopt_backend_workspaces(t, g, ops, be, model);
  return t;
}

// The format of a --plan file: remat-plan/1 or remat-schedule/1; anything else is a UserError
// that lists both.
std::string plan_file_format(const std::string& text, const std::string& path) {
  const nlohmann::json j = json_parse(text, path);
  const nlohmann::json none;
  const nlohmann::json& f = j.is_object() && j.contains("format") ? j["format"] : none;
  if (f == "remat-plan/1" || f == "remat-schedule/1") return f.get<std::string>();
  REMAT_USER_ERROR(path << ": field 'format': " << (f.is_null() ? "missing" : f.dump())
                        << " is not a format --plan accepts (\"remat-plan/1\": an execution plan "
                           "from train --save-plan; \"remat-schedule/1\": a schedule from plan -o)");
}

}  // namespace

StepPlan make_step_plan(const Graph& g, const OpRegistry& ops, Backend& be,
                        const StepPlanOptions& opt, int64_t solver_budget) {
  StepPlan sp;
  auto workspace = [&](NodeId n) { return node_workspace_bytes(g, ops, be, n); };
  if (!opt.budget && opt.schedule_file.empty()) {
    sp.plan = plan_keep_all(g, workspace, opt.constant_bytes);
    sp.status = "no budget";
    return sp;
  }
  std::string text;  // --plan FILE: an execution plan or a schedule, told apart by format
  if (!opt.schedule_file.empty()) {
    text = read_file(opt.schedule_file, "plan or schedule");
    const std::string format = plan_file_format(text, opt.schedule_file);
    if (format == "remat-plan/1") {
      sp.plan = plan_from_json_text(text, g, opt.schedule_file, opt.constant_bytes);  // as saved
      sp.plan.budget = opt.budget.value_or(0);
      sp.status = "loaded";
      return sp;
    }
  }
  const CostTable costs = cost_table(g, ops, be, opt.cost_model);
  GraphProblem gp = problem_from_graph(g, costs, opt.constant_bytes);
  problem_set_link(gp.problem, link_bytes_per_second(opt.link_bytes_per_second, costs),
                   opt.device_flops, opt.copy_overlap);
  sp.cost_unit = gp.problem.cost_unit;
  for (const auto& n : gp.problem.nodes) sp.all_keep_cost += n.cost;
  Schedule schedule;
  if (!opt.schedule_file.empty()) {
    schedule = schedule_from_json_text(text, opt.schedule_file);
    schedule_check_problem(schedule, gp.problem, opt.schedule_file);
    sp.status = "loaded";
  } else {
    SolveOptions so;
    so.time_limit_seconds = opt.time_limit;
    so.threads = opt.threads;
    so.log_level = opt.log_level;
    so.host_budget = opt.host_budget;
    ProgressLine line;  // Note [live lines]
    line.label = "solving";
    std::optional<ProgressTicker> ticker;  // Note [progress ticker]
    if (opt.log_level >= 1) {
      so.progress = progress_solve, so.phase = progress_phase, so.progress_user = &line;
      ticker.emplace(&line);
    }
    SolveResult r;
    try {
      r = solve(gp.problem, opt.strategy, solver_budget, so);
    } catch (...) {
      ticker.reset();
      progress_line_clear(&line);  // the error's line takes its place
      throw;
    }
    ticker.reset();
    progress_line_clear(&line);
    if (!r.feasible)
      REMAT_USER_ERROR("strategy '" << opt.strategy << "' finds no schedule within "
                                    << format_bytes(solver_budget) << " for '" << g.name << "'"
                                    << (r.message.empty() ? "" : ": " + r.message)
                                    << " (any schedule needs at least "
                                    << format_bytes(problem_min_budget(gp.problem))
                                    << (opt.strategy == "checkmate"
                                            ? "; try a larger budget)"
                                            : "; try --strategy checkmate or a larger budget)"));
    schedule = r.schedule;
    sp.solve_seconds = r.solve_seconds;
    sp.gap = r.gap;
    sp.status = r.schedule.status;
  }
  SimResult sim = simulate(gp.problem, schedule);
  if (!sim.valid) REMAT_USER_ERROR("schedule '" << schedule.strategy << "' is invalid: " << sim.error);
  sp.cost = sim.total_cost;
  sp.plan = lower_schedule(g, gp, schedule, opt.budget.value_or(0));
  return sp;
}

}  // namespace remat
