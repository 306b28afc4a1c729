// Op test cases shared by the CPU gradient tests (test_ops_a.cpp) and the CUDA-vs-CPU tests
// (test_cuda_ops_a.cpp), so both backends are checked on exactly the same shapes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/attrs.h"
#include "runtime/core/tensor.h"
#include "tests/op_harness.h"

namespace remat {

struct ConvCase {
  const char* name;
  AttrMap attrs;
  Shape x;
  float x_scale;  // inputs uniform in [-x_scale, x_scale)
};

// conv2d: stride, asymmetric kernel/stride/padding, dilation, groups, depthwise (multiplier 1
// and 2), grouped pointwise, no bias, fused relu and relu6 (relu6 with inputs scaled so both
// clips are exercised).
inline std::vector<ConvCase> conv2d_cases() {
  using Ints = std::vector<int64_t>;
  return {
      {"basic", attr_map({{"filters", 4}, {"kernel", 3}, {"padding", 1}}), {2, 3, 5, 5}, 1},
      {"stride_asym",
       attr_map({{"filters", 3}, {"kernel", Ints{3, 2}}, {"stride", Ints{2, 1}}, {"padding", Ints{1, 0}}}),
       {2, 2, 6, 5}, 1},
      {"stride2_pad2", attr_map({{"filters", 2}, {"kernel", 3}, {"stride", 2}, {"padding", 2}}), {1, 2, 5, 5}, 1},
      {"dilation", attr_map({{"filters", 2}, {"kernel", 3}, {"dilation", 2}, {"padding", 1}}), {2, 2, 6, 6}, 1},
      {"groups", attr_map({{"filters", 6}, {"kernel", 3}, {"groups", 2}}), {2, 4, 5, 4}, 1},
      {"depthwise", attr_map({{"filters", 3}, {"kernel", 3}, {"groups", 3}, {"padding", 1}}), {2, 3, 4, 4}, 1},
      {"depthwise_x2", attr_map({{"filters", 6}, {"kernel", 2}, {"groups", 3}, {"stride", 2}}), {1, 3, 5, 5}, 1},
      {"pointwise_groups", attr_map({{"filters", 4}, {"kernel", 1}, {"groups", 2}}), {2, 4, 3, 3}, 1},
      {"no_bias", attr_map({{"filters", 3}, {"kernel", 2}, {"bias", false}}), {2, 2, 4, 4}, 1},
      {"relu", attr_map({{"filters", 3}, {"kernel", 3}, {"padding", 1}, {"activation", std::string("relu")}}),
       {2, 2, 4, 4}, 1},
      {"relu6", attr_map({{"filters", 3}, {"kernel", 3}, {"padding", 1}, {"activation", std::string("relu6")}}),
       {2, 2, 4, 4}, 4},
  };
}

// The transformer ops (and dense over rank 3) at small shapes: every op of a GPT block, both
// softmax modes, every matmul transpose combination with batch dimensions, the token loss with
// an ignored target, and the optimizer ops GPT training uses. `tol` is the gradient check's.
struct TransformerCase {
  const char* name;
  OpCase c;
  GradTolerance tol;
};

inline std::vector<TransformerCase> transformer_cases() {
  auto mm = [](bool ta, bool tb, double scale) {
    return attr_map({{"transpose_a", ta}, {"transpose_b", tb}, {"scale", scale}});
  };
  return {
      {"embedding", {"embedding", attr_map({{"vocab", 7}, {"dim", 5}}), {i32({2, 6})}, {}, 3, 7}, kTolLinear},
      {"position_embedding", {"position_embedding", attr_map({{"max_len", 8}}), {f32({2, 5, 3})}}, kTolLinear},
      {"layernorm", {"layernorm", {}, {f32({2, 3, 6})}}, kTolNormalize},
      {"layernorm_plain", {"layernorm", attr_map({{"affine", false}, {"eps", 1e-3}}), {f32({4, 5})}}, kTolNormalize},
      {"gelu", {"gelu", {}, {f32({3, 7})}}, kTolNormalize},
      {"dense_rank3", {"dense", attr_map({{"units", 4}}), {f32({2, 3, 5})}}, kTolLinear},
      {"linear_rank4", {"linear", attr_map({{"units", 3}, {"bias", false}}), {f32({2, 2, 3, 4})}}, kTolLinear},
      {"matmul_nn", {"matmul", mm(false, false, 1.0), {f32({2, 3, 4}), f32({2, 4, 5})}}, kTolLinear},
      {"matmul_nt_scaled", {"matmul", mm(false, true, 0.5), {f32({2, 2, 3, 4}), f32({2, 2, 5, 4})}}, kTolLinear},
      {"matmul_tn", {"matmul", mm(true, false, -2.0), {f32({3, 4, 2}), f32({3, 4, 5})}}, kTolLinear},
      {"matmul_tt", {"matmul", mm(true, true, 1.5), {f32({4, 3}), f32({5, 4})}}, kTolLinear},
      {"split_heads", {"split_heads", attr_map({{"heads", 3}}), {f32({2, 4, 6})}}, kTolLinear},
      {"merge_heads", {"merge_heads", {}, {f32({2, 3, 4, 2})}}, kTolLinear},
      {"softmax", {"softmax", {}, {f32({3, 6})}}, kTolNormalize},
      {"softmax_causal", {"softmax", attr_map({{"causal", true}}), {f32({2, 2, 5, 5})}}, kTolNormalize},
      {"token_xent", {"token_xent", {}, {f32({2, 3, 6}), i32({2, 3})}, {}, 4, 6}, kTolLoss},
  };
}

}  // namespace remat
