// The rematerialization problem: validation, JSON ("remat-problem/1") IO, budgets and rescaling.
#include "solver/problem.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/check.h"

namespace remat {
namespace {

using Json = nlohmann::json;

const char* kFormat = "remat-problem/1";

std::string node_where(const std::string& source, int i, const std::string& name) {
  std::ostringstream os;
  os << source << ": nodes[" << i << "] '" << name << "'";
  return os.str();
}

// Reads one field of a JSON object with a type check; errors name `where` and the field.
const Json& require_field(const Json& obj, const std::string& where, const char* field) {
  auto it = obj.find(field);
  if (it == obj.end()) REMAT_USER_ERROR(where << ": missing field '" << field << "'");
  return *it;
}

int64_t json_int64(const Json& v, const std::string& where, const char* field) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18)
      return static_cast<int64_t>(d);
  }
  REMAT_USER_ERROR(where << ": field '" << field << "': expected an integer, got " << v.dump());
}

double json_number(const Json& v, const std::string& where, const char* field) {
  if (!v.is_number())
    REMAT_USER_ERROR(where << ": field '" << field << "': expected a number, got " << v.dump());
  return v.get<double>();
}

std::string json_string(const Json& v, const std::string& where, const char* field) {
  if (!v.is_string())
    REMAT_USER_ERROR(where << ": field '" << field << "': expected a string, got " << v.dump());
  return v.get<std::string>();
}

void reject_unknown_fields(const Json& obj, const std::string& where,
                           const std::set<std::string>& known) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (known.count(it.key())) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    REMAT_USER_ERROR(where << ": unknown field '" << it.key() << "' (known: " << list << ")");
  }
}

ProblemNodeKind parse_kind(const std::string& s, const std::string& where) {
  if (s == "forward") return ProblemNodeKind::Forward;
  if (s == "loss") return ProblemNodeKind::Loss;
  if (s == "backward") return ProblemNodeKind::Backward;
  REMAT_USER_ERROR(where << ": field 'kind': unknown kind '" << s
                         << "' (known: forward, loss, backward)");
}

ProblemNode parse_node(const Json& j, int i, const std::string& source) {
  ProblemNode node;
  std::string where = source + ": nodes[" + std::to_string(i) + "]";
  if (!j.is_object()) REMAT_USER_ERROR(where << ": expected an object, got " << j.dump());
  node.name = json_string(require_field(j, where, "name"), where, "name");
  where = node_where(source, i, node.name);
  reject_unknown_fields(j, where, {"name", "kind", "cost", "bytes", "workspace_bytes", "deps"});
  node.kind = parse_kind(json_string(require_field(j, where, "kind"), where, "kind"), where);
  node.cost = json_number(require_field(j, where, "cost"), where, "cost");
  node.bytes = json_int64(require_field(j, where, "bytes"), where, "bytes");
  if (j.contains("workspace_bytes"))
    node.workspace_bytes = json_int64(j["workspace_bytes"], where, "workspace_bytes");
  const Json& deps = require_field(j, where, "deps");
  if (!deps.is_array())
    REMAT_USER_ERROR(where << ": field 'deps': expected an array, got " << deps.dump());
  for (const Json& d : deps) node.deps.push_back(static_cast<int>(json_int64(d, where, "deps")));
  // Order of deps is free in the file; duplicates are caught by validation after sorting.
  std::sort(node.deps.begin(), node.deps.end());
  return node;
}

}  // namespace

const char* problem_node_kind_name(ProblemNodeKind kind) {
  switch (kind) {
    case ProblemNodeKind::Forward: return "forward";
    case ProblemNodeKind::Loss: return "loss";
    case ProblemNodeKind::Backward: return "backward";
  }
  return "?";
}

std::vector<std::vector<int>> problem_users(const Problem& p) {
  std::vector<std::vector<int>> users(p.nodes.size());
  for (int k = 0; k < p.size(); ++k)
    for (int d : p.nodes[k].deps) users[d].push_back(k);
  return users;
}

void problem_validate(const Problem& p, const std::string& source) {
  if (p.nodes.empty()) REMAT_USER_ERROR(source << ": problem has no nodes");
  if (p.constant_bytes < 0)
    REMAT_USER_ERROR(source << ": field 'constant_bytes': must be >= 0, got " << p.constant_bytes);
  if (p.batch_constant_bytes < 0 || p.batch_constant_bytes > p.constant_bytes)
    REMAT_USER_ERROR(source << ": field 'batch_constant_bytes': must be in [0, constant_bytes = "
                            << p.constant_bytes << "], got " << p.batch_constant_bytes);
  if (p.batch < 1) REMAT_USER_ERROR(source << ": field 'batch': must be >= 1, got " << p.batch);
  if (p.cost_unit != "flops" && p.cost_unit != "ms")
    REMAT_USER_ERROR(source << ": field 'cost_unit': must be 'flops' or 'ms', got '" << p.cost_unit
                            << "'");
  for (int i = 0; i < p.size(); ++i) {
    const ProblemNode& n = p.nodes[i];
    std::string where = node_where(source, i, n.name);
    if (!std::isfinite(n.cost))
      REMAT_USER_ERROR(where << ": field 'cost': must be finite, got " << n.cost);
    if (n.cost < 0) REMAT_USER_ERROR(where << ": field 'cost': must be >= 0, got " << n.cost);
    if (n.bytes < 0) REMAT_USER_ERROR(where << ": field 'bytes': must be >= 0, got " << n.bytes);
    if (n.workspace_bytes < 0)
      REMAT_USER_ERROR(where << ": field 'workspace_bytes': must be >= 0, got "
                             << n.workspace_bytes);
    for (size_t k = 0; k < n.deps.size(); ++k) {
      int d = n.deps[k];
      if (d == i)
        REMAT_USER_ERROR(where << ": field 'deps': depends on itself (a cycle)");
      if (d < 0 || d > i)
        REMAT_USER_ERROR(where << ": field 'deps': dependency " << d
                               << " is not an earlier node (nodes must be in topological order;"
                                  " a forward reference or a cycle)");
      if (k > 0 && d == n.deps[k - 1])
        REMAT_USER_ERROR(where << ": field 'deps': duplicate dependency " << d);
      if (k > 0 && d < n.deps[k - 1])
        REMAT_USER_ERROR(where << ": field 'deps': must be ascending, got " << n.deps[k - 1]
                               << " before " << d);
    }
  }
}

Problem problem_from_json_text(const std::string& text, const std::string& source) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::parse_error& e) {
    REMAT_USER_ERROR(source << ": invalid JSON: " << e.what());
  }
  if (!j.is_object()) REMAT_USER_ERROR(source << ": expected a JSON object at the top level");
  reject_unknown_fields(j, source,
                        {"format", "name", "batch", "constant_bytes", "batch_constant_bytes",
                         "cost_unit", "nodes"});
  std::string format = json_string(require_field(j, source, "format"), source, "format");
  if (format != kFormat)
    REMAT_USER_ERROR(source << ": field 'format': unknown format '" << format << "' (expected '"
                            << kFormat << "')");
  Problem p;
  if (j.contains("name")) p.name = json_string(j["name"], source, "name");
  if (j.contains("batch")) p.batch = json_int64(j["batch"], source, "batch");
  if (j.contains("constant_bytes"))
    p.constant_bytes = json_int64(j["constant_bytes"], source, "constant_bytes");
  if (j.contains("batch_constant_bytes"))
    p.batch_constant_bytes = json_int64(j["batch_constant_bytes"], source, "batch_constant_bytes");
  if (j.contains("cost_unit")) p.cost_unit = json_string(j["cost_unit"], source, "cost_unit");
  const Json& nodes = require_field(j, source, "nodes");
  if (!nodes.is_array())
    REMAT_USER_ERROR(source << ": field 'nodes': expected an array, got " << nodes.type_name());
  for (size_t i = 0; i < nodes.size(); ++i)
    p.nodes.push_back(parse_node(nodes[i], static_cast<int>(i), source));
  problem_validate(p, source);
  return p;
}

std::string problem_to_json_text(const Problem& p) {
  Json j;
  j["format"] = kFormat;
  j["name"] = p.name;
  j["batch"] = p.batch;
  j["constant_bytes"] = p.constant_bytes;
  if (p.batch_constant_bytes != 0) j["batch_constant_bytes"] = p.batch_constant_bytes;
  j["cost_unit"] = p.cost_unit;
  Json nodes = Json::array();
  for (const ProblemNode& n : p.nodes) {
    Json o;
    o["name"] = n.name;
    o["kind"] = problem_node_kind_name(n.kind);
    o["cost"] = n.cost;
    o["bytes"] = n.bytes;
    if (n.workspace_bytes != 0) o["workspace_bytes"] = n.workspace_bytes;
    o["deps"] = n.deps;
    nodes.push_back(o);
  }
  j["nodes"] = nodes;
  return j.dump(1) + "\n";
}

Problem problem_load(const std::string& path) {
  std::ifstream in(path);
  if (!in) REMAT_USER_ERROR(path << ": cannot open problem file");
  std::stringstream ss;
  ss << in.rdbuf();
  return problem_from_json_text(ss.str(), path);
}

void problem_save(const Problem& p, const std::string& path) {
  std::ofstream out(path);
  if (!out) REMAT_USER_ERROR(path << ": cannot write problem file");
  out << problem_to_json_text(p);
  if (!out) REMAT_USER_ERROR(path << ": write failed");
}

int64_t problem_min_budget(const Problem& p) {
  int64_t best = p.constant_bytes;
  for (const ProblemNode& n : p.nodes) {
    int64_t need = p.constant_bytes + n.bytes + n.workspace_bytes;
    for (int d : n.deps) need += p.nodes[d].bytes;
    best = std::max(best, need);
  }
  return best;
}

int64_t problem_total_bytes(const Problem& p) {
  int64_t total = p.constant_bytes;
  int64_t max_ws = 0;
  for (const ProblemNode& n : p.nodes) {
    total += n.bytes;
    max_ws = std::max(max_ws, n.workspace_bytes);
  }
  return total + max_ws;
}

Problem problem_at_batch(const Problem& p, int64_t batch) {
  REMAT_CHECK(batch >= 1 && p.batch >= 1, "batch must be >= 1, got " << batch);
  Problem q = p;
  q.batch = batch;
  auto scale = [&](int64_t bytes) {
    __int128 num = static_cast<__int128>(bytes) * batch;
    return static_cast<int64_t>((num + p.batch - 1) / p.batch);
  };
  double factor = static_cast<double>(batch) / static_cast<double>(p.batch);
  q.batch_constant_bytes = scale(p.batch_constant_bytes);
  q.constant_bytes = p.constant_bytes - p.batch_constant_bytes + q.batch_constant_bytes;
  for (ProblemNode& n : q.nodes) {
    n.bytes = scale(n.bytes);
    n.workspace_bytes = scale(n.workspace_bytes);
    n.cost *= factor;
  }
  return q;
}

}  // namespace remat
