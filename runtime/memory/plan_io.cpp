// Execution plans as JSON, resolved by name against the graph they run on.
#include "runtime/memory/plan_io.h"

#include <nlohmann/json.hpp>

#include "runtime/io/atomic_file.h"
#include "runtime/core/check.h"
#include "runtime/core/checked.h"
#include "runtime/io/input_file.h"

namespace remat {

using nlohmann::json;

namespace {
constexpr const char* kFormat = "remat-plan/1";
}  // namespace

std::string plan_to_json_text(const ExecutionPlan& plan, const Graph& g) {
  json steps = json::array();
  for (const PlanStep& s : plan.steps) {
    if (s.kind == PlanStepKind::Compute)
      steps.push_back({{"compute", g.node(s.node).name},
                       {"recompute", s.recompute},
                       {"bytes_during", s.bytes_during},
                       {"bytes_after", s.bytes_after}});
    else if (s.kind == PlanStepKind::Free)
      steps.push_back({{"free", g.value(s.value).name}, {"bytes_after", s.bytes_after}});
    else if (s.kind == PlanStepKind::Prefetch)
      steps.push_back({{"prefetch", g.value(s.value).name}, {"bytes_after", s.bytes_after}});
    else
      steps.push_back({{s.kind == PlanStepKind::Offload ? "offload" : "host_free",
                        g.value(s.value).name},
                       {"bytes_after", s.bytes_after}});
  }
  json j = {{"format", kFormat},
            {"graph", plan.graph_name},
            {"batch", g.batch},
            {"strategy", plan.strategy},
            {"budget", plan.budget},
            {"constant_bytes", plan.constant_bytes},
            {"predicted_peak", plan.predicted_peak},
            {"steps", steps}};
  if (plan.predicted_host_peak > 0) j["predicted_host_peak"] = plan.predicted_host_peak;
  return j.dump(1) + "\n";
}

ExecutionPlan plan_from_json_text(const std::string& text, const Graph& g, const std::string& source,
                                  int64_t constant_bytes) {
  if (constant_bytes < 0) constant_bytes = g.persistent_bytes();
  const json j = json_parse(text, source);
  if (!j.is_object()) REMAT_USER_ERROR(source << ": expected a JSON object at the top level");
  const std::string format = j.contains("format") ? json_string(j["format"], source, "format") : "";
  if (format != kFormat)
    REMAT_USER_ERROR(source << ": not an execution plan (field 'format' must be \"" << kFormat
                            << "\", got \"" << format << "\")");
  ExecutionPlan p;
  p.graph_name = json_string(json_field(j, source, "graph"), source, "graph");
  if (p.graph_name != g.name)
    REMAT_USER_ERROR(source << ": plan for model '" << p.graph_name << "', not '" << g.name << "'");
  const int64_t batch = json_int64(json_field(j, source, "batch"), source, "batch");
  if (batch != g.batch)
    REMAT_USER_ERROR(source << ": plan for batch " << batch << ", the graph has batch " << g.batch);
  p.strategy = json_string(json_field(j, source, "strategy"), source, "strategy");
  auto count = [&](const json& obj, const std::string& where, const char* field) {
    const int64_t v = json_int64(json_field(obj, where, field), where, field);
    check_count(v, where, field);
    return v;
  };
  p.budget = count(j, source, "budget");
  p.constant_bytes = count(j, source, "constant_bytes");
  p.predicted_peak = count(j, source, "predicted_peak");
  if (j.contains("predicted_host_peak")) p.predicted_host_peak = count(j, source, "predicted_host_peak");
  if (p.constant_bytes != constant_bytes)
    REMAT_USER_ERROR(source << ": plan's constant " << p.constant_bytes << " bytes, this run's "
                            << constant_bytes
                            << ": made for another graph, world size or optimizer sharding");
  const json& steps = json_field(j, source, "steps");
  if (!steps.is_array()) REMAT_USER_ERROR(source << ": field 'steps': expected an array");
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::string where = source + ": steps[" + std::to_string(i) + "]";
    const json& js = steps[i];
    if (!js.is_object()) REMAT_USER_ERROR(where << ": expected an object");
    PlanStep s;
    s.bytes_after = count(js, where, "bytes_after");
    if (js.contains("compute")) {
      json_reject_unknown_fields(js, where, {"compute", "recompute", "bytes_during", "bytes_after"});
      const std::string name = json_string(js["compute"], where, "compute");
      s.node = g.find_node(name);
      if (s.node < 0 || g.node(s.node).kind == NodeKind::Update)
        REMAT_USER_ERROR(where << ": node '" << name << "' is not a node of '" << g.name << "'");
      s.value = g.node(s.node).output;
      s.recompute = json_bool(json_field(js, where, "recompute"), where, "recompute");
      s.bytes_during = count(js, where, "bytes_during");
    } else {
      const char* field = "free";
      for (const char* f : {"offload", "prefetch", "host_free"})
        if (js.contains(f)) field = f;
      json_reject_unknown_fields(js, where, {field, "bytes_after"});
      const std::string name = json_string(json_field(js, where, field), where, field);
      const std::string kind = field;
      s.kind = kind == "free"       ? PlanStepKind::Free
               : kind == "offload"  ? PlanStepKind::Offload
               : kind == "prefetch" ? PlanStepKind::Prefetch
                                    : PlanStepKind::HostFree;
      s.value = g.find_value(name);
      if (s.value == kNoValue || g.value(s.value).kind != ValueKind::Activation)
        REMAT_USER_ERROR(where << ": '" << name << "' is not an activation of '" << g.name << "'");
      s.bytes_during = s.bytes_after;
    }
    p.steps.push_back(s);
  }
  plan_check_structure(p, g, source);
  return p;
}

void plan_check_structure(const ExecutionPlan& plan, const Graph& g, const std::string& source) {
  std::vector<bool> resident(g.values.size(), false), computed(g.nodes.size(), false);
  std::vector<bool> on_host(g.values.size(), false);
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& s = plan.steps[i];
    const std::string where = source + ": steps[" + std::to_string(i) + "]";
    if (s.kind == PlanStepKind::Offload || s.kind == PlanStepKind::Prefetch ||
        s.kind == PlanStepKind::HostFree) {
      const size_t v = static_cast<size_t>(s.value);
      const std::string& name = g.value(s.value).name;
      if (s.kind == PlanStepKind::Offload && (!resident[v] || on_host[v]))
        REMAT_USER_ERROR(where << ": offloads '" << name << "', which is "
                               << (on_host[v] ? "already on the host" : "not in memory"));
      if (s.kind != PlanStepKind::Offload && !on_host[v])
        REMAT_USER_ERROR(where << ": " << (s.kind == PlanStepKind::Prefetch ? "prefetches" : "frees")
                               << " the host copy of '" << name << "', which has none");
      if (s.kind == PlanStepKind::Prefetch && resident[v])
        REMAT_USER_ERROR(where << ": prefetches '" << name << "', which is in memory");
      if (s.kind == PlanStepKind::Offload) on_host[v] = true;
      if (s.kind == PlanStepKind::HostFree) on_host[v] = false;
      if (s.kind == PlanStepKind::Prefetch) resident[v] = true;
      continue;
    }
    if (s.kind == PlanStepKind::Free) {
      if (!resident[static_cast<size_t>(s.value)])
        REMAT_USER_ERROR(where << ": frees '" << g.value(s.value).name
                               << "', which is not in memory at this step");
      resident[static_cast<size_t>(s.value)] = false;
      continue;
    }
    const Node& n = g.node(s.node);
    for (ValueId v : n.inputs)
      if (g.value(v).kind == ValueKind::Activation && !resident[static_cast<size_t>(v)])
        REMAT_USER_ERROR(where << ": computes '" << n.name << "', whose input '" << g.value(v).name
                               << "' is not in memory at this step (never computed, or freed)");
    const bool activation = g.value(n.output).kind == ValueKind::Activation;
    if (activation && resident[static_cast<size_t>(n.output)])
      REMAT_USER_ERROR(where << ": computes '" << n.name << "' while its value is still in memory");
    if (s.recompute != computed[static_cast<size_t>(s.node)])
      REMAT_USER_ERROR(where << ": 'recompute' is " << (s.recompute ? "true" : "false") << " but '"
                             << n.name << "' is computed here for the "
                             << (s.recompute ? "first" : "second or later") << " time");
    computed[static_cast<size_t>(s.node)] = true;
    if (activation) resident[static_cast<size_t>(n.output)] = true;
  }
  for (size_t n = 0; n < g.nodes.size(); ++n)
    if (g.nodes[n].kind != NodeKind::Update && !computed[n])
      REMAT_USER_ERROR(source << ": node '" << g.nodes[n].name << "' is never computed");
  for (size_t v = 0; v < g.values.size(); ++v) {
    if (resident[v])
      REMAT_USER_ERROR(source << ": activation '" << g.values[v].name
                              << "' is still in memory after the last step (a free is missing)");
    if (on_host[v])
      REMAT_USER_ERROR(source << ": activation '" << g.values[v].name
                              << "' still has a host copy after the last step (a host_free is "
                                 "missing)");
  }
}

void plan_save(const ExecutionPlan& plan, const Graph& g, const std::string& path) {
  write_file_atomic(path, plan_to_json_text(plan, g));
}

ExecutionPlan plan_load(const std::string& path, const Graph& g, int64_t constant_bytes) {
  return plan_from_json_text(read_file(path, "execution plan"), g, path, constant_bytes);
}

}  // namespace remat
