// batchnorm's pieces shared by its op (ops/batchnorm.cpp: attributes, shapes, gradient rule,
// registration) and its CPU kernels (ops/batchnorm_cpu.cpp): the attributes, the positions of
// the parameters among a node's inputs, the per-channel layout.
#pragma once

#include <cstdint>

#include "ops/fused_activation.h"
#include "ops/op_common.h"

namespace remat {

struct BatchNormAttrs : OpAttrs {
  double momentum = 0.1;  // running = (1 - momentum) * running + momentum * batch
  double eps = 1e-5;
  bool train = true;  // train: batch statistics; inference: running statistics
  bool scale = true;  // a learned scale (weight); false: gamma = 1, no weight parameter
  bool channels_last = false;  // data_format: x [N, H, W, C] (Note [channels-last layout])
  // A fused relu / relu6 on the output (Note [batchnorm activation] in ops/batchnorm.cpp).
  Activation activation = Activation::None;
};

// Positions of the parameters among a node's inputs; -1 where absent. Forward:
// [x, weight (scale only), bias, running_mean, running_var]; grad_input: [dy, x, weight (scale
// only), running_mean, running_var (inference only)]; grad_weight: [dy, x, running_mean,
// running_var (inference only)].
struct BnSlots {
  int weight, bias, mean, var;
};
inline BnSlots bn_forward_slots(bool scale) {
  return scale ? BnSlots{1, 2, 3, 4} : BnSlots{-1, 1, 2, 3};
}
inline BnSlots bn_grad_input_slots(bool scale) {
  return scale ? BnSlots{2, -1, 3, 4} : BnSlots{-1, -1, 2, 3};
}

// Per-channel layout: element (n, c, i) of x lives at base(n, c) + i * step: NCHW (and
// [N, F]) at (n * C + c) * inner + i, NHWC at (n * inner + i) * C + c.
struct BnDims {
  int64_t n = 0, c = 0, inner = 0;
  bool channels_last = false;
  int64_t per_channel() const { return n * inner; }
  int64_t base(int64_t sample, int64_t channel) const {
    return channels_last ? sample * c * inner + channel : (sample * c + channel) * inner;
  }
  int64_t step() const { return channels_last ? c : 1; }
};

inline BnDims bn_dims(const Shape& s, bool channels_last) {
  BnDims d;
  d.channels_last = channels_last && s.size() == 4;
  d.n = s.at(0);
  d.c = d.channels_last ? s.at(3) : s.at(1);
  d.inner = s.size() == 4 ? (d.channels_last ? s[1] * s[2] : s[2] * s[3]) : 1;
  return d;
}

// The CPU kernels (ops/batchnorm_cpu.cpp), for F32 or BF16 data (Note [bf16 execution]: they
// read and write bf16 themselves):
//   forward      [x, weight (scale only), bias, running_mean, running_var] -> y, updating the
//                running statistics on the first computation only (Note [in-place updates]);
//   grad_input   [dy, x, weight (scale only) (, running_mean, running_var in inference)] -> dx;
//   grad_weight  [dy, x (, running_mean, running_var in inference)] -> dweight [C];
//   grad_bias    [dy] -> dbias [C].
void bn_forward_cpu(const ExecContext& ctx);
void bn_grad_input_cpu(const ExecContext& ctx);
void bn_grad_weight_cpu(const ExecContext& ctx);
void bn_grad_bias_cpu(const ExecContext& ctx);

}  // namespace remat
