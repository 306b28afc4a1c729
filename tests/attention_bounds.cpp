// Note [flash attention tolerance]'s magnitudes and bound, and the host model of the flash
// kernels' rounding (tests/attention_bounds.h).
#include "tests/attention_bounds.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "kernels/rng.h"
#include "runtime/core/bf16.h"

namespace remat {

// Note [flash attention tolerance]
// The flash kernels differ from the CPU reference (double sums, one rounding per stored value)
// in three ways; with u = 2^-8 (bf16) and e = 2^-22 (an FP32 sum on tensor cores, whose adders
// may truncate: 4 ulps of FP32 per addition rather than half of one):
//   (1) they round p c (the forward's P V and dv) and dS (dq, dk) to bf16 before their
//       products: at most u times the sum of the magnitudes of the terms behind an output;
//   (2) they sum in FP32: the scores over D terms, l, delta and the products over T: at most
//       (T + D) e relative to those magnitudes; a score's absolute error sigma <= D e scale
//       sum_e |q_ie k_je| becomes a relative error of p (exp), twice with the normalisation;
//   (3) each side rounds its result to bf16 once: u |x| on each side.
// So |gpu - cpu| <= 2 u |cpu| + (1 + 2u) (u + 2 (T + D) e + 4 sigma) M + 1e-6, where M is the
// magnitude of the terms behind the output (dW_ij = dO_i . v_j and delta_i bounded by their
// magnitudes Wbar_ij = sum_e |dO_ie v_je| and dbar_i = sum_j p_ij c_ij Wbar_ij, so |dS_ij| <=
// p_ij (c_ij Wbar_ij + dbar_i)):
//   o_ie:  M = sum_j p_ij c_ij |v_je|
//   dq_ie: M = scale sum_j p_ij (c_ij Wbar_ij + dbar_i) |k_je|
//   dk_je: M = scale sum_i p_ij (c_ij Wbar_ij + dbar_i) |q_ie|
//   dv_je: M = sum_i p_ij c_ij |dO_ie|
// and 1e-6 absolute where M is 0. A kernel that drops, doubles or misplaces a term errs by the
// size of that term, which is of the order of M / T at least, far above u M for the T of the
// tests; tests/test_cuda_attention_flash.cpp checks that the host model of the kernels' rounding
// passes and that the model with the dropout mask left out of dv fails.

namespace {

constexpr double kU = 1.0 / 256;
constexpr double kSumE = 1.0 / (1 << 22);

struct Geometry {
  int64_t t, d;
  // Element e of row i of block b (b = n H + h) of a [N, H, T, D] tensor.
  int64_t at(int64_t b, int64_t i, int64_t e) const { return (b * t + i) * d + e; }
};

// Element e of row i of gradient g (0 dq, 1 dk, 2 dv) of block b in the packed [N, 3H, T, D].
int64_t packed_at(const AttentionCase& c, int64_t b, int g, int64_t i, int64_t e) {
  const int64_t n = b / c.heads, h = b % c.heads;
  return (((n * 3 + g) * c.heads + h) * c.t + i) * c.d + e;
}

int64_t visible_keys(const AttentionCase& c, int64_t i) { return c.causal ? i + 1 : c.t; }

double keep(const AttentionCase& c, int64_t b, int64_t i, int64_t j) {
  const float rate = static_cast<float>(c.rate);
  return rng_dropout_factor(rate, rng_keep_scale(rate), c.seed, c.step,
                            c.first + static_cast<uint64_t>((b * c.t + i) * c.t + j));
}

// p_ij of block b (double, the reference's softmax) for every visible j of row i.
std::vector<double> probs(const AttentionCase& c, const AttentionInputs& x, int64_t b, int64_t i) {
  const Geometry g{c.t, c.d};
  const int64_t w = visible_keys(c, i);
  std::vector<double> p(static_cast<size_t>(w));
  double mx = -std::numeric_limits<double>::infinity(), l = 0;
  for (int64_t j = 0; j < w; ++j) {
    double s = 0;
    for (int64_t e = 0; e < c.d; ++e) s += double(x.q[g.at(b, i, e)]) * x.k[g.at(b, j, e)];
    p[j] = c.scale * s;
    mx = std::max(mx, p[j]);
  }
  for (double& v : p) l += (v = std::exp(v - mx));
  for (double& v : p) v /= l;
  return p;
}

}  // namespace

AttentionOutputs attention_magnitudes(const AttentionCase& c, const AttentionInputs& x) {
  const Geometry g{c.t, c.d};
  const int64_t bh = c.n * c.heads;
  AttentionOutputs m;
  m.out.assign(x.q.size(), 0.0f);
  m.grads.assign(3 * x.q.size(), 0.0f);
  std::vector<double> dq(static_cast<size_t>(c.d));
  for (int64_t b = 0; b < bh; ++b) {
    std::vector<double> gk(static_cast<size_t>(c.t * c.d), 0.0), gv(gk.size(), 0.0);
    for (int64_t i = 0; i < c.t; ++i) {
      const std::vector<double> p = probs(c, x, b, i);
      const int64_t w = visible_keys(c, i);
      std::vector<double> wbar(static_cast<size_t>(w)), cf(static_cast<size_t>(w));
      double dbar = 0;
      for (int64_t j = 0; j < w; ++j) {
        double s = 0;
        for (int64_t e = 0; e < c.d; ++e)
          s += std::fabs(double(x.dout[g.at(b, i, e)]) * x.v[g.at(b, j, e)]);
        wbar[j] = s;
        cf[j] = keep(c, b, i, j);
        dbar += p[j] * cf[j] * s;
      }
      std::fill(dq.begin(), dq.end(), 0.0);
      for (int64_t e = 0; e < c.d; ++e) {
        double o = 0;
        for (int64_t j = 0; j < w; ++j) o += p[j] * cf[j] * std::fabs(x.v[g.at(b, j, e)]);
        m.out[g.at(b, i, e)] = static_cast<float>(o);
      }
      for (int64_t j = 0; j < w; ++j) {
        const double ds = p[j] * (cf[j] * wbar[j] + dbar);
        for (int64_t e = 0; e < c.d; ++e) {
          dq[e] += ds * std::fabs(x.k[g.at(b, j, e)]);
          gk[j * c.d + e] += ds * std::fabs(x.q[g.at(b, i, e)]);
          gv[j * c.d + e] += p[j] * cf[j] * std::fabs(x.dout[g.at(b, i, e)]);
        }
      }
      for (int64_t e = 0; e < c.d; ++e)
        m.grads[packed_at(c, b, 0, i, e)] = static_cast<float>(std::fabs(c.scale) * dq[e]);
    }
    for (int64_t j = 0; j < c.t; ++j)
      for (int64_t e = 0; e < c.d; ++e) {
        m.grads[packed_at(c, b, 1, j, e)] =
            static_cast<float>(std::fabs(c.scale) * gk[j * c.d + e]);
        m.grads[packed_at(c, b, 2, j, e)] = static_cast<float>(gv[j * c.d + e]);
      }
  }
  return m;
}

::testing::AssertionResult within_flash_bound(const AttentionCase& c, const AttentionInputs& x,
                                              const AttentionOutputs& want,
                                              const AttentionOutputs& got) {
  const AttentionOutputs m = attention_magnitudes(c, x);
  double sigma = 0;  // the largest score error, Note [flash attention tolerance] (2)
  const Geometry g{c.t, c.d};
  for (int64_t b = 0; b < c.n * c.heads; ++b)
    for (int64_t i = 0; i < c.t; ++i)
      for (int64_t j = 0; j < visible_keys(c, i); ++j) {
        double s = 0;
        for (int64_t e = 0; e < c.d; ++e)
          s += std::fabs(double(x.q[g.at(b, i, e)]) * x.k[g.at(b, j, e)]);
        sigma = std::max(sigma, double(c.d) * kSumE * std::fabs(c.scale) * s);
      }
  const double per_m = (1 + 2 * kU) * (kU + 2.0 * double(c.t + c.d) * kSumE + 4 * sigma);
  std::ostringstream err;
  int bad = 0;
  auto check = [&](const char* what, const std::vector<float>& a, const std::vector<float>& b,
                   const std::vector<float>& mag) {
    if (a.size() != b.size() || a.size() != mag.size()) {
      ++bad;
      err << "\n  " << what << ": " << a.size() << " vs " << b.size() << " elements";
      return;
    }
    int64_t n_bad = 0;
    double worst = 0;
    std::ostringstream first;
    for (size_t k = 0; k < a.size(); ++k) {
      const double d = std::fabs(double(a[k]) - b[k]);
      const double tol = 2 * kU * std::fabs(a[k]) + per_m * mag[k] + 1e-6;
      if (std::isfinite(d) && d <= tol) continue;
      if (!std::isnan(d)) worst = std::max(worst, d / tol);
      if (n_bad++ < 3)
        first << " [" << k << "] " << a[k] << " vs " << b[k] << " (M " << mag[k] << ");";
    }
    if (n_bad) {
      ++bad;
      err << "\n  " << what << ": " << n_bad << " of " << a.size()
          << " elements outside the bound (worst " << worst << "x the bound);" << first.str();
    }
  };
  check("out", want.out, got.out, m.out);
  check("grads (dq, dk, dv)", want.grads, got.grads, m.grads);
  if (!bad) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "flash attention outside its bound:" << err.str();
}

AttentionOutputs attention_flash_model(const AttentionCase& c, const AttentionInputs& x,
                                       bool drop_mask_in_dv) {
  const Geometry g{c.t, c.d};
  const float scale = static_cast<float>(c.scale);
  AttentionOutputs r;
  r.out.assign(x.q.size(), 0.0f);
  r.grads.assign(3 * x.q.size(), 0.0f);
  auto dot = [&](const std::vector<float>& a, const std::vector<float>& b, int64_t blk, int64_t i,
                 int64_t j) {
    float s = 0.0f;
    for (int64_t e = 0; e < c.d; ++e) s += a[g.at(blk, i, e)] * b[g.at(blk, j, e)];
    return s;
  };
  for (int64_t b = 0; b < c.n * c.heads; ++b) {
    std::vector<float> gk(static_cast<size_t>(c.t * c.d), 0.0f), gv(gk.size(), 0.0f);
    for (int64_t i = 0; i < c.t; ++i) {
      const int64_t w = visible_keys(c, i);
      std::vector<float> s(static_cast<size_t>(w)), dw(s.size()), cf(s.size());
      float m = -INFINITY, l = 0.0f, dl = 0.0f;
      for (int64_t j = 0; j < w; ++j) {
        s[j] = scale * dot(x.q, x.k, b, i, j);
        dw[j] = dot(x.dout, x.v, b, i, j);
        cf[j] = static_cast<float>(keep(c, b, i, j));
        m = std::max(m, s[j]);
      }
      for (int64_t j = 0; j < w; ++j) {
        const float e = std::exp(s[j] - m);
        l += e;
        dl += e * (cf[j] * dw[j]);
      }
      const float delta = dl / l;
      for (int64_t e = 0; e < c.d; ++e) {
        float o = 0.0f, dq = 0.0f;
        for (int64_t j = 0; j < w; ++j) {
          const float p = std::exp(s[j] - m) / l;
          o += bf16_round(std::exp(s[j] - m) * cf[j]) * x.v[g.at(b, j, e)];
          dq += bf16_round(p * (cf[j] * dw[j] - delta)) * x.k[g.at(b, j, e)];
        }
        r.out[g.at(b, i, e)] = bf16_round(o / l);
        r.grads[packed_at(c, b, 0, i, e)] = bf16_round(scale * dq);
      }
      for (int64_t j = 0; j < w; ++j) {
        const float p = std::exp(s[j] - m) / l;
        const float pc = bf16_round(drop_mask_in_dv ? p : p * cf[j]);
        const float ds = bf16_round(p * (cf[j] * dw[j] - delta));
        for (int64_t e = 0; e < c.d; ++e) {
          gk[j * c.d + e] += ds * x.q[g.at(b, i, e)];
          gv[j * c.d + e] += pc * x.dout[g.at(b, i, e)];
        }
      }
    }
    for (int64_t j = 0; j < c.t; ++j)
      for (int64_t e = 0; e < c.d; ++e) {
        r.grads[packed_at(c, b, 1, j, e)] = bf16_round(scale * gk[j * c.d + e]);
        r.grads[packed_at(c, b, 2, j, e)] = bf16_round(gv[j * c.d + e]);
      }
  }
  return r;
}

}  // namespace remat
