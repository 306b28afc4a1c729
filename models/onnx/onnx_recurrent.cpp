// nn.LSTM as torch.onnx.export writes it, one ONNX LSTM node per layer, unrolled over the
// sequence into remat's ops (Note [unrolled recurrent layers]).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/onnx/onnx_pattern_graph.h"
#include "models/onnx/onnx_translator.h"

namespace remat {
namespace onnx_detail {

// Note [unrolled recurrent layers]
// An LSTM layer over [T, N, F] keeps a state (h, c) per sample and, per step t in order (from
// the last step back for the reverse direction of a bidirectional layer),
//   z = W x_t + b_ih + R h + b_hh;  i, f, o = sigmoid(z_i, z_f, z_o);  g = tanh(z_g)
//   c = f c + i g;  h = o tanh(c)
// from h = c = 0, and outputs every step's h. PyTorch's export feeds the ONNX node its
// parameters reordered (W = Unsqueeze(Concat(Slice(weight_ih_l0, ...)))): gates i, o, f, c where
// PyTorch stores i, f, g, o. The pattern (match_lstm) traces W, R and B back through those Slices,
// Concats and Unsqueezes to the initializers and the row where each ONNX gate starts in them,
// checks that the initial states are zeros (ConstantOfShape) and takes the reshape of the output
// Y [T, D, N, H] into [T, N, D H] (Squeeze; Transpose + Reshape when bidirectional) into the
// pattern. The translation (lstm) then emits, per direction: one `dense` of the whole
// sequence by weight_ih_l0 (with bias_ih_l0), and per step a `channel_slice` of its row t, a
// `dense` of h by weight_hh_l0 (with bias_hh_l0; at the first step, where h = 0, b_hh alone: a
// learned `add_constant`), `channel_slice`s of the gates at PyTorch's rows, `sigmoid`, `tanh`,
// `channel_scale` products and `add`s; the steps' h joined by a `concat` along T (the directions
// by one along the features). Every step reads the same parameters (weight tying), which keep
// their state_dict names and layouts, so `export` writes them as PyTorch loads them. The values
// stay sequence-first (Note [sequence-first values]): a step's [N, 1, 4H] is ONNX's [1, N, 4H].
// The solver plans the unrolled graph like any other: a recurrent network's steps are the chain
// that rematerialization was first applied to.

constexpr int64_t kGates = 4;  // an LSTM's i, o, f, c

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
  std::vector<Rows> d;
  for (const auto& in : c->input()) {
    const std::optional<Rows> r = one(in);
    if (!r) return std::nullopt;
    d.push_back(*r);
  }
  return d;
}

// Rows [from, from + 4h) of `r` as one initializer of 4h rows whose ONNX gate k (i, o, f, c)
// starts at row rows[k]; none otherwise.
struct Gates {
  std::string initializer;
  std::vector<int64_t> rows;  // ONNX gate order
};
std::optional<Gates> gates_of(const Graph& g, const Rows& r, size_t from, int64_t h) {
  const int64_t n = kGates;
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

// An initial state: absent, or a ConstantOfShape of zeros (perhaps sliced per layer).
bool zero_state(const Graph& g, std::string v) {
  if (v.empty()) return true;
  while (const onnx::NodeProto* s = g.made_by(v, "Slice")) v = s->input(0);
  const onnx::NodeProto* c = g.made_by(v, "ConstantOfShape");
  if (!c) return false;
  for (const auto& a : c->attribute()) {
    if (a.name() != "value") continue;
    const OnnxConst k = const_from_proto(a.t(), "ConstantOfShape's value");
    if (k.numel() != 1 || (k.is_float ? k.f[0] != 0.0 : !(k.i[0] == SymInt{})))
      return false;
  }
  return true;
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

// What of an LSTM node the unrolling does not take ("" when it takes it all).
std::string unsupported_lstm(const Graph& g, const onnx::NodeProto& n) {
  const std::string module = "nn.LSTM";  // (in the messages)
  for (const auto& a : n.attribute()) {
    const std::string& k = a.name();
    if (k == "activations" || k == "activation_alpha" || k == "activation_beta" || k == "clip" ||
        (k == "input_forget" && a.i() != 0) || (k == "layout" && a.i() != 0))
      return "attribute '" + k + "' is not supported (PyTorch's " + module + " exports none)";
    if (k == "direction" && a.s() == "reverse")
      return "direction 'reverse' alone is not supported (forward or bidirectional)";
  }
  if (n.input_size() > 4 && !n.input(4).empty())
    return "sequence_lens (a packed sequence) is not supported";
  if (n.input_size() > 7 && !n.input(7).empty())
    return "peepholes (input P) are not supported";
  for (int k = 5; k <= 6; ++k)
    if (n.input_size() > k && !zero_state(g, n.input(k)))
      return std::string(k == 5 ? "initial_h" : "initial_c") + " is not zeros (an initial state "
             "passed to " + module + " is not supported)";
  for (int k = 1; k <= 2; ++k)
    if (n.output_size() > k && !n.output(k).empty() &&
        (g.is_output(n.output(k)) || !g.consumers(n.output(k)).empty()))
      return std::string(k == 1 ? "Y_h" : "Y_c") + " (the final state, `_, (h, c) = lstm(x)`) "
             "is read; only the output sequence Y is supported (the final h of a one-layer "
             "forward " + module + " is Y's last step, `y[:, -1]`)";
  return "";
}

}  // namespace

// Note [unrolled recurrent layers]: the LSTM node at k with its parameters traced, its output
// reshaped.
void match_lstm(Graph& g, int k) {
  const onnx::NodeProto* n = g.node(k);
  if (!n || n->op_type() != "LSTM" || !n->domain().empty()) return;
  int64_t h = 0;
  for (const auto& a : n->attribute())
    if (a.name() == "hidden_size") h = a.i();
  std::string why = unsupported_lstm(g, *n);
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
    std::vector<std::optional<Gates>> p = {gates_of(g, (*w)[d], 0, h),
                                           gates_of(g, (*r)[d], 0, h)};
    if (bias) {
      p.push_back(gates_of(g, (*b)[d], 0, h));
      p.push_back(gates_of(g, (*b)[d], static_cast<size_t>(kGates * h), h));
    }
    for (const auto& q : p)
      if (!q || q->rows != p[0]->rows) why = traced + " (one gate order in all four)";
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

namespace {

// The layers of one direction's steps (Note [unrolled recurrent layers]): x sequence-first
// [T, F], `p` the direction's weight_ih, weight_hh (and bias_ih, bias_hh) initializers, `rows`
// where the ONNX gates start in them, h the hidden size.
class Unrolled {
 public:
  Unrolled(Translator& t, const DataValue& x, std::vector<std::string> p,
           std::vector<int64_t> rows, int64_t h)
      : t_(t), p_(std::move(p)), rows_(std::move(rows)), h_(h),
        bias_(p_.size() == 4), steps_(x.sample[0]) {
    dense_.set("units", kGates * h);
    dense_.set("bias", bias_);
    std::vector<ParamUse> wx = {{"weight", p_[0], {kGates * h, x.sample[1]}, {}}};
    if (bias_) wx.push_back({"bias", p_[2], {kGates * h}, {}});
    z_x_ = t.emit("dense", {x}, dense_, wx, {steps_, kGates * h}, {steps_, kGates * h});
  }

  int64_t steps() const { return steps_; }
  // Row `step` of W x + b_ih: [1, gates h].
  DataValue input_part(int64_t step) { return slice(z_x_, 1, step, 1); }
  // R h + b_hh of the state h: [1, gates h].
  DataValue state_part(const DataValue& h) {
    std::vector<ParamUse> wh = {{"weight", p_[1], {kGates * h_, h_}, {}}};
    if (bias_) wh.push_back({"bias", p_[3], {kGates * h_}, {}});
    return t_.emit("dense", {h}, dense_, wh, row(), row());
  }
  // z + b_hh (the state part of a zero state), or z without biases.
  DataValue plus_state_bias(const DataValue& z) {
    if (!bias_) return z;
    AttrMap a;
    a.set("shape", std::vector<int64_t>{kGates * h_});
    a.set("learned", true);
    return t_.emit("add_constant", {z}, a, {{"bias", p_[3], {kGates * h_}, {}}}, row(), row());
  }
  // ONNX gate k of z [1, gates h]: [1, h].
  DataValue gate(const DataValue& z, int k) {
    return slice(z, 2, rows_[static_cast<size_t>(k)], h_);
  }
  DataValue unary(const std::string& op, const DataValue& v) {
    return t_.emit(op, {v}, {}, {}, one(), one());
  }
  DataValue product(const DataValue& a, const DataValue& b) {
    AttrMap m;
    m.set("axes", int64_t{3});  // an elementwise product of [N, 1, h]
    return t_.emit("channel_scale", {a, b}, m, {}, one(), one());
  }
  DataValue add(const DataValue& a, const DataValue& b, const Shape& s) {
    return t_.emit("add", {a, b}, {}, {}, s, s);
  }
  // The steps' h [1, h] joined along T: [T, h].
  DataValue join(const std::vector<DataValue>& hs) {
    if (steps_ == 1) return hs[0];
    AttrMap cat;
    cat.set("axis", int64_t{1});
    return t_.emit("concat", hs, cat, {}, {steps_, h_}, {steps_, h_});
  }
  Shape row() const { return {1, kGates * h_}; }
  Shape one() const { return {1, h_}; }

 private:
  DataValue slice(const DataValue& v, int64_t axis, int64_t offset, int64_t n) {
    AttrMap a;
    a.set("axis", axis);
    a.set("offset", offset);
    a.set("channels", n);
    const Shape s = axis == 1 ? row() : one();
    return t_.emit("channel_slice", {v}, a, {}, s, s);
  }

  Translator& t_;
  std::vector<std::string> p_;
  std::vector<int64_t> rows_;
  int64_t h_;
  bool bias_;
  int64_t steps_;
  AttrMap dense_;
  DataValue z_x_;
};

// LSTM (ONNX gates i, o, f, c): c = f c + i g, h = o tanh(c), from zero states.
DataValue lstm_direction(Unrolled& u, bool reverse) {
  std::vector<DataValue> hs(static_cast<size_t>(u.steps()));
  std::optional<DataValue> hp, cp;  // the state; none while it is zero
  for (int64_t k = 0; k < u.steps(); ++k) {
    const int64_t step = reverse ? u.steps() - 1 - k : k;
    DataValue z = u.input_part(step);
    z = hp ? u.add(z, u.state_part(*hp), u.row()) : u.plus_state_bias(z);
    const DataValue i = u.unary("sigmoid", u.gate(z, 0)), o = u.unary("sigmoid", u.gate(z, 1));
    DataValue c = u.product(i, u.unary("tanh", u.gate(z, 3)));
    if (cp) c = u.add(u.product(u.unary("sigmoid", u.gate(z, 2)), *cp), c, u.one());
    cp = c;
    hp = u.product(o, u.unary("tanh", c));
    hs[static_cast<size_t>(step)] = *hp;
  }
  return u.join(hs);
}

// The pattern node of match_lstm: input 0 the sequence, then per direction its weight_ih,
// weight_hh (and bias_ih, bias_hh) initializers.
void lstm(Translator& t) {
  const std::string op = "LSTM";
  if (t.has_attr("unsupported")) t.fail(op + ": " + t.attr_string("unsupported", ""));
  const DataValue& x = t.data(0, kSeqFirst);
  if (!x.seq_first || x.sample.size() != 2)
    t.fail(op + ": the input is " + shape_str(x.sample) + " per sample; it reads a sequence " +
           "[T, N, F] (batch_first transposes [N, T, F] to it)");
  const DataValue seq = x;
  const int64_t h = t.attr_int("hidden_size", 0), dirs = t.attr_int("directions", 1);
  const std::vector<int64_t> rows = t.attr_ints("gate_rows", {});
  const int64_t per = t.attr_int("bias", 1) ? 4 : 2;
  std::vector<DataValue> out;
  for (int64_t d = 0; d < dirs; ++d) {
    std::vector<std::string> p;
    for (int64_t k = 0; k < per; ++k)
      p.push_back(t.node().input(static_cast<int>(1 + d * per + k)));
    Unrolled u(t, seq, p, rows, h);
    out.push_back(lstm_direction(u, d == 1));
  }
  if (dirs == 1) return t.alias(0, out[0]);
  AttrMap cat;
  cat.set("axis", int64_t{2});
  t.emit("concat", out, cat, {}, {seq.sample[0], 2 * h}, {seq.sample[0], 2 * h});
}

}  // namespace

std::map<std::string, TranslateFn> with_recurrent_patterns(std::map<std::string, TranslateFn> ops) {
  ops["LSTM"] = lstm;
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
