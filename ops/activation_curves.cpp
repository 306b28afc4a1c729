// sigmoid, tanh, hardsigmoid (alpha, beta), hardswish, leaky_relu (alpha), gelu_erf, silu, sqrt,
// pow (exponent) and erf: user ops whose gradients <op>_grad [dy, saved] read the forward's output
// (sigmoid, tanh, leaky_relu, sqrt) or its input (hardsigmoid, hardswish, gelu_erf, silu, pow,
// erf);
// and affine (scale, shift:
// y = scale x + shift, scalar arithmetic on data), whose gradient is affine (scale) of dy, reading
// neither. One definition of each curve and its derivative serves the CPU and the GPU
// (kernels/curve_math.h, Note [curve arithmetic]).
#include <limits>

#include "kernels/curve_math.h"
#include "ops/cpu_storage.h"
#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

struct CurveAttrs : OpAttrs {
  CurveParams p;
};

struct CurveSpec {
  const char* name;
  Curve f;
  double flops;  // per element, forward and gradient alike (the FLOPs cost model)
  const char* summary;
  const char* grad_summary;
};

const CurveSpec kCurves[] = {
    {"sigmoid", Curve::Sigmoid, 4, "y = 1 / (1 + exp(-x))", "dx = dy y (1 - y) [dy, y]"},
    {"tanh", Curve::Tanh, 4, "y = tanh(x)", "dx = dy (1 - y^2) [dy, y]"},
    {"hardsigmoid", Curve::HardSigmoid, 3,
     "y = max(0, min(1, alpha x + beta)) (alpha 1/6, beta 1/2)", "dx = alpha dy inside the clip [dy, x]"},
    {"hardswish", Curve::HardSwish, 4, "y = x min(max(x + 3, 0), 6) / 6",
     "dx = dy (x / 3 + 1/2) on [-3, 3], dy above, 0 below [dy, x]"},
    {"leaky_relu", Curve::LeakyRelu, 1, "y = x for x > 0, alpha x otherwise (alpha 0.01)",
     "dx = dy for y > 0, alpha dy otherwise [dy, y]"},
    {"gelu_erf", Curve::GeluErf, 8, "y = x (1 + erf(x / sqrt 2)) / 2 (PyTorch's exact GELU)",
     "dx = dy (Phi(x) + x phi(x)) [dy, x]"},
    {"silu", Curve::Silu, 5, "y = x sigmoid(x) (PyTorch's SiLU, swish)",
     "dx = dy s (1 + x (1 - s)), s = sigmoid(x) [dy, x]"},
    {"affine", Curve::Affine, 2, "y = scale x + shift (scale 1, shift 0; x * c, x / c, x + c, -x)",
     nullptr},
    {"sqrt", Curve::Sqrt, 1, "y = sqrt(x) (NaN below 0)", "dx = dy / (2 y) [dy, y]"},
    {"pow", Curve::Pow, 8, "y = x^exponent (a constant; NaN for a negative x and a fraction)",
     "dx = dy exponent x^(exponent - 1) [dy, x]"},
    {"erf", Curve::Erf, 8, "y = erf(x) (the Gauss error function)",
     "dx = dy 2 exp(-x^2) / sqrt(pi) [dy, x]"},
};

// The forward and its gradient parse the same attributes (a gradient node shares its forward
// node's).
OpAttrsPtr curve_parse(AttrReader& r, const std::string& name, Curve f) {
  constexpr double kBig = std::numeric_limits<double>::max();
  auto a = std::make_shared<CurveAttrs>();
  a->p.f = f;
  if (f == Curve::HardSigmoid) {
    a->p.alpha = r.get_double("alpha", 1.0 / 6.0, -kBig, kBig);
    a->p.beta = r.get_double("beta", 0.5, -kBig, kBig);
  } else if (f == Curve::Affine) {
    a->p.alpha = r.get_double("scale", 1.0, -kBig, kBig);
    a->p.beta = r.get_double("shift", 0.0, -kBig, kBig);
  } else if (f == Curve::Pow) {
    if (!r.has("exponent")) r.fail("exponent", "is required (pow: y = x^exponent)");
    a->p.alpha = r.get_double("exponent", 2.0, -1e6, 1e6);
  } else if (f == Curve::LeakyRelu) {
    // alpha >= 0 keeps y's sign x's, so the gradient can read y (Note [curve arithmetic]).
    a->p.alpha = r.get_double("alpha", 0.01, 0.0, kBig);
  }
  r.finish(name);
  return a;
}

void curve_cpu(const ExecContext& c) {
  const CurveParams& p = attrs_of<CurveAttrs>(*c.node).p;
  const float* x = c.inputs[0].f32();
  float* y = c.output.f32();
  for (int64_t i = 0; i < c.output.numel(); ++i) y[i] = curve_value(p, x[i]);
}

void curve_grad_cpu(const ExecContext& c) {
  const CurveParams& p = attrs_of<CurveAttrs>(*c.node).p;
  const float* dy = c.inputs[0].f32();
  const float* saved = c.inputs[1].f32();
  float* dx = c.output.f32();
  for (int64_t i = 0; i < c.output.numel(); ++i) dx[i] = curve_grad(p, dy[i], saved[i]);
}

#ifdef REMAT_HAVE_CUDA
void curve_cuda(const ExecContext& c) {
  const CurveParams& p = attrs_of<CurveAttrs>(*c.node).p;
  with_storage(c.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    curve_forward(p, storage<T>(c.output), storage<T>(c.inputs[0]), c.output.numel(),
                  cuda_stream(c));
  });
}
void curve_grad_cuda(const ExecContext& c) {
  const CurveParams& p = attrs_of<CurveAttrs>(*c.node).p;
  with_storage(c.inputs[0].desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    curve_backward(p, storage<T>(c.output), storage<T>(c.inputs[0]), storage<T>(c.inputs[1]),
                   c.output.numel(), cuda_stream(c));
  });
}
#endif

// affine's gradient: affine (scale, no shift) of dy.
ValueId affine_of(GradEmitter& g, const Node& fwd, ValueId dy, const TensorDesc& x) {
  AttrMap m;
  m.origin = fwd.attrs.origin;
  m.set("scale", attrs_of<CurveAttrs>(fwd).p.alpha);
  AttrReader rd(m);
  OpAttrsPtr typed = curve_parse(rd, "affine", Curve::Affine);
  return g.emit("grad", "affine", {dy}, x, m, typed);
}

OpDef make_curve(const CurveSpec& s) {
  OpDef op;
  op.name = s.name;
  op.summary = s.summary;
  const std::string name = s.name;
  const Curve f = s.f;
  op.parse = [name, f](AttrReader& r) { return curve_parse(r, name, f); };
  op.infer = [name](const OpAttrs&, const std::vector<TensorDesc>& in) {
    require_float(name, in);
    return in.at(0);
  };
  const double flops = s.flops;
  op.cost = [flops](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, flops);
  };
  op.cpu = curve_cpu;
#ifdef REMAT_HAVE_CUDA
  op.cuda = curve_cuda;
#endif
  with_bf16_per_sample(op, 1).bf16_cuda_native = true;
  op.layout_agnostic = true;
  const std::string grad = name + "_grad";
  op.gradient = [grad, f](GradEmitter& g, const Node& fwd, ValueId dy) {
    const TensorDesc x = g.graph().value(fwd.inputs[0]).desc;  // a copy: emit grows the graph
    if (f == Curve::Affine) return std::vector<ValueId>{affine_of(g, fwd, dy, x)};
    const ValueId saved = curve_grad_reads_output(f) ? fwd.output : fwd.inputs[0];
    return std::vector<ValueId>{g.emit("grad", grad, {dy, saved}, x)};
  };
  return op;
}

OpDef make_curve_grad(const CurveSpec& s) {
  OpDef op;
  op.name = std::string(s.name) + "_grad";
  op.summary = s.grad_summary;
  op.user_visible = false;
  op.min_inputs = op.max_inputs = 2;
  const std::string name = op.name;
  const Curve f = s.f;
  op.parse = [name, f](AttrReader& r) { return curve_parse(r, name, f); };
  op.infer = [name](const OpAttrs&, const std::vector<TensorDesc>& in) {
    require_float(name, in);
    if (!(in.at(0) == in.at(1)))
      REMAT_USER_ERROR(name << " expects dy and its saved value of one shape, got "
                            << shape_str(in[0].shape) << " and " << shape_str(in[1].shape));
    return in[0];
  };
  const double flops = s.flops;
  op.cost = [flops](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, flops);
  };
  op.cpu = curve_grad_cpu;
#ifdef REMAT_HAVE_CUDA
  op.cuda = curve_grad_cuda;
#endif
  with_bf16_per_sample(op, 2).bf16_cuda_native = true;
  return op;
}

}  // namespace

void register_activation_curve_ops(OpRegistry& r) {
  for (const CurveSpec& s : kCurves) {
    r.add(make_curve(s));
    if (s.grad_summary) r.add(make_curve_grad(s));
  }
}

}  // namespace remat
