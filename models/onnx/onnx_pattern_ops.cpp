// The nodes of domain "remat" that the pattern pre-pass makes (Note [ONNX patterns] in
// onnx_translator.h), each translated into one layer of an existing op after its constants are
// checked to give that op's result.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <string>
#include <utility>

#include "models/onnx/onnx_translator.h"

namespace remat {
namespace onnx_detail {

namespace {

// Dense(x, W, bias?): nn.Linear's MatMul by its transposed weight (weight_in_out 0), or a
// MatMul by an [in, out] weight (1), with the bias Add when there is one.
void dense(Translator& t) {
  const DataValue x = t.data(0, kFolds | kSeqFirstRows);
  if (x.remat != x.sample || x.sample.empty()) t.fail("expects data [N, ..., F]");
  const Shape w = t.initializer_dims(1);
  const bool in_out = t.attr_int("weight_in_out", 1) != 0;
  if (w.size() != 2) t.fail("the weight must be 2-D, got " + shape_str(w));
  const int64_t in = in_out ? w[0] : w[1], out = in_out ? w[1] : w[0];
  if (in != x.sample.back())
    t.fail("a weight " + shape_str(w) + " does not take " + std::to_string(x.sample.back()) + " inputs");
  std::vector<ParamUse> params = {{"weight", t.node().input(1), {out, in}, {}}};
  if (in_out) params[0].values = t.transposed_initializer(1);  // remat keeps [out, in]
  if (t.has(2)) {
    if (shape_numel(t.initializer_dims(2)) != out) t.fail("the bias is not one per output");
    params.push_back({"bias", t.node().input(2), {out}, {}});
  }
  AttrMap a;
  a.set("units", out);
  a.set("bias", t.has(2));
  Shape o = x.sample;
  o.back() = out;
  t.emit("dense", {x}, a, params, o, o);
}

// The heads of Reshape(x, [N, T, H, D]) then Transpose [0, 2, 1, 3] (or [0, 2, 3, 1]: k for
// q k^T, kept as [H, T, D] and marked transposed).
void split_heads(Translator& t) {
  const DataValue x = t.data(0, kFolds);
  if ((x.sample.size() != 2 || x.fold > 1) && !x.transposed) {  // not tokens: the two ops
    const DataValue r = reshape_onnx(t, x, t.konst(1));
    transpose_data(t, r, t.attr_ints("perm", {}));
    return;
  }
  if (x.remat != x.sample || x.sample.size() != 2) t.fail("expects data [N, T, C]");
  const OnnxConst& to = t.konst(1);
  if (to.i.size() != 4 || !(to.i[0] == SymInt{1, 0} || to.i[0] == SymInt{0, 0}))
    t.fail("expects a Reshape to [N, T, heads, C / heads]");
  std::vector<int64_t> rest;
  for (size_t k = 1; k < 4; ++k) {
    if (!to.i[k].is_const()) t.fail("the batch N may only be the first dimension of the shape");
    rest.push_back(to.i[k].c);
  }
  const int64_t T = rest[0] == 0 ? x.sample[0] : rest[0], h = rest[1];
  if (h < 1 || h > x.sample[1]) t.fail("a split into " + std::to_string(h) + " heads");
  const int64_t d = rest[2] == -1 ? x.sample[1] / h : rest[2];
  if (T != x.sample[0] || h < 1 || h * d != x.sample[1])
    t.fail("a Reshape of " + shape_str(x.sample) + " to [" + std::to_string(rest[0]) + ", " +
           std::to_string(rest[1]) + ", " + std::to_string(rest[2]) + "] is not a split into heads");
  const bool transposed = t.attr_ints("perm", {}) == std::vector<int64_t>{0, 2, 3, 1};
  AttrMap a;
  a.set("heads", h);
  const Shape heads = {h, T, d};
  t.emit("split_heads", {x}, a, {}, transposed ? Shape{h, d, T} : heads, heads);
  if (transposed) t.mark_transposed(0);
}

// Transpose [0, 2, 1, 3] of heads [N, H, T, D] then Reshape to [N, T, H D].
void merge_heads(Translator& t) {
  const DataValue x = t.data(0, kFolds);
  if ((x.sample.size() != 3 || x.fold > 1) && !x.transposed) {  // not heads: the two ops
    const DataValue y = transpose_data(t, x, t.attr_ints("perm", {}));
    reshape_onnx(t, y, t.konst(1));
    return;
  }
  if (x.remat != x.sample || x.transposed || x.sample.size() != 3) t.fail("expects heads [N, H, T, D]");
  const OnnxConst& to = t.konst(1);
  const int64_t c = x.sample[0] * x.sample[2];  // the heads' sizes are the import's own
  if (to.i.size() != 3 || !(to.i[0] == SymInt{1, 0} || to.i[0] == SymInt{0, 0}) ||
      !(to.i[1] == SymInt{0, x.sample[1]} || to.i[1] == SymInt{0, 0}) ||
      !(to.i[2] == SymInt{0, c} || to.i[2] == SymInt{0, -1}))
    t.fail("expects a Reshape to [N, T, heads * D]");
  t.emit("merge_heads", {x}, {}, {}, {x.sample[1], c}, {x.sample[1], c});
}

// Reshape(x, [N, g, C / g, H, W]), Transpose [0, 2, 1, 3, 4], Reshape to [N, C, H, W]:
// channel_shuffle with g groups.
void channel_shuffle(Translator& t) {
  const DataValue x = t.data(0);
  if (x.remat != x.sample || x.sample.size() != 3) t.fail("expects an image [N, C, H, W]");
  const Shape& s = x.sample;
  const Shape grouped = reshape_target(t, s, t.konst(1));
  if (grouped.size() != 4 || grouped[0] < 1 || grouped[0] * grouped[1] != s[0] ||
      grouped[2] != s[1] || grouped[3] != s[2])
    t.fail("a Reshape of " + shape_str(s) + " to " + shape_str(grouped) +
           " per sample is not a split of the channels into groups [g, C / g, H, W]");
  const Shape swapped = {grouped[1], grouped[0], grouped[2], grouped[3]};
  if (reshape_target(t, swapped, t.konst(2)) != s)
    t.fail("the transposed groups are not reshaped back to " + shape_str(s));
  AttrMap a;
  a.set("groups", grouped[0]);
  t.emit("channel_shuffle", {x}, a, {}, s, s);
}

// `s` with its last two dimensions swapped.
Shape swap_last_two(Shape s) {
  std::swap(s[s.size() - 1], s[s.size() - 2]);
  return s;
}

// MatMul of data by data: remat's matmul (q k^T with transpose_b, probs v), times a scale. With
// the pattern's transpose_a / transpose_b, input a or b is the Transpose's input, [.., K, M] or
// [.., N, K], read transposed (absorb_transposes in onnx_patterns.cpp).
void matmul_of(Translator& t, double scale) {
  const DataValue a = t.data(0, kFolds), b = t.data(1, kFolds);
  const bool ta = t.attr_int("transpose_a", 0) != 0, tb_attr = t.attr_int("transpose_b", 0) != 0;
  if (a.transposed || a.remat != a.sample) t.fail("input 0 is not a plain tensor");
  if (a.sample.size() < 2 || b.sample.size() != a.sample.size())
    t.fail("expects two tensors of one rank (at least [N, M, K]), got " + shape_str(a.sample) +
           " and " + shape_str(b.sample));
  if (tb_attr && b.transposed) t.fail("a Transpose of transposed heads is not supported");
  const Shape sa = ta ? swap_last_two(a.sample) : a.sample;  // as ONNX's product sees them
  const Shape sb = tb_attr ? swap_last_two(b.sample) : b.sample;
  const size_t r = sa.size();
  for (size_t k = 0; k + 2 < r; ++k)
    if (sa[k] != sb[k]) t.fail("the batch dimensions differ (no broadcasting)");
  if (sa[r - 1] != sb[r - 2]) t.fail(shape_str(sa) + " x " + shape_str(sb) + " do not multiply");
  if (!b.transposed && b.remat != b.sample) t.fail("input 1 is not a plain tensor");
  AttrMap at;
  if (ta) at.set("transpose_a", true);
  at.set("transpose_b", b.transposed || tb_attr);
  if (scale != 1.0) at.set("scale", scale);
  Shape out = sa;
  out[r - 1] = sb[r - 1];
  t.emit("matmul", {a, b}, at, {}, out, out);
}

void scaled_matmul(Translator& t) {
  const double c = t.konst(2).scalar(t.where() + ": the scale");
  if (c == 0 || !std::isfinite(c)) t.fail("the scale must be finite and not 0");
  matmul_of(t, t.attr_int("divide", 0) ? 1.0 / c : c);
}

// Where(mask, a, b) then Softmax over the last axis: a causal softmax when the mask [T, T]
// hides exactly the keys after each query (j > i) behind -inf (or any fill at or below -1e4,
// whose exponential is 0 in float next to a finite score); any other constant mask adds 0 or the
// fill before a plain softmax (Note [tensor constants]), where no row may hide every key (its
// softmax would weigh the scores Where had replaced).
void masked_softmax(Translator& t) {
  const bool fill_first = t.is_const(0) && !t.is_const(1);
  const int data_k = fill_first ? 1 : 0, fill_k = fill_first ? 0 : 1;
  const DataValue x = t.data(data_k);
  const OnnxConst& fill = t.konst(fill_k);
  const OnnxConst& mask = t.konst(2);
  const int64_t rank = static_cast<int64_t>(x.sample.size()) + 1;
  if (normalize_axis(t.attr_int("axis", -1), rank, t.where()) != rank - 1 || x.remat != x.sample ||
      x.sample.size() < 2)
    t.fail("only a softmax over the last axis of scores [.., T, T] is supported");
  for (double f : fill.f)
    if (!(f <= -1e4)) t.fail("the masked scores must be -inf (or at most -1e4)");
  if (fill.f.empty()) t.fail("the mask's fill must be a float");
  const int64_t T = x.sample.back();
  const std::vector<int64_t> m = mask.ints(t.where() + ": mask");
  bool causal = x.sample[x.sample.size() - 2] == T && mask.shape.size() >= 2 &&
                mask.shape[mask.shape.size() - 1] == T && mask.shape[mask.shape.size() - 2] == T &&
                mask.numel() == T * T;
  for (int64_t i = 0; causal && i < T; ++i)
    for (int64_t j = 0; causal && j < T; ++j)
      causal = (m[static_cast<size_t>(i * T + j)] != 0) == ((j > i) == fill_first);
  if (causal) {
    AttrMap a;
    a.set("causal", true);
    t.emit("softmax", {x}, a, {}, x.sample, x.remat);
    return;
  }
  if (fill.f.size() != 1) t.fail("the mask's fill must be one value");
  const size_t keys = mask.shape.empty() ? 1 : static_cast<size_t>(mask.shape.back());
  for (size_t row = 0; !std::isinf(fill.f[0]) && row * keys < m.size(); ++row) {
    bool all_hidden = true;
    for (size_t j = 0; all_hidden && j < keys; ++j)
      all_hidden = (m[row * keys + j] != 0) == fill_first;
    if (all_hidden)
      t.fail("the mask hides every key of a row behind a finite fill (" +
             std::to_string(fill.f[0]) + "), where Where's replacement makes the softmax uniform");
  }
  const DataValue& y = emit_additive_mask(t, x, mask, fill.shape, !fill_first, fill.f[0]);
  t.emit("softmax", {y}, {}, {}, x.sample, x.remat);
}

// x + Gather(W, positions) with positions 0 .. T-1: position_embedding.
void position_embedding(Translator& t) {
  const DataValue x = t.data(0);
  if (x.remat != x.sample || x.sample.size() != 2) t.fail("expects data [N, T, C]");
  const Shape w = t.initializer_dims(1);
  const std::vector<int64_t> pos = t.konst(2).ints(t.where() + ": positions");
  const int64_t T = x.sample[0], C = x.sample[1];
  if (w.size() != 2 || w[1] != C) t.fail("the table " + shape_str(w) + " is not [max_len, C]");
  if (static_cast<int64_t>(pos.size()) != T) t.fail("the positions are not one per token");
  for (int64_t i = 0; i < T; ++i)
    if (pos[static_cast<size_t>(i)] != i) t.fail("the positions are not 0, 1, ..., T - 1");
  AttrMap a;
  a.set("max_len", w[0]);
  t.emit("position_embedding", {x}, a, {{"weight", t.node().input(1), w, {}}}, x.sample, x.remat);
}

// GPT-2's gelu written out: remat's gelu (the same tanh formula) once the constants are its.
void gelu_tanh(Translator& t) {
  const DataValue x = t.data(0, kSeqFirst);
  const double want[4] = {0.044715, std::sqrt(2.0 / 3.14159265358979323846), 1.0, 0.5};
  for (int k = 0; k < 4; ++k) {
    const double c = t.konst(k + 1).scalar(t.where());
    // The constants arrive as float32.
    if (std::fabs(c - want[k]) > 1e-6 * want[k] + 1e-7)
      t.fail("a constant " + std::to_string(c) + " where GPT-2's gelu has " + std::to_string(want[k]));
  }
  t.emit("gelu", {x}, {}, {}, x.sample, x.remat);
}

// nn.GELU() written out (match_gelu_erf): remat's gelu_erf once its constants are sqrt 2 (or
// 1 / sqrt 2 as a product), 1 and 1/2.
void gelu_erf(Translator& t) {
  const DataValue x = t.data(0, kSeqFirst);
  const bool divide = t.attr_int("divide", 0) != 0;
  const double want[3] = {divide ? std::sqrt(2.0) : std::sqrt(0.5), 1.0, 0.5};
  for (int k = 0; k < 3; ++k) {
    const double c = t.konst(k + 1).scalar(t.where());
    if (std::fabs(c - want[k]) > 1e-6 * want[k])  // float32 constants
      t.fail("a constant " + std::to_string(c) + " where the exact GELU has " + std::to_string(want[k]));
  }
  t.emit("gelu_erf", {x}, {}, {}, x.sample, x.remat);
}

// Layer norm written out (opsets before 17): remat's layernorm over the last axis, once both
// means are over it and the exponent is 2.
void layer_norm(Translator& t) {
  const DataValue x = t.data(0, kSeqFirstRows);
  if (x.remat != x.sample || x.sample.empty()) t.fail("expects data [N, ..., C]");
  const int64_t rank = static_cast<int64_t>(x.sample.size()) + 1;
  for (const char* m : {"mean_axes", "var_axes"}) {
    const std::vector<int64_t> axes = t.attr_ints(m, {});
    if (axes.size() != 1 || normalize_axis(axes[0], rank, t.where()) != rank - 1)
      t.fail("the means must be over the last axis alone");
  }
  if (t.attr_int("mean_keepdims", 1) == 0 || t.attr_int("var_keepdims", 1) == 0)
    t.fail("the means must keep their axis");
  if (t.konst(2).scalar(t.where() + ": exponent") != 2.0) t.fail("the variance must square");
  emit_layernorm(t, x, 3, 4, t.konst(1).scalar(t.where() + ": eps"));
}

}  // namespace

const std::map<std::string, TranslateFn>& pattern_ops() {
  static const std::map<std::string, TranslateFn> ops = with_recurrent_patterns(with_shape_patterns(with_attention_patterns({
      {"Dense", dense},
      {"SplitHeads", split_heads},
      {"MergeHeads", merge_heads},
      {"ScaledMatMul", scaled_matmul},
      {"MatMulT", [](Translator& t) { matmul_of(t, 1.0); }},
      {"MaskedSoftmax", masked_softmax},
      {"PositionEmbedding", position_embedding},
      {"GeluTanh", gelu_tanh},
      {"LayerNorm", layer_norm},
      {"ChannelShuffle", channel_shuffle},
      {"GroupNorm", group_norm_pattern},
      {"HardSwish", [](Translator& t) { layer_ops().at("HardSwish")(t); }},  // x's hardswish
      {"GeluErf", gelu_erf},
      {"Silu", [](Translator& t) {  // x sigmoid(x)
         const DataValue x = t.data(0, kSeqFirst);
         t.emit("silu", {x}, {}, {}, x.sample, x.remat);
       }},
  })));
  return ops;
}

void matmul_of_data(Translator& t) { matmul_of(t, 1.0); }

}  // namespace onnx_detail
}  // namespace remat
