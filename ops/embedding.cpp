// embedding: token ids int32 [..] (e.g. [N, T]) -> rows of a table weight [vocab, dim]:
// y[.., :] = weight[id, :]; and its backward op embedding_grad_weight [dy, ids] -> [vocab, dim],
// which sums the gradient rows of every occurrence of a token in a fixed order (Note
// [deterministic embedding gradient]). The ids get no gradient.
#include <algorithm>
#include <string>
#include <vector>

#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

// Note [deterministic embedding gradient]
// dW[v, :] = sum of dy[p, :] over the positions p whose id is v. Both paths first order the
// positions by (id, position) — the CPU by a stable counting sort, the GPU by CUB's stable radix
// sort of (id, position) pairs — and then sum each id's rows in double in increasing position
// order, one writer per (v, c): no atomics, so the CPU and the GPU give the same bits and a
// recomputation gives the same bits as the first run. Rows of ids that do not occur are zero.

struct EmbeddingAttrs : OpAttrs {
  int64_t vocab = 0, dim = 0;
  double init_std = 0.02;
};

// Shared with embedding_grad_weight (it reads the forward node's attrs).
OpAttrsPtr embedding_parse(AttrReader& r, const std::string& op_name) {
  auto a = std::make_shared<EmbeddingAttrs>();
  a->vocab = r.require_int("vocab", 1, int64_t{1} << 31);
  a->dim = r.require_int("dim", 1, int64_t{1} << 24);
  a->init_std = r.get_double("init_std", 0.02, 1e-12, 100.0);
  r.finish(op_name);
  return a;
}

// ids [..] int32 -> [.., dim].
TensorDesc embedding_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const EmbeddingAttrs&>(at);
  const TensorDesc& ids = in.at(0);
  if (ids.dtype != DType::I32 || ids.shape.empty())
    REMAT_USER_ERROR("embedding expects int32 token ids (e.g. the input [N, T] of a token "
                     "model), got " << dtype_name(ids.dtype) << " " << shape_str(ids.shape));
  Shape y = ids.shape;
  y.push_back(a.dim);
  return checked_desc(y, DType::F32, "embedding output");
}

std::vector<ParamSpec> embedding_params(const OpAttrs& at, const std::vector<TensorDesc>&) {
  const auto& a = static_cast<const EmbeddingAttrs&>(at);
  ParamSpec w;
  w.suffix = "weight";
  w.desc = checked_desc({a.vocab, a.dim}, DType::F32, "embedding weight");
  w.init = InitKind::Normal;
  w.init_std = a.init_std;
  w.fan_in = a.vocab;
  w.fan_out = a.dim;
  w.role = ParamRole::Embedding;
  return {w};
}

// The CPU path's workspace: the positions in (id, position) order (int32) and the offset of
// each id's run (int64, vocab + 1).
int64_t grad_cpu_workspace(int64_t rows, int64_t vocab) {
  const int64_t order = checked_mul(rows, 4, "embedding_grad_weight workspace");
  return (order + 7) / 8 * 8 + checked_mul(vocab + 1, 8, "embedding_grad_weight workspace");
}

// Throws the user error for a token id outside [0, vocab) at flat position p of `ids`.
[[noreturn]] void bad_id(const ExecContext& ctx, const TensorView& ids, int32_t id, int64_t p,
                         int64_t vocab) {
  const int64_t t = ids.shape().back();
  REMAT_USER_ERROR(ctx.node->op << " node '" << ctx.node->name << "': token id " << id
                                << " at sample " << p / t << ", position " << p % t
                                << " is outside the vocabulary [0, " << vocab << ")");
}

// y[p, :] = weight[ids[p], :]. inputs [ids, weight].
void embedding_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<EmbeddingAttrs>(*ctx.node);
  const int32_t* ids = ctx.inputs[0].i32();
  const float* w = ctx.inputs[1].f32();
  float* y = ctx.output.f32();
  const int64_t rows = ctx.inputs[0].numel();
  for (int64_t p = 0; p < rows; ++p) {
    const int32_t id = ids[p];
    if (id < 0 || id >= a.vocab) bad_id(ctx, ctx.inputs[0], id, p, a.vocab);
    std::copy(w + id * a.dim, w + (id + 1) * a.dim, y + p * a.dim);
  }
}

// dW [vocab, dim] from dy [.., dim] and ids [..] (Note [deterministic embedding gradient]).
void embedding_grad_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<EmbeddingAttrs>(*ctx.node);
  const float* dy = ctx.inputs[0].f32();
  const int32_t* ids = ctx.inputs[1].i32();
  float* dw = ctx.output.f32();
  const int64_t rows = ctx.inputs[1].numel(), c = a.dim;
  REMAT_CHECK(ctx.workspace_bytes >= grad_cpu_workspace(rows, a.vocab),
              "embedding_grad_weight: workspace too small");
  auto* order = static_cast<int32_t*>(ctx.workspace);
  auto* end = reinterpret_cast<int64_t*>(static_cast<char*>(ctx.workspace) + (rows * 4 + 7) / 8 * 8);
  // Stable counting sort: end[v] = first slot of id v, then advanced past each placed position,
  // so that afterwards id v's positions are order[end[v - 1] .. end[v]) (end[-1] = 0).
  std::fill(end, end + a.vocab + 1, 0);
  for (int64_t p = 0; p < rows; ++p) {
    if (ids[p] < 0 || ids[p] >= a.vocab) bad_id(ctx, ctx.inputs[1], ids[p], p, a.vocab);
    ++end[ids[p] + 1];
  }
  for (int64_t v = 0; v < a.vocab; ++v) end[v + 1] += end[v];
  for (int64_t p = 0; p < rows; ++p) order[end[ids[p]]++] = static_cast<int32_t>(p);
  for (int64_t v = 0; v < a.vocab; ++v) {
    float* row = dw + v * c;
    const int64_t begin = v == 0 ? 0 : end[v - 1];
    for (int64_t j = 0; j < c; ++j) {
      double s = 0;
      for (int64_t k = begin; k < end[v]; ++k) s += dy[order[k] * c + j];
      row[j] = static_cast<float>(s);
    }
  }
}

#ifdef REMAT_HAVE_CUDA
void embedding_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<EmbeddingAttrs>(*ctx.node);
  embedding_forward(ctx.output.f32(), ctx.inputs[0].i32(), ctx.inputs[1].f32(),
                    ctx.inputs[0].numel(), a.dim, a.vocab, cuda_stream(ctx));
}

int64_t embedding_grad_cuda_workspace(const ExecContext& ctx) {
  const auto& a = attrs_of<EmbeddingAttrs>(*ctx.node);
  return embedding_backward_workspace_bytes(ctx.inputs.at(1).numel(), a.vocab);
}

void embedding_grad_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<EmbeddingAttrs>(*ctx.node);
  REMAT_CHECK(ctx.workspace_bytes >= embedding_grad_cuda_workspace(ctx),
              "node '" << ctx.node->name << "': embedding_grad_weight workspace too small");
  embedding_backward(ctx.output.f32(), ctx.inputs[0].f32(), ctx.inputs[1].i32(),
                     ctx.inputs[1].numel(), a.dim, a.vocab, ctx.workspace, ctx.workspace_bytes,
                     cuda_stream(ctx));
}
#endif

std::vector<ValueId> embedding_gradient(GradEmitter& g, const Node& fwd, ValueId dy) {
  const ValueId ids = fwd.inputs.at(0), weight = fwd.inputs.at(1);
  const TensorDesc wd = g.graph().value(weight).desc;  // a copy: emit grows the graph
  return {kNoValue, g.emit("grad_weight", "embedding_grad_weight", {dy, ids}, wd)};
}

}  // namespace

void register_embedding_ops(OpRegistry& r) {
  OpDef f;
  f.name = "embedding";
  f.summary = "token embedding: int32 ids [..] -> weight[id] [.., dim] (vocab, dim, init_std)";
  f.parse = [](AttrReader& rd) { return embedding_parse(rd, "embedding"); };
  f.infer = embedding_infer;
  f.params = embedding_params;
  f.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    OpCost c;
    c.bytes_moved = in.at(0).bytes() + 2 * out.bytes();  // ids, table rows read, output
    return c;
  };
  f.cpu = embedding_cpu;
#ifdef REMAT_HAVE_CUDA
  f.cuda = embedding_cuda;
#endif
  f.gradient = embedding_gradient;
  f.index_bound = [](const OpAttrs& at, const std::vector<TensorDesc>&, int) {
    return static_cast<const EmbeddingAttrs&>(at).vocab;
  };
  r.add(std::move(f));

  OpDef gw;
  gw.name = "embedding_grad_weight";
  gw.summary = "embedding table gradient [dy, ids] -> [vocab, dim], deterministic";
  gw.user_visible = false;
  gw.min_inputs = gw.max_inputs = 2;
  gw.parse = [](AttrReader& rd) { return embedding_parse(rd, "embedding_grad_weight"); };
  gw.infer = [](const OpAttrs& at, const std::vector<TensorDesc>& in) {
    const auto& a = static_cast<const EmbeddingAttrs&>(at);
    REMAT_CHECK(in.at(1).dtype == DType::I32 && in[0].shape.size() == in[1].shape.size() + 1,
                "embedding_grad_weight expects [dy [.., dim], ids [..]]");
    return TensorDesc{{a.vocab, a.dim}, DType::F32};
  };
  gw.cost = [](const OpAttrs& at, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    const auto& a = static_cast<const EmbeddingAttrs&>(at);
    OpCost c = elementwise_cost(in, out, 0);
    c.flops = static_cast<double>(in.at(0).numel());
    c.workspace_bytes = grad_cpu_workspace(in.at(1).numel(), a.vocab);
    return c;
  };
  gw.cpu = embedding_grad_cpu;
#ifdef REMAT_HAVE_CUDA
  gw.cuda = embedding_grad_cuda;
  gw.cuda_workspace = embedding_grad_cuda_workspace;
#endif
  gw.index_bound = [](const OpAttrs& at, const std::vector<TensorDesc>&, int) {
    return static_cast<const EmbeddingAttrs&>(at).vocab;
  };
  r.add(std::move(gw));
}

}  // namespace remat
