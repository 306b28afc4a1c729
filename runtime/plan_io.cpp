// Execution plans as JSON, resolved by name against the graph they run on.
#include "runtime/plan_io.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/check.h"

namespace remat {

using nlohmann::json;

namespace {
constexpr const char* kFormat = "remat-plan/1";

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) REMAT_USER_ERROR(path << ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

std::string plan_to_json_text(const ExecutionPlan& plan, const Graph& g) {
  json steps = json::array();
  for (const PlanStep& s : plan.steps) {
    if (s.kind == PlanStepKind::Compute)
      steps.push_back({{"compute", g.node(s.node).name},
                       {"recompute", s.recompute},
                       {"bytes_during", s.bytes_during},
                       {"bytes_after", s.bytes_after}});
    else
      steps.push_back({{"free", g.value(s.value).name}, {"bytes_after", s.bytes_after}});
  }
  json j = {{"format", kFormat},
            {"graph", plan.graph_name},
            {"batch", g.batch},
            {"strategy", plan.strategy},
            {"budget", plan.budget},
            {"constant_bytes", plan.constant_bytes},
            {"predicted_peak", plan.predicted_peak},
            {"steps", steps}};
  return j.dump(1) + "\n";
}

ExecutionPlan plan_from_json_text(const std::string& text, const Graph& g, const std::string& source,
                                  int64_t constant_bytes) {
  if (constant_bytes < 0) constant_bytes = g.persistent_bytes();
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    REMAT_USER_ERROR(source << ": invalid JSON: " << e.what());
  }
  ExecutionPlan p;
  std::string where = source;
  try {
    if (j.value("format", "") != kFormat)
      REMAT_USER_ERROR(source << ": not an execution plan (format must be \"" << kFormat << "\")");
    p.graph_name = j.at("graph").get<std::string>();
    if (p.graph_name != g.name)
      REMAT_USER_ERROR(source << ": plan for model '" << p.graph_name << "', not '" << g.name << "'");
    if (j.at("batch").get<int64_t>() != g.batch)
      REMAT_USER_ERROR(source << ": plan for batch " << j.at("batch").get<int64_t>()
                              << ", the graph has batch " << g.batch);
    p.strategy = j.at("strategy").get<std::string>();
    p.budget = j.at("budget").get<int64_t>();
    p.constant_bytes = j.at("constant_bytes").get<int64_t>();
    p.predicted_peak = j.at("predicted_peak").get<int64_t>();
    if (p.constant_bytes != constant_bytes)
      REMAT_USER_ERROR(source << ": plan's constant " << p.constant_bytes << " bytes, this run's "
                              << constant_bytes
                              << ": made for another graph, world size or optimizer sharding");
    const json& steps = j.at("steps");
    for (size_t i = 0; i < steps.size(); ++i) {
      where = source + ": steps[" + std::to_string(i) + "]";
      const json& js = steps[i];
      PlanStep s;
      s.bytes_after = js.at("bytes_after").get<int64_t>();
      if (js.contains("compute")) {
        const std::string name = js.at("compute").get<std::string>();
        s.node = g.find_node(name);
        if (s.node < 0 || g.node(s.node).kind == NodeKind::Update)
          REMAT_USER_ERROR(where << ": node '" << name << "' is not a node of '" << g.name << "'");
        s.value = g.node(s.node).output;
        s.recompute = js.at("recompute").get<bool>();
        s.bytes_during = js.at("bytes_during").get<int64_t>();
      } else {
        const std::string name = js.at("free").get<std::string>();
        s.kind = PlanStepKind::Free;
        s.value = g.find_value(name);
        if (s.value == kNoValue || g.value(s.value).kind != ValueKind::Activation)
          REMAT_USER_ERROR(where << ": '" << name << "' is not an activation of '" << g.name << "'");
        s.bytes_during = s.bytes_after;
      }
      p.steps.push_back(s);
    }
  } catch (const json::exception& e) {
    REMAT_USER_ERROR(where << ": " << e.what());
  }
  return p;
}

void plan_save(const ExecutionPlan& plan, const Graph& g, const std::string& path) {
  std::ofstream f(path);
  if (!f) REMAT_USER_ERROR(path << ": cannot open for writing");
  f << plan_to_json_text(plan, g);
  if (!f) REMAT_USER_ERROR(path << ": write failed");
}

ExecutionPlan plan_load(const std::string& path, const Graph& g, int64_t constant_bytes) {
  return plan_from_json_text(read_file(path), g, path, constant_bytes);
}

std::string json_file_format(const std::string& path) {
  try {
    json j = json::parse(read_file(path));
    return j.is_object() ? j.value("format", "") : "";
  } catch (const json::exception&) {
    return "";
  }
}

}  // namespace remat
