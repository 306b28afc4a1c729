// Schedule JSON ("remat-schedule/1"): written by `plan -o`, reloaded by the executor.
#include <nlohmann/json.hpp>

#include "runtime/io/atomic_file.h"
#include "runtime/core/check.h"
#include "runtime/io/input_file.h"
#include "solver/schedule.h"

namespace remat {
namespace {

using Json = nlohmann::json;
const char* kFormat = "remat-schedule/1";

Json rows_to_json(const BoolMatrix& m) {
  Json rows = Json::array();
  for (int t = 0; t < m.rows(); ++t) {
    Json row = Json::array();
    for (int i = 0; i < m.cols(); ++i)
      if (m(t, i)) row.push_back(i);
    rows.push_back(row);
  }
  return rows;
}

BoolMatrix rows_from_json(const Json& j, int n, const std::string& source, const char* field) {
  if (!j.is_array() || static_cast<int>(j.size()) != n)
    REMAT_USER_ERROR(source << ": field '" << field << "': expected an array of " << n
                            << " stages");
  BoolMatrix m(n, n);
  for (int t = 0; t < n; ++t) {
    if (!j[t].is_array())
      REMAT_USER_ERROR(source << ": field '" << field << "' stage " << t
                              << ": expected an array of node indices");
    for (const Json& v : j[t]) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= n)
        REMAT_USER_ERROR(source << ": field '" << field << "' stage " << t
                                << ": bad node index " << v.dump() << " (expected 0.." << n - 1
                                << ")");
      m.set(t, v.get<int>(), true);
    }
  }
  return m;
}

}  // namespace

std::string schedule_to_json_text(const Schedule& s, const SimResult* sim, const Problem* p) {
  Json j;
  j["format"] = kFormat;
  j["strategy"] = s.strategy;
  j["n"] = s.R.rows();
  j["status"] = s.status;
  if (sim) {
    j["peak_bytes"] = sim->peak_bytes;
    j["cost"] = sim->total_cost;
  }
  if (p) {
    std::vector<std::string> names;
    for (const auto& node : p->nodes) names.push_back(node.name);
    j["problem"] = {{"name", p->name}, {"batch", p->batch}, {"nodes", names}};
  }
  j["R"] = rows_to_json(s.R);
  j["S"] = rows_to_json(s.S);
  if (s.has_copies()) {
    j["offload"] = rows_to_json(s.offload);
    j["prefetch"] = rows_to_json(s.prefetch);
    if (sim) j["host_peak_bytes"] = sim->host_peak_bytes, j["copy_cost"] = sim->copy_cost;
  }
  return j.dump() + "\n";
}

Schedule schedule_from_json_text(const std::string& text, const std::string& source) {
  const Json j = json_parse(text, source);
  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat)
    REMAT_USER_ERROR(source << ": field 'format': expected '" << kFormat << "'");
  for (const char* f : {"n", "R", "S"})
    if (!j.contains(f)) REMAT_USER_ERROR(source << ": missing field '" << f << "'");
  if (!j["n"].is_number_integer() || j["n"].get<int64_t>() < 1 ||
      j["n"].get<int64_t>() > kMaxProblemNodes)
    REMAT_USER_ERROR(source << ": field 'n': expected an integer in [1, " << kMaxProblemNodes
                            << "], got " << j["n"].dump());
  int n = j["n"].get<int>();
  Schedule s;
  if (j.contains("strategy") && j["strategy"].is_string()) s.strategy = j["strategy"];
  if (j.contains("status") && j["status"].is_string()) s.status = j["status"];
  if (j.contains("problem")) {
    const auto& jp = j["problem"];
    if (!jp.is_object() || !jp.contains("name") || !jp.contains("batch") || !jp.contains("nodes") ||
        !jp["name"].is_string() || !jp["batch"].is_number_integer() || !jp["nodes"].is_array() ||
        jp["nodes"].size() != static_cast<size_t>(n))
      REMAT_USER_ERROR(source << ": field 'problem': expected {name, batch, nodes: " << n
                              << " names}");
    s.problem_name = jp["name"].get<std::string>();
    s.problem_batch = jp["batch"].get<int64_t>();
    for (const auto& name : jp["nodes"]) {
      if (!name.is_string()) REMAT_USER_ERROR(source << ": field 'problem.nodes': expected names");
      s.node_names.push_back(name.get<std::string>());
    }
  }
  s.R = rows_from_json(j["R"], n, source, "R");
  s.S = rows_from_json(j["S"], n, source, "S");
  if (j.contains("offload") != j.contains("prefetch"))
    REMAT_USER_ERROR(source << ": fields 'offload' and 'prefetch' come together (missing '"
                            << (j.contains("offload") ? "prefetch" : "offload") << "')");
  if (j.contains("offload")) {
    s.offload = rows_from_json(j["offload"], n, source, "offload");
    s.prefetch = rows_from_json(j["prefetch"], n, source, "prefetch");
  }
  return s;
}

void schedule_save(const Schedule& s, const std::string& path, const SimResult* sim,
                   const Problem* p) {
  write_file_atomic(path, schedule_to_json_text(s, sim, p));
}

Schedule schedule_load(const std::string& path) {
  return schedule_from_json_text(read_file(path, "schedule file"), path);
}

void schedule_check_problem(const Schedule& s, const Problem& p, const std::string& source) {
  const std::string hint = ": it was made for another model, input size or batch";
  if (s.R.cols() != p.size())
    REMAT_USER_ERROR(source << ": schedule for " << s.R.cols() << " nodes, problem '" << p.name
                            << "' has " << p.size() << hint);
  if (!s.problem_name.empty() && s.problem_name != p.name)
    REMAT_USER_ERROR(source << ": schedule for model '" << s.problem_name << "', not '" << p.name
                            << "'");
  if (s.problem_batch != 0 && s.problem_batch != p.batch)
    REMAT_USER_ERROR(source << ": schedule for batch " << s.problem_batch << ", the graph has batch "
                            << p.batch);
  for (size_t i = 0; i < s.node_names.size(); ++i)
    if (s.node_names[i] != p.nodes[i].name)
      REMAT_USER_ERROR(source << ": node " << i << " is '" << s.node_names[i] << "' in the schedule, '"
                              << p.nodes[i].name << "' in the graph" << hint);
}

}  // namespace remat
