// The `activation: none|relu|relu6` attribute shared by conv2d, dense and batchnorm: parsing, the
// CPU loops (also used by the standalone relu/relu6 ops), weight init choice, and the gradient node
// a fused activation needs before the op's own gradients.
#pragma once

#include <algorithm>
#include <memory>
#include <string>

#include "ops/op_common.h"

namespace remat {

enum class Activation { None, Relu, Relu6 };

inline Activation parse_activation(AttrReader& r) {
  std::string s = r.get_choice("activation", "none", {"none", "relu", "relu6"});
  if (s == "relu") return Activation::Relu;
  if (s == "relu6") return Activation::Relu6;
  return Activation::None;
}

// HeNormal for the relu family, GlorotUniform otherwise.
inline InitKind weight_init_for(Activation a) {
  return a == Activation::None ? InitKind::GlorotUniform : InitKind::HeNormal;
}

// y = max(0, x) / min(max(0, x), 6), elementwise; x may equal y (in place).
inline void relu_forward_cpu(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
inline void relu6_forward_cpu(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::min(x[i] > 0.0f ? x[i] : 0.0f, 6.0f);
}
// One value through the activation (the loops' rule, so a fused op rounds as the standalone one).
inline float activate_cpu(Activation a, float x) {
  if (a == Activation::None) return x;
  const float r = x > 0.0f ? x : 0.0f;
  return a == Activation::Relu6 ? std::min(r, 6.0f) : r;
}
inline void activation_forward_cpu(Activation a, float* y, int64_t n) {
  if (a == Activation::Relu) relu_forward_cpu(y, y, n);
  else if (a == Activation::Relu6) relu6_forward_cpu(y, y, n);
}

// dx = dy * (0 < y) for relu, dy * (0 < y < 6) for relu6 (y: the forward OUTPUT).
inline void relu_grad_cpu(const float* dy, const float* y, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}
inline void relu6_grad_cpu(const float* dy, const float* y, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = (y[i] > 0.0f && y[i] < 6.0f) ? dy[i] : 0.0f;
}

// With a fused activation, emits relu_grad / relu6_grad [dy, y] -> dz (the gradient of the
// pre-activation) and returns dz; returns dy unchanged for Activation::None. The grad node
// gets its own empty attrs: it must not inherit the forward op's attrs, which relu_grad
// cannot parse when a graph file is reloaded.
inline ValueId emit_activation_grad(GradEmitter& g, const Node& fwd, ValueId dy, Activation a) {
  if (a == Activation::None) return dy;
  const char* op = a == Activation::Relu ? "relu_grad" : "relu6_grad";
  const TensorDesc out = g.graph().value(fwd.output).desc;  // a copy: emit grows the graph
  const ValueId y = fwd.output;
  AttrMap m;
  m.origin = fwd.attrs.origin;
  return g.emit("act_grad", op, {dy, y}, out, m, std::make_shared<EmptyAttrs>());
}

}  // namespace remat
