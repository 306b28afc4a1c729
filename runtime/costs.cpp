// Cost table JSON ("remat-costs/1") reading and writing, with errors naming file and node.
#include "runtime/costs.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/check.h"

namespace remat {

using nlohmann::json;

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
  return j.dump(1);
}

CostTable costs_from_json_text(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    REMAT_USER_ERROR(source << ": invalid JSON: " << e.what());
  }
  CostTable t;
  std::string where = source;
  try {
    if (j.value("format", "") != "remat-costs/1")
      REMAT_USER_ERROR(source << ": not a cost table (format must be \"remat-costs/1\")");
    t.model = j.value("model", "");
    t.device = j.value("device", "");
    t.unit = j.at("unit").get<std::string>();
    if (t.unit != "flops" && t.unit != "ms")
      REMAT_USER_ERROR(source << ": field 'unit': '" << t.unit << "' is not flops or ms");
    t.batch = j.at("batch").get<int64_t>();
    for (size_t i = 0; i < j.at("nodes").size(); ++i) {
      const json& jn = j["nodes"][i];
      where = source + ": nodes[" + std::to_string(i) + "]";
      NodeCost n;
      n.name = jn.at("name").get<std::string>();
      n.cost = jn.at("cost").get<double>();
      n.bytes = jn.at("bytes").get<int64_t>();
      n.workspace_bytes = jn.value("workspace_bytes", int64_t{0});
      n.spread = jn.value("spread", 0.0);
      if (!std::isfinite(n.cost) || n.cost < 0 || n.bytes < 0 || n.workspace_bytes < 0)
        REMAT_USER_ERROR(where << " '" << n.name << "': cost and sizes must be finite and >= 0");
      t.nodes.push_back(std::move(n));
    }
  } catch (const json::exception& e) {
    REMAT_USER_ERROR(where << ": " << e.what());
  }
  return t;
}

void costs_save(const CostTable& t, const std::string& path) {
  std::ofstream f(path);
  if (!f) REMAT_USER_ERROR(path << ": cannot open for writing");
  f << costs_to_json_text(t) << "\n";
  if (!f) REMAT_USER_ERROR(path << ": write failed");
}

CostTable costs_load(const std::string& path) {
  std::ifstream f(path);
  if (!f) REMAT_USER_ERROR(path << ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return costs_from_json_text(ss.str(), path);
}

}  // namespace remat
