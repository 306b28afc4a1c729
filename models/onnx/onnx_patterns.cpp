// The pattern pre-pass of the ONNX importer (Note [ONNX patterns] in onnx_translator.h): node
// groups a transformer export spells out become one node of domain "remat" each, which the walk
// translates into one layer of an existing op (onnx_pattern_ops.cpp).
#include <onnx/onnx_pb.h>

#include <map>
#include <set>

#include "models/onnx/onnx_pattern_graph.h"
#include "models/onnx/onnx_translator.h"
#include "ops/block_swap.h"

namespace remat {
namespace onnx_detail {

namespace {

using namespace patterns;

// MatMul(x, W) by a weight, [+ Add(bias)]: Dense(x, W, bias?), weight_in_out = 1 when W is
// [in, out] itself, 0 when it is Transpose(W') of an [out, in] initializer (nn.Linear).
void match_dense(Graph& g, int k) {
  const onnx::NodeProto* mm = g.node(k);
  if (!mm || mm->op_type() != "MatMul" || !mm->domain().empty() || !g.is_data(mm->input(0))) return;
  std::vector<int> group = {k};
  std::string weight;
  int64_t in_out = 1;
  if (g.is_init(mm->input(1))) {
    weight = mm->input(1);
  } else if (const onnx::NodeProto* t = g.made_by(mm->input(1), "Transpose")) {
    if (!g.is_init(t->input(0)) || !g.only_for(mm->input(1), k)) return;
    weight = t->input(0);
    in_out = 0;
    group.push_back(g.index(t));
  } else {
    return;
  }
  std::string out = mm->output(0), bias;
  const int j = g.sole_consumer(out);
  const onnx::NodeProto* add = g.node(j);
  if (add && add->op_type() == "Add" && add->domain().empty()) {
    const std::string* b = other_input(*add, out);
    if (b && g.is_init(*b)) {
      bias = *b;
      out = add->output(0);
      group.push_back(j);
    }
  }
  onnx::NodeProto f = fused_node("Dense", *mm, {mm->input(0), weight}, out);
  if (!bias.empty()) f.add_input(bias);
  set_int(&f, "weight_in_out", in_out);
  g.fuse(group, f);
}

// Transpose(Reshape(x, shape), perm): SplitHeads(x, shape) with perm [0, 2, 1, 3] (q, v) or
// [0, 2, 3, 1] (k, transposed for q k^T).
void match_split_heads(Graph& g, int k) {
  const onnx::NodeProto* t = g.node(k);
  if (!t || t->op_type() != "Transpose" || !t->domain().empty()) return;
  const std::vector<int64_t> perm = perm_of(*t);
  if (perm != std::vector<int64_t>{0, 2, 1, 3} && perm != std::vector<int64_t>{0, 2, 3, 1}) return;
  const onnx::NodeProto* r = g.made_by(t->input(0), "Reshape");
  if (!r || !g.only_for(t->input(0), k) || !g.is_data(r->input(0))) return;
  onnx::NodeProto f = fused_node("SplitHeads", *t, {r->input(0), r->input(1)}, t->output(0));
  copy_attrs(&f, *t, "");
  g.fuse({g.index(r), k}, f);
}

// Reshape(Transpose(x, [0, 2, 1, 3]), shape): MergeHeads(x, shape).
void match_merge_heads(Graph& g, int k) {
  const onnx::NodeProto* r = g.node(k);
  if (!r || r->op_type() != "Reshape" || !r->domain().empty()) return;
  const onnx::NodeProto* t = g.made_by(r->input(0), "Transpose");
  if (!t || !g.only_for(r->input(0), k) || perm_of(*t) != std::vector<int64_t>{0, 2, 1, 3} ||
      !g.is_data(t->input(0)))
    return;
  onnx::NodeProto f = fused_node("MergeHeads", *r, {t->input(0), r->input(1)}, r->output(0));
  copy_attrs(&f, *t, "");
  g.fuse({g.index(t), k}, f);
}

// Reshape(Transpose(Reshape(x, grouped), [0, 2, 1, 3, 4]), shape): ChannelShuffle(x, grouped,
// shape), ShuffleNet's x.view(N, g, C / g, H, W).transpose(1, 2).reshape(N, C, H, W).
void match_channel_shuffle(Graph& g, int k) {
  const onnx::NodeProto* back = g.node(k);
  if (!back || back->op_type() != "Reshape" || !back->domain().empty()) return;
  const onnx::NodeProto* t = g.made_by(back->input(0), "Transpose");
  if (!t || !g.only_for(back->input(0), k) || perm_of(*t) != std::vector<int64_t>{0, 2, 1, 3, 4})
    return;
  const onnx::NodeProto* grouped = g.made_by(t->input(0), "Reshape");
  if (!grouped || !g.only_for(t->input(0), g.index(t)) || !g.is_data(grouped->input(0))) return;
  onnx::NodeProto f = fused_node("ChannelShuffle", *grouped,
                                 {grouped->input(0), grouped->input(1), back->input(1)}, back->output(0));
  g.fuse({g.index(grouped), g.index(t), k}, f);
}

// Reshape(InstanceNormalization(Reshape(x, grouped), scale, bias), shape): GroupNorm(x, grouped,
// scale, bias, shape), nn.GroupNorm's normalization as PyTorch exports it (Note [instance
// normalization] in onnx_norm_ops.cpp).
void match_group_norm(Graph& g, int k) {
  const onnx::NodeProto* back = g.node(k);
  if (!back || back->op_type() != "Reshape" || !back->domain().empty()) return;
  const onnx::NodeProto* norm = g.made_by(back->input(0), "InstanceNormalization");
  if (!norm || !g.only_for(back->input(0), k) || norm->input_size() != 3) return;
  const onnx::NodeProto* grouped = g.made_by(norm->input(0), "Reshape");
  if (!grouped || !g.only_for(norm->input(0), g.index(norm)) || !g.is_data(grouped->input(0)))
    return;
  onnx::NodeProto f = fused_node("GroupNorm", *norm,
                                 {grouped->input(0), grouped->input(1), norm->input(1),
                                  norm->input(2), back->input(1)},
                                 back->output(0));
  copy_attrs(&f, *norm, "");
  g.fuse({g.index(grouped), g.index(norm), k}, f);
}

// The inputs of product `mm` (node mmk, fused into `f` with `group`) that are a Transpose of
// data swapping the last two axes alone, read by the product only (q @ k.transpose(-2, -1)):
// `f` reads the Transpose's input instead, with transpose_a / transpose_b, and the Transposes
// join the group (no copy).
void absorb_transposes(Graph& g, const onnx::NodeProto& mm, int mmk, onnx::NodeProto* f,
                       std::vector<int>* group) {
  for (int side : {0, 1}) {
    const onnx::NodeProto* t = g.made_by(mm.input(side), "Transpose");
    if (!t || !g.only_for(mm.input(side), mmk) || !g.is_data(t->input(0))) continue;
    const std::vector<int64_t> perm = perm_of(*t);
    const auto r = static_cast<int64_t>(perm.size());
    if (r < 3 || perm != block_swap_perm(r, BlockSwap{r - 3, 1, 1})) continue;
    f->set_input(side, t->input(0));
    set_int(f, side == 0 ? "transpose_a" : "transpose_b", 1);
    group->push_back(g.index(t));
  }
}

// MatMul(a, b) of data with a Transpose of the last two axes as an input: MatMulT(a, b) with
// transpose_a / transpose_b (absorb_transposes); run after the scaled products took theirs.
void match_transposed_matmul(Graph& g, int k) {
  const onnx::NodeProto* mm = g.node(k);
  if (!mm || mm->op_type() != "MatMul" || !mm->domain().empty()) return;
  onnx::NodeProto f = fused_node("MatMulT", *mm, {mm->input(0), mm->input(1)}, mm->output(0));
  std::vector<int> group = {k};
  absorb_transposes(g, *mm, k, &f, &group);
  if (group.size() == 1 || !g.is_data(f.input(0)) || !g.is_data(f.input(1))) return;
  g.fuse(group, f);
}

// Mul(MatMul(a, b), c) or Div(MatMul(a, b), c) of data: ScaledMatMul(a, b, c), divide = 0 / 1,
// with the transposes of a and b it absorbs.
void match_scaled_matmul(Graph& g, int k) {
  const onnx::NodeProto* s = g.node(k);
  if (!s || (s->op_type() != "Mul" && s->op_type() != "Div") || !s->domain().empty()) return;
  for (int side = 0; side < 2; ++side) {
    if (s->op_type() == "Div" && side == 1) break;  // c / (a b) is not a scale
    const onnx::NodeProto* mm = g.made_by(s->input(side), "MatMul");
    const std::string& c = s->input(1 - side);
    if (!mm || !g.only_for(s->input(side), k) || g.is_data(c) || !g.is_data(mm->input(0)) ||
        !g.is_data(mm->input(1)))
      continue;
    onnx::NodeProto f = fused_node("ScaledMatMul", *mm, {mm->input(0), mm->input(1), c}, s->output(0));
    set_int(&f, "divide", s->op_type() == "Div");
    std::vector<int> group = {g.index(mm), k};
    absorb_transposes(g, *mm, g.index(mm), &f, &group);
    g.fuse(group, f);
    return;
  }
}

// Softmax(Where(mask, a, b)): MaskedSoftmax(a, b, mask) with the softmax's axis.
void match_masked_softmax(Graph& g, int k) {
  const onnx::NodeProto* sm = g.node(k);
  if (!sm || sm->op_type() != "Softmax" || !sm->domain().empty()) return;
  const onnx::NodeProto* w = g.made_by(sm->input(0), "Where");
  if (!w || !g.only_for(sm->input(0), k)) return;
  onnx::NodeProto f = fused_node("MaskedSoftmax", *sm, {w->input(1), w->input(2), w->input(0)},
                                 sm->output(0));
  copy_attrs(&f, *sm, "");
  g.fuse({g.index(w), k}, f);
}

// GPT-2's gelu, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), as torch.onnx.export writes
// it: Mul(x, x), Mul(x, .), Mul(c3, .), Add(x, .), Mul(c2, .), Tanh, Add(c1, .), Mul(x, .),
// Mul(c0, .). Anchored at the Tanh; GeluTanh(x, c3, c2, c1, c0).
void match_gelu_tanh(Graph& g, int k) {
  const onnx::NodeProto* th = g.node(k);
  if (!th || th->op_type() != "Tanh" || !th->domain().empty()) return;
  std::vector<int> group = {k};
  const onnx::NodeProto* m4 = g.made_by(th->input(0), "Mul");
  if (!m4 || !g.only_for(th->input(0), k)) return;
  group.push_back(g.index(m4));
  const bool c2_first = !g.is_data(m4->input(0));
  const std::string c2 = m4->input(c2_first ? 0 : 1), a1v = m4->input(c2_first ? 1 : 0);
  const onnx::NodeProto* a1 = g.made_by(a1v, "Add");
  if (!a1 || !g.only_for(a1v, g.index(m4))) return;
  group.push_back(g.index(a1));
  // Add(x, m3) with m3 = Mul(c3, Mul(x, Mul(x, x))) (or Pow(x, 3)).
  for (int side = 0; side < 2; ++side) {
    const std::string x = a1->input(side), m3v = a1->input(1 - side);
    const onnx::NodeProto* m3 = g.made_by(m3v, "Mul");
    if (!m3 || !g.only_for(m3v, g.index(a1))) continue;
    const bool c3_first = !g.is_data(m3->input(0));
    const std::string c3 = m3->input(c3_first ? 0 : 1), cube = m3->input(c3_first ? 1 : 0);
    std::vector<int> inner = {g.index(m3)};
    const onnx::NodeProto* m2 = g.made_by(cube, "Mul");
    if (!m2 || !g.only_for(cube, g.index(m3))) continue;
    const std::string* sq = other_input(*m2, x);
    const onnx::NodeProto* m1 = sq ? g.made_by(*sq, "Mul") : nullptr;
    if (!m1 || m1->input(0) != x || m1->input(1) != x || !g.only_for(*sq, g.index(m2))) continue;
    inner.push_back(g.index(m2));
    inner.push_back(g.index(m1));
    // Forward from the Tanh: Add(c1, tanh), Mul(x, .), Mul(c0, .), each the one reader.
    const int a2k = g.sole_consumer(th->output(0));
    const onnx::NodeProto* a2 = g.node(a2k);
    if (!a2 || a2->op_type() != "Add" || !other_input(*a2, th->output(0))) return;
    const int m5k = g.sole_consumer(a2->output(0));
    const onnx::NodeProto* m5 = g.node(m5k);
    if (!m5 || m5->op_type() != "Mul" || !other_input(*m5, a2->output(0)) ||
        *other_input(*m5, a2->output(0)) != x)
      return;
    const int m6k = g.sole_consumer(m5->output(0));
    const onnx::NodeProto* m6 = g.node(m6k);
    if (!m6 || m6->op_type() != "Mul" || !other_input(*m6, m5->output(0))) return;
    const std::string c1 = *other_input(*a2, th->output(0));
    const std::string c0 = *other_input(*m6, m5->output(0));
    const std::string out = m6->output(0);
    for (int j : inner) group.push_back(j);
    for (int j : {a2k, m5k, m6k}) group.push_back(j);
    g.fuse(group, fused_node("GeluTanh", *th, {x, c3, c2, c1, c0}, out));
    return;
  }
}

// The exact GELU as torch.onnx.export writes nn.GELU(): Div(x, c) (or Mul(x, c)), Erf, Add(., c1),
// Mul(x, .), Mul(., c0), each in either order. Anchored at the Erf; GeluErf(x, c, c1, c0) with
// divide = 1 for the Div.
void match_gelu_erf(Graph& g, int k) {
  const onnx::NodeProto* erf = g.node(k);
  if (!erf || erf->op_type() != "Erf" || !erf->domain().empty()) return;
  const onnx::NodeProto* scale = g.made_by(erf->input(0), "Div");
  if (!scale) scale = g.made_by(erf->input(0), "Mul");
  if (!scale || !g.only_for(erf->input(0), k)) return;
  const bool x_first = g.is_data(scale->input(0));
  if (scale->op_type() == "Div" && !x_first) return;  // c / x is not a scale
  const std::string x = scale->input(x_first ? 0 : 1), c = scale->input(x_first ? 1 : 0);
  if (g.is_data(c)) return;
  const int addk = g.sole_consumer(erf->output(0));
  const onnx::NodeProto* add = g.node(addk);
  const std::string* c1 = add && add->op_type() == "Add" ? other_input(*add, erf->output(0)) : nullptr;
  if (!c1 || g.is_data(*c1)) return;
  const int mulk = g.sole_consumer(add->output(0));
  const onnx::NodeProto* mul = g.node(mulk);
  const std::string* xs = mul && mul->op_type() == "Mul" ? other_input(*mul, add->output(0)) : nullptr;
  if (!xs || *xs != x) return;
  const int halfk = g.sole_consumer(mul->output(0));
  const onnx::NodeProto* half = g.node(halfk);
  const std::string* c0 = half && half->op_type() == "Mul" ? other_input(*half, mul->output(0)) : nullptr;
  if (!c0 || g.is_data(*c0)) return;
  onnx::NodeProto f = fused_node("GeluErf", *erf, {x, c, *c1, *c0}, half->output(0));
  set_int(&f, "divide", scale->op_type() == "Div");
  g.fuse({g.index(scale), k, addk, mulk, halfk}, f);
}
// Mul(x, f(x)), a gate of x by itself: HardSwish(x) for f = HardSigmoid with PyTorch's alpha
// 1/6 and beta 1/2 (F.hardswish as opsets before 14, which have no HardSwish, write it), Silu(x)
// for f = Sigmoid (F.silu).
void match_self_gate(Graph& g, int k) {
  const onnx::NodeProto* mul = g.node(k);
  if (!mul || mul->op_type() != "Mul" || !mul->domain().empty()) return;
  for (int side = 0; side < 2; ++side) {
    const onnx::NodeProto* hs = g.made_by(mul->input(side), "HardSigmoid");
    const onnx::NodeProto* sg = g.made_by(mul->input(side), "Sigmoid");
    const onnx::NodeProto* f = hs ? hs : sg;
    if (!f || f->input(0) != mul->input(1 - side) || !g.only_for(mul->input(side), k)) continue;
    if (hs) {
      float alpha = 0.2f, beta = 0.5f;  // ONNX's defaults
      for (const auto& a : hs->attribute()) {
        if (a.name() == "alpha") alpha = a.f();
        if (a.name() == "beta") beta = a.f();
      }
      if (alpha != static_cast<float>(1.0 / 6.0) || beta != 0.5f) return;
    }
    g.fuse({g.index(f), k}, fused_node(hs ? "HardSwish" : "Silu", *f, {f->input(0)}, mul->output(0)));
    return;
  }
}
// Add(x, Gather(W, positions)) with W an initializer [L, C]: PositionEmbedding(x, W, positions).
void match_position_embedding(Graph& g, int k) {
  const onnx::NodeProto* add = g.node(k);
  if (!add || add->op_type() != "Add" || !add->domain().empty()) return;
  for (int side = 0; side < 2; ++side) {
    const onnx::NodeProto* gather = g.made_by(add->input(side), "Gather");
    if (!gather || !g.is_init(gather->input(0)) || g.is_data(gather->input(1)) ||
        !g.only_for(add->input(side), k) || !g.is_data(add->input(1 - side)))
      continue;
    g.fuse({g.index(gather), k},
           fused_node("PositionEmbedding", *add,
                      {add->input(1 - side), gather->input(0), gather->input(1)}, add->output(0)));
    return;
  }
}

// Layer norm as opsets before 17 write it: ReduceMean(x), Sub, Pow(., 2), ReduceMean, Add(eps),
// Sqrt, Div, Mul(weight), Add(bias). Anchored at the Sqrt; LayerNorm(x, eps, exponent, weight,
// bias) with both means' axes and keepdims as attributes (mean_*, var_*).
void match_layer_norm(Graph& g, int k) {
  const onnx::NodeProto* sq = g.node(k);
  if (!sq || sq->op_type() != "Sqrt" || !sq->domain().empty() || !g.is_data(sq->input(0))) return;
  const onnx::NodeProto* a = g.made_by(sq->input(0), "Add");
  if (!a || !g.only_for(sq->input(0), k)) return;
  const bool v_first = g.is_data(a->input(0));
  const std::string vv = a->input(v_first ? 0 : 1), eps = a->input(v_first ? 1 : 0);
  const onnx::NodeProto* var = g.made_by(vv, "ReduceMean");
  if (g.is_data(eps) || !var || !g.only_for(vv, g.index(a))) return;
  const onnx::NodeProto* pw = g.made_by(var->input(0), "Pow");
  if (!pw || !g.only_for(var->input(0), g.index(var)) || g.is_data(pw->input(1))) return;
  const std::string dv = pw->input(0);
  const onnx::NodeProto* d = g.made_by(dv, "Sub");
  if (!d || g.consumers(dv).size() != 2) return;
  const onnx::NodeProto* mean = g.made_by(d->input(1), "ReduceMean");
  const std::string x = d->input(0);
  if (!mean || mean->input(0) != x || !g.only_for(d->input(1), g.index(d))) return;
  const int divk = g.sole_consumer(sq->output(0));
  const onnx::NodeProto* div = g.node(divk);
  if (!div || div->op_type() != "Div" || div->input(0) != dv || div->input(1) != sq->output(0)) return;
  const int mulk = g.sole_consumer(div->output(0));
  const onnx::NodeProto* mul = g.node(mulk);
  const std::string* w = mul && mul->op_type() == "Mul" ? other_input(*mul, div->output(0)) : nullptr;
  if (!w || !g.is_init(*w)) return;
  const int addk = g.sole_consumer(mul->output(0));
  const onnx::NodeProto* add = g.node(addk);
  const std::string* b = add && add->op_type() == "Add" ? other_input(*add, mul->output(0)) : nullptr;
  if (!b || !g.is_init(*b)) return;
  onnx::NodeProto f = fused_node("LayerNorm", *mean, {x, eps, pw->input(1), *w, *b}, add->output(0));
  copy_attrs(&f, *mean, "mean_");
  copy_attrs(&f, *var, "var_");
  g.fuse({g.index(mean), g.index(d), g.index(pw), g.index(var), g.index(a), k, divk, mulk, addk}, f);
}

}  // namespace

std::vector<onnx::NodeProto> rewrite_patterns(const onnx::GraphProto& proto) {
  Graph g(proto);
  // Each pass sees the graph the earlier ones left: split and merge heads before the scaled
  // products, whose Transposes they would otherwise take for weights.
  // The LSTM and GRU first: a bidirectional output's Transpose + Reshape would read as merge_heads.
  for (auto match : {match_recurrent, match_multihead_attention, match_class_token,
                     match_relative_position_bias,
                     match_layer_norm, match_gelu_tanh, match_position_embedding, match_split_heads,
                     match_merge_heads, match_dense, match_scaled_matmul, match_transposed_matmul,
                     match_masked_softmax,
                     match_channel_shuffle, match_group_norm, match_self_gate, match_gelu_erf,
                     match_roll,
                     match_patch_merge, match_unbind})
    for (int k = 0; k < g.size(); ++k) match(g, k);
  return g.result();
}

}  // namespace onnx_detail
}  // namespace remat
