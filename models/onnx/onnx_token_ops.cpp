// The ONNX nodes of a vision transformer over its tokens [N, T, C]: the multi-head attention of
// nn.MultiheadAttention (Note [multi-head attention] in onnx_attention_patterns.cpp: dense +
// attention + dense), the class token (class_token), the learned position table added to the
// tokens (position_embedding; another parameter of the data's trailing axes added to it is a
// learned add_constant) and the class token's row taken for the head (channel_slice of row 0
// along T, then a reshape to [N, C]).
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/relative_position_index.h"
#include "models/onnx/onnx_translator.h"

namespace remat {
namespace onnx_detail {

namespace {

// Tokens [T, C] per sample as remat holds them, or an error naming what the node needs;
// `takes` as Translator::data's.
DataValue tokens_input(Translator& t, int k, const std::string& what,
                       unsigned takes = kBatchFirst) {
  const DataValue& x = t.data(k, takes);
  if (x.sample.size() != 2 || x.remat != x.sample || x.transposed)
    t.fail(what + " reads tokens [N, T, C], not " + shape_str(x.sample) + " per sample");
  return x;
}

// The ONNX shapes of the group's values that Shape nodes read (AttentionShapeRole).
void attention_shapes(Translator& t) {
  const DataValue x = tokens_input(t, 0, "a multi-head attention", kSeqFirst);
  const SymInt tokens{0, x.sample[0]}, n{1, 0}, c{0, x.sample[1]};
  const std::vector<int64_t> roles = t.attr_ints("roles", {});
  const Shape w = t.initializer_dims(1);
  if (static_cast<int>(roles.size()) != t.node().output_size() || w.size() != 2)
    t.fail("malformed pattern node");
  for (size_t k = 0; k < roles.size(); ++k) {
    std::vector<SymInt> dims = {tokens, n, c};
    if (roles[k] == kPacked) dims[2] = {0, w[0]};
    if (roles[k] == kProjection) dims = {{x.sample[0], 0}, c};
    t.set_shape_only(static_cast<int>(k), dims);
  }
}

// Input k, a Reshape target or slice bound, as integers with the batch symbolic.
std::vector<SymInt> sym_ints(Translator& t, int k) {
  const OnnxConst& v = t.konst(k);
  if (v.is_float || v.shape.size() != 1) t.fail("a reshape target or slice bound is not a 1-D integer list");
  return v.i;
}

// Slice inputs 11 + 4 which .. 14 + 4 which (starts, ends, axes, steps) take channels
// [which C, (which + 1) C) of the last axis of qkv [T, N, 3C].
void check_slice(Translator& t, int which, int64_t c) {
  const int base = 11 + 4 * which;
  const std::vector<int64_t> starts = t.konst(base).ints(t.where() + ": starts");
  const std::vector<int64_t> ends = t.konst(base + 1).ints(t.where() + ": ends");
  const std::vector<int64_t> axes = t.has(base + 2) ? t.konst(base + 2).ints(t.where() + ": axes")
                                                    : std::vector<int64_t>{0};
  const bool steps_one = !t.has(base + 3) || t.konst(base + 3).ints(t.where() + ": steps") ==
                                                 std::vector<int64_t>{1};
  const int64_t lo = which * c, hi = (which + 1) * c;
  if (starts != std::vector<int64_t>{lo} || ends.size() != 1 || std::min(ends[0], 3 * c) != hi ||
      axes.size() != 1 || (axes[0] != -1 && axes[0] != 2) || !steps_one)
    t.fail(std::string("the ") + "qkv"[which] + " slice is not channels [" + std::to_string(lo) +
           ", " + std::to_string(hi) + ") of the packed projection");
}

// The dropout rate of the attention's probabilities (input 25, or the Dropout's ratio attribute,
// ONNX's default 0.5; Note [multi-head attention]), 0 without a Dropout.
double attention_dropout(Translator& t) {
  if (t.attr_int("attn_dropout", 0) == 0) return 0;
  const double rate = t.has(25) ? t.konst(25).scalar(t.where() + ": the attention's dropout ratio")
                                : t.attr_float("dropout_ratio", 0.5);
  if (rate < 0 || rate >= 1) t.fail("the attention's dropout ratio " + std::to_string(rate) +
                                    " is not in [0, 1)");
  return short_float(rate);
}

// The tokens x the attention reads: batch-first where the group moves them ([N, T, C] through
// x's Transpose), sequence-first where it does not (Note [sequence-first values]); either
// other is attention across the batch.
DataValue attention_input(Translator& t) {
  const DataValue x = tokens_input(t, 0, "a multi-head attention", kSeqFirst);
  const bool batch_first = t.attr_int("batch_first_in", 1) != 0;
  if (x.seq_first == batch_first)
    t.fail(batch_first ? "the attention transposes tokens that are sequence-first already "
                         "([T, N, C] to [N, T, C]): it would attend across the batch"
                       : "a sequence-first attention (batch_first=False) reads [T, N, C], but "
                         "its input is batch-first [N, T, C]: it would attend across the batch");
  return x;
}

void multihead_attention(Translator& t) {
  const DataValue x = attention_input(t);
  const int64_t tokens = x.sample[0], c = x.sample[1];
  const Shape w_in = t.initializer_dims(1), w_out = t.initializer_dims(3);
  if (w_in != Shape{3 * c, c} || shape_numel(t.initializer_dims(2)) != 3 * c ||
      w_out != Shape{c, c} || shape_numel(t.initializer_dims(4)) != c)
    t.fail("the projections " + shape_str(w_in) + " and " + shape_str(w_out) + " do not fit " +
           std::to_string(c) + " channels");
  if (t.attr_int("gemm_transB", 0) != 1 || t.attr_int("gemm_transA", 0) != 0 ||
      t.attr_float("gemm_alpha", 1.0) != 1.0 || t.attr_float("gemm_beta", 1.0) != 1.0)
    t.fail("the output projection's Gemm is not x W^T + b");
  const int64_t axis = t.attr_int("softmax_axis", -1);
  if (axis != -1 && axis != 2) t.fail("the softmax is not over the keys (last axis)");
  // [T, N H, D] for q, k and v: the heads come from the reshape. N is the batch, symbolic, or
  // the export's own where it fixed one.
  const int64_t fixed = t.static_batch().value_or(0);
  auto batch_times = [&](const SymInt& v, int64_t k) {
    return v == SymInt{k, 0} || (fixed > 0 && v == SymInt{0, fixed * k});
  };
  const std::vector<SymInt> split = sym_ints(t, 6);
  int64_t heads = 0;
  for (int64_t h = 1; h <= c && split.size() == 3; ++h)
    if (c % h == 0 && batch_times(split[1], h)) heads = h;
  if (heads == 0 || !(split[0] == SymInt{0, tokens}) || !(split[2] == SymInt{0, c / heads}) ||
      sym_ints(t, 7) != split || sym_ints(t, 8) != split)
    t.fail("the heads' reshape is not [T, N H, D] with H D = " + std::to_string(c));
  const int64_t d = c / heads;
  const std::vector<SymInt> merge = sym_ints(t, 9), unmerge = sym_ints(t, 10);
  if (merge.size() != 2 || !batch_times(merge[0], tokens) || !(merge[1] == SymInt{0, c}) ||
      unmerge.size() != 3 || !(unmerge[0] == SymInt{0, tokens}) || !batch_times(unmerge[1], 1) ||
      !(unmerge[2] == SymInt{0, c}))
    t.fail("the merge of the heads is not [T N, C] then [T, N, C]");
  for (int which = 0; which < 3; ++which) check_slice(t, which, c);
  const double divisor = t.konst(5).scalar(t.where() + ": the query's divisor");
  if (static_cast<float>(divisor) != static_cast<float>(std::sqrt(static_cast<double>(d))))
    t.fail("the query is divided by " + std::to_string(divisor) + ", not sqrt(" +
           std::to_string(d) + ")");
  AttrMap in;
  in.set("units", 3 * c);
  const DataValue qkv = t.emit("dense", {x}, in,
                               {{"weight", t.node().input(1), {3 * c, c}, {}},
                                {"bias", t.node().input(2), {3 * c}, {}}},
                               {tokens, 3 * c}, {tokens, 3 * c});
  const AttentionMask mask = attention_mask(t, tokens);
  const double rate = attention_dropout(t);
  DataValue mixed;
  if (mask.kind == AttentionMask::kAdditive) {
    mixed = emit_masked_attention(t, qkv, heads, mask, rate);
  } else {
    AttrMap a;
    a.set("heads", heads);
    a.set("causal", mask.kind == AttentionMask::kCausal);
    if (rate > 0) a.set("dropout", rate);
    a.set("scale", 1.0 / std::sqrt(static_cast<double>(d)));
    mixed = t.emit("attention", {qkv}, a, {}, {tokens, c}, {tokens, c});
  }
  AttrMap out;
  out.set("units", c);
  t.emit("dense", {mixed}, out,
         {{"weight", t.node().input(3), {c, c}, {}}, {"bias", t.node().input(4), {c}, {}}},
         {tokens, c}, {tokens, c});
  t.mark_seq_first(0, t.attr_int("batch_first_out", 1) == 0);  // without y's Transpose, [T, N, C]
}

// Concat(Expand(token [1, 1, C], [N, 1, 1]), x) along the tokens.
void class_token(Translator& t) {
  const DataValue x = tokens_input(t, 0, "a class token");
  const int64_t c = x.sample[1];
  if (normalize_axis(t.attr_int("concat_axis", 1), 3, t.where()) != 1)
    t.fail("the class token is not joined along the tokens (axis 1)");
  const std::vector<SymInt> to = sym_ints(t, 2);
  const Shape w = t.initializer_dims(1);
  const bool batch = to.size() == 3 && (to[0] == SymInt{1, 0} ||
                                        (t.static_batch() && to[0] == SymInt{0, *t.static_batch()}));
  if (w != Shape{1, 1, c} || !batch || !(to[1] == SymInt{0, 1}) ||
      !(to[2] == SymInt{0, 1} || to[2] == SymInt{0, c}))
    t.fail("only a token [1, 1, " + std::to_string(c) + "] expanded to [N, 1, " +
           std::to_string(c) + "] before the tokens is supported");
  const Shape out = {x.sample[0] + 1, c};
  t.emit("class_token", {x}, {}, {{"weight", t.node().input(1), {c}, {}}}, out, out);
}

// Add(x, w) of data x and a parameter w whose dims, leading 1s dropped, are x's trailing axes:
// a learned add_constant (a trained bias of the features: ResMLP's affine shift).
void learned_bias(Translator& t, int table) {
  emit_learned_table(t, "add_constant", "bias", table, t.data(1 - table, kSeqFirst), "a sum",
                     "a table [1, T, C] added to tokens [N, T, C] (a learned position embedding)");
}

// Add(x, table) of tokens x [T, C] and a table initializer [1, T, C]: a position_embedding;
// another parameter of x's trailing axes: learned_bias.
void add_table(Translator& t, const TranslateFn& add) {
  for (int table : {0, 1}) {
    if (t.inputs() != 2 || !t.is_initializer(table) || t.is_const(1 - table)) continue;
    const DataValue& x = t.data(1 - table, kSeqFirst);
    Shape w = t.initializer_dims(table);
    if (w.size() == 3 && w[0] == 1) w.erase(w.begin());
    if (x.sample.size() != 2 || x.remat != x.sample || w != x.sample || x.seq_first)
      return learned_bias(t, table);
    AttrMap a;
    a.set("max_len", x.sample[0]);
    t.emit("position_embedding", {x}, a, {{"weight", t.node().input(table), x.sample, {}}},
           x.sample, x.remat);
    return;
  }
  add(t);
}

// Gather(x, i) along the tokens of x [N, T, C]: row i (x[:, i], a ViT's class token for its
// head), [N, C] for a scalar i, [N, 1, C] for [i].
void gather_token(Translator& t, const TranslateFn& gather) {
  if (t.is_const(0) || !t.is_const(1)) return gather(t);
  const DataValue x = tokens_input(t, 0, "a Gather of data");
  if (normalize_axis(t.attr_int("axis", 0), 3, t.where()) != 1)
    t.fail("only a Gather along the tokens (axis 1) of data is supported");
  const OnnxConst& index = t.konst(1);
  const std::vector<int64_t> i = index.ints(t.where() + ": indices");
  if (i.size() != 1 || index.shape.size() > 1)
    t.fail("only a Gather of one token is supported");
  const int64_t row = i[0] < 0 ? i[0] + x.sample[0] : i[0];
  if (row < 0 || row >= x.sample[0]) t.fail("token " + std::to_string(i[0]) + " of " + std::to_string(x.sample[0]));
  AttrMap a;
  a.set("offset", row);
  a.set("channels", int64_t{1});
  const Shape one = {1, x.sample[1]};
  const DataValue y = t.emit("channel_slice", {x}, a, {}, one, one, x.dtype);
  if (!index.shape.empty()) return;  // [i]: the row kept as an axis
  AttrMap r;
  r.set("shape", std::vector<int64_t>{x.sample[1]});
  t.emit("reshape", {y}, r, {}, {x.sample[1]}, {x.sample[1]}, x.dtype);
}

// The window [Wh, Ww] of `tokens` = Wh Ww tokens and a table of `rows` = (2 Wh - 1)(2 Ww - 1)
// rows whose torchvision index `index` is, if one is.
std::optional<Shape> window_of_index(const std::vector<int64_t>& index, int64_t tokens,
                                     int64_t rows) {
  if (static_cast<int64_t>(index.size()) != tokens * tokens) return std::nullopt;
  for (int64_t wh = 1; wh <= tokens; ++wh) {
    const int64_t ww = tokens / wh;
    if (wh * ww != tokens || (2 * wh - 1) * (2 * ww - 1) != rows) continue;
    bool same = true;
    for (int64_t k = 0; k < tokens * tokens && same; ++k)
      same = index[static_cast<size_t>(k)] ==
             relative_position_index(k / tokens, k % tokens, wh, ww);
    if (same) return Shape{wh, ww};
  }
  return std::nullopt;
}

// The grid of windows [gh, gw] and shift [sh, sw] whose Swin mask (shifted_window_mask) the
// constant `mask` (nW T T values in window, query, key order) is, for windows of `window`.
std::optional<std::pair<Shape, Shape>> shift_of_mask(const std::vector<double>& mask,
                                                     int64_t windows, const Shape& window) {
  const int64_t wh = window[0], ww = window[1], t = wh * ww;
  if (static_cast<int64_t>(mask.size()) != windows * t * t) return std::nullopt;
  for (int64_t gh = 1; gh <= windows; ++gh) {
    if (windows % gh != 0) continue;
    const int64_t gw = windows / gh;
    for (int64_t sh = 0; sh < wh; ++sh)
      for (int64_t sw = sh == 0 ? 1 : 0; sw < ww; ++sw) {
        bool same = true;
        for (int64_t e = 0; e < windows * t * t && same; ++e)
          same = mask[static_cast<size_t>(e)] ==
                 shifted_window_mask(e / (t * t), e / t % t, e % t, gh, gw, wh, ww, sh, sw);
        if (same) return std::make_pair(Shape{gh, gw}, Shape{sh, sw});
      }
  }
  return std::nullopt;
}

// The shifted-window part of RelativePositionBias (inputs 5, 6, 7: the view's shape, the mask, the
// shape back): the window and grid attributes that add the mask to scores x ([nW N, H, T, T]:
// folded, Note [folded batch]), once the views are [N, nW, H, T, T] and back and the mask is
// Swin's for some grid and shift.
void set_shifted_windows(Translator& t, const DataValue& x, const Shape& window, AttrMap* a) {
  const int64_t windows = x.fold, heads = x.sample[1], tokens = x.sample[3];
  if (windows < 2 || x.sample.size() != 4)
    t.fail("the mask's scores must be windows folded into the batch, [nW N, H, T, T], got " +
           shape_str(x.sample) + " per sample");
  const std::optional<int64_t> batch = t.static_batch();
  auto is_n = [&](const SymInt& v, int64_t m) {
    return v == SymInt{m, 0} || (batch && v == SymInt{0, m * *batch});
  };
  const OnnxConst& view = t.konst(5);
  const OnnxConst& back = t.konst(7);
  const std::vector<SymInt> rest = {{0, windows}, {0, heads}, {0, tokens}, {0, tokens}};
  if (view.i.size() != 5 || !is_n(view.i[0], 1) ||
      !std::equal(rest.begin(), rest.end(), view.i.begin() + 1))
    t.fail("the scores are viewed as [" + (view.i.empty() ? std::string() : sym_str(view.i[0])) +
           ", ...], not [N, " + std::to_string(windows) + ", " + std::to_string(heads) + ", " +
           std::to_string(tokens) + ", " + std::to_string(tokens) + "]");
  if (back.i.size() != 4 || !(is_n(back.i[0], windows) || back.i[0] == SymInt{0, -1}) ||
      !std::equal(rest.begin() + 1, rest.end(), back.i.begin() + 1))
    t.fail("the masked scores are not viewed back as [" + std::to_string(windows) + "N, " +
           std::to_string(heads) + ", " + std::to_string(tokens) + ", " +
           std::to_string(tokens) + "]");
  const OnnxConst& mask = t.konst(6);
  Shape dims = mask.shape;
  while (!dims.empty() && dims.front() == 1) dims.erase(dims.begin());
  if (!mask.is_float || dims != Shape{windows, 1, tokens, tokens})
    t.fail("the mask " + shape_str(mask.shape) + " is not a float [1, nW, 1, T, T] = [1, " +
           std::to_string(windows) + ", 1, " + std::to_string(tokens) + ", " +
           std::to_string(tokens) + "]");
  const auto found = shift_of_mask(mask.f, windows, window);
  if (!found)
    t.fail("the mask is not Swin's shifted-window mask of " + std::to_string(windows) +
           " windows of " + shape_str(window) + " for any grid and shift");
  a->set("windows", found->first);
  a->set("shift", found->second);
}

// RelativePositionBias(scores, table [R, H], index, target[, axes[, view, mask, back]])
// (match_relative_position_bias in onnx_attention_patterns.cpp): relative_position_bias of the
// window whose torchvision index the constant index is, the table its parameter; with Swin's
// shifted-window mask when inputs 5-7 are there.
void relative_position_bias(Translator& t) {
  const DataValue x = t.data(0, kFolds);
  const size_t r = x.sample.size();
  if (x.transposed || x.remat != x.sample || r < 3 || x.sample[r - 1] != x.sample[r - 2])
    t.fail("expects scores [N, .., H, T, T], got " + shape_str(x.sample) + " per sample");
  const int64_t heads = x.sample[r - 3], tokens = x.sample[r - 1];
  const Shape w = t.initializer_dims(1);
  if (w.size() != 2 || w[1] != heads)
    t.fail("a table " + shape_str(w) + " for scores of " + std::to_string(heads) + " heads: "
           "expects a table [R, " + std::to_string(heads) + "]");
  const std::vector<int64_t> target = t.konst(3).ints(t.where() + ": the bias's shape");
  if (target != std::vector<int64_t>{tokens, tokens, heads} &&
      target != std::vector<int64_t>{tokens, tokens, -1})
    t.fail("the gathered table is reshaped to " + shape_str(target) + ", not [T, T, H] = " +
           shape_str(Shape{tokens, tokens, heads}));
  if (t.has(4) && t.konst(4).ints(t.where() + ": the axes") != std::vector<int64_t>{0})
    t.fail("the bias is unsqueezed at other than axis 0");
  if (t.has_attr("unsqueeze_axes") && t.attr_ints("unsqueeze_axes", {}) != std::vector<int64_t>{0})
    t.fail("the bias is unsqueezed at other than axis 0");
  const std::vector<int64_t> index = t.konst(2).ints(t.where() + ": the index");
  if (const std::optional<Shape> window = window_of_index(index, tokens, w[0])) {
    AttrMap a;
    a.set("window", *window);
    if (t.has(6)) set_shifted_windows(t, x, *window, &a);
    t.emit("relative_position_bias", {x}, a, {{"table", t.node().input(1), w, {}}}, x.sample,
           x.remat, x.dtype);
    return;
  }
  t.fail("the index (" + std::to_string(index.size()) + " values) is not torchvision's relative "
         "position index of a window of " + std::to_string(tokens) + " tokens with a table of " +
         std::to_string(w[0]) + " rows");
}

}  // namespace

std::map<std::string, TranslateFn> with_token_ops(std::map<std::string, TranslateFn> ops) {
  const TranslateFn add = ops.at("Add"), gather = ops.at("Gather");
  ops["Add"] = [add](Translator& t) { add_table(t, add); };
  ops["Gather"] = [gather](Translator& t) { gather_token(t, gather); };
  return ops;
}

std::map<std::string, TranslateFn> with_attention_patterns(std::map<std::string, TranslateFn> ops) {
  ops["AttentionShapes"] = attention_shapes;
  ops["MultiheadAttention"] = multihead_attention;
  ops["ClassToken"] = class_token;
  ops["RelativePositionBias"] = relative_position_bias;
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
