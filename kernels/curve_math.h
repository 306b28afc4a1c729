// The pointwise curves past relu (sigmoid, tanh, hard sigmoid, hard swish, leaky relu, the exact
// GELU, SiLU, erf; the affine map of scalar arithmetic; sqrt and a power by a constant) and their
// derivatives, as one definition shared by the CPU reference (ops/activation_curves.cpp) and the
// CUDA kernels (kernels/activation_curves.cu).
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define REMAT_CURVE_FN __host__ __device__ __forceinline__
#else
#define REMAT_CURVE_FN inline
#endif

namespace remat {

// Note [curve arithmetic]
// Every curve evaluates in double from the FP32 (or widened bf16) value and rounds once to FP32.
// The CPU and the device run the same operations in the same order, each rounded in double (the
// device code uses __dmul_rn / __dadd_rn, so nvcc cannot contract a product and a sum into an
// FMA the CPU does not do; division and sqrt are IEEE on both): hardsigmoid, hardswish, leaky
// relu and sqrt, which use nothing else, agree bit for bit (sqrt in double rounded to FP32 is
// FP32's correctly rounded sqrt, PyTorch's), and so does a power of 2, 3 (products) or -1. sigmoid,
// tanh, the exact GELU, SiLU, erf and other powers also call exp / tanh / erf / pow, whose double
// results may differ in the last bit between the C library and CUDA's: after the rounding to FP32
// the two agree but for rare ties. Gradients read what the forward keeps: sigmoid, tanh, leaky
// relu and sqrt their output y; hard sigmoid, hard swish, GELU, SiLU, erf and pow their input x
// (PyTorch's backward reads x too; y rounded to bf16 near 1 would lose which side of the clip x
// was on); affine's gradient is an affine node of dy alone.
enum class Curve : int32_t {
  Sigmoid, Tanh, HardSigmoid, HardSwish, LeakyRelu, GeluErf, Silu, Affine, Sqrt, Pow, Erf
};

constexpr double kCurveSqrtHalf = 0.70710678118654752440;       // 1 / sqrt(2)
constexpr double kCurveInvSqrt2Pi = 0.39894228040143267794;     // 1 / sqrt(2 pi)
constexpr double kCurveTwoOverSqrtPi = 1.12837916709551257390;  // 2 / sqrt(pi)

struct CurveParams {
  Curve f = Curve::Sigmoid;
  // HardSigmoid, Affine: the slope (PyTorch: 1/6); LeakyRelu: the negative slope; Pow: the
  // exponent.
  double alpha = 0;
  double beta = 0;   // HardSigmoid, Affine: the offset (PyTorch: 1/2)
};

REMAT_CURVE_FN double curve_mul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
REMAT_CURVE_FN double curve_add(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
REMAT_CURVE_FN double curve_clamp01(double v) { return v < 0.0 ? 0.0 : (v > 1.0 ? 1.0 : v); }

// x^e: products for 2 and 3 (exact in double from an FP32 x), an IEEE division for -1 (rounded
// to FP32 it is FP32's correctly rounded 1 / x, PyTorch's reciprocal), pow otherwise.
REMAT_CURVE_FN double curve_pow(double x, double e) {
  if (e == 2.0) return curve_mul(x, x);
  if (e == 3.0) return curve_mul(curve_mul(x, x), x);
  if (e == -1.0) return 1.0 / x;
  if (e == 1.0) return x;
  return pow(x, e);
}

// y = f(x).
REMAT_CURVE_FN float curve_value(const CurveParams& p, float xf) {
  const double x = xf;
  switch (p.f) {
    case Curve::Sigmoid:
      return static_cast<float>(1.0 / curve_add(1.0, exp(-x)));
    case Curve::Tanh:
      return static_cast<float>(tanh(x));
    case Curve::HardSigmoid:  // max(0, min(1, alpha x + beta))
      return static_cast<float>(curve_clamp01(curve_add(curve_mul(p.alpha, x), p.beta)));
    case Curve::HardSwish: {  // x min(max(x + 3, 0), 6) / 6, PyTorch's spelling
      const double t = curve_add(x, 3.0);
      const double c = t < 0.0 ? 0.0 : (t > 6.0 ? 6.0 : t);
      return static_cast<float>(curve_mul(x, c) / 6.0);
    }
    case Curve::LeakyRelu:
      return x > 0.0 ? xf : static_cast<float>(curve_mul(p.alpha, x));
    case Curve::GeluErf: {  // x Phi(x) = x (1 + erf(x / sqrt 2)) / 2, PyTorch's nn.GELU()
      const double e = erf(curve_mul(x, kCurveSqrtHalf));
      return static_cast<float>(curve_mul(curve_mul(0.5, x), curve_add(1.0, e)));
    }
    case Curve::Silu:  // x sigmoid(x), PyTorch's nn.SiLU()
      return static_cast<float>(curve_mul(x, 1.0 / curve_add(1.0, exp(-x))));
    case Curve::Affine:  // alpha x + beta
      return static_cast<float>(curve_add(curve_mul(p.alpha, x), p.beta));
    case Curve::Sqrt:  // NaN below 0, as PyTorch's
      return static_cast<float>(sqrt(x));
    case Curve::Pow:  // x^alpha
      return static_cast<float>(curve_pow(x, p.alpha));
    case Curve::Erf:
      return static_cast<float>(erf(x));
  }
  return 0.0f;
}

// dx = dy f'(.), `saved` the value the curve's gradient reads (Note [curve arithmetic]).
REMAT_CURVE_FN float curve_grad(const CurveParams& p, float dyf, float savedf) {
  const double dy = dyf, s = savedf;
  switch (p.f) {
    case Curve::Sigmoid:  // s = y: dy y (1 - y)
      return static_cast<float>(curve_mul(curve_mul(dy, s), curve_add(1.0, -s)));
    case Curve::Tanh:  // s = y: dy (1 - y^2)
      return static_cast<float>(curve_mul(dy, curve_add(1.0, -curve_mul(s, s))));
    case Curve::HardSigmoid: {  // s = x: alpha dy inside the clip, 0 outside
      const double v = curve_add(curve_mul(p.alpha, s), p.beta);
      return v > 0.0 && v < 1.0 ? static_cast<float>(curve_mul(p.alpha, dy)) : 0.0f;
    }
    case Curve::HardSwish:  // s = x: 0 below -3, dy (x / 3 + 1/2) up to 3, dy above
      if (s < -3.0) return 0.0f;
      if (s <= 3.0) return static_cast<float>(curve_mul(dy, curve_add(s / 3.0, 0.5)));
      return dyf;
    case Curve::LeakyRelu:  // s = y (alpha >= 0, so y > 0 exactly where x > 0)
      return s > 0.0 ? dyf : static_cast<float>(curve_mul(p.alpha, dy));
    case Curve::GeluErf: {  // s = x: dy (Phi(x) + x phi(x))
      const double cdf = curve_mul(0.5, curve_add(1.0, erf(curve_mul(s, kCurveSqrtHalf))));
      const double pdf = curve_mul(kCurveInvSqrt2Pi, exp(curve_mul(-0.5, curve_mul(s, s))));
      return static_cast<float>(curve_mul(dy, curve_add(cdf, curve_mul(s, pdf))));
    }
    case Curve::Silu: {  // s = x: dy sig(x) (1 + x (1 - sig(x)))
      const double sig = 1.0 / curve_add(1.0, exp(-s));
      return static_cast<float>(
          curve_mul(curve_mul(dy, sig), curve_add(1.0, curve_mul(s, curve_add(1.0, -sig)))));
    }
    case Curve::Affine:  // alpha dy (the op's gradient node is itself an affine of dy)
      return static_cast<float>(curve_mul(p.alpha, dy));
    case Curve::Sqrt:  // s = y: dy / (2 y), PyTorch's (inf at y = 0)
      return static_cast<float>(dy / curve_mul(2.0, s));
    case Curve::Pow:  // s = x: dy alpha x^(alpha - 1); 0 for alpha 0, as PyTorch's
      if (p.alpha == 0.0) return 0.0f;
      return static_cast<float>(curve_mul(curve_mul(dy, p.alpha), curve_pow(s, p.alpha - 1.0)));
    case Curve::Erf:  // s = x: dy 2 exp(-x^2) / sqrt(pi)
      return static_cast<float>(
          curve_mul(dy, curve_mul(kCurveTwoOverSqrtPi, exp(-curve_mul(s, s)))));
  }
  return 0.0f;
}

// Whether the gradient reads the forward's output (else its input).
REMAT_CURVE_FN bool curve_grad_reads_output(Curve f) {
  return f == Curve::Sigmoid || f == Curve::Tanh || f == Curve::LeakyRelu || f == Curve::Sqrt;
}

}  // namespace remat
