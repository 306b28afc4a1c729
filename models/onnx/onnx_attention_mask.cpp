// The attn_mask of an imported nn.MultiheadAttention and the layers of an attention under a mask
// other than the causal one.
//
// Note [attention masks]
// nn.MultiheadAttention adds its attn_mask to the scores before the softmax (baddbmm: Note
// [multi-head attention] in onnx_attention_patterns.cpp), and an export holds it as a constant.
// PyTorch's causal mask (0 on and below the diagonal, -inf or a fill at or below -1e4 above,
// whose exp is 0 beside a kept key) is `attention` with causal: true, no T x T value. Any other
// float mask [T, T] (a local band, a prefix mask, a learned-free bias; a boolean mask arrives as
// the export's -inf fill) is the attention spelled out in remat's ops, each as the export
// computes it: the packed projection's q, k and v (`channel_slice` of the last axis),
// `split_heads`, `matmul` of q k^T scaled by 1 / sqrt(D), `add_constant` of the mask (a buffer,
// its -inf kept: Note [constant infinities] in runtime/checkpoint.cpp), `softmax`, the
// attention's `dropout`, `matmul` by v and `merge_heads`. That holds the scores and
// probabilities [H, T, T] per sample, which the solver plans as any activation. A mask that
// leaves a query no key (a row of -inf) or holds NaN is refused: PyTorch's output there is NaN.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <string>
#include <vector>

#include "models/onnx/onnx_translator.h"

namespace remat {
namespace onnx_detail {

namespace {

bool is_causal(const std::vector<double>& m, int64_t tokens) {
  for (int64_t i = 0; i < tokens; ++i)
    for (int64_t j = 0; j < tokens; ++j) {
      const double v = m[static_cast<size_t>(i * tokens + j)];
      if (j <= i ? v != 0.0 : v > -1e4) return false;
    }
  return true;
}

// Every query keeps a key, and no entry is NaN.
void check_additive(Translator& t, const std::vector<double>& m, int64_t tokens) {
  for (int64_t i = 0; i < tokens; ++i) {
    bool kept = false;
    for (int64_t j = 0; j < tokens; ++j) {
      const double v = m[static_cast<size_t>(i * tokens + j)];
      if (std::isnan(v))
        t.fail("the attn_mask is NaN at query " + std::to_string(i) + ", key " +
               std::to_string(j));
      kept = kept || !(std::isinf(v) && v < 0);
    }
    if (!kept)
      t.fail("the attn_mask leaves query " + std::to_string(i) +
             " no key (every entry of its row is -inf): its output would be NaN");
  }
}

// `part` (0: q, 1: k, 2: v) of the packed projection [T, 3C] as heads [H, T, D].
DataValue heads_of(Translator& t, const DataValue& qkv, int part, int64_t heads) {
  const int64_t tokens = qkv.sample[0], c = qkv.sample[1] / 3, d = c / heads;
  AttrMap s;
  s.set("axis", int64_t{2});
  s.set("offset", part * c);
  s.set("channels", c);
  const DataValue one = t.emit("channel_slice", {qkv}, s, {}, {tokens, c}, {tokens, c});
  AttrMap h;
  h.set("heads", heads);
  return t.emit("split_heads", {one}, h, {}, {heads, tokens, d}, {heads, tokens, d});
}

}  // namespace

AttentionMask attention_mask(Translator& t, int64_t tokens) {
  AttentionMask mask;
  if (!t.has(24)) return mask;
  if (t.has(23) && t.konst(23).scalar(t.where() + ": the scores' factor") != 1.0)
    t.fail("the scores are scaled by " + std::to_string(t.konst(23).scalar(t.where())) +
           " before the mask, not 1");
  const OnnxConst& m = t.konst(24);
  Shape dims = m.shape;
  while (dims.size() > 2 && dims.front() == 1) dims.erase(dims.begin());
  if (!m.is_float || dims != Shape{tokens, tokens})
    t.fail("only a float attn_mask [" + std::to_string(tokens) + ", " + std::to_string(tokens) +
           "] is supported, not a mask " + shape_str(m.shape));
  if (is_causal(m.f, tokens)) {
    mask.kind = AttentionMask::kCausal;
    return mask;
  }
  check_additive(t, m.f, tokens);
  mask.kind = AttentionMask::kAdditive;
  mask.values.assign(m.f.begin(), m.f.end());
  return mask;
}

DataValue emit_masked_attention(Translator& t, const DataValue& qkv, int64_t heads,
                                const AttentionMask& mask, double dropout) {
  const int64_t tokens = qkv.sample[0], c = qkv.sample[1] / 3, d = c / heads;
  const DataValue q = heads_of(t, qkv, 0, heads), k = heads_of(t, qkv, 1, heads),
                  v = heads_of(t, qkv, 2, heads);
  const Shape scores = {heads, tokens, tokens};
  AttrMap qk;
  qk.set("transpose_b", true);
  qk.set("scale", 1.0 / std::sqrt(static_cast<double>(d)));
  DataValue s = t.emit("matmul", {q, k}, qk, {}, scores, scores);
  AttrMap table;
  table.set("shape", std::vector<int64_t>{tokens, tokens});
  s = t.emit("add_constant", {s}, table,
             {{"table", "", {tokens, tokens},
               std::vector<float>(mask.values.begin(), mask.values.end())}},
             scores, scores);
  DataValue p = t.emit("softmax", {s}, {}, {}, scores, scores);
  if (dropout > 0) {
    AttrMap r;
    r.set("rate", dropout);
    p = t.emit("dropout", {p}, r, {}, scores, scores);
  }
  const DataValue o = t.emit("matmul", {p, v}, {}, {}, {heads, tokens, d}, {heads, tokens, d});
  return t.emit("merge_heads", {o}, {}, {}, {tokens, c}, {tokens, c});
}

}  // namespace onnx_detail
}  // namespace remat
