// nn.LSTM and nn.GRU as torch.onnx.export writes them, one ONNX LSTM or GRU node per layer,
// unrolled over the sequence into remat's ops (Note [unrolled recurrent layers]); the pattern
// that finds them is onnx_recurrent_pattern.cpp.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/onnx/onnx_translator.h"

namespace remat {
namespace onnx_detail {

// Note [unrolled recurrent layers]
// An LSTM layer over [T, N, F] keeps a state (h, c) per sample and, per step t in order (from
// the last step back for the reverse direction of a bidirectional layer),
//   z = W x_t + b_ih + R h + b_hh;  i, f, o = sigmoid(z_i, z_f, z_o);  g = tanh(z_g)
//   c = f c + i g;  h = o tanh(c)
// from h = c = 0, and outputs every step's h. A GRU layer (PyTorch's, ONNX's
// linear_before_reset) keeps h and computes, with a = W x_t + b_ih and s = R h + b_hh,
//   z, r = sigmoid(a_z + s_z, a_r + s_r);  n = tanh(a_n + r s_n);  h = n + z (h - n).
// PyTorch's export feeds the ONNX node its parameters reordered (W = Unsqueeze(Concat(Slice(
// weight_ih_l0, ...)))): gates i, o, f, c where PyTorch stores i, f, g, o; z, r, h where it
// stores r, z, n. The pattern (match_recurrent) traces W, R and B back through those Slices,
// Concats and Unsqueezes to the initializers and the row where each ONNX gate starts in them,
// checks that the initial states are zeros (ConstantOfShape, or a zero Constant expanded) and
// takes the reshape of the output Y [T, D, N, H] into [T, N, D H] (Squeeze; Transpose + Reshape
// when bidirectional) into the pattern. The translation then emits, per direction and step: a
// `channel_slice` of x_t, its `dense` by weight_ih_l0 (with bias_ih_l0), a `dense` of h by
// weight_hh_l0 (with bias_hh_l0), `channel_slice`s of the gates at
// PyTorch's rows, `sigmoid`, `tanh`, `channel_scale` products, `add`s (and for the GRU's h - n
// an `affine` by -1). At the first step h = 0: the LSTM adds b_hh alone to the input part (a
// learned `add_constant`); the GRU, which needs s apart, takes s = b_hh as a learned
// `add_constant` on zeros (an `affine` by 0 of the input part) and h = n - z n. The steps' h are
// joined by a `concat` along T (the directions by one along the features), unless only the next
// recurrent layer reads them (Note [per-step sequences]). Every step reads the
// same parameters (weight tying; their gradients summed as they arrive, Note [running parameter
// sums] in runtime/graph/autodiff.cpp), which keep their state_dict names and layouts, so
// `export` writes them as PyTorch loads them. The values stay sequence-first (Note
// [sequence-first values]): a step's [N, 1, 4H] is ONNX's [1, N, 4H]. The solver plans the
// unrolled graph like any other: a recurrent network's steps are the chain that
// rematerialization was first applied to. One `dense` per step rather than one of the whole
// sequence (as cuDNN's LSTM computes it): a step is then recomputed from x_t and the state of the
// step before, which the linearised baselines hold at their cuts (Note [cut sets] in
// solver/baselines.h), where the sequence's input part is one large value that every step reads.
// On the two-layer LSTM of the tests at batch 16 (Adam, FLOPs costs; 2026-12-02) the smallest
// budget falls from 201 to 103 KB and checkmate's plan at 260 KB (30 s) from 2.12x to 1.01x; on a
// wider one (64 inputs, 256 hidden units, 32 steps, batch 32, SGD) the smallest budget falls from
// 15.5 to 10.3 MB, and at 20 MB checkmate's plan (60 s) from 1.18x to 1.13x; keeping everything
// takes about the same (26.84 against 26.86 MB, with Note [per-step sequences]). The cost
// is T small products in place of one large one, which a GPU runs less well.

// Note [per-step sequences]
// In a stack of recurrent layers (nn.LSTM's num_layers > 1: the output Y of one layer, through
// the pattern's Squeeze, is the input X of the next) the next layer reads its input one step at a
// time. So a layer whose output only recurrent layers read, as their input (and which is not the
// graph's output), leaves its steps unjoined: the translator records the output as its steps
// (Translator::set_steps), each [1, H] (a bidirectional layer's two directions joined per step
// along the features, [1, 2H]), and the next layer's step t feeds step t to its `dense`, where it
// would slice x_t out of the joined sequence. The joined sequence and its T slices, two copies of
// the whole output that the step would hold, compute and recompute, are gone; the gradient
// reaches each step's h directly. An output that anything else reads (a head's Slice or Gather of
// the last step, a tagger's linear layer) is joined as before.

namespace {

// The layers of one direction's steps (Note [unrolled recurrent layers]): x sequence-first
// [T, F], `p` the direction's weight_ih, weight_hh (and bias_ih, bias_hh) initializers, `rows`
// where the ONNX gates start in them (one per gate), h the hidden size.
class Unrolled {
 public:
  // `x_steps`: x's steps when the layer before left them unjoined (Note [per-step sequences]).
  Unrolled(Translator& t, const DataValue& x, const std::vector<DataValue>* x_steps,
           std::vector<std::string> p, std::vector<int64_t> rows, int64_t h)
      : t_(t), p_(std::move(p)), rows_(std::move(rows)), h_(h),
        gates_(static_cast<int64_t>(rows_.size())), bias_(p_.size() == 4), x_(x),
        x_steps_(x_steps) {
    dense_.set("units", gates_ * h);
    dense_.set("bias", bias_);
  }

  int64_t steps() const { return x_.sample[0]; }
  // W x_t + b_ih of step t's input x_t [1, F]: [1, gates h].
  DataValue input_part(int64_t step) {
    const int64_t f = x_.sample[1];
    std::vector<ParamUse> wx = {{"weight", p_[0], {gates_ * h_, f}, {}}};
    if (bias_) wx.push_back({"bias", p_[2], {gates_ * h_}, {}});
    const DataValue x_t =
        x_steps_ ? (*x_steps_)[static_cast<size_t>(step)] : slice(x_, 1, step, 1, {1, f});
    return t_.emit("dense", {x_t}, dense_, wx, row(), row());
  }
  // R h + b_hh of the state h: [1, gates h].
  DataValue state_part(const DataValue& h) {
    std::vector<ParamUse> wh = {{"weight", p_[1], {gates_ * h_, h_}, {}}};
    if (bias_) wh.push_back({"bias", p_[3], {gates_ * h_}, {}});
    return t_.emit("dense", {h}, dense_, wh, row(), row());
  }
  // z + b_hh (the state part of a zero state), or z without biases.
  DataValue plus_state_bias(const DataValue& z) {
    if (!bias_) return z;
    AttrMap a;
    a.set("shape", std::vector<int64_t>{gates_ * h_});
    a.set("learned", true);
    return t_.emit("add_constant", {z}, a, {{"bias", p_[3], {gates_ * h_}, {}}}, row(), row());
  }
  // ONNX gate k of z [1, gates h]: [1, h].
  DataValue gate(const DataValue& z, int k) {
    return slice(z, 2, rows_[static_cast<size_t>(k)], h_, one());
  }
  DataValue unary(const std::string& op, const DataValue& v) {
    return t_.emit(op, {v}, {}, {}, one(), one());
  }
  // scale times v ([1, h] or [1, gates h]).
  DataValue scaled(const DataValue& v, double scale) {
    AttrMap a;
    a.set("scale", scale);
    a.set("shift", 0.0);
    return t_.emit("affine", {v}, a, {}, v.sample, v.remat);
  }
  DataValue product(const DataValue& a, const DataValue& b) {
    AttrMap m;
    m.set("axes", int64_t{3});  // an elementwise product of [N, 1, h]
    return t_.emit("channel_scale", {a, b}, m, {}, one(), one());
  }
  DataValue add(const DataValue& a, const DataValue& b, const Shape& s) {
    return t_.emit("add", {a, b}, {}, {}, s, s);
  }
  bool has_bias() const { return bias_; }
  Shape row() const { return {1, gates_ * h_}; }
  Shape one() const { return {1, h_}; }

 private:
  // n entries of v from `offset` along `axis` (1: T, 2: features), shaped s.
  DataValue slice(const DataValue& v, int64_t axis, int64_t offset, int64_t n, const Shape& s) {
    AttrMap a;
    a.set("axis", axis);
    a.set("offset", offset);
    a.set("channels", n);
    return t_.emit("channel_slice", {v}, a, {}, s, s);
  }

  Translator& t_;
  std::vector<std::string> p_;
  std::vector<int64_t> rows_;
  int64_t h_;
  int64_t gates_;
  bool bias_;
  DataValue x_;
  const std::vector<DataValue>* x_steps_;
  AttrMap dense_;
};

// LSTM (ONNX gates i, o, f, c): c = f c + i g, h = o tanh(c), from zero states. Every step's h.
std::vector<DataValue> lstm_direction(Unrolled& u, bool reverse) {
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
  return hs;
}

// GRU (ONNX gates z, r, h; linear_before_reset): n = tanh(a_n + r s_n), h = n + z (h - n), from
// a zero state. Every step's h.
std::vector<DataValue> gru_direction(Unrolled& u, bool reverse) {
  std::vector<DataValue> hs(static_cast<size_t>(u.steps()));
  std::optional<DataValue> hp;  // the state; none while it is zero
  for (int64_t k = 0; k < u.steps(); ++k) {
    const int64_t step = reverse ? u.steps() - 1 - k : k;
    const DataValue a = u.input_part(step);
    // s = R h + b_hh; at h = 0, b_hh alone (none without biases: the terms it enters vanish).
    std::optional<DataValue> s;
    if (hp)
      s = u.state_part(*hp);
    else if (u.has_bias())
      s = u.plus_state_bias(u.scaled(a, 0.0));
    auto pre = [&](int g) {  // gate g of a + s
      return s ? u.add(u.gate(a, g), u.gate(*s, g), u.one()) : u.gate(a, g);
    };
    const DataValue z = u.unary("sigmoid", pre(0));
    DataValue n = u.gate(a, 2);
    if (s) n = u.add(n, u.product(u.unary("sigmoid", pre(1)), u.gate(*s, 2)), u.one());  // r s_n
    n = u.unary("tanh", n);
    // As PyTorch's cell: (h - n) z + n; at h = 0, n + -(z n), the same values.
    hp = hp ? u.add(u.product(u.add(*hp, u.scaled(n, -1.0), u.one()), z), n, u.one())
            : u.add(n, u.scaled(u.product(z, n), -1.0), u.one());
    hs[static_cast<size_t>(step)] = *hp;
  }
  return hs;
}

// The per-step outputs of `dirs` directions (each [1, h]) joined along the features: [1, dirs h].
DataValue features_of_step(Translator& t, const std::vector<std::vector<DataValue>>& dirs,
                           size_t step, int64_t h) {
  if (dirs.size() == 1) return dirs[0][step];
  AttrMap cat;
  cat.set("axis", int64_t{2});
  const Shape s = {1, static_cast<int64_t>(dirs.size()) * h};
  return t.emit("concat", {dirs[0][step], dirs[1][step]}, cat, {}, s, s);
}

// The pattern node of match_recurrent: input 0 the sequence, then per direction its weight_ih,
// weight_hh (and bias_ih, bias_hh) initializers.
void recurrent(Translator& t) {
  const std::string op = t.node().op_type();
  if (t.has_attr("unsupported")) t.fail(op + ": " + t.attr_string("unsupported", ""));
  const auto* in = t.steps(0);  // the layer before's steps, unjoined (Note [per-step sequences])
  const DataValue x = in ? in->first : t.data(0, kSeqFirst);
  if (!x.seq_first || x.sample.size() != 2)
    t.fail(op + ": the input is " + shape_str(x.sample) + " per sample; it reads a sequence " +
           "[T, N, F] (batch_first transposes [N, T, F] to it)");
  const int64_t h = t.attr_int("hidden_size", 0), dirs = t.attr_int("directions", 1);
  const std::vector<int64_t> rows = t.attr_ints("gate_rows", {});
  const int64_t per = t.attr_int("bias", 1) ? 4 : 2;
  std::vector<std::vector<DataValue>> hs;  // per direction, per step
  for (int64_t d = 0; d < dirs; ++d) {
    std::vector<std::string> p;
    for (int64_t k = 0; k < per; ++k)
      p.push_back(t.node().input(static_cast<int>(1 + d * per + k)));
    Unrolled u(t, x, in ? &in->second : nullptr, p, rows, h);
    hs.push_back(op == "GRU" ? gru_direction(u, d == 1) : lstm_direction(u, d == 1));
  }
  const int64_t steps = x.sample[0];
  const Shape out = {steps, dirs * h};
  if (t.read_only_as_input0_by(0, "LSTM", "GRU")) {  // Note [per-step sequences]
    std::vector<DataValue> per_step;
    for (size_t k = 0; k < static_cast<size_t>(steps); ++k)
      per_step.push_back(features_of_step(t, hs, k, h));
    DataValue joined = x;
    joined.layer.clear();  // no layer computes it
    joined.sample = joined.remat = out;
    return t.set_steps(0, joined, std::move(per_step));
  }
  std::vector<DataValue> joined;  // per direction, [T, h]
  for (const auto& d : hs) {
    if (steps == 1) {
      joined.push_back(d[0]);
      continue;
    }
    AttrMap cat;
    cat.set("axis", int64_t{1});
    joined.push_back(t.emit("concat", d, cat, {}, {steps, h}, {steps, h}));
  }
  if (dirs == 1) return t.alias(0, joined[0]);
  AttrMap cat;
  cat.set("axis", int64_t{2});
  t.emit("concat", joined, cat, {}, out, out);
}

}  // namespace

std::map<std::string, TranslateFn> with_recurrent_patterns(std::map<std::string, TranslateFn> ops) {
  ops["LSTM"] = recurrent;
  ops["GRU"] = recurrent;
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
