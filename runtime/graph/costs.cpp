// Cost table JSON ("remat-costs/1") reading and writing, with errors naming file and node.
#include "runtime/graph/costs.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "runtime/io/atomic_file.h"
#include "runtime/core/check.h"
#include "runtime/core/checked.h"
#include "runtime/io/input_file.h"

namespace remat {

using nlohmann::json;

namespace {

LinkCost link_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) REMAT_USER_ERROR(where << ": expected an object");
  LinkCost l;
  for (auto [field, rate] : {std::pair{"to_host_bytes_per_second", &l.to_host_bytes_per_second},
                             std::pair{"from_host_bytes_per_second", &l.from_host_bytes_per_second}}) {
    *rate = json_number(json_field(j, where, field), where, field);
    if (!std::isfinite(*rate) || *rate <= 0)
      REMAT_USER_ERROR(where << ": field '" << field << "': must be finite and > 0, got " << *rate);
  }
  if (j.contains("bytes")) l.bytes = json_int64(j["bytes"], where, "bytes");
  check_count(l.bytes, where, "bytes");
  return l;
}

}  // namespace

double link_bytes_per_second(double given, const CostTable& t) {
  return given > 0 ? given : t.link.measured() ? t.link.bytes_per_second() : 0;
}

std::string costs_to_json_text(const CostTable& t) {
  json nodes = json::array();
  for (const auto& n : t.nodes)
    nodes.push_back({{"name", n.name},
                     {"cost", n.cost},
                     {"bytes", n.bytes},
                     {"workspace_bytes", n.workspace_bytes},
                     {"spread", n.spread}});
  json j = {{"format", "remat-costs/1"}, {"model", t.model}, {"device", t.device},
            {"unit", t.unit},            {"batch", t.batch}, {"nodes", nodes}};
  if (t.link.measured())
    j["link"] = {{"to_host_bytes_per_second", t.link.to_host_bytes_per_second},
                 {"from_host_bytes_per_second", t.link.from_host_bytes_per_second},
                 {"bytes", t.link.bytes}};
  return j.dump(1);
}

CostTable costs_from_json_text(const std::string& text, const std::string& source) {
  const json j = json_parse(text, source);
  if (!j.is_object()) REMAT_USER_ERROR(source << ": expected a JSON object at the top level");
  const std::string format = j.contains("format") ? json_string(j["format"], source, "format") : "";
  if (format != "remat-costs/1")
    REMAT_USER_ERROR(source << ": not a cost table (field 'format' must be \"remat-costs/1\")");
  CostTable t;
  if (j.contains("model")) t.model = json_string(j["model"], source, "model");
  if (j.contains("device")) t.device = json_string(j["device"], source, "device");
  t.unit = json_string(json_field(j, source, "unit"), source, "unit");
  if (t.unit != "flops" && t.unit != "ms")
    REMAT_USER_ERROR(source << ": field 'unit': '" << t.unit << "' is not flops or ms");
  t.batch = json_int64(json_field(j, source, "batch"), source, "batch");
  check_count(t.batch, source, "batch");
  if (j.contains("link")) t.link = link_from_json(j["link"], source + ": field 'link'");
  const json& nodes = json_field(j, source, "nodes");
  if (!nodes.is_array()) REMAT_USER_ERROR(source << ": field 'nodes': expected an array");
  for (size_t i = 0; i < nodes.size(); ++i) {
    const json& jn = nodes[i];
    std::string where = source + ": nodes[" + std::to_string(i) + "]";
    NodeCost n;
    n.name = json_string(json_field(jn, where, "name"), where, "name");
    where += " '" + n.name + "'";
    n.cost = json_number(json_field(jn, where, "cost"), where, "cost");
    n.bytes = json_int64(json_field(jn, where, "bytes"), where, "bytes");
    if (jn.contains("workspace_bytes"))
      n.workspace_bytes = json_int64(jn["workspace_bytes"], where, "workspace_bytes");
    if (jn.contains("spread")) n.spread = json_number(jn["spread"], where, "spread");
    if (!std::isfinite(n.cost) || n.cost < 0)
      REMAT_USER_ERROR(where << ": field 'cost': must be finite and >= 0, got " << n.cost);
    check_count(n.bytes, where, "bytes");
    check_count(n.workspace_bytes, where, "workspace_bytes");
    t.nodes.push_back(std::move(n));
  }
  return t;
}

void costs_save(const CostTable& t, const std::string& path) {
  write_file_atomic(path, costs_to_json_text(t) + "\n");
}

CostTable costs_load(const std::string& path) {
  return costs_from_json_text(read_file(path, "cost table"), path);
}

}  // namespace remat
