// Internal to models/onnx: the graph the pattern pre-pass rewrites (Note [ONNX patterns] in
// onnx_translator.h) and the helpers its matchers share (onnx_patterns.cpp,
// onnx_attention_patterns.cpp).
#pragma once

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "models/onnx/onnx_const.h"

namespace remat {
namespace onnx_detail {
namespace patterns {

class Graph {
 public:
  explicit Graph(const onnx::GraphProto& g) : nodes_(g.node().begin(), g.node().end()) {
    for (const auto& t : g.initializer()) {
      inits_.insert(t.name());
      init_protos_[t.name()] = &t;
    }
    for (const auto& o : g.output()) outputs_.insert(o.name());
    for (const auto& i : g.input())
      if (!inits_.count(i.name())) data_.insert(i.name());
    // A value is data when it depends on the input through anything but its shape.
    for (const auto& n : nodes_) {
      bool data = false;
      if (n.op_type() != "Shape" && n.op_type() != "Size")
        for (const auto& i : n.input()) data = data || data_.count(i);
      if (data)
        for (const auto& o : n.output()) data_.insert(o);
    }
    for (int k = 0; k < static_cast<int>(nodes_.size()); ++k) {
      for (const auto& o : nodes_[k].output()) producer_[o] = k;
      for (const auto& i : nodes_[k].input()) consumers_[i].push_back(k);
    }
    removed_.assign(nodes_.size(), false);
  }

  const onnx::NodeProto* node(int k) const {
    return k >= 0 && !removed_[static_cast<size_t>(k)] ? &nodes_[static_cast<size_t>(k)] : nullptr;
  }
  int producer(const std::string& v) const {
    auto it = producer_.find(v);
    return it == producer_.end() ? -1 : it->second;
  }
  // The node producing `v` if it has op type `op` and is still in the graph.
  const onnx::NodeProto* made_by(const std::string& v, const char* op) const {
    const onnx::NodeProto* n = node(producer(v));
    return n && n->op_type() == op && n->domain().empty() ? n : nullptr;
  }
  bool is_init(const std::string& v) const { return inits_.count(v) > 0; }
  // An initializer's dims (empty for anything else).
  Shape init_dims(const std::string& v) const {
    auto it = init_protos_.find(v);
    return it == init_protos_.end() ? Shape{}
                                    : Shape(it->second->dims().begin(), it->second->dims().end());
  }
  // The one node reading `v` (-1 when none, several, or `v` is a graph output).
  int sole_consumer(const std::string& v) const {
    auto it = consumers_.find(v);
    if (outputs_.count(v) || it == consumers_.end() || it->second.size() != 1) return -1;
    return node(it->second[0]) ? it->second[0] : -1;
  }
  bool is_output(const std::string& v) const { return outputs_.count(v) > 0; }
  // The nodes reading `v`.
  std::vector<int> consumers(const std::string& v) const {
    auto it = consumers_.find(v);
    return it == consumers_.end() ? std::vector<int>{} : it->second;
  }
  // `v` is read by exactly one node (`k`) and is not a graph output.
  bool only_for(const std::string& v, int k) const {
    auto it = consumers_.find(v);
    return !outputs_.count(v) && it != consumers_.end() && it->second.size() == 1 && it->second[0] == k;
  }
  int index(const onnx::NodeProto* n) const { return static_cast<int>(n - nodes_.data()); }
  // The integers of a Constant node's value or an integer initializer; none for anything else
  // (data, floats, a value some other node computes).
  std::optional<std::vector<int64_t>> ints_of(const std::string& v) const {
    const onnx::TensorProto* t = int_tensor(v);
    if (!t) return std::nullopt;
    return const_from_proto(*t, "constant '" + v + "'").ints("constant '" + v + "'");
  }
  // The integer of a scalar (0-D) Constant or initializer; none for anything else.
  std::optional<int64_t> scalar_int_of(const std::string& v) const {
    const onnx::TensorProto* t = int_tensor(v);
    if (!t || t->dims_size() != 0) return std::nullopt;
    return const_from_proto(*t, "constant '" + v + "'").ints("constant '" + v + "'").front();
  }
  // A value the step computes from the input (else a constant the import folds).
  bool is_data(const std::string& v) const { return data_.count(v) > 0; }

  // Replaces `group` (node indices) by `fused`, placed where the last of them was.
  void fuse(std::vector<int> group, onnx::NodeProto fused) {
    int last = -1;
    for (int k : group) last = std::max(last, k);
    for (int k : group) removed_[static_cast<size_t>(k)] = true;
    fused.set_domain("remat");
    placed_[last] = std::move(fused);
  }
  // Removes `group` and places `first` where its first node was, `last` where its last was (a
  // pattern translated in two parts: Note [multi-head attention] in onnx_attention_patterns.cpp).
  void fuse_two(std::vector<int> group, onnx::NodeProto first, onnx::NodeProto last) {
    const int lo = *std::min_element(group.begin(), group.end());
    fuse(std::move(group), std::move(last));
    first.set_domain("remat");
    placed_[lo] = std::move(first);
  }

  std::vector<onnx::NodeProto> result() const {
    std::vector<onnx::NodeProto> out;
    for (size_t k = 0; k < nodes_.size(); ++k) {
      if (!removed_[k]) out.push_back(nodes_[k]);
      auto it = placed_.find(static_cast<int>(k));
      if (it != placed_.end()) out.push_back(it->second);
    }
    return out;
  }

  int size() const { return static_cast<int>(nodes_.size()); }

 private:
  const onnx::TensorProto* int_tensor(const std::string& v) const {
    const onnx::TensorProto* t = nullptr;
    if (auto it = init_protos_.find(v); it != init_protos_.end()) t = it->second;
    if (const onnx::NodeProto* c = made_by(v, "Constant"))
      for (const auto& a : c->attribute())
        if (a.name() == "value" && a.has_t()) t = &a.t();
    const bool ints = t && (t->data_type() == onnx::TensorProto::INT64 ||
                            t->data_type() == onnx::TensorProto::INT32);
    return ints ? t : nullptr;
  }

  std::vector<onnx::NodeProto> nodes_;
  std::set<std::string> inits_, outputs_, data_;
  std::map<std::string, const onnx::TensorProto*> init_protos_;  // alive for the pass
  std::map<std::string, int> producer_;
  std::map<std::string, std::vector<int>> consumers_;
  std::vector<bool> removed_;
  std::map<int, onnx::NodeProto> placed_;
};

inline onnx::NodeProto fused_node(const std::string& op, const onnx::NodeProto& named_after,
                           std::vector<std::string> inputs, const std::string& output) {
  onnx::NodeProto n;
  n.set_op_type(op);
  n.set_name(named_after.name());
  for (auto& i : inputs) n.add_input(i);
  n.add_output(output);
  return n;
}

inline void set_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

inline void copy_attrs(onnx::NodeProto* to, const onnx::NodeProto& from, const std::string& prefix) {
  for (const auto& a : from.attribute()) {
    onnx::AttributeProto* c = to->add_attribute();
    *c = a;
    c->set_name(prefix + a.name());
  }
}

// The other input of a two-input node, given one of them.
inline const std::string* other_input(const onnx::NodeProto& n, const std::string& v) {
  if (n.input_size() != 2) return nullptr;
  if (n.input(0) == v) return &n.input(1);
  if (n.input(1) == v) return &n.input(0);
  return nullptr;
}

// A Transpose's perm attribute (empty when absent).
inline std::vector<int64_t> perm_of(const onnx::NodeProto& t) {
  for (const auto& a : t.attribute())
    if (a.name() == "perm") return {a.ints().begin(), a.ints().end()};
  return {};
}

// The multi-head attention of nn.MultiheadAttention and a ViT's class token
// (onnx_attention_patterns.cpp), anchored at node k.
void match_multihead_attention(Graph& g, int k);
void match_class_token(Graph& g, int k);
void match_relative_position_bias(Graph& g, int k);
void match_roll(Graph& g, int k);         // onnx_shape_patterns.cpp
void match_patch_merge(Graph& g, int k);  // onnx_shape_patterns.cpp
void match_unbind(Graph& g, int k);       // onnx_shape_patterns.cpp
void match_recurrent(Graph& g, int k);    // onnx_recurrent_pattern.cpp (LSTM, GRU)

}  // namespace patterns
}  // namespace onnx_detail
}  // namespace remat
