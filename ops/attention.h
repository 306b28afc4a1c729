// The fused attention op's pieces shared by its definition and CPU kernels (ops/attention.cpp)
// and its CUDA path (ops/attention_cuda.cpp): attributes, sizes, the two layouts of Note
// [attention layouts], the scale and the dropout numbering.
#pragma once

#include <cmath>
#include <cstdint>

#include "ops/op_common.h"

namespace remat {

struct AttentionAttrs : OpAttrs {
  bool causal = true;
  bool has_scale = false;
  double scale = 1.0;  // has_scale false: 1 / sqrt(D)
  double rate = 0.0;   // dropout on the probabilities, in [0, 1)
  int64_t heads = 0;   // > 0: the token layout (Note [attention layouts]); 0: heads [N, H, T, D]
};

// Note [attention layouts]
// The op takes its heads in one of two layouts:
//   heads (no `heads` attribute): q, k, v are three [N, H, T, D] inputs (split_heads' outputs),
//     the output is [N, H, T, D], and the gradient [N, 3H, T, D] holds dq, dk and dv at
//     channels h, H + h and 2H + h, which three concat_slice nodes take apart;
//   tokens (`heads: H`): one input qkv [N, T, 3C] (C = H D) holding q, k and v side by side as
//     GPT-2's c_attn linear writes them (q at channels h D + e, k at C + h D + e, v at 2C + h D +
//     e), the output is [N, T, C] (head h at channels h D + e, what merge_heads would give), and
//     the gradient is qkv's own [N, T, 3C]: no split_heads, merge_heads or concat_slice around
//     it, and one linear makes q, k and v.
// AttentionLayout says where row i (a token) of head h of sample n lives in each tensor: element
// e of that row is at offset(n, h) + i * stride + e.
struct AttentionLayout {
  int64_t n = 0, heads = 0, t = 0, d = 0;
  bool tokens = false;

  int64_t c() const { return heads * d; }
  int64_t blocks() const { return n * heads; }  // (sample, head) pairs, b = n H + h
  // q, k, v (which = 0, 1, 2): the heads layout indexes each of the three inputs alike.
  int64_t in_offset(int64_t b, int which) const {
    const int64_t s = b / heads, h = b % heads;
    return tokens ? s * t * 3 * c() + which * c() + h * d : b * t * d;
  }
  int64_t in_stride() const { return tokens ? 3 * c() : d; }
  // The node input that holds q, k or v (which = 0, 1, 2) when `first` inputs come before them
  // (the gradient's dO): three inputs in the heads layout, the one qkv in the token layout.
  size_t input(int first, int which) const {
    return static_cast<size_t>(first + (tokens ? 0 : which));
  }
  int64_t out_offset(int64_t b) const {
    const int64_t s = b / heads, h = b % heads;
    return tokens ? s * t * c() + h * d : b * t * d;
  }
  int64_t out_stride() const { return tokens ? c() : d; }
  // dq, dk, dv (g = 0, 1, 2) in the gradient's output.
  int64_t grad_offset(int64_t b, int g) const {
    const int64_t s = b / heads, h = b % heads;
    return tokens ? s * t * 3 * c() + g * c() + h * d : ((s * 3 + g) * heads + h) * t * d;
  }
  int64_t grad_stride() const { return tokens ? 3 * c() : d; }
};

// The layout of a node given its attributes and q's shape (the heads layout's [N, H, T, D], or
// the token layout's [N, T, 3C]); the shapes were checked when the node was built.
inline AttentionLayout attention_layout(const AttentionAttrs& a, const Shape& q) {
  AttentionLayout l;
  l.tokens = a.heads > 0;
  l.n = q[0];
  if (l.tokens) {
    l.heads = a.heads;
    l.t = q[1];
    l.d = q[2] / (3 * a.heads);
  } else {
    l.heads = q[1];
    l.t = q[2];
    l.d = q[3];
  }
  return l;
}

inline double attention_scale(const AttentionAttrs& a, int64_t d) {
  return a.has_scale ? a.scale : 1.0 / std::sqrt(static_cast<double>(d));
}

// Global index of the first probability element of this run's samples (data parallel and
// per-sample staging: ctx.batch_offset samples of H T T elements come before it).
inline uint64_t attention_first_element(const ExecContext& ctx, const AttentionLayout& l) {
  return static_cast<uint64_t>(ctx.batch_offset * l.heads * l.t * l.t);
}

#ifdef REMAT_HAVE_CUDA
// The CUDA kernels of the op and of its gradient (ops/attention_cuda.cpp).
void attention_cuda(const ExecContext& ctx);
void attention_grad_cuda(const ExecContext& ctx);
int64_t attention_cuda_workspace(const ExecContext& ctx);
int64_t attention_grad_cuda_workspace(const ExecContext& ctx);
#endif

}  // namespace remat
