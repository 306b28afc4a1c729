// Graph construction, lookup and validation. See graph.h for the model of values and nodes.
#include "runtime/graph/graph.h"

#include <sstream>

#include "runtime/core/check.h"

namespace remat {

namespace {
struct KindName {
  ValueKind kind;
  const char* name;
};
constexpr KindName kValueKinds[] = {
    {ValueKind::Activation, "activation"}, {ValueKind::Input, "input"},
    {ValueKind::Label, "label"},           {ValueKind::Param, "param"},
    {ValueKind::ParamGrad, "param_grad"},  {ValueKind::OptState, "opt_state"},
    {ValueKind::Buffer, "buffer"},
};
constexpr const char* kNodeKinds[] = {"forward", "loss", "backward", "update"};
constexpr const char* kParamRoles[] = {"weight", "bias", "norm", "embedding"};
}  // namespace

const char* param_role_name(ParamRole r) { return kParamRoles[static_cast<int>(r)]; }

ParamRole param_role_from_name(const std::string& s) {
  for (int i = 0; i < 4; ++i)
    if (s == kParamRoles[i]) return static_cast<ParamRole>(i);
  REMAT_USER_ERROR("unknown parameter role '" << s << "' (known: weight, bias, norm, embedding)");
}

const char* value_kind_name(ValueKind k) {
  for (const auto& e : kValueKinds)
    if (e.kind == k) return e.name;
  return "?";
}

ValueKind value_kind_from_name(const std::string& s) {
  for (const auto& e : kValueKinds)
    if (s == e.name) return e.kind;
  REMAT_USER_ERROR("unknown value kind '" << s << "'");
}

const char* node_kind_name(NodeKind k) { return kNodeKinds[static_cast<int>(k)]; }

NodeKind node_kind_from_name(const std::string& s) {
  for (int i = 0; i < 4; ++i)
    if (s == kNodeKinds[i]) return static_cast<NodeKind>(i);
  REMAT_USER_ERROR("unknown node kind '" << s << "' (known: forward, loss, backward, update)");
}

ValueId Graph::add_value(Value v) {
  REMAT_CHECK(find_value(v.name) == kNoValue, "duplicate value name '" << v.name << "'");
  checked_tensor_bytes(v.desc, "graph '" + name + "': value '" + v.name + "'", "shape");
  values.push_back(std::move(v));
  return static_cast<ValueId>(values.size() - 1);
}

NodeId Graph::add_node(Node n, const TensorDesc& out) {
  Value v;
  v.name = n.name;
  v.desc = out;
  v.kind = ValueKind::Activation;
  v.producer = static_cast<NodeId>(nodes.size());
  ValueId id = add_value(std::move(v));
  return add_node_writing(std::move(n), id);
}

NodeId Graph::add_node_writing(Node n, ValueId out) {
  REMAT_CHECK(out >= 0 && out < static_cast<ValueId>(values.size()), "bad output value " << out);
  REMAT_CHECK(find_node(n.name) == -1, "duplicate node name '" << n.name << "'");
  NodeId id = static_cast<NodeId>(nodes.size());
  n.output = out;
  if (n.kind != NodeKind::Update) values[static_cast<size_t>(out)].producer = id;
  nodes.push_back(std::move(n));
  return id;
}

ValueId Graph::find_value(const std::string& n) const {
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].name == n) return static_cast<ValueId>(i);
  return kNoValue;
}

NodeId Graph::find_node(const std::string& n) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].name == n) return static_cast<NodeId>(i);
  return -1;
}

std::vector<std::vector<NodeId>> Graph::users() const {
  std::vector<std::vector<NodeId>> u(values.size());
  for (size_t i = 0; i < nodes.size(); ++i)
    for (ValueId v : nodes[i].inputs) {
      auto& list = u[static_cast<size_t>(v)];
      if (list.empty() || list.back() != static_cast<NodeId>(i))
        list.push_back(static_cast<NodeId>(i));
    }
  return u;
}

int64_t planned_nodes(const Graph& g) {
  int64_t n = 0;
  for (const Node& node : g.nodes) n += node.kind != NodeKind::Update;
  return n;
}

DType Graph::activation_precision() const {
  for (const Value& v : values)
    if (v.desc.dtype == DType::BF16) return DType::BF16;
  return DType::F32;
}

int64_t Graph::persistent_bytes() const {
  int64_t total = 0;
  for (const auto& v : values)
    if (value_is_persistent(v.kind))  // Note [allocation size]
      total = checked_add(total, v.desc.alloc_bytes(), "graph '" + name + "': value '" + v.name + "'",
                          "bytes (sum of the persistent values)");
  return total;
}

void Graph::validate() const {
  // Each activation has exactly one producer that precedes all its readers; update nodes come
  // last and write persistent values only.
  std::vector<int> writers(values.size(), 0);
  bool seen_update = false;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    auto where = [&] { return "graph '" + name + "': node " + std::to_string(i) + " '" + n.name + "'"; };
    REMAT_CHECK(n.typed != nullptr, where() << " has no parsed attributes");
    REMAT_CHECK(n.output >= 0 && n.output < static_cast<ValueId>(values.size()),
                where() << " has no output");
    if (n.kind == NodeKind::Update) {
      seen_update = true;
      REMAT_CHECK(value_is_persistent(values[static_cast<size_t>(n.output)].kind),
                  where() << " updates a non-persistent value");
    } else {
      REMAT_CHECK(!seen_update, where() << " follows an update node");
      ++writers[static_cast<size_t>(n.output)];
      REMAT_CHECK(values[static_cast<size_t>(n.output)].producer == static_cast<NodeId>(i),
                  where() << " output's producer is not this node");
    }
    for (ValueId v : n.inputs) {
      REMAT_CHECK(v >= 0 && v < static_cast<ValueId>(values.size()),
                  where() << " reads value id " << v << " out of range");
      const Value& val = values[static_cast<size_t>(v)];
      if (val.kind == ValueKind::Activation || (val.producer >= 0 && n.kind != NodeKind::Update))
        REMAT_CHECK(val.producer >= 0 && val.producer < static_cast<NodeId>(i),
                    where() << " reads '" << val.name << "' before it is computed");
    }
  }
  for (size_t v = 0; v < values.size(); ++v) {
    if (values[v].kind == ValueKind::Activation)
      REMAT_CHECK(writers[v] == 1, "graph '" << name << "': activation '" << values[v].name
                                             << "' has " << writers[v] << " producers");
    else
      REMAT_CHECK(writers[v] <= 1, "graph '" << name << "': persistent value '" << values[v].name
                                             << "' written by " << writers[v] << " nodes");
  }
}

}  // namespace remat
