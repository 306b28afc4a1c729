// The pattern of nn.LSTM and nn.GRU as torch.onnx.export writes them: an ONNX LSTM or GRU node
// with its parameters traced back to the module's initializers and its output's reshape, fused
// into one node that onnx_recurrent.cpp unrolls (Note [unrolled recurrent layers]).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/onnx/onnx_pattern_graph.h"

namespace remat {
namespace onnx_detail {

namespace patterns {
namespace {

// Row r of a constant traced to an initializer: (initializer, its row).
using Rows = std::vector<std::pair<std::string, int64_t>>;

// Integer attribute list `name` of n (an older opset's Slice, Unsqueeze, Squeeze).
std::optional<std::vector<int64_t>> ints_attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return std::vector<int64_t>(a.ints().begin(), a.ints().end());
  return std::nullopt;
}

// Input k of n as constant integers, or attribute `name` where an older opset has it there.
std::optional<std::vector<int64_t>> ints_in(const Graph& g, const onnx::NodeProto& n, int k,
                                            const std::string& name) {
  if (n.input_size() > k && !n.input(k).empty()) return g.ints_of(n.input(k));
  return ints_attr(n, name);
}

int64_t clamp_index(int64_t i, int64_t dim) {
  if (i < 0) i += dim;
  return std::min(std::max<int64_t>(i, 0), dim);
}

// The rows of constant `v` when it is an initializer, or Slices along axis 0 and Concats along
// axis 0 of such; none otherwise.
std::optional<Rows> rows_of(const Graph& g, const std::string& v) {
  if (g.is_init(v)) {
    const Shape dims = g.init_dims(v);
    if (dims.empty()) return std::nullopt;
    Rows r;
    for (int64_t i = 0; i < dims[0]; ++i) r.emplace_back(v, i);
    return r;
  }
  if (const onnx::NodeProto* c = g.made_by(v, "Concat")) {
    for (const auto& a : c->attribute())
      if (a.name() == "axis" && a.i() != 0) return std::nullopt;
    Rows r;
    for (const auto& in : c->input()) {
      const std::optional<Rows> part = rows_of(g, in);
      if (!part) return std::nullopt;
      r.insert(r.end(), part->begin(), part->end());
    }
    return r;
  }
  if (const onnx::NodeProto* s = g.made_by(v, "Slice")) {
    const std::optional<Rows> all = rows_of(g, s->input(0));
    const auto starts = ints_in(g, *s, 1, "starts"), ends = ints_in(g, *s, 2, "ends");
    const auto axes = ints_in(g, *s, 3, "axes"), steps = ints_in(g, *s, 4, "steps");
    if (!all || !starts || !ends || starts->size() != 1 || ends->size() != 1) return std::nullopt;
    if ((axes && *axes != std::vector<int64_t>{0}) || (steps && *steps != std::vector<int64_t>{1}))
      return std::nullopt;
    const int64_t n = static_cast<int64_t>(all->size());
    const int64_t lo = clamp_index(starts->front(), n), hi = clamp_index(ends->front(), n);
    return Rows(all->begin() + lo, all->begin() + std::max(lo, hi));
  }
  return std::nullopt;
}

// A weight [D, rows, ...] of the LSTM node: Unsqueeze(x, [0]) for one direction, Concat along
// axis 0 of those for two; the rows of each direction's x.
std::optional<std::vector<Rows>> directions_of(const Graph& g, const std::string& v) {
  auto one = [&](const std::string& u) -> std::optional<Rows> {
    const onnx::NodeProto* n = g.made_by(u, "Unsqueeze");
    if (!n || ints_in(g, *n, 1, "axes") != std::vector<int64_t>{0}) return std::nullopt;
    return rows_of(g, n->input(0));
  };
  if (const std::optional<Rows> r = one(v)) return std::vector<Rows>{*r};
  const onnx::NodeProto* c = g.made_by(v, "Concat");
  if (!c) return std::nullopt;
  for (const auto& a : c->attribute())
    if (a.name() == "axis" && a.i() != 0) return std::nullopt;  // (the directions' axis)
  std::vector<Rows> d;
  for (const auto& in : c->input()) {
    const std::optional<Rows> r = one(in);
    if (!r) return std::nullopt;
    d.push_back(*r);
  }
  return d;
}

// Rows [from, from + n h) of `r` as one initializer of n h rows whose ONNX gate k (LSTM: i, o,
// f, c; GRU: z, r, h) starts at row rows[k]; none otherwise.
struct Gates {
  std::string initializer;
  std::vector<int64_t> rows;  // ONNX gate order
};
std::optional<Gates> gates_of(const Graph& g, const Rows& r, size_t from, int64_t n, int64_t h) {
  if (r.size() < from + static_cast<size_t>(n * h)) return std::nullopt;
  Gates out{r[from].first, {}};
  const Shape dims = g.init_dims(out.initializer);
  if (dims.empty() || dims[0] != n * h) return std::nullopt;
  for (int64_t k = 0; k < n; ++k) {
    const auto& first = r[from + static_cast<size_t>(k * h)];
    for (int64_t j = 0; j < h; ++j)
      if (r[from + static_cast<size_t>(k * h + j)] !=
          std::make_pair(out.initializer, first.second + j))
        return std::nullopt;
    out.rows.push_back(first.second);
  }
  return out;
}

// Every element of a constant tensor is zero.
bool all_zeros(const onnx::TensorProto& t, const std::string& what) {
  const OnnxConst k = const_from_proto(t, what);
  for (size_t e = 0; e < static_cast<size_t>(k.numel()); ++e)
    if (k.is_float ? k.f[e] != 0.0 : !(k.i[e] == SymInt{})) return false;
  return true;
}

// An initial state: absent, or zeros: a ConstantOfShape of zeros (nn.LSTM's export) or a
// Constant of zeros expanded to the batch (nn.GRU's), perhaps sliced per layer.
bool zero_state(const Graph& g, std::string v) {
  if (v.empty()) return true;
  for (;;) {
    const onnx::NodeProto* s = g.made_by(v, "Slice");
    if (!s) s = g.made_by(v, "Expand");
    if (!s) break;
    v = s->input(0);
  }
  const onnx::NodeProto* c = g.made_by(v, "ConstantOfShape");
  if (!c) c = g.made_by(v, "Constant");
  if (!c) return false;
  const bool fill = c->op_type() == "ConstantOfShape";
  for (const auto& a : c->attribute()) {
    if (a.name() != "value") continue;
    if (!a.has_t() || !all_zeros(a.t(), c->op_type() + "'s value")) return false;
    return true;
  }
  return fill;  // ConstantOfShape without a value fills with zeros
}

void set_ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

void set_string(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

// What the unrolling needs of each kind of recurrent node.
struct Cell {
  std::string module;               // (in the messages)
  int64_t gates;                    // rows of W per hidden unit
  std::vector<int> state_inputs;    // the initial states
  std::vector<std::string> states;  // the outputs after Y: the final states
};
const Cell kLstm{"nn.LSTM", 4, {5, 6}, {"Y_h", "Y_c"}};
const Cell kGru{"nn.GRU", 3, {5}, {"Y_h"}};

// What of a recurrent node the unrolling does not take ("" when it takes it all).
std::string unsupported_recurrent(const Graph& g, const onnx::NodeProto& n, const Cell& cell) {
  const std::string& module = cell.module;
  const bool gru = &cell == &kGru;
  bool before_reset = false;
  for (const auto& a : n.attribute()) {
    const std::string& k = a.name();
    if (k == "activations" || k == "activation_alpha" || k == "activation_beta" || k == "clip" ||
        (k == "input_forget" && a.i() != 0) || (k == "layout" && a.i() != 0))
      return "attribute '" + k + "' is not supported (PyTorch's " + module + " exports none)";
    if (k == "direction" && a.s() == "reverse")
      return "direction 'reverse' alone is not supported (forward or bidirectional)";
    if (k == "linear_before_reset") before_reset = a.i() != 0;
  }
  if (gru && !before_reset)
    return "linear_before_reset 0 (the reset gate applied before R) is not supported; "
           "PyTorch's nn.GRU exports 1";
  if (n.input_size() > 4 && !n.input(4).empty())
    return "sequence_lens (a packed sequence) is not supported";
  if (!gru && n.input_size() > 7 && !n.input(7).empty())
    return "peepholes (input P) are not supported";
  for (size_t s = 0; s < cell.state_inputs.size(); ++s) {
    const int k = cell.state_inputs[s];
    if (n.input_size() > k && !zero_state(g, n.input(k)))
      return std::string(s == 0 ? "initial_h" : "initial_c") + " is not zeros (an initial "
             "state passed to " + module + " is not supported)";
  }
  for (size_t s = 0; s < cell.states.size(); ++s) {
    const int k = static_cast<int>(s) + 1;
    if (n.output_size() > k && !n.output(k).empty() &&
        (g.is_output(n.output(k)) || !g.consumers(n.output(k)).empty()))
      return cell.states[s] + " (the final state, `_, " + (gru ? "h" : "(h, c)") + " = " +
             (gru ? "gru" : "lstm") + "(x)`) is read; only the output sequence Y is supported "
             "(the final h of a one-layer forward " + module + " is Y's last step, `y[:, -1]`)";
  }
  return "";
}

}  // namespace

// Note [unrolled recurrent layers]: the LSTM or GRU node at k with its parameters traced, its
// output reshaped.
void match_recurrent(Graph& g, int k) {
  const onnx::NodeProto* n = g.node(k);
  if (!n || (n->op_type() != "LSTM" && n->op_type() != "GRU") || !n->domain().empty()) return;
  const Cell& cell = n->op_type() == "LSTM" ? kLstm : kGru;
  int64_t h = 0;
  for (const auto& a : n->attribute())
    if (a.name() == "hidden_size") h = a.i();
  std::string why = unsupported_recurrent(g, *n, cell);
  const auto w = n->input_size() > 1 ? directions_of(g, n->input(1)) : std::nullopt;
  const auto r = n->input_size() > 2 ? directions_of(g, n->input(2)) : std::nullopt;
  const bool bias = n->input_size() > 3 && !n->input(3).empty();
  const auto b = bias ? directions_of(g, n->input(3)) : std::nullopt;
  const size_t dirs = w ? w->size() : 0;
  std::vector<Gates> params;  // per direction: W, R (and Wb, Rb)
  const std::string traced = "its weights are not module parameters as PyTorch exports them";
  const bool all = w && r && r->size() == dirs && (!bias || (b && b->size() == dirs));
  if (why.empty() && (h < 1 || !all)) why = traced;
  for (size_t d = 0; why.empty() && d < dirs; ++d) {
    const int64_t gates = cell.gates;
    std::vector<std::optional<Gates>> p = {gates_of(g, (*w)[d], 0, gates, h),
                                           gates_of(g, (*r)[d], 0, gates, h)};
    if (bias) {
      p.push_back(gates_of(g, (*b)[d], 0, gates, h));
      p.push_back(gates_of(g, (*b)[d], static_cast<size_t>(gates * h), gates, h));
    }
    for (const auto& q : p)
      if (!q || q->rows != p[0]->rows) why = traced + " (one gate order in all of them)";
    for (const auto& q : p)
      if (why.empty()) params.push_back(*q);
  }
  for (const Gates& p : params)
    if (p.rows != params[0].rows) why = "its directions have their gates in other orders";
  // Y [T, D, N, H] as [T, N, D H]: Squeeze(Y, [1]), or Transpose [0, 2, 1, 3] + Reshape.
  std::vector<int> group = {k};
  std::string out = n->output(0);
  const int c1 = g.sole_consumer(out);
  const onnx::NodeProto* next = g.node(c1);
  if (why.empty() && dirs == 1 && next && next->op_type() == "Squeeze" &&
      ints_in(g, *next, 1, "axes") == std::vector<int64_t>{1}) {
    group.push_back(c1), out = next->output(0);
  } else if (why.empty() && dirs == 2 && next && next->op_type() == "Transpose" &&
             perm_of(*next) == std::vector<int64_t>{0, 2, 1, 3}) {
    const int c2 = g.sole_consumer(next->output(0));
    const onnx::NodeProto* rs = g.node(c2);
    const auto to = rs && rs->op_type() == "Reshape" ? g.ints_of(rs->input(1)) : std::nullopt;
    if (to && to->size() == 3 && (*to)[0] == 0 && (*to)[1] == 0 &&
        ((*to)[2] == -1 || (*to)[2] == 2 * h))
      group.push_back(c1), group.push_back(c2), out = rs->output(0);
    else
      why = "its output is read other than as [T, N, 2H] (Transpose [0, 2, 1, 3] + Reshape)";
  } else if (why.empty()) {
    why = "its output is read other than as [T, N, H] (Squeeze of axis 1)";
  }
  onnx::NodeProto f = fused_node(n->op_type(), *n, {n->input(0)}, out);
  if (!why.empty()) {
    set_string(&f, "unsupported", why);
    g.fuse({k}, f);
    return;
  }
  for (const Gates& p : params) f.add_input(p.initializer);
  set_int(&f, "hidden_size", h);
  set_int(&f, "directions", static_cast<int64_t>(dirs));
  set_int(&f, "bias", bias);
  set_ints(&f, "gate_rows", params[0].rows);  // checked equal in every parameter
  g.fuse(group, f);
}

}  // namespace patterns

}  // namespace onnx_detail
}  // namespace remat
