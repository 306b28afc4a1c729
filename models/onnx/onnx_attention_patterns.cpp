// The pattern pre-pass's matchers for a vision transformer (Note [ONNX patterns] in
// onnx_translator.h): nn.MultiheadAttention as torch.onnx.export writes it, and the class token.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "models/onnx/onnx_pattern_graph.h"
#include "models/onnx/onnx_translator.h"

namespace remat {
namespace onnx_detail {
namespace patterns {

// Note [multi-head attention]
// nn.MultiheadAttention (batch_first, as torchvision's ViT builds it) exports as about twenty
// nodes over the tokens x [N, T, C] that move the batch out of the first axis and fold the heads
// into it:
//   xt = Transpose(x, [1, 0, 2])                      [T, N, C]
//   qkv = Add(b_in, MatMul(xt, Transpose(W_in)))       [T, N, 3C]  (W_in [3C, C]: q, k, v rows)
//   q, k, v = Slice(qkv, [0, C) / [C, 2C) / [2C, 3C) of the last axis)
//   each Reshape(., [T, N H, D]) and Transpose: q [1, 0, 2] then Div by sqrt(D), k [1, 2, 0],
//   v [1, 0, 2]; MatMul(q, k), Softmax, MatMul(., v)  [N H, T, D]
//   Transpose [1, 0, 2], Reshape [T N, C], Gemm(W_out, b_out), Reshape [T, N, C],
//   Transpose [1, 0, 2]                                [N, T, C]
// which is remat's dense (3C; its weight W_in as PyTorch stores it) + attention in the token
// layout (heads H, not causal, scale 1 / sqrt(D); Note [attention layouts] in ops/attention.h)
// + dense (C). The reshape targets and slice bounds are computed from Shape nodes of the group's
// own values (xt, qkv, the slices, the projection's input and output), so the group becomes two
// nodes: AttentionShapes, where its first node was, gives each of those values its ONNX shape
// ([T, N, C], [T, N, 3C], [T N, C]; the batch not first) for Shape alone to read, and
// MultiheadAttention, where its last node was, reads the targets and bounds the Shapes led to,
// checks each against the heads its reshape names, and emits the three layers. With an
// attn_mask (nn.TransformerEncoder(x, mask) of a GPT written in PyTorch), the scores are
// baddbmm(mask, q, k) before the softmax: Add(Mul(MatMul(q, k), alpha), mask), the Mul absent
// where the export leaves it out, the mask a constant (Unsqueeze(mask, 0) times beta); the two
// join the group, alpha and the mask its inputs, and the translation takes PyTorch's causal mask
// (-inf above the diagonal) as causal attention. In a training-mode export with dropout > 0 (the
// default 0.1 of nn.TransformerEncoderLayer), a Dropout sits between the Softmax and the second
// MatMul: it joins the group too, its ratio an input, and becomes the attention's dropout.
// Sequence-first (batch_first=False, PyTorch's default), the tokens arrive as [T, N, C] and leave
// so: neither Transpose is there (or x's is read by more than the projection, a residual's
// Transpose of its own), and the group reads and writes sequence-first values (Note
// [sequence-first values] in onnx_translator.h); attributes batch_first_in and batch_first_out
// say which Transposes it holds.
namespace {

bool has_perm(const onnx::NodeProto* t, std::vector<int64_t> perm) {
  return t && perm_of(*t) == perm;
}

// The Reshape, Slice and qkv value above one of q, k, v's Transposes.
struct Head {
  const onnx::NodeProto *transpose = nullptr, *reshape = nullptr, *slice = nullptr;
};
Head head_above(const Graph& g, const onnx::NodeProto* transpose) {
  Head h{transpose, nullptr, nullptr};
  if (transpose) h.reshape = g.made_by(transpose->input(0), "Reshape");
  if (h.reshape) h.slice = g.made_by(h.reshape->input(0), "Slice");
  return h;
}

// The group's nodes from x's Transpose to the output's, by role.
struct Mha {
  const onnx::NodeProto *xt, *w_t, *mm_in, *add_in, *div, *scores, *softmax, *mixed, *out_t,
      *merge, *gemm, *unmerge, *y;
  const onnx::NodeProto *mask_add, *alpha_mul;  // an attn_mask's nodes, where there is one
  const onnx::NodeProto* attn_drop;             // a Dropout of the probabilities, if any
  Head q, k, v;
  std::string x, w_in, b_in, alpha, mask;
};

// The softmax's input as baddbmm(mask, q, k): Add(Mul(scores, alpha) or scores, mask), mask and
// alpha constants; sets the mask's nodes and values and returns the scores' MatMul.
const onnx::NodeProto* masked_scores(const Graph& g, Mha* m) {
  m->mask_add = g.made_by(m->softmax->input(0), "Add");
  if (!m->mask_add || m->mask_add->input_size() != 2) return nullptr;
  for (int side : {0, 1}) {
    const std::string& s = m->mask_add->input(side);
    if (!g.is_data(s) || g.is_data(m->mask_add->input(1 - side))) continue;
    m->mask = m->mask_add->input(1 - side);
    m->alpha_mul = g.made_by(s, "Mul");
    if (!m->alpha_mul) return g.made_by(s, "MatMul");
    for (int f : {0, 1})
      if (!g.is_data(m->alpha_mul->input(f)) && g.is_data(m->alpha_mul->input(1 - f))) {
        m->alpha = m->alpha_mul->input(f);
        return g.made_by(m->alpha_mul->input(1 - f), "MatMul");
      }
  }
  return nullptr;
}

// The nodes reading `v` other than the group's: they must all be Shape nodes.
bool only_shapes_besides(const Graph& g, const std::string& v, const std::set<int>& group,
                         bool* shaped) {
  *shaped = false;
  for (int c : g.consumers(v)) {
    if (group.count(c)) continue;
    const onnx::NodeProto* n = g.node(c);
    if (!n) continue;
    if (n->op_type() != "Shape" || !n->domain().empty()) return false;
    *shaped = true;
  }
  return true;
}

bool find_mha(const Graph& g, int k, Mha* m) {
  m->softmax = g.node(k);
  if (!m->softmax || m->softmax->op_type() != "Softmax" || !m->softmax->domain().empty()) return false;
  m->scores = g.made_by(m->softmax->input(0), "MatMul");
  if (!m->scores) m->scores = masked_scores(g, m);
  if (!m->scores) return false;
  m->div = g.made_by(m->scores->input(0), "Div");
  if (!m->div || g.is_data(m->div->input(1))) return false;
  m->q = head_above(g, g.made_by(m->div->input(0), "Transpose"));
  m->k = head_above(g, g.made_by(m->scores->input(1), "Transpose"));
  const onnx::NodeProto* after = g.node(g.sole_consumer(m->softmax->output(0)));
  if (after && after->op_type() == "Dropout" && after->domain().empty() &&
      (after->output_size() < 2 || after->output(1).empty() ||
       g.consumers(after->output(1)).empty())) {
    m->attn_drop = after;
    after = g.node(g.sole_consumer(after->output(0)));
  }
  m->mixed = after;
  const std::string& probs = m->attn_drop ? m->attn_drop->output(0) : m->softmax->output(0);
  if (!m->mixed || m->mixed->op_type() != "MatMul" || m->mixed->input(0) != probs) return false;
  m->v = head_above(g, g.made_by(m->mixed->input(1), "Transpose"));
  if (!has_perm(m->q.transpose, {1, 0, 2}) || !has_perm(m->k.transpose, {1, 2, 0}) ||
      !has_perm(m->v.transpose, {1, 0, 2}) || !m->q.slice || !m->k.slice || !m->v.slice)
    return false;
  const std::string& qkv = m->q.slice->input(0);
  if (m->k.slice->input(0) != qkv || m->v.slice->input(0) != qkv) return false;
  m->add_in = g.made_by(qkv, "Add");
  if (!m->add_in) return false;
  for (int side : {0, 1}) {
    const onnx::NodeProto* mm = g.made_by(m->add_in->input(side), "MatMul");
    if (mm && g.is_init(m->add_in->input(1 - side))) {
      m->mm_in = mm;
      m->b_in = m->add_in->input(1 - side);
    }
  }
  if (!m->mm_in) return false;
  m->w_t = g.made_by(m->mm_in->input(1), "Transpose");
  if (!has_perm(m->w_t, {1, 0}) || !g.is_init(m->w_t->input(0))) return false;
  m->w_in = m->w_t->input(0);
  // Batch-first tokens come through x's Transpose, read by the projection (and Shapes) alone;
  // sequence-first ones (Note [sequence-first values]) are the projection's input itself.
  m->xt = g.made_by(m->mm_in->input(0), "Transpose");
  bool shaped = false;
  if (!has_perm(m->xt, {1, 0, 2}) ||
      !only_shapes_besides(g, m->xt->output(0), {g.index(m->mm_in)}, &shaped))
    m->xt = nullptr;
  m->x = m->xt ? m->xt->input(0) : m->mm_in->input(0);
  if (!g.is_data(m->x)) return false;
  // The one node other than Shapes that reads n's output, if it has op type `op`.
  auto next = [&](const onnx::NodeProto* n, const char* op) -> const onnx::NodeProto* {
    const onnx::NodeProto* found = nullptr;
    for (int c : n ? g.consumers(n->output(0)) : std::vector<int>{}) {
      const onnx::NodeProto* r = g.node(c);
      if (!r || r->op_type() == "Shape") continue;
      if (found) return nullptr;
      found = r;
    }
    return found && found->op_type() == op && found->domain().empty() ? found : nullptr;
  };
  m->out_t = next(m->mixed, "Transpose");
  m->merge = next(m->out_t, "Reshape");
  m->gemm = next(m->merge, "Gemm");
  m->unmerge = next(m->gemm, "Reshape");
  m->y = next(m->unmerge, "Transpose");  // back to the batch first; none: sequence-first
  if (!has_perm(m->y, {1, 0, 2})) m->y = nullptr;
  return has_perm(m->out_t, {1, 0, 2}) && m->gemm && m->gemm->input(0) == m->merge->output(0) &&
         m->gemm->input_size() == 3 && g.is_init(m->gemm->input(1)) &&
         g.is_init(m->gemm->input(2)) && m->unmerge;
}

}  // namespace

void match_multihead_attention(Graph& g, int k) {
  Mha m{};
  if (!find_mha(g, k, &m)) return;
  std::vector<const onnx::NodeProto*> nodes = {
      m.xt, m.w_t, m.mm_in, m.add_in, m.q.slice, m.q.reshape, m.q.transpose, m.k.slice,
      m.k.reshape, m.k.transpose, m.v.slice, m.v.reshape, m.v.transpose, m.div, m.scores,
      m.softmax, m.mixed, m.out_t, m.merge, m.gemm, m.unmerge, m.y};
  nodes.erase(std::remove(nodes.begin(), nodes.end(), nullptr), nodes.end());
  const onnx::NodeProto* last = nodes.back();  // the group's output: y, or the unmerge
  std::set<int> group;
  for (const onnx::NodeProto* n : nodes) group.insert(g.index(n));
  for (const onnx::NodeProto* n : {m.mask_add, m.alpha_mul, m.attn_drop})
    if (n) group.insert(g.index(n));
  // Every value inside the group is read by the group and Shape nodes alone; those Shape nodes
  // read the values AttentionShapes gives a shape to.
  std::map<std::string, AttentionShapeRole> roles = {
      {m.add_in->output(0), kPacked},      {m.q.slice->output(0), kOneOfThree},
      {m.k.slice->output(0), kOneOfThree}, {m.v.slice->output(0), kOneOfThree},
      {m.merge->output(0), kProjection},   {m.gemm->output(0), kProjection}};
  if (m.xt) roles[m.xt->output(0)] = kTokensFirst;
  onnx::NodeProto shapes = fused_node("AttentionShapes", *m.softmax, {m.x, m.w_in}, "");
  shapes.clear_output();
  std::vector<int64_t> shape_roles;
  for (const onnx::NodeProto* n : nodes) {
    if (n == last) continue;
    bool shaped = false;
    if (!only_shapes_besides(g, n->output(0), group, &shaped)) return;
    if (!shaped) continue;
    auto role = roles.find(n->output(0));
    if (role == roles.end()) return;
    shapes.add_output(n->output(0));
    shape_roles.push_back(role->second);
  }
  auto* r = shapes.add_attribute();
  r->set_name("roles");
  r->set_type(onnx::AttributeProto::INTS);
  for (int64_t v : shape_roles) r->add_ints(v);
  std::vector<std::string> in = {m.x, m.w_in, m.b_in, m.gemm->input(1), m.gemm->input(2),
                                 m.div->input(1), m.q.reshape->input(1), m.k.reshape->input(1),
                                 m.v.reshape->input(1), m.merge->input(1), m.unmerge->input(1)};
  for (const Head* h : {&m.q, &m.k, &m.v})
    for (int i = 1; i <= 4; ++i) in.push_back(i < h->slice->input_size() ? h->slice->input(i) : "");
  if (m.mask_add || m.attn_drop) {  // inputs 23 and 24: the scores' factor and the mask
    in.push_back(m.alpha);
    in.push_back(m.mask);
  }
  if (m.attn_drop)  // input 25: the dropout's ratio (none: ONNX's default)
    in.push_back(m.attn_drop->input_size() > 1 ? m.attn_drop->input(1) : "");
  onnx::NodeProto f = fused_node("MultiheadAttention", *m.softmax, in, last->output(0));
  // Whether the group moves batch-first tokens in (x's Transpose) and back out (y's).
  for (const auto& [name, on] : {std::pair<const char*, bool>{"batch_first_in", m.xt != nullptr},
                                 {"batch_first_out", m.y != nullptr}}) {
    auto* a = f.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(on);
  }
  if (m.attn_drop) {
    copy_attrs(&f, *m.attn_drop, "dropout_");
    auto* d = f.add_attribute();
    d->set_name("attn_dropout");
    d->set_type(onnx::AttributeProto::INT);
    d->set_i(1);
  }
  copy_attrs(&f, *m.gemm, "gemm_");
  copy_attrs(&f, *m.softmax, "softmax_");
  g.fuse_two({group.begin(), group.end()}, shapes, f);
}

// Concat(Expand(token, shape), x) along axis 1: ClassToken(x, token, shape), token an
// initializer [1, 1, C] (nn.Parameter) before the tokens x [N, T, C].
void match_class_token(Graph& g, int k) {
  const onnx::NodeProto* cat = g.node(k);
  if (!cat || cat->op_type() != "Concat" || !cat->domain().empty() || cat->input_size() != 2)
    return;
  const onnx::NodeProto* expand = g.made_by(cat->input(0), "Expand");
  if (!expand || !g.is_init(expand->input(0)) || !g.is_data(cat->input(1)) ||
      !g.only_for(cat->input(0), k))
    return;
  onnx::NodeProto f = fused_node("ClassToken", *cat,
                                 {cat->input(1), expand->input(0), expand->input(1)}, cat->output(0));
  copy_attrs(&f, *cat, "concat_");
  g.fuse({g.index(expand), k}, f);
}

// Add(scores, [Unsqueeze(] Transpose(Reshape(Gather(table, index), [T, T, H]), [2, 0, 1]) [, 0)]):
// Swin's and MaxViT's relative position bias (torchvision's _get_relative_position_bias and
// get_relative_positional_bias), table an initializer [R, H] (nn.Parameter), the index its
// buffer (flat, or Reshape(buffer, [-1])): RelativePositionBias(scores, table, index, target),
// whose translation checks the index and the target. Swin's shifted windows go on: Reshape to
// [N, nW, H, T, T], Add(mask), Reshape back to [N nW, H, T, T]: three more inputs (the two
// shapes and the mask), the output the second Reshape's.
void match_shifted_window_mask(Graph& g, onnx::NodeProto* f, std::vector<int>* group) {
  const int r1k = g.sole_consumer(f->output(0));
  const onnx::NodeProto* r1 = g.node(r1k);
  if (!r1 || r1->op_type() != "Reshape" || !r1->domain().empty() || r1->input(0) != f->output(0))
    return;
  const int addk = g.sole_consumer(r1->output(0));
  const onnx::NodeProto* add = g.node(addk);
  const std::string* mask = add && add->op_type() == "Add" && add->domain().empty()
                                ? other_input(*add, r1->output(0))
                                : nullptr;
  if (!mask || g.is_data(*mask)) return;
  const int r2k = g.sole_consumer(add->output(0));
  const onnx::NodeProto* r2 = g.node(r2k);
  if (!r2 || r2->op_type() != "Reshape" || !r2->domain().empty() || r2->input(0) != add->output(0))
    return;
  if (f->input_size() == 4) f->add_input("");  // no Unsqueeze's axes
  for (const std::string& in : {r1->input(1), *mask, r2->input(1)}) f->add_input(in);
  f->set_output(0, r2->output(0));
  for (int m : {r1k, addk, r2k}) group->push_back(m);
}

void match_relative_position_bias(Graph& g, int k) {
  const onnx::NodeProto* add = g.node(k);
  if (!add || add->op_type() != "Add" || !add->domain().empty() || add->input_size() != 2) return;
  for (int side : {1, 0}) {
    const std::string& bias = add->input(side);
    if (!g.is_data(add->input(1 - side)) || g.is_data(bias) || !g.only_for(bias, k)) continue;
    std::vector<int> group = {k};
    const onnx::NodeProto* unsq = g.made_by(bias, "Unsqueeze");
    const onnx::NodeProto* t = g.made_by(unsq ? unsq->input(0) : bias, "Transpose");
    if (unsq) group.push_back(g.index(unsq));
    if (!t || perm_of(*t) != std::vector<int64_t>{2, 0, 1} ||
        (unsq && !g.only_for(t->output(0), group.back())))
      continue;
    const onnx::NodeProto* r = g.made_by(t->input(0), "Reshape");
    const onnx::NodeProto* gather = r ? g.made_by(r->input(0), "Gather") : nullptr;
    if (!gather || !g.is_init(gather->input(0)) || !g.only_for(t->input(0), g.index(t)) ||
        !g.only_for(r->input(0), g.index(r)))
      continue;
    for (const auto& a : gather->attribute())
      if (a.name() == "axis" && a.i() != 0) return;
    for (const onnx::NodeProto* n : {t, r, gather}) group.push_back(g.index(n));
    onnx::NodeProto f = fused_node(
        "RelativePositionBias", *add,
        {add->input(1 - side), gather->input(0), gather->input(1), r->input(1)}, add->output(0));
    if (unsq) {  // its axes: an input from opset 13, an attribute before
      f.add_input(unsq->input_size() > 1 ? unsq->input(1) : "");
      copy_attrs(&f, *unsq, "unsqueeze_");
    }
    match_shifted_window_mask(g, &f, &group);
    g.fuse(group, f);
    return;
  }
}

}  // namespace patterns
}  // namespace onnx_detail
}  // namespace remat
