// attention: scaled dot-product attention of query, key and value heads [N, H, T, D] as one op
// (Note [fused attention]); its gradient attention_grad [dO, q, k, v] -> [N, 3H, T, D] holds dq,
// dk and dv side by side along the heads, which three concat_slice nodes take apart.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/rng.h"
#include "ops/concat.h"
#include "ops/cpu_storage.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

// Note [fused attention]
// out = dropout(softmax(scale q k^T, causal)) v, for each sample and head, without the T x T
// scores, probabilities or mask as graph values: the op keeps one row of scores in its
// workspace, and its gradient recomputes them from q, k and v (flash attention's trade of
// compute for memory, made inside one node, so the solver sees one node whose only outputs are
// [N, H, T, D]). The written-out form (matmul, softmax, dropout, matmul) stays available; `plan`
// compares the two on configs/gpt2.yaml and configs/gpt2_fused.yaml. Math, on the CPU and in
// kernels/attention.cu alike, in double: s_ij = scale sum_e q_ie k_je; p_ij = exp(s_ij - m_i) /
// l_i over the visible keys j (j <= i when causal); the dropout mask c_ij = 1 / (1 - rate) or 0
// from rng_uniform(seed, step, first + (b T + i) T + j) >= rate, the numbering the written-out
// dropout gives the probabilities [N, H, T, T] (b = n H + h, first = the batch offset's
// elements); o_ie = sum_j p_ij c_ij v_je. Backward: dW_ij = dO_i . v_j, dP = c dW, delta_i =
// sum_j p_ij dP_ij, dS = p (dP - delta); dq = scale dS k, dk = scale dS^T q, dv = (p c)^T dO;
// every sum in ascending index order, one rounding per stored element.

struct AttentionAttrs : OpAttrs {
  bool causal = true;
  bool has_scale = false;
  double scale = 1.0;  // has_scale false: 1 / sqrt(D)
  double rate = 0.0;   // dropout on the probabilities, in [0, 1)
};

OpAttrsPtr attention_parse(AttrReader& r, const std::string& op_name) {
  auto a = std::make_shared<AttentionAttrs>();
  a->causal = r.get_bool("causal", true);
  a->has_scale = r.has("scale");
  a->scale = r.get_double("scale", 1.0, -1e30, 1e30);
  a->rate = r.get_double("dropout", 0.0, 0.0, 1.0);
  if (a->rate >= 1.0) r.fail("dropout", "must be less than 1 (in [0, 1))");
  r.finish(op_name);
  return a;
}

struct Dims {
  int64_t n, heads, t, d;
};

Dims dims_of(const Shape& s) { return {s[0], s[1], s[2], s[3]}; }

TensorDesc attention_infer(const OpAttrs&, const std::vector<TensorDesc>& in) {
  if (in.size() != 3) REMAT_USER_ERROR("attention expects 3 inputs (q, k, v), got " << in.size());
  const DType t = require_float("attention", in);
  for (const TensorDesc& x : in) {
    if (x.shape.size() != 4 || x.shape[2] < 1 || x.shape[3] < 1)
      REMAT_USER_ERROR("attention expects heads [N, H, T, D] (split_heads' output), got "
                       << shape_str(x.shape));
    if (x.shape != in[0].shape || x.dtype != t)
      REMAT_USER_ERROR("attention expects q, k and v of one shape and dtype, got "
                       << shape_str(in[0].shape) << " and " << shape_str(x.shape));
  }
  const Shape& x = in[0].shape;  // the mask numbering's range: N H T T elements
  checked_mul(checked_mul(checked_mul(x[0], x[1], "attention heads"), x[2], "attention rows"), x[2],
              "attention scores");
  return in[0];
}

double scale_of(const AttentionAttrs& a, int64_t d) {
  return a.has_scale ? a.scale : 1.0 / std::sqrt(static_cast<double>(d));
}

// Global index of the first probability element of this run's samples (data parallel and
// per-sample staging: ctx.batch_offset samples of H T T elements come before it).
uint64_t first_element(const ExecContext& ctx, const Dims& m) {
  return static_cast<uint64_t>(ctx.batch_offset * m.heads * m.t * m.t);
}

// The dropout factor c_ij of Note [fused attention] (the kernels' too: kernels/rng.h).
double keep_factor(double rate, uint64_t seed, uint64_t step, uint64_t index) {
  const float r = static_cast<float>(rate);
  return rng_dropout_factor(r, rng_keep_scale(r), seed, step, index);
}

// FLOPs: scores and the weighted sum are two products of T x T x D per head (half of them
// under the causal mask), plus the softmax; the gradient recomputes the scores twice and forms
// dW, dq, dk and dv: seven such products.
OpCost attention_cost(const OpAttrs& at, const Shape& s, double products, int64_t io,
                      int64_t workspace) {
  const Dims m = dims_of(s);
  const double visible = static_cast<const AttentionAttrs&>(at).causal ? 0.5 : 1.0;
  const double tt = static_cast<double>(m.n * m.heads) * static_cast<double>(m.t) * m.t * visible;
  OpCost c;
  c.flops = products * 2.0 * tt * static_cast<double>(m.d) + 5.0 * tt;
  c.bytes_moved = io;
  c.workspace_bytes = workspace;
  return c;
}

// CPU workspace: two rows of T doubles (forward); per row m, l and delta of every query row
// plus three rows of T doubles (backward).
int64_t forward_workspace(const Dims& m) { return 2 * m.t * 8; }
int64_t backward_workspace(const Dims& m) { return (3 * m.n * m.heads * m.t + 3 * m.t) * 8; }

// sum_e a_e b_e over d elements, in double, e ascending.
double dot(const float* a, const float* b, int64_t d) {
  double acc = 0;
  for (int64_t e = 0; e < d; ++e) acc += static_cast<double>(a[e]) * b[e];
  return acc;
}

// Scores of query row i of head b against the visible keys into s[0, w); returns w, and m_i,
// l_i through max / sum.
int64_t score_row(const float* q, const float* k, const Dims& m, double scale, bool causal,
                  int64_t i, double* s, double* max, double* sum) {
  const int64_t w = causal ? i + 1 : m.t;
  const float* qi = q + i * m.d;
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < w; ++j) {
    s[j] = scale * dot(qi, k + j * m.d, m.d);
    mx = std::max(mx, s[j]);
  }
  double l = 0;
  for (int64_t j = 0; j < w; ++j) l += std::exp(s[j] - mx);
  *max = mx;
  *sum = l;
  return w;
}

// inputs [q, k, v] -> out.
void attention_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<AttentionAttrs>(*ctx.node);
  const Dims m = dims_of(ctx.inputs[0].shape());
  REMAT_CHECK(ctx.workspace_bytes >= forward_workspace(m),
              "node '" << ctx.node->name << "': attention workspace too small");
  const double scale = scale_of(a, m.d);
  const uint64_t first = first_element(ctx, m), step = static_cast<uint64_t>(ctx.step);
  auto* s = static_cast<double*>(ctx.workspace);
  double* w8 = s + m.t;  // p_ij c_ij
  const int64_t block = m.t * m.d;
  for (int64_t b = 0; b < m.n * m.heads; ++b) {
    const float* q = ctx.inputs[0].f32() + b * block;
    const float* k = ctx.inputs[1].f32() + b * block;
    const float* v = ctx.inputs[2].f32() + b * block;
    float* o = ctx.output.f32() + b * block;
    for (int64_t i = 0; i < m.t; ++i) {
      double mx, l;
      const int64_t w = score_row(q, k, m, scale, a.causal, i, s, &mx, &l);
      const uint64_t row = first + static_cast<uint64_t>((b * m.t + i) * m.t);
      for (int64_t j = 0; j < w; ++j)
        w8[j] = std::exp(s[j] - mx) / l * keep_factor(a.rate, ctx.node->seed, step, row + j);
      for (int64_t e = 0; e < m.d; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < w; ++j) acc += w8[j] * v[j * m.d + e];
        o[i * m.d + e] = static_cast<float>(acc);
      }
    }
  }
}

// inputs [dO, q, k, v] -> [N, 3H, T, D]: dq, dk, dv of sample n head h at channels h, H + h,
// 2H + h. Pass 1 per query row: m, l, delta and dq; pass 2 per key row: dk and dv.
void attention_grad_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<AttentionAttrs>(*ctx.node);
  const Dims m = dims_of(ctx.inputs[1].shape());
  REMAT_CHECK(ctx.workspace_bytes >= backward_workspace(m),
              "node '" << ctx.node->name << "': attention_grad workspace too small");
  const double scale = scale_of(a, m.d);
  const uint64_t first = first_element(ctx, m), step = static_cast<uint64_t>(ctx.step);
  auto* stats = static_cast<double*>(ctx.workspace);  // per row (b, i): m, l, delta
  double* s = stats + 3 * m.n * m.heads * m.t;
  double* ds = s + m.t;
  double* pc = ds + m.t;
  const int64_t block = m.t * m.d;
  for (int64_t b = 0; b < m.n * m.heads; ++b) {
    const int64_t n = b / m.heads, h = b % m.heads;
    const float* dout = ctx.inputs[0].f32() + b * block;
    const float* q = ctx.inputs[1].f32() + b * block;
    const float* k = ctx.inputs[2].f32() + b * block;
    const float* v = ctx.inputs[3].f32() + b * block;
    float* dq = ctx.output.f32() + ((n * 3 * m.heads) + h) * block;
    float* dk = dq + m.heads * block;
    float* dv = dk + m.heads * block;
    auto dw = [&](int64_t i, int64_t j) { return dot(dout + i * m.d, v + j * m.d, m.d); };
    for (int64_t i = 0; i < m.t; ++i) {  // pass 1
      double* st = stats + 3 * (b * m.t + i);
      const int64_t w = score_row(q, k, m, scale, a.causal, i, s, &st[0], &st[1]);
      const uint64_t row = first + static_cast<uint64_t>((b * m.t + i) * m.t);
      double delta = 0;
      for (int64_t j = 0; j < w; ++j) {
        const double p = std::exp(s[j] - st[0]) / st[1];
        ds[j] = keep_factor(a.rate, ctx.node->seed, step, row + j) * dw(i, j);  // dP
        s[j] = p;
        delta += p * ds[j];
      }
      st[2] = delta;
      for (int64_t j = 0; j < w; ++j) ds[j] = s[j] * (ds[j] - delta);
      for (int64_t e = 0; e < m.d; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < w; ++j) acc += ds[j] * k[j * m.d + e];
        dq[i * m.d + e] = static_cast<float>(scale * acc);
      }
    }
    for (int64_t j = 0; j < m.t; ++j) {  // pass 2: the rows i that see key j
      const int64_t i0 = a.causal ? j : 0;
      for (int64_t i = i0; i < m.t; ++i) {
        const double* st = stats + 3 * (b * m.t + i);
        const double p = std::exp(scale * dot(q + i * m.d, k + j * m.d, m.d) - st[0]) / st[1];
        const double c = keep_factor(a.rate, ctx.node->seed, step,
                                     first + static_cast<uint64_t>((b * m.t + i) * m.t + j));
        ds[i] = p * (c * dw(i, j) - st[2]);
        pc[i] = p * c;
      }
      for (int64_t e = 0; e < m.d; ++e) {
        double gk = 0, gv = 0;
        for (int64_t i = i0; i < m.t; ++i) {
          gk += ds[i] * q[i * m.d + e];
          gv += pc[i] * dout[i * m.d + e];
        }
        dk[j * m.d + e] = static_cast<float>(scale * gk);
        dv[j * m.d + e] = static_cast<float>(gv);
      }
    }
  }
}

#ifdef REMAT_HAVE_CUDA
// The kernels CudaOptions::attention_kernel asks for where the data allow them: the tiled ones
// for head sizes up to 128 (Note [tiled attention kernels]), the flash ones for bf16 data,
// head sizes 32, 64, 128 and 16-byte aligned tensors (Note [flash attention kernels]); the row
// kernels otherwise.
AttentionKernel kernel_for(const ExecContext& ctx, const Dims& m, const void* out) {
  const AttentionKernel asked = cuda_context(ctx).attention_kernel;
  if (asked == AttentionKernel::Tiled && attention_tiled_supports(m.d)) return asked;
  if (asked == AttentionKernel::Flash && ctx.inputs[0].desc->dtype == DType::BF16 &&
      attention_flash_supports(m.d)) {
    bool aligned = (reinterpret_cast<uintptr_t>(out) & 15u) == 0;
    for (const TensorView& x : ctx.inputs)
      aligned &= (reinterpret_cast<uintptr_t>(x.data) & 15u) == 0;
    if (aligned) return asked;
  }
  return AttentionKernel::Rows;
}

// F32 or BF16 data, all of one dtype (bf16-native: Note [bf16 launchers] in kernels/kernels.h).
void attention_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<AttentionAttrs>(*ctx.node);
  const Dims m = dims_of(ctx.inputs[0].shape());
  const AttentionKernel kernel = kernel_for(ctx, m, ctx.output.data);
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    auto forward = [&](auto* out, auto... args) {
      if constexpr (std::is_same_v<T, uint16_t>) {
        if (kernel == AttentionKernel::Flash) return attention_forward_flash(out, args...);
      }
      if (kernel == AttentionKernel::Tiled) attention_forward_tiled(out, args...);
      else attention_forward(out, args...);
    };
    forward(storage<T>(ctx.output), storage<T>(ctx.inputs[0]), storage<T>(ctx.inputs[1]),
            storage<T>(ctx.inputs[2]), m.n * m.heads, m.t, m.d, scale_of(a, m.d), a.causal,
            static_cast<float>(a.rate), ctx.node->seed, step_source(ctx),
            first_element(ctx, m), cuda_stream(ctx));
  });
}

int64_t attention_grad_cuda_workspace(const ExecContext& ctx) {
  const Dims m = dims_of(ctx.inputs.at(1).shape());
  return attention_backward_workspace_bytes(m.n * m.heads, m.t);
}

void attention_grad_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<AttentionAttrs>(*ctx.node);
  const Dims m = dims_of(ctx.inputs[1].shape());
  REMAT_CHECK(ctx.workspace_bytes >= attention_grad_cuda_workspace(ctx),
              "node '" << ctx.node->name << "': attention_grad workspace too small");
  const AttentionKernel kernel = kernel_for(ctx, m, ctx.output.data);
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    auto backward = [&](auto* grads, auto... args) {
      if constexpr (std::is_same_v<T, uint16_t>) {
        if (kernel == AttentionKernel::Flash) return attention_backward_flash(grads, args...);
      }
      if (kernel == AttentionKernel::Tiled) attention_backward_tiled(grads, args...);
      else attention_backward(grads, args...);
    };
    backward(storage<T>(ctx.output), storage<T>(ctx.inputs[0]), storage<T>(ctx.inputs[1]),
             storage<T>(ctx.inputs[2]), storage<T>(ctx.inputs[3]), m.n, m.heads, m.t, m.d,
             scale_of(a, m.d), a.causal, static_cast<float>(a.rate), ctx.node->seed,
             step_source(ctx), first_element(ctx, m), ctx.workspace,
             cuda_stream(ctx));
  });
}
#endif

std::vector<ValueId> attention_gradient(GradEmitter& g, const Node& fwd, ValueId dy) {
  const std::vector<ValueId> in = fwd.inputs;  // a copy: emit() grows the graph
  const TensorDesc d = g.graph().value(in[0]).desc;
  TensorDesc packed = d;
  packed.shape[1] = 3 * d.shape[1];
  const ValueId grads = g.emit("grad", "attention_grad", {dy, in[0], in[1], in[2]}, packed);
  const std::string origin = fwd.attrs.origin;
  return {emit_concat_slice(g, "grad_q", grads, 0, d, origin),
          emit_concat_slice(g, "grad_k", grads, d.shape[1], d, origin),
          emit_concat_slice(g, "grad_v", grads, 2 * d.shape[1], d, origin)};
}

}  // namespace

void register_attention_ops(OpRegistry& r) {
  OpDef f;
  f.name = "attention";
  f.summary = "fused scaled dot-product attention of heads [N, H, T, D] (causal, scale, dropout)";
  f.min_inputs = f.max_inputs = 3;
  f.parse = [](AttrReader& rd) { return attention_parse(rd, "attention"); };
  f.infer = attention_infer;
  f.cost = [](const OpAttrs& at, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    const Dims m = dims_of(out.shape);
    return attention_cost(at, out.shape, 2, io_bytes(in, out), forward_workspace(m));
  };
  f.cpu = attention_cpu;
#ifdef REMAT_HAVE_CUDA
  f.cuda = attention_cuda;
#endif
  f.gradient = attention_gradient;
  with_bf16_per_sample(f, -1).bf16_cuda_native = true;
  r.add(std::move(f));

  OpDef gd;
  gd.name = "attention_grad";
  gd.summary = "fused attention gradient [dO, q, k, v] -> [N, 3H, T, D] (dq, dk, dv)";
  gd.user_visible = false;
  gd.kind = NodeKind::Backward;
  gd.min_inputs = gd.max_inputs = 4;
  gd.parse = [](AttrReader& rd) { return attention_parse(rd, "attention_grad"); };
  gd.infer = [](const OpAttrs&, const std::vector<TensorDesc>& in) {
    TensorDesc packed = in.at(1);
    packed.shape[1] = checked_mul(3, packed.shape[1], "attention_grad heads");
    return packed;
  };
  gd.cost = [](const OpAttrs& at, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    const Dims m = dims_of(in.at(1).shape);
    return attention_cost(at, in.at(1).shape, 7, io_bytes(in, out), backward_workspace(m));
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
