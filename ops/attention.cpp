// attention: scaled dot-product attention as one op (Note [fused attention]), its heads in one
// of the two layouts of Note [attention layouts] (ops/attention.h): three [N, H, T, D] inputs,
// or GPT-2's packed qkv [N, T, 3C] with `heads: H`. Its gradient attention_grad holds dq, dk and
// dv together: [N, 3H, T, D], which three concat_slice nodes take apart, or qkv's [N, T, 3C].
// The CUDA path is ops/attention_cuda.cpp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/rng.h"
#include "ops/attention.h"
#include "ops/concat.h"
#include "ops/cpu_storage.h"
#include "ops/op_common.h"
#include "ops/registry.h"

namespace remat {
namespace {

// Note [fused attention]
// out = dropout(softmax(scale q k^T, causal)) v, for each sample and head, without the T x T
// scores, probabilities or mask as graph values: the op keeps one row of scores in its
// workspace, and its gradient recomputes them from q, k and v (flash attention's trade of
// compute for memory, made inside one node, so the solver sees one node whose only outputs are
// [N, H, T, D], or [N, T, C] in the token layout of Note [attention layouts] in ops/attention.h).
// The written-out form (matmul, softmax, dropout, matmul) stays available; `plan`
// compares the two on configs/gpt2.yaml and configs/gpt2_fused.yaml. Math, on the CPU and in
// kernels/attention.cu alike, in double: s_ij = scale sum_e q_ie k_je; p_ij = exp(s_ij - m_i) /
// l_i over the visible keys j (j <= i when causal); the dropout mask c_ij = 1 / (1 - rate) or 0
// from rng_uniform(seed, step, first + (b T + i) T + j) >= rate, the numbering the written-out
// dropout gives the probabilities [N, H, T, T] (b = n H + h, first = the batch offset's
// elements); o_ie = sum_j p_ij c_ij v_je. Backward: dW_ij = dO_i . v_j, dP = c dW, delta_i =
// sum_j p_ij dP_ij, dS = p (dP - delta); dq = scale dS k, dk = scale dS^T q, dv = (p c)^T dO;
// every sum in ascending index order, one rounding per stored element.

OpAttrsPtr attention_parse(AttrReader& r, const std::string& op_name) {
  auto a = std::make_shared<AttentionAttrs>();
  a->causal = r.get_bool("causal", true);
  a->has_scale = r.has("scale");
  a->scale = r.get_double("scale", 1.0, -1e30, 1e30);
  a->rate = r.get_double("dropout", 0.0, 0.0, 1.0);
  if (a->rate >= 1.0) r.fail("dropout", "must be less than 1 (in [0, 1))");
  a->heads = r.get_int("heads", 0, 0, int64_t{1} << 20);
  if (r.has("heads") && a->heads < 1) r.fail("heads", "must be at least 1");
  r.finish(op_name);
  return a;
}

// The output of the heads layout: three [N, H, T, D] of one shape and dtype.
TensorDesc infer_heads(const std::vector<TensorDesc>& in) {
  if (in.size() != 3)
    REMAT_USER_ERROR("attention expects 3 inputs (q, k, v), got " << in.size()
                                                                  << " (or one qkv with heads)");
  const DType t = require_float("attention", in);
  for (const TensorDesc& x : in) {
    if (x.shape.size() != 4 || x.shape[2] < 1 || x.shape[3] < 1)
      REMAT_USER_ERROR("attention expects heads [N, H, T, D] (split_heads' output), got "
                       << shape_str(x.shape));
    if (x.shape != in[0].shape || x.dtype != t)
      REMAT_USER_ERROR("attention expects q, k and v of one shape and dtype, got "
                       << shape_str(in[0].shape) << " and " << shape_str(x.shape));
  }
  return in[0];
}

// The output of the token layout: qkv [N, T, 3C] with 3C a multiple of 3 heads -> [N, T, C].
TensorDesc infer_tokens(const AttentionAttrs& a, const std::vector<TensorDesc>& in) {
  if (in.size() != 1)
    REMAT_USER_ERROR("attention with heads expects one input (qkv [N, T, 3C]), got " << in.size());
  require_float("attention", in);
  const Shape& s = in[0].shape;
  if (s.size() != 3 || s[1] < 1 || s[2] < 1 || s[2] % (3 * a.heads) != 0)
    REMAT_USER_ERROR("attention with heads " << a.heads << " expects qkv [N, T, 3C] with 3C a "
                     << "multiple of 3 x " << a.heads << " (q, k, v of " << a.heads
                     << " heads side by side), got " << shape_str(s));
  return checked_desc({s[0], s[1], s[2] / 3}, in[0].dtype, "attention output");
}

TensorDesc attention_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const AttentionAttrs&>(at);
  const TensorDesc out = a.heads > 0 ? infer_tokens(a, in) : infer_heads(in);
  const AttentionLayout l = attention_layout(a, in[0].shape);  // the mask numbering's range
  checked_mul(checked_mul(checked_mul(l.n, l.heads, "attention heads"), l.t, "attention rows"),
              l.t, "attention scores");
  return out;
}

// The dropout factor c_ij of Note [fused attention] (the kernels' too: kernels/rng.h).
double keep_factor(double rate, uint64_t seed, uint64_t step, uint64_t index) {
  const float r = static_cast<float>(rate);
  return rng_dropout_factor(r, rng_keep_scale(r), seed, step, index);
}

// FLOPs: scores and the weighted sum are two products of T x T x D per head (half of them
// under the causal mask), plus the softmax; the gradient recomputes the scores twice and forms
// dW, dq, dk and dv: seven such products.
OpCost attention_cost(const AttentionAttrs& a, const AttentionLayout& l, double products,
                      int64_t io, int64_t workspace) {
  const double visible = a.causal ? 0.5 : 1.0;
  const double tt = static_cast<double>(l.blocks()) * static_cast<double>(l.t) * l.t * visible;
  OpCost c;
  c.flops = products * 2.0 * tt * static_cast<double>(l.d) + 5.0 * tt;
  c.bytes_moved = io;
  c.workspace_bytes = workspace;
  return c;
}

// CPU workspace: two rows of T doubles (forward); per row m, l and delta of every query row
// plus three rows of T doubles (backward).
int64_t forward_workspace(const AttentionLayout& l) { return 2 * l.t * 8; }
int64_t backward_workspace(const AttentionLayout& l) {
  return (3 * l.blocks() * l.t + 3 * l.t) * 8;
}

// One (sample, head) block's rows: row i at p + i * stride.
struct Rows {
  const float* p;
  int64_t stride;
  const float* row(int64_t i) const { return p + i * stride; }
};

// sum_e a_e b_e over d elements, in double, e ascending.
double dot(const float* a, const float* b, int64_t d) {
  double acc = 0;
  for (int64_t e = 0; e < d; ++e) acc += static_cast<double>(a[e]) * b[e];
  return acc;
}

// Scores of query row i against the visible keys into s[0, w); returns w, and m_i, l_i
// through max / sum.
int64_t score_row(const Rows& q, const Rows& k, const AttentionLayout& l, double scale,
                  bool causal, int64_t i, double* s, double* max, double* sum) {
  const int64_t w = causal ? i + 1 : l.t;
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < w; ++j) {
    s[j] = scale * dot(q.row(i), k.row(j), l.d);
    mx = std::max(mx, s[j]);
  }
  double sum_exp = 0;
  for (int64_t j = 0; j < w; ++j) sum_exp += std::exp(s[j] - mx);
  *max = mx;
  *sum = sum_exp;
  return w;
}

// q, k, v of block b: the three inputs of the heads layout, or the one qkv of the token layout.
Rows input_rows(const ExecContext& ctx, const AttentionLayout& l, int first_input, int64_t b,
                int which) {
  return {ctx.inputs[l.input(first_input, which)].f32() + l.in_offset(b, which), l.in_stride()};
}

// inputs [q, k, v] or [qkv] -> out.
void attention_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<AttentionAttrs>(*ctx.node);
  const AttentionLayout l = attention_layout(a, ctx.inputs[0].shape());
  REMAT_CHECK(ctx.workspace_bytes >= forward_workspace(l),
              "node '" << ctx.node->name << "': attention workspace too small");
  const double scale = attention_scale(a, l.d);
  const uint64_t first = attention_first_element(ctx, l), step = static_cast<uint64_t>(ctx.step);
  auto* s = static_cast<double*>(ctx.workspace);
  double* w8 = s + l.t;  // p_ij c_ij
  for (int64_t b = 0; b < l.blocks(); ++b) {
    const Rows q = input_rows(ctx, l, 0, b, 0), k = input_rows(ctx, l, 0, b, 1),
               v = input_rows(ctx, l, 0, b, 2);
    float* o = ctx.output.f32() + l.out_offset(b);
    for (int64_t i = 0; i < l.t; ++i) {
      double mx, sum;
      const int64_t w = score_row(q, k, l, scale, a.causal, i, s, &mx, &sum);
      const uint64_t row = first + static_cast<uint64_t>((b * l.t + i) * l.t);
      for (int64_t j = 0; j < w; ++j)
        w8[j] = std::exp(s[j] - mx) / sum * keep_factor(a.rate, ctx.node->seed, step, row + j);
      for (int64_t e = 0; e < l.d; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < w; ++j) acc += w8[j] * v.row(j)[e];
        o[i * l.out_stride() + e] = static_cast<float>(acc);
      }
    }
  }
}

// inputs [dO, q, k, v] or [dO, qkv] -> dq, dk, dv where AttentionLayout::grad_offset says. Pass
// 1 per query row: m, l, delta and dq; pass 2 per key row: dk and dv.
void attention_grad_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<AttentionAttrs>(*ctx.node);
  const AttentionLayout l = attention_layout(a, ctx.inputs[1].shape());
  REMAT_CHECK(ctx.workspace_bytes >= backward_workspace(l),
              "node '" << ctx.node->name << "': attention_grad workspace too small");
  const double scale = attention_scale(a, l.d);
  const uint64_t first = attention_first_element(ctx, l), step = static_cast<uint64_t>(ctx.step);
  auto* stats = static_cast<double*>(ctx.workspace);  // per row (b, i): m, l, delta
  double* s = stats + 3 * l.blocks() * l.t;
  double* ds = s + l.t;
  double* pc = ds + l.t;
  const int64_t gs = l.grad_stride();
  for (int64_t b = 0; b < l.blocks(); ++b) {
    const Rows dout{ctx.inputs[0].f32() + l.out_offset(b), l.out_stride()};
    const Rows q = input_rows(ctx, l, 1, b, 0), k = input_rows(ctx, l, 1, b, 1),
               v = input_rows(ctx, l, 1, b, 2);
    float* dq = ctx.output.f32() + l.grad_offset(b, 0);
    float* dk = ctx.output.f32() + l.grad_offset(b, 1);
    float* dv = ctx.output.f32() + l.grad_offset(b, 2);
    auto dw = [&](int64_t i, int64_t j) { return dot(dout.row(i), v.row(j), l.d); };
    for (int64_t i = 0; i < l.t; ++i) {  // pass 1
      double* st = stats + 3 * (b * l.t + i);
      const int64_t w = score_row(q, k, l, scale, a.causal, i, s, &st[0], &st[1]);
      const uint64_t row = first + static_cast<uint64_t>((b * l.t + i) * l.t);
      double delta = 0;
      for (int64_t j = 0; j < w; ++j) {
        const double p = std::exp(s[j] - st[0]) / st[1];
        ds[j] = keep_factor(a.rate, ctx.node->seed, step, row + j) * dw(i, j);  // dP
        s[j] = p;
        delta += p * ds[j];
      }
      st[2] = delta;
      for (int64_t j = 0; j < w; ++j) ds[j] = s[j] * (ds[j] - delta);
      for (int64_t e = 0; e < l.d; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < w; ++j) acc += ds[j] * k.row(j)[e];
        dq[i * gs + e] = static_cast<float>(scale * acc);
      }
    }
    for (int64_t j = 0; j < l.t; ++j) {  // pass 2: the rows i that see key j
      const int64_t i0 = a.causal ? j : 0;
      for (int64_t i = i0; i < l.t; ++i) {
        const double* st = stats + 3 * (b * l.t + i);
        const double p = std::exp(scale * dot(q.row(i), k.row(j), l.d) - st[0]) / st[1];
        const double c = keep_factor(a.rate, ctx.node->seed, step,
                                     first + static_cast<uint64_t>((b * l.t + i) * l.t + j));
        ds[i] = p * (c * dw(i, j) - st[2]);
        pc[i] = p * c;
      }
      for (int64_t e = 0; e < l.d; ++e) {
        double gk = 0, gv = 0;
        for (int64_t i = i0; i < l.t; ++i) {
          gk += ds[i] * q.row(i)[e];
          gv += pc[i] * dout.row(i)[e];
        }
        dk[j * gs + e] = static_cast<float>(scale * gk);
        dv[j * gs + e] = static_cast<float>(gv);
      }
    }
  }
}

std::vector<ValueId> attention_gradient(GradEmitter& g, const Node& fwd, ValueId dy) {
  const std::vector<ValueId> in = fwd.inputs;  // a copy: emit() grows the graph
  const TensorDesc d = g.graph().value(in[0]).desc;
  if (in.size() == 1)  // the token layout: the gradient is qkv's own [N, T, 3C]
    return {g.emit("grad", "attention_grad", {dy, in[0]}, d)};
  TensorDesc packed = d;
  packed.shape[1] = 3 * d.shape[1];
  const ValueId grads = g.emit("grad", "attention_grad", {dy, in[0], in[1], in[2]}, packed);
  const std::string origin = fwd.attrs.origin;
  return {emit_concat_slice(g, "grad_q", grads, 0, d, origin),
          emit_concat_slice(g, "grad_k", grads, d.shape[1], d, origin),
          emit_concat_slice(g, "grad_v", grads, 2 * d.shape[1], d, origin)};
}

// The gradient's output for [dO, q, k, v] (heads) or [dO, qkv] (tokens).
TensorDesc attention_grad_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const AttentionAttrs&>(at);
  if (in.size() != (a.heads > 0 ? 2u : 4u))
    REMAT_USER_ERROR("attention_grad expects " << (a.heads > 0 ? "[dO, qkv]" : "[dO, q, k, v]")
                                               << ", got " << in.size() << " inputs");
  if (a.heads > 0) return in.at(1);
  TensorDesc packed = in.at(1);
  packed.shape.at(1) = checked_mul(3, packed.shape[1], "attention_grad heads");
  return packed;
}

}  // namespace

void register_attention_ops(OpRegistry& r) {
  OpDef f;
  f.name = "attention";
  f.summary = "fused scaled dot-product attention of heads [N, H, T, D], or of a packed qkv "
              "[N, T, 3C] with `heads` (causal, scale, dropout)";
  f.min_inputs = 1;
  f.max_inputs = 3;
  f.parse = [](AttrReader& rd) { return attention_parse(rd, "attention"); };
  f.infer = attention_infer;
  f.cost = [](const OpAttrs& at, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    const auto& a = static_cast<const AttentionAttrs&>(at);
    const AttentionLayout l = attention_layout(a, in.at(0).shape);
    return attention_cost(a, l, 2, io_bytes(in, out), forward_workspace(l));
  };
  f.cpu = attention_cpu;
#ifdef REMAT_HAVE_CUDA
  f.cuda = attention_cuda;
  f.cuda_workspace = attention_cuda_workspace;
#endif
  f.gradient = attention_gradient;
  with_bf16_per_sample(f, -1).bf16_cuda_native = true;
  r.add(std::move(f));

  OpDef gd;
  gd.name = "attention_grad";
  gd.summary = "fused attention gradient [dO, q, k, v] -> [N, 3H, T, D] (dq, dk, dv), or "
               "[dO, qkv] -> [N, T, 3C]";
  gd.user_visible = false;
  gd.kind = NodeKind::Backward;
  gd.min_inputs = 2;
  gd.max_inputs = 4;
  gd.parse = [](AttrReader& rd) { return attention_parse(rd, "attention_grad"); };
  gd.infer = attention_grad_infer;
  gd.cost = [](const OpAttrs& at, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    const auto& a = static_cast<const AttentionAttrs&>(at);
    const AttentionLayout l = attention_layout(a, in.at(1).shape);
    return attention_cost(a, l, 7, io_bytes(in, out), backward_workspace(l));
  };
  gd.cpu = attention_grad_cpu;
#ifdef REMAT_HAVE_CUDA
  gd.cuda = attention_grad_cuda;
  gd.cuda_workspace = attention_grad_cuda_workspace;
#endif
  with_bf16_per_sample(gd, -1).bf16_cuda_native = true;
  r.add(std::move(gd));
}

}  // namespace remat
