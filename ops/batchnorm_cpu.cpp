// batchnorm's CPU kernels (ops/batchnorm.h): batch statistics in double in a fixed order,
// synchronised across data-parallel ranks (Note [synchronised batch statistics]), for F32 or
// BF16 data.
#include <cmath>
#include <vector>

#include "ops/batchnorm.h"
#include "ops/cpu_storage.h"
#include "runtime/comm/communicator.h"
#include "runtime/core/check.h"

namespace remat {
namespace {

// gamma[c], 1 without a learned scale.
inline float gamma_at(const float* gamma, int64_t c) { return gamma ? gamma[c] : 1.0f; }

// Note [synchronised batch statistics]
// In a data-parallel step (ctx.comm set) the batch statistics are those of the global batch,
// as with PyTorch's SyncBatchNorm: each rank sums its values per channel, the sums are
// all-reduced, and the mean, the variance (a second pass over squared deviations from the
// global mean, as in one process) and the backward's reductions (sum dy, sum dy * xhat) come
// from the global sums and count. So N ranks train exactly as one process at N x batch, up to
// the order of the additions, and every rank's running statistics stay identical. The
// collectives run on every computation, recomputations included: every rank runs the same
// plan (Note [collective order] in runtime/comm/communicator.h).

// Sums over every rank when the step is data parallel (per channel, in place).
void bn_all_reduce(Communicator* comm, std::vector<double>& sums) {
  if (!comm) return;
  REMAT_CHECK(comm->memory() == DeviceKind::Cpu,
              "batchnorm's CPU path needs a host-memory communicator, got " << comm->name());
  comm->all_reduce_now(sums.data(), static_cast<int64_t>(sums.size()), CommType::F64, CommOp::Sum);
}

// Values per channel over the whole (global) batch.
double bn_count(const BnDims& d, const Communicator* comm) {
  return static_cast<double>(d.per_channel()) * (comm ? comm->size() : 1);
}

// Mean and variance per channel used to normalise: batch statistics (train; biased variance,
// in double, in a fixed order: deterministic) or the running ones (inference).
struct BnStats {
  std::vector<double> mean, var;
};

template <typename T>
BnStats bn_norm_stats(const BatchNormAttrs& a, const T* x, const BnDims& d,
                      const float* running_mean, const float* running_var, Communicator* comm) {
  BnStats st;
  st.mean.assign(static_cast<size_t>(d.c), 0.0);
  st.var.assign(static_cast<size_t>(d.c), 0.0);
  if (!a.train) {
    for (int64_t c = 0; c < d.c; ++c) st.mean[c] = running_mean[c], st.var[c] = running_var[c];
    return st;
  }
  const double count = bn_count(d, comm);
  for (int64_t c = 0; c < d.c; ++c) {
    double sum = 0;
    for (int64_t n = 0; n < d.n; ++n) {
      const T* p = x + d.base(n, c);
      for (int64_t i = 0; i < d.inner; ++i) sum += load(p, i * d.step());
    }
    st.mean[c] = sum;
  }
  bn_all_reduce(comm, st.mean);
  for (double& m : st.mean) m /= count;
  for (int64_t c = 0; c < d.c; ++c) {
    const double m = st.mean[c];
    double sq = 0;
    for (int64_t n = 0; n < d.n; ++n) {
      const T* p = x + d.base(n, c);
      for (int64_t i = 0; i < d.inner; ++i)
        sq += (load(p, i * d.step()) - m) * (load(p, i * d.step()) - m);
    }
    st.var[c] = sq;
  }
  bn_all_reduce(comm, st.var);
  for (double& v : st.var) v /= count;
  return st;
}

// inputs [x [N,C,..], weight [C] (scale only), bias [C], running_mean [C], running_var [C]]
// -> y like x. Updates the running buffers in place on first computation only (Note [in-place
// updates]). T: x's and y's storage (ops/cpu_storage.h); the parameters and statistics are F32.
template <typename T>
void bn_forward_cpu_t(const ExecContext& ctx) {
  const auto& a = attrs_of<BatchNormAttrs>(*ctx.node);
  const BnSlots at = bn_forward_slots(a.scale);
  const BnDims d = bn_dims(ctx.inputs[0].shape(), a.channels_last);
  const T* x = storage<T>(ctx.inputs[0]);
  const float* gamma = a.scale ? ctx.inputs[at.weight].f32() : nullptr;
  const float* beta = ctx.inputs[at.bias].f32();
  float* running_mean = ctx.inputs[at.mean].f32();
  float* running_var = ctx.inputs[at.var].f32();
  T* y = storage<T>(ctx.output);
  const double count = bn_count(d, ctx.comm);
  const BnStats st = bn_norm_stats(a, x, d, running_mean, running_var, ctx.comm);
  for (int64_t c = 0; c < d.c; ++c) {
    const double mean = st.mean[c], var = st.var[c];
    const double inv_std = 1.0 / std::sqrt(var + a.eps);
    const float g = gamma_at(gamma, c);
    const float scale = static_cast<float>(g * inv_std);
    const float shift = static_cast<float>(beta[c] - mean * g * inv_std);
    for (int64_t n = 0; n < d.n; ++n) {
      const int64_t base = d.base(n, c);
      for (int64_t i = 0; i < d.inner; ++i) {
        const int64_t j = base + i * d.step();
        store(y, j, activate_cpu(a.activation, load(x, j) * scale + shift));
      }
    }
    if (a.train && ctx.first_compute) {
      const double m = a.momentum;
      const double unbiased = var * count / (count - 1.0);
      running_mean[c] = static_cast<float>((1.0 - m) * running_mean[c] + m * mean);
      running_var[c] = static_cast<float>((1.0 - m) * running_var[c] + m * unbiased);
    }
  }
}

// inputs [dy, x, weight (scale only) (, running_mean, running_var in inference mode)] -> dx.
template <typename T>
void bn_grad_input_cpu_t(const ExecContext& ctx) {
  const auto& a = attrs_of<BatchNormAttrs>(*ctx.node);
  const BnSlots at = bn_grad_input_slots(a.scale);
  const BnDims d = bn_dims(ctx.inputs[1].shape(), a.channels_last);
  const T* dy = storage<T>(ctx.inputs[0]);
  const T* x = storage<T>(ctx.inputs[1]);
  const float* gamma = a.scale ? ctx.inputs[at.weight].f32() : nullptr;
  const float* rm = a.train ? nullptr : ctx.inputs[at.mean].f32();
  const float* rv = a.train ? nullptr : ctx.inputs[at.var].f32();
  T* dx = storage<T>(ctx.output);
  const BnStats st = bn_norm_stats(a, x, d, rm, rv, ctx.comm);
  std::vector<double> inv_std(static_cast<size_t>(d.c));
  for (int64_t c = 0; c < d.c; ++c) inv_std[c] = 1.0 / std::sqrt(st.var[c] + a.eps);
  if (!a.train) {  // running statistics are constants: dx = dy * gamma / std
    for (int64_t c = 0; c < d.c; ++c) {
      const float k = static_cast<float>(gamma_at(gamma, c) * inv_std[c]);
      for (int64_t n = 0; n < d.n; ++n) {
        const int64_t base = d.base(n, c);
        for (int64_t i = 0; i < d.inner; ++i) {
          const int64_t j = base + i * d.step();
          store(dx, j, load(dy, j) * k);
        }
      }
    }
    return;
  }
  // sums[c] = sum dy, sums[C + c] = sum dy * xhat (over the global batch when synchronised)
  std::vector<double> sums(static_cast<size_t>(2 * d.c), 0.0);
  for (int64_t c = 0; c < d.c; ++c) {
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t n = 0; n < d.n; ++n) {
      const int64_t base = d.base(n, c);
      for (int64_t i = 0; i < d.inner; ++i) {
        const int64_t j = base + i * d.step();
        sum_dy += load(dy, j);
        sum_dy_xhat += load(dy, j) * (load(x, j) - st.mean[c]) * inv_std[c];
      }
    }
    sums[c] = sum_dy;
    sums[d.c + c] = sum_dy_xhat;
  }
  bn_all_reduce(ctx.comm, sums);
  const double count = bn_count(d, ctx.comm);
  for (int64_t c = 0; c < d.c; ++c) {
    // dx = gamma * inv_std * (dy - mean(dy) - xhat * mean(dy * xhat))
    const double mean = st.mean[c], is = inv_std[c];
    const double mean_dy = sums[c] / count, mean_dy_xhat = sums[d.c + c] / count;
    for (int64_t n = 0; n < d.n; ++n) {
      const int64_t base = d.base(n, c);
      for (int64_t i = 0; i < d.inner; ++i) {
        const int64_t j = base + i * d.step();
        const double xhat = (load(x, j) - mean) * is;
        store(dx, j,
              static_cast<float>(gamma_at(gamma, c) * is *
                                 (load(dy, j) - mean_dy - xhat * mean_dy_xhat)));
      }
    }
  }
}

// inputs [dy, x (, running_mean, running_var in inference mode)] -> dweight [C] = sum dy * xhat
// over this rank's samples (the gradient average over ranks completes the global sum).
template <typename T>
void bn_grad_weight_cpu_t(const ExecContext& ctx) {
  const auto& a = attrs_of<BatchNormAttrs>(*ctx.node);
  const BnDims d = bn_dims(ctx.inputs[1].shape(), a.channels_last);
  const T* dy = storage<T>(ctx.inputs[0]);
  const T* x = storage<T>(ctx.inputs[1]);
  const float* rm = a.train ? nullptr : ctx.inputs[2].f32();
  const float* rv = a.train ? nullptr : ctx.inputs[3].f32();
  float* dw = ctx.output.f32();
  const BnStats st = bn_norm_stats(a, x, d, rm, rv, ctx.comm);
  for (int64_t c = 0; c < d.c; ++c) {
    const double mean = st.mean[c];
    const double inv_std = 1.0 / std::sqrt(st.var[c] + a.eps);
    double s = 0;
    for (int64_t n = 0; n < d.n; ++n) {
      const int64_t base = d.base(n, c);
      for (int64_t i = 0; i < d.inner; ++i)
        s += load(dy, base + i * d.step()) * (load(x, base + i * d.step()) - mean) * inv_std;
    }
    dw[c] = static_cast<float>(s);
  }
}

// inputs [dy] -> dbias [C] = sum of dy over N (and H, W).
template <typename T>
void bn_grad_bias_cpu_t(const ExecContext& ctx) {
  const auto& a = attrs_of<BatchNormAttrs>(*ctx.node);
  const BnDims d = bn_dims(ctx.inputs[0].shape(), a.channels_last);
  const T* dy = storage<T>(ctx.inputs[0]);
  float* db = ctx.output.f32();
  for (int64_t c = 0; c < d.c; ++c) {
    double s = 0;
    for (int64_t n = 0; n < d.n; ++n) {
      const int64_t base = d.base(n, c);
      for (int64_t i = 0; i < d.inner; ++i) s += load(dy, base + i * d.step());
    }
    db[c] = static_cast<float>(s);
  }
}

}  // namespace

void bn_forward_cpu(const ExecContext& ctx) {
  with_storage(ctx.inputs[0].desc->dtype,
               [&](auto tag) { bn_forward_cpu_t<decltype(tag)>(ctx); });
}
void bn_grad_input_cpu(const ExecContext& ctx) {
  with_storage(ctx.inputs[0].desc->dtype,
               [&](auto tag) { bn_grad_input_cpu_t<decltype(tag)>(ctx); });
}
void bn_grad_weight_cpu(const ExecContext& ctx) {
  with_storage(ctx.inputs[0].desc->dtype,
               [&](auto tag) { bn_grad_weight_cpu_t<decltype(tag)>(ctx); });
}
void bn_grad_bias_cpu(const ExecContext& ctx) {
  with_storage(ctx.inputs[0].desc->dtype,
               [&](auto tag) { bn_grad_bias_cpu_t<decltype(tag)>(ctx); });
}

}  // namespace remat
