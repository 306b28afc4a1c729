// The rematerialization problem: validation, JSON ("remat-problem/1") IO, budgets and rescaling.
#include "solver/problem.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/io/atomic_file.h"
#include "runtime/core/check.h"
#include "runtime/core/checked.h"
#include "runtime/io/input_file.h"

namespace remat {
namespace {

using Json = nlohmann::json;

const char* kFormat = "remat-problem/1";

std::string node_where(const std::string& source, int i, const std::string& name) {
  std::ostringstream os;
  os << source << ": nodes[" << i << "] '" << name << "'";
  return os.str();
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
  node.name = json_string(json_field(j, where, "name"), where, "name");
  where = node_where(source, i, node.name);
  json_reject_unknown_fields(j, where, {"name", "kind", "cost", "bytes", "workspace_bytes", "deps"});
  node.kind = parse_kind(json_string(json_field(j, where, "kind"), where, "kind"), where);
  node.cost = json_number(json_field(j, where, "cost"), where, "cost");
  node.bytes = json_int64(json_field(j, where, "bytes"), where, "bytes");
  if (j.contains("workspace_bytes"))
    node.workspace_bytes = json_int64(j["workspace_bytes"], where, "workspace_bytes");
  const Json& deps = json_field(j, where, "deps");
  if (!deps.is_array())
    REMAT_USER_ERROR(where << ": field 'deps': expected an array, got " << deps.dump());
  for (const Json& d : deps) {
    const int64_t dep = json_int64(d, where, "deps");
    if (dep < 0 || dep >= kMaxProblemNodes)
      REMAT_USER_ERROR(where << ": field 'deps': dependency " << dep
                             << " is not an earlier node (nodes must be in topological order)");
    node.deps.push_back(static_cast<int>(dep));
  }
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
  if (p.size() > kMaxProblemNodes)
    REMAT_USER_ERROR(source << ": field 'nodes': " << p.size() << " nodes, more than the limit of "
                            << kMaxProblemNodes);
  if (p.constant_bytes < 0)
    REMAT_USER_ERROR(source << ": field 'constant_bytes': must be >= 0, got " << p.constant_bytes);
  check_count(p.constant_bytes, source, "constant_bytes");
  check_count(p.batch, source, "batch");
  if (p.batch_constant_bytes < 0 || p.batch_constant_bytes > p.constant_bytes)
    REMAT_USER_ERROR(source << ": field 'batch_constant_bytes': must be in [0, constant_bytes = "
                            << p.constant_bytes << "], got " << p.batch_constant_bytes);
  if (p.batch < 1) REMAT_USER_ERROR(source << ": field 'batch': must be >= 1, got " << p.batch);
  if (p.cost_unit != "flops" && p.cost_unit != "ms")
    REMAT_USER_ERROR(source << ": field 'cost_unit': must be 'flops' or 'ms', got '" << p.cost_unit
                            << "'");
  if (!std::isfinite(p.copy_cost_per_byte) || p.copy_cost_per_byte < 0)
    REMAT_USER_ERROR(source << ": field 'copy_cost_per_byte': must be finite and >= 0, got "
                            << p.copy_cost_per_byte);
  // Note [checked sizes]: the constant, every node's bytes and the largest workspace together
  // fit, so no sum the solver or the simulator forms from them can overflow.
  int64_t total = p.constant_bytes, max_workspace = 0;
  std::map<std::string, int> first_of;
  for (int i = 0; i < p.size(); ++i) {
    const ProblemNode& n = p.nodes[i];
    std::string where = node_where(source, i, n.name);
    auto [first, fresh] = first_of.emplace(n.name, i);
    if (!fresh)
      REMAT_USER_ERROR(where << ": field 'name': duplicate node name (also nodes["
                             << first->second << "])");
    if (!std::isfinite(n.cost))
      REMAT_USER_ERROR(where << ": field 'cost': must be finite, got " << n.cost);
    if (n.cost < 0) REMAT_USER_ERROR(where << ": field 'cost': must be >= 0, got " << n.cost);
    if (n.bytes < 0) REMAT_USER_ERROR(where << ": field 'bytes': must be >= 0, got " << n.bytes);
    if (n.workspace_bytes < 0)
      REMAT_USER_ERROR(where << ": field 'workspace_bytes': must be >= 0, got "
                             << n.workspace_bytes);
    total = checked_add(total, n.bytes, where, "bytes (constant plus every node's bytes)");
    check_count(n.workspace_bytes, where, "workspace_bytes");
    max_workspace = std::max(max_workspace, n.workspace_bytes);
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
  checked_add(total, max_workspace, source,
              "workspace_bytes (the largest, plus the constant and every node's bytes)");
}

const char* copy_overlap_name(CopyOverlap overlap) {
  return overlap == CopyOverlap::Stream ? "stream" : "stage";
}

CopyOverlap copy_overlap_from_name(const std::string& name, const std::string& where) {
  if (name == "stage") return CopyOverlap::Stage;
  if (name == "stream") return CopyOverlap::Stream;
  REMAT_USER_ERROR(where << ": must be 'stage' or 'stream', got '" << name << "'");
}

void problem_set_link(Problem& p, double bytes_per_second, double device_flops,
                      CopyOverlap overlap) {
  if (bytes_per_second <= 0) return;
  p.copy_overlap = overlap;
  p.copy_cost_per_byte =
      p.cost_unit == "ms" ? 1e3 / bytes_per_second : device_flops / bytes_per_second;
}

Problem problem_from_json_text(const std::string& text, const std::string& source) {
  const Json j = json_parse(text, source);
  if (!j.is_object()) REMAT_USER_ERROR(source << ": expected a JSON object at the top level");
  json_reject_unknown_fields(j, source,
                        {"format", "name", "batch", "constant_bytes", "batch_constant_bytes",
                         "cost_unit", "copy_cost_per_byte", "copy_overlap", "nodes"});
  std::string format = json_string(json_field(j, source, "format"), source, "format");
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
  if (j.contains("copy_cost_per_byte"))
    p.copy_cost_per_byte = json_number(j["copy_cost_per_byte"], source, "copy_cost_per_byte");
  if (j.contains("copy_overlap"))
    p.copy_overlap = copy_overlap_from_name(json_string(j["copy_overlap"], source, "copy_overlap"),
                                            source + ": field 'copy_overlap'");
  const Json& nodes = json_field(j, source, "nodes");
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
  if (p.copy_cost_per_byte != 0) j["copy_cost_per_byte"] = p.copy_cost_per_byte;
  if (p.copy_overlap != CopyOverlap::Stage) j["copy_overlap"] = copy_overlap_name(p.copy_overlap);
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
  return problem_from_json_text(read_file(path, "problem file"), path);
}

void problem_save(const Problem& p, const std::string& path) {
  write_file_atomic(path, problem_to_json_text(p));
}

// Both sums below are checked although problem_validate bounds them (Note [checked sizes]):
// they also run on problems built in code.
int64_t problem_working_set(const Problem& p, int k) {
  const ProblemNode& n = p.nodes[size_t(k)];
  const std::string_view why = "bytes (the working set of a node)";
  int64_t ws = checked_add(n.bytes, n.workspace_bytes, n.name, why);
  for (int d : n.deps) ws = checked_add(ws, p.nodes[size_t(d)].bytes, n.name, why);
  return ws;
}

int64_t problem_min_budget(const Problem& p) {
  int64_t best = p.constant_bytes;
  for (int k = 0; k < p.size(); ++k)
    best = std::max(best, checked_add(p.constant_bytes, problem_working_set(p, k),
                                      p.nodes[size_t(k)].name,
                                      "bytes (the minimum budget of a node)"));
  return best;
}

int64_t problem_total_bytes(const Problem& p) {
  int64_t total = p.constant_bytes;
  int64_t max_ws = 0;
  for (const ProblemNode& n : p.nodes) {
    total = checked_add(total, n.bytes, n.name, "bytes (sum of every node's bytes)");
    max_ws = std::max(max_ws, n.workspace_bytes);
  }
  return checked_add(total, max_ws, p.name, "workspace_bytes (plus every node's bytes)");
}

Problem problem_at_batch(const Problem& p, int64_t batch) {
  REMAT_CHECK(batch >= 1 && p.batch >= 1, "batch must be >= 1, got " << batch);
  Problem q = p;
  q.batch = batch;
  const std::string at = "problem '" + p.name + "' at batch " + std::to_string(batch);
  // ceil(bytes * batch / p.batch), exact in 128 bits, then checked against kMaxCount.
  auto scale = [&](int64_t bytes, const std::string& where, const char* field) {
    const __int128 v = (static_cast<__int128>(bytes) * batch + p.batch - 1) / p.batch;
    if (v > kMaxCount)
      REMAT_USER_ERROR(where << ": field '" << field << "': " << bytes << " bytes at batch "
                             << p.batch << " scale to more than 2^62 bytes at batch " << batch);
    return static_cast<int64_t>(v);
  };
  double factor = static_cast<double>(batch) / static_cast<double>(p.batch);
  q.batch_constant_bytes = scale(p.batch_constant_bytes, at, "batch_constant_bytes");
  q.constant_bytes = checked_add(p.constant_bytes - p.batch_constant_bytes,
                                 q.batch_constant_bytes, at, "constant_bytes");
  for (int i = 0; i < q.size(); ++i) {
    ProblemNode& n = q.nodes[static_cast<size_t>(i)];
    const std::string where = node_where(at, i, n.name);
    n.bytes = scale(n.bytes, where, "bytes");
    n.workspace_bytes = scale(n.workspace_bytes, where, "workspace_bytes");
    n.cost *= factor;
  }
  problem_validate(q, at);
  return q;
}

}  // namespace remat
