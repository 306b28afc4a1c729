// The fused attention op's CUDA path (ops/attention.h): the kernels CudaOptions::attention_kernel
// asks for, in either layout of Note [attention layouts]. The flash kernels read both layouts in
// place; the row and tiled kernels take the heads layout only, so the token layout reaches them
// through copies in the node's workspace (Note [token layout on the row kernels]).
#ifdef REMAT_HAVE_CUDA

#include <cstdint>

#include "ops/attention.h"
#include "ops/cpu_storage.h"
#include "ops/op_cuda.h"

namespace remat {
namespace {

// Note [token layout on the row kernels]
// The row and tiled kernels (kernels/attention.cu, attention_tiled*.cu) index q, k, v and the
// output as [N, H, T, D] and the gradient as [N, 3H, T, D]. For the token layout the forward
// permutes qkv [N, T, 3H, D] to [N, 3H, T, D] in the workspace, where sample n's q, k and v are
// the consecutive [H, T, D] blocks at 3n, 3n + 1 and 3n + 2, runs the kernels one sample at a
// time on them (the dropout numbering advanced by n H T T, so the masks are the flash kernels'
// and the CPU's), and permutes the [N, H, T, D] result back to [N, T, C]; the backward stages dO
// and qkv the same way, and the [N, 3H, T, D] gradient permutes to [N, T, 3H, D], which is qkv's
// [N, T, 3C]. The copies are exact and cost the workspace: 4 N T C elements forward, 7 N T C
// backward (plus the kernels' own 3 H T doubles). The flash kernels need none of it.

constexpr int64_t kAlign = 256;
int64_t round_up(int64_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

HeadStrides in_strides(const AttentionLayout& l) {
  if (l.tokens) return {l.t * 3 * l.c(), l.d, 3 * l.c()};
  return {l.heads * l.t * l.d, l.t * l.d, l.d};
}
HeadStrides out_strides(const AttentionLayout& l) {
  if (l.tokens) return {l.t * l.c(), l.d, l.c()};
  return {l.heads * l.t * l.d, l.t * l.d, l.d};
}
HeadStrides grad_strides(const AttentionLayout& l) {
  if (l.tokens) return {l.t * 3 * l.c(), l.d, 3 * l.c()};
  return {3 * l.heads * l.t * l.d, l.t * l.d, l.d};
}

// The kernels asked for where the data allow them: tiled for head sizes up to 128 (Note [tiled
// attention kernels]), flash for bf16 data with head sizes 32, 64, 128 (Note [flash attention
// kernels]; the launchers check the alignment, which the allocator's 256 bytes give); rows
// otherwise.
AttentionKernel kernel_for(const ExecContext& ctx, const AttentionLayout& l, DType t) {
  const AttentionKernel asked = cuda_context(ctx).attention_kernel;
  if (asked == AttentionKernel::Tiled && attention_tiled_supports(l.d)) return asked;
  if (asked == AttentionKernel::Flash && t == DType::BF16 && attention_flash_supports(l.d))
    return asked;
  return AttentionKernel::Rows;
}

// The row or tiled forward on one [bh, T, D] group of heads.
template <typename T>
void heads_forward(AttentionKernel kernel, T* out, const T* q, const T* k, const T* v, int64_t bh,
                   const AttentionLayout& l, const AttentionAttrs& a, const ExecContext& ctx,
                   uint64_t first) {
  auto run = [&](auto... args) {
    if (kernel == AttentionKernel::Tiled)
      attention_forward_tiled(args...);
    else
      attention_forward(args...);
  };
  run(out, q, k, v, bh, l.t, l.d, attention_scale(a, l.d), a.causal, static_cast<float>(a.rate),
      ctx.node->seed, step_source(ctx), first, cuda_stream(ctx));
}

// The row or tiled backward on n samples of [heads, T, D] (grads [n, 3 heads, T, D]).
template <typename T>
void heads_backward(AttentionKernel kernel, T* grads, const T* dout, const T* q, const T* k,
                    const T* v, int64_t n, const AttentionLayout& l, const AttentionAttrs& a,
                    const ExecContext& ctx, uint64_t first, void* workspace) {
  auto run = [&](auto... args) {
    if (kernel == AttentionKernel::Tiled)
      attention_backward_tiled(args...);
    else
      attention_backward(args...);
  };
  run(grads, dout, q, k, v, n, l.heads, l.t, l.d, attention_scale(a, l.d), a.causal,
      static_cast<float>(a.rate), ctx.node->seed, step_source(ctx), first, workspace,
      cuda_stream(ctx));
}

// Bytes of one [N, T, C] (or [N, H, T, D]) tensor in the op's dtype.
int64_t block_bytes(const AttentionLayout& l, DType t) {
  return checked_mul(l.n * l.t, l.c(), "attention staging") * dtype_size(t);
}

}  // namespace

int64_t attention_cuda_workspace(const ExecContext& ctx) {
  const auto& a = attrs_of<AttentionAttrs>(*ctx.node);
  const DType t = ctx.inputs.at(0).desc->dtype;
  const AttentionLayout l = attention_layout(a, ctx.inputs.at(0).shape());
  if (!l.tokens || kernel_for(ctx, l, t) == AttentionKernel::Flash) return 0;
  return 4 * round_up(block_bytes(l, t));  // qkv and the output in the heads layout
}

int64_t attention_grad_cuda_workspace(const ExecContext& ctx) {
  const auto& a = attrs_of<AttentionAttrs>(*ctx.node);
  const DType t = ctx.inputs.at(0).desc->dtype;
  const AttentionLayout l = attention_layout(a, ctx.inputs.at(1).shape());
  if (!l.tokens || kernel_for(ctx, l, t) == AttentionKernel::Flash)
    return attention_backward_workspace_bytes(l.blocks(), l.t);
  // the kernels' statistics for one sample, then dO, qkv and the gradient in the heads layout
  return round_up(attention_backward_workspace_bytes(l.heads, l.t)) +
         7 * round_up(block_bytes(l, t));
}

// inputs [q, k, v] or [qkv] -> out, F32 or BF16 (bf16-native: Note [bf16 launchers] in
// kernels/kernels.h).
void attention_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<AttentionAttrs>(*ctx.node);
  const DType dtype = ctx.inputs[0].desc->dtype;
  const AttentionLayout l = attention_layout(a, ctx.inputs[0].shape());
  const AttentionKernel kernel = kernel_for(ctx, l, dtype);
  const uint64_t first = attention_first_element(ctx, l);
  if (kernel == AttentionKernel::Flash) {
    auto in = [&](int x) { return ctx.inputs[l.input(0, x)].bf16() + l.in_offset(0, x); };
    attention_forward_flash(ctx.output.bf16(), out_strides(l), in(0), in(1), in(2), in_strides(l),
                            l.n, l.heads, l.t, l.d, attention_scale(a, l.d), a.causal,
                            static_cast<float>(a.rate), ctx.node->seed, step_source(ctx), first,
                            cuda_stream(ctx));
    return;
  }
  REMAT_CHECK(ctx.workspace_bytes >= attention_cuda_workspace(ctx),
              "node '" << ctx.node->name << "': attention workspace too small");
  with_storage(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* out = storage<T>(ctx.output);
    if (!l.tokens) {
      heads_forward(kernel, out, storage<T>(ctx.inputs[0]), storage<T>(ctx.inputs[1]),
                    storage<T>(ctx.inputs[2]), l.blocks(), l, a, ctx, first);
      return;
    }
    // Note [token layout on the row kernels]
    const int64_t hb = l.heads * l.t * l.d;  // one sample's [H, T, D]
    auto* ws = static_cast<unsigned char*>(ctx.workspace);
    T* qkvh = reinterpret_cast<T*>(ws);
    T* outh = reinterpret_cast<T*>(ws + 3 * round_up(block_bytes(l, dtype)));
    permute_0213(qkvh, storage<T>(ctx.inputs[0]), l.n, l.t, 3 * l.heads, l.d, cuda_stream(ctx));
    for (int64_t n = 0; n < l.n; ++n) {
      const T* q = qkvh + 3 * n * hb;
      heads_forward(kernel, outh + n * hb, q, q + hb, q + 2 * hb, l.heads, l, a, ctx,
                    first + static_cast<uint64_t>(n * l.heads * l.t * l.t));
    }
    permute_0213(out, outh, l.n, l.heads, l.t, l.d, cuda_stream(ctx));
  });
}

// inputs [dO, q, k, v] or [dO, qkv] -> the gradient of Note [attention layouts].
void attention_grad_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<AttentionAttrs>(*ctx.node);
  const DType dtype = ctx.inputs[0].desc->dtype;
  const AttentionLayout l = attention_layout(a, ctx.inputs[1].shape());
  REMAT_CHECK(ctx.workspace_bytes >= attention_grad_cuda_workspace(ctx),
              "node '" << ctx.node->name << "': attention_grad workspace too small");
  const AttentionKernel kernel = kernel_for(ctx, l, dtype);
  const uint64_t first = attention_first_element(ctx, l);
  if (kernel == AttentionKernel::Flash) {
    auto in = [&](int x) { return ctx.inputs[l.input(1, x)].bf16() + l.in_offset(0, x); };
    uint16_t* g = ctx.output.bf16();
    attention_backward_flash(g, g + l.grad_offset(0, 1), g + l.grad_offset(0, 2), grad_strides(l),
                             ctx.inputs[0].bf16(), out_strides(l), in(0), in(1), in(2),
                             in_strides(l), l.n, l.heads, l.t, l.d, attention_scale(a, l.d),
                             a.causal, static_cast<float>(a.rate), ctx.node->seed, step_source(ctx),
                             first, ctx.workspace, cuda_stream(ctx));
    return;
  }
  with_storage(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* grads = storage<T>(ctx.output);
    if (!l.tokens) {
      heads_backward(kernel, grads, storage<T>(ctx.inputs[0]), storage<T>(ctx.inputs[1]),
                     storage<T>(ctx.inputs[2]), storage<T>(ctx.inputs[3]), l.n, l, a, ctx, first,
                     ctx.workspace);
      return;
    }
    // Note [token layout on the row kernels]
    const int64_t hb = l.heads * l.t * l.d, bytes = round_up(block_bytes(l, dtype));
    auto* ws = static_cast<unsigned char*>(ctx.workspace);
    void* kernel_ws = ws;
    ws += round_up(attention_backward_workspace_bytes(l.heads, l.t));
    T* douth = reinterpret_cast<T*>(ws);
    T* qkvh = reinterpret_cast<T*>(ws + bytes);
    T* gradh = reinterpret_cast<T*>(ws + 4 * bytes);
    const cudaStream_t stream = cuda_stream(ctx);
    permute_0213(douth, storage<T>(ctx.inputs[0]), l.n, l.t, l.heads, l.d, stream);
    permute_0213(qkvh, storage<T>(ctx.inputs[1]), l.n, l.t, 3 * l.heads, l.d, stream);
    for (int64_t n = 0; n < l.n; ++n) {
      const T* q = qkvh + 3 * n * hb;
      heads_backward(kernel, gradh + 3 * n * hb, douth + n * hb, q, q + hb, q + 2 * hb, 1, l, a,
                     ctx, first + static_cast<uint64_t>(n * l.heads * l.t * l.t), kernel_ws);
    }
    permute_0213(grads, gradh, l.n, 3 * l.heads, l.t, l.d, stream);
  });
}

}  // namespace remat

#endif  // REMAT_HAVE_CUDA
