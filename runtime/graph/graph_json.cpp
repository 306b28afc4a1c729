// Graph <-> JSON ("remat-graph/1"). Attributes are stored as written; loading re-parses them
// through the registry so every node gets its typed attrs back.
#include <nlohmann/json.hpp>

#include "runtime/io/atomic_file.h"
#include "runtime/core/check.h"
#include "runtime/io/input_file.h"
#include "runtime/graph/graph.h"
#include "runtime/graph/op.h"

namespace remat {

using nlohmann::json;

namespace {

json attr_to_json(const AttrValue& v) {
  if (auto b = std::get_if<bool>(&v)) return *b;
  if (auto i = std::get_if<int64_t>(&v)) return *i;
  if (auto d = std::get_if<double>(&v)) return json{{"f", *d}};  // keeps 1.0 a double
  if (auto s = std::get_if<std::string>(&v)) return *s;
  return std::get<std::vector<int64_t>>(v);
}

AttrValue attr_from_json(const json& j, const std::string& where) {
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_object() && j.contains("f")) return j.at("f").get<double>();
  if (j.is_number_float()) return j.get<double>();
  if (j.is_string()) return j.get<std::string>();
  if (j.is_array()) return j.get<std::vector<int64_t>>();
  REMAT_USER_ERROR(where << ": unsupported attribute value " << j.dump());
}

const char* init_name(InitKind k) {
  switch (k) {
    case InitKind::Zeros: return "zeros";
    case InitKind::Ones: return "ones";
    case InitKind::HeNormal: return "he_normal";
    case InitKind::GlorotUniform: return "glorot_uniform";
    case InitKind::Normal: return "normal";
    case InitKind::None: return "none";
  }
  return "none";
}

InitKind init_from_name(const std::string& s, const std::string& where) {
  for (InitKind k : {InitKind::Zeros, InitKind::Ones, InitKind::HeNormal, InitKind::GlorotUniform,
                     InitKind::Normal, InitKind::None})
    if (s == init_name(k)) return k;
  REMAT_USER_ERROR(where << ": unknown init '" << s << "'");
}

}  // namespace

std::string graph_to_json_text(const Graph& g) {
  json values = json::array();
  for (const auto& v : g.values) {
    json jv = {{"name", v.name},
               {"shape", v.desc.shape},
               {"dtype", dtype_name(v.desc.dtype)},
               {"kind", value_kind_name(v.kind)},
               {"init", init_name(v.init)},
               {"fan_in", v.fan_in},
               {"fan_out", v.fan_out},
               {"grad_of", v.grad_of}};
    if (v.init == InitKind::Normal) jv["init_std"] = v.init_std;
    if (v.kind == ValueKind::Param) jv["role"] = param_role_name(v.role);
    if (v.constant) jv["constant"] = true;
    values.push_back(std::move(jv));
  }
  json nodes = json::array();
  for (const auto& n : g.nodes) {
    json attrs = json::object();
    for (const auto& kv : n.attrs.values) attrs[kv.first] = attr_to_json(kv.second);
    nodes.push_back({{"name", n.name},
                     {"op", n.op},
                     {"kind", node_kind_name(n.kind)},
                     {"attrs", attrs},
                     {"inputs", n.inputs},
                     {"output", n.output},
                     {"forward", n.forward},
                     {"seed", n.seed}});
  }
  json j = {{"format", "remat-graph/1"}, {"name", g.name},   {"batch", g.batch},
            {"input", g.input},          {"label", g.label}, {"loss", g.loss},
            {"values", values},          {"nodes", nodes}};
  if (g.micro_batches > 1) j["micro_batches"] = g.micro_batches;
  return j.dump(1);
}

Graph graph_from_json_text(const std::string& text, const OpRegistry& ops, const std::string& src) {
  const json j = json_parse(text, src);
  Graph g;
  std::string where = src;
  try {
    if (j.value("format", "") != "remat-graph/1")
      REMAT_USER_ERROR(src << ": not a remat graph (format must be \"remat-graph/1\")");
    g.name = j.at("name").get<std::string>();
    g.batch = j.at("batch").get<int64_t>();
    g.input = j.at("input").get<int>();
    g.label = j.at("label").get<int>();
    g.loss = j.at("loss").get<int>();
    g.micro_batches = j.value("micro_batches", 1);
    if (g.micro_batches < 1 || g.micro_batches > kMaxMicroBatches)
      REMAT_USER_ERROR(src << ": field 'micro_batches': " << g.micro_batches << " is not in [1, "
                           << kMaxMicroBatches << "]");
    for (size_t i = 0; i < j.at("values").size(); ++i) {
      const json& jv = j["values"][i];
      where = src + ": values[" + std::to_string(i) + "]";
      Value v;
      v.name = jv.at("name").get<std::string>();
      v.desc.shape = jv.at("shape").get<Shape>();
      v.desc.dtype = dtype_from_name(jv.at("dtype").get<std::string>());
      v.kind = value_kind_from_name(jv.at("kind").get<std::string>());
      v.init = init_from_name(jv.value("init", "none"), where);
      v.fan_in = jv.value("fan_in", int64_t{0});
      v.fan_out = jv.value("fan_out", int64_t{0});
      v.grad_of = jv.value("grad_of", kNoValue);
      v.init_std = jv.value("init_std", 0.0);
      v.role = param_role_from_name(jv.value("role", "weight"));
      v.constant = jv.value("constant", false);
      g.values.push_back(std::move(v));
    }
    for (size_t i = 0; i < j.at("nodes").size(); ++i) {
      const json& jn = j["nodes"][i];
      where = src + ": nodes[" + std::to_string(i) + "]";
      Node n;
      n.name = jn.at("name").get<std::string>();
      n.op = jn.at("op").get<std::string>();
      n.kind = node_kind_from_name(jn.at("kind").get<std::string>());
      for (const auto& kv : jn.at("attrs").items())
        n.attrs.set(kv.key(), attr_from_json(kv.value(), where + " attr '" + kv.key() + "'"));
      n.attrs.origin = where + " '" + n.name + "'";
      n.inputs = jn.at("inputs").get<std::vector<ValueId>>();
      n.output = jn.at("output").get<ValueId>();
      n.forward = jn.value("forward", -1);
      n.seed = jn.value("seed", uint64_t{0});
      AttrReader reader(n.attrs);
      n.typed = ops.get(n.op).parse(reader);
      REMAT_CHECK(n.output >= 0 && n.output < static_cast<ValueId>(g.values.size()),
                  where << ": output " << n.output << " out of range");
      if (n.kind != NodeKind::Update)
        g.values[static_cast<size_t>(n.output)].producer = static_cast<NodeId>(i);
      g.nodes.push_back(std::move(n));
    }
  } catch (const json::exception& e) {
    REMAT_USER_ERROR(where << ": " << e.what());
  }
  g.validate();
  return g;
}

void graph_save(const Graph& g, const std::string& path) {
  write_file_atomic(path, graph_to_json_text(g) + "\n");
}

Graph graph_load(const std::string& path, const OpRegistry& ops) {
  return graph_from_json_text(read_file(path, "graph file"), ops, path);
}

}  // namespace remat
