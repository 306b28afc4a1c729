// batchnorm: per-channel normalisation of [N, C, H, W] (or [N, F]) with a learned scale and
// shift and running statistics, PyTorch conventions; its three backward ops. Backward recomputes
// the batch statistics from x so the forward stays single-output. `scale: false` drops the
// learned scale (Keras's BatchNormalization(scale=False), InceptionV3's): gamma is 1 and the
// node has no weight parameter and no weight gradient.
#include <cmath>
#include <vector>

#include "ops/batchnorm_cuda.h"
#include "ops/cpu_storage.h"
#include "ops/data_format.h"
#include "ops/op_common.h"
#include "ops/registry.h"
#include "runtime/core/check.h"
#include "runtime/comm/communicator.h"

namespace remat {
namespace {

struct BatchNormAttrs : OpAttrs {
  double momentum = 0.1;  // running = (1 - momentum) * running + momentum * batch
  double eps = 1e-5;
  bool train = true;  // train: batch statistics; inference: running statistics
  bool scale = true;  // a learned scale (weight); false: gamma = 1, no weight parameter
  bool channels_last = false;  // data_format: x [N, H, W, C] (Note [channels-last layout])
};

// Positions of the parameters among a node's inputs; -1 where absent. Forward:
// [x, weight (scale only), bias, running_mean, running_var]; grad_input: [dy, x, weight (scale
// only), running_mean, running_var (inference only)]; grad_weight: [dy, x, running_mean,
// running_var (inference only)].
struct BnSlots {
  int weight, bias, mean, var;
};
BnSlots bn_forward_slots(bool scale) { return scale ? BnSlots{1, 2, 3, 4} : BnSlots{-1, 1, 2, 3}; }
BnSlots bn_grad_input_slots(bool scale) {
  return scale ? BnSlots{2, -1, 3, 4} : BnSlots{-1, -1, 2, 3};
}

// gamma[c], 1 without a learned scale.
inline float gamma_at(const float* gamma, int64_t c) { return gamma ? gamma[c] : 1.0f; }

OpAttrsPtr bn_parse(AttrReader& r, const std::string& op_name) {
  auto a = std::make_shared<BatchNormAttrs>();
  a->momentum = r.get_double("momentum", 0.1, 0.0, 1.0);
  a->eps = r.get_double("eps", 1e-5, 0.0, 1.0);
  if (a->eps <= 0) r.fail("eps", "must be greater than 0");
  a->train = r.get_choice("mode", "train", {"train", "inference"}) == "train";
  a->scale = r.get_bool("scale", true);
  a->channels_last = read_channels_last(r);
  r.finish(op_name);
  return a;
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

BnDims bn_dims(const Shape& s, bool channels_last) {
  BnDims d;
  d.channels_last = channels_last && s.size() == 4;
  d.n = s.at(0);
  d.c = d.channels_last ? s.at(3) : s.at(1);
  d.inner = s.size() == 4 ? (d.channels_last ? s[1] * s[2] : s[2] * s[3]) : 1;
  return d;
}

void bn_check_input(const TensorDesc& x, const char* op) {
  if (!dtype_is_float(x.dtype))
    REMAT_USER_ERROR(op << " expects an f32 or bf16 input, got " << dtype_name(x.dtype));
  if (x.shape.size() != 4 && x.shape.size() != 2)
    REMAT_USER_ERROR(op << " expects a [N, C, H, W] or [N, F] input, got " << shape_str(x.shape));
}

TensorDesc bn_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const BatchNormAttrs&>(at);
  const TensorDesc& x = in.at(0);
  bn_check_input(x, "batchnorm");
  if (a.train && bn_dims(x.shape, a.channels_last).per_channel() < 2)
    REMAT_USER_ERROR("batchnorm in train mode needs more than 1 value per channel, got input "
                     << shape_str(x.shape));
  return x;
}

std::vector<ParamSpec> bn_params(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const BatchNormAttrs&>(at);
  TensorDesc c{{bn_dims(in.at(0).shape, a.channels_last).c}, DType::F32};
  std::vector<ParamSpec> out;
  if (a.scale)
    out.push_back({"weight", c, ValueKind::Param, InitKind::Ones, 0, 0});
  out.push_back({"bias", c, ValueKind::Param, InitKind::Zeros, 0, 0});
  out.push_back({"running_mean", c, ValueKind::Buffer, InitKind::Zeros, 0, 0});
  out.push_back({"running_var", c, ValueKind::Buffer, InitKind::Ones, 0, 0});
  return out;
}

OpCost bn_cost_scaled(const std::vector<TensorDesc>& in, const TensorDesc& out, double per_elem) {
  OpCost c;
  c.flops = per_elem * static_cast<double>(in.at(0).numel());
  c.bytes_moved = io_bytes(in, out);
  return c;
}

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
        store(y, j, load(x, j) * scale + shift);
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

// The kernels for the dtype of the data (inputs and outputs of one dtype; Note [bf16
// execution]: these read and write bf16 themselves).
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

std::vector<ValueId> bn_gradient(GradEmitter& g, const Node& fwd, ValueId dy) {
  const auto& a = attrs_of<BatchNormAttrs>(fwd);
  const BnSlots at = bn_forward_slots(a.scale);
  const size_t n = a.scale ? 5 : 4;
  REMAT_CHECK(fwd.inputs.size() == n, "batchnorm node '" << fwd.name << "' has "
                                                          << fwd.inputs.size() << " inputs, not "
                                                          << n);
  const ValueId x = fwd.inputs[0], b = fwd.inputs[at.bias];
  const ValueId rm = fwd.inputs[at.mean], rv = fwd.inputs[at.var];
  const Graph& gr = g.graph();
  std::vector<ValueId> gi_in = {dy, x}, gw_in = {dy, x};
  if (a.scale) gi_in.push_back(fwd.inputs[at.weight]);
  if (!a.train) {
    gi_in.insert(gi_in.end(), {rm, rv});
    gw_in.insert(gw_in.end(), {rm, rv});
  }
  const TensorDesc x_desc = gr.value(x).desc, c_desc = gr.value(b).desc;
  std::vector<ValueId> out(n, kNoValue);
  out[0] = g.emit("grad_input", "batchnorm_grad_input", gi_in, x_desc);
  if (a.scale) out[at.weight] = g.emit("grad_weight", "batchnorm_grad_weight", gw_in, c_desc);
  out[at.bias] = g.emit("grad_bias", "batchnorm_grad_bias", {dy}, c_desc);
  return out;
}

// A backward op sharing batchnorm's attributes.
OpDef bn_backward_op(const std::string& name, const std::string& summary, int min_in, int max_in) {
  OpDef op;
  op.name = name;
  op.summary = summary;
  op.user_visible = false;
  op.kind = NodeKind::Backward;
  op.min_inputs = min_in;
  op.max_inputs = max_in;
  op.parse = [name](AttrReader& r) { return bn_parse(r, name); };
  op.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return bn_cost_scaled(in, out, 6.0);
  };
  return op;
}

TensorDesc channel_desc(const OpAttrs& at, const TensorDesc& x) {
  return TensorDesc{{bn_dims(x.shape, static_cast<const BatchNormAttrs&>(at).channels_last).c},
                    DType::F32};
}

#ifdef REMAT_HAVE_CUDA
BnCudaParams bn_cuda_params(const Node& n) {
  const auto& a = attrs_of<BatchNormAttrs>(n);
  BnCudaParams p;
  p.momentum = a.momentum;
  p.eps = a.eps;
  p.train = a.train;
  p.scale = a.scale;
  p.channels_last = a.channels_last;
  return p;
}

// Attaches a batchnorm kernel (and its workspace query, when it has one): ops/batchnorm_cuda.cpp.
// cuDNN computes the batch statistics inside its calls, so the CUDA path cannot synchronise
// them across ranks (Note [synchronised batch statistics]): it refuses rather than train each
// rank on its own statistics.
void set_bn_cuda(OpDef& op, void (*run)(const BnCudaParams&, const ExecContext&),
                 int64_t (*workspace)(const BnCudaParams&, const ExecContext&)) {
  op.cuda = [run](const ExecContext& ctx) {
    const BnCudaParams p = bn_cuda_params(*ctx.node);
    if (ctx.comm && p.train)
      REMAT_USER_ERROR("layer '" << ctx.node->name << "': batchnorm in train mode on CUDA cannot "
                                 << "synchronise its batch statistics across ranks yet (the CPU "
                                 << "path does); train data parallel on the CPU, or set "
                                 << "mode: inference");
    run(p, ctx);
  };
  if (workspace)
    op.cuda_workspace = [workspace](const ExecContext& ctx) {
      return workspace(bn_cuda_params(*ctx.node), ctx);
    };
}
#endif

}  // namespace

void register_batchnorm_ops(OpRegistry& r) {
  OpDef bn;
  bn.name = "batchnorm";
  bn.summary = "batch normalisation per channel (momentum, eps, mode train|inference, scale)";
  bn.min_inputs = bn.max_inputs = 1;
  bn.parse = [](AttrReader& rd) { return bn_parse(rd, "batchnorm"); };
  bn.infer = bn_infer;
  bn.params = bn_params;
  bn.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return bn_cost_scaled(in, out, 7.0);
  };
  bn.cpu = bn_forward_cpu;
  bn.gradient = bn_gradient;
  bn.channels_last = [](const OpAttrs&, const std::vector<TensorDesc>& in) {
    return in.at(0).shape.size() == 4;
  };
#ifdef REMAT_HAVE_CUDA
  set_bn_cuda(bn, batchnorm_forward_cuda, batchnorm_forward_cuda_workspace);
#endif
  with_bf16(bn).bf16_cpu_native = bn.bf16_cuda_native = true;
  r.add(std::move(bn));

  OpDef gi = bn_backward_op("batchnorm_grad_input", "batchnorm input gradient", 2, 5);
  gi.infer = [](const OpAttrs&, const std::vector<TensorDesc>& in) {
    bn_check_input(in.at(1), "batchnorm_grad_input");
    return in.at(1);
  };
  gi.cpu = bn_grad_input_cpu;
#ifdef REMAT_HAVE_CUDA
  set_bn_cuda(gi, batchnorm_grad_input_cuda, batchnorm_grad_input_cuda_workspace);
#endif
  with_bf16(gi).bf16_cpu_native = gi.bf16_cuda_native = true;
  r.add(std::move(gi));

  OpDef gw = bn_backward_op("batchnorm_grad_weight", "batchnorm scale gradient", 2, 4);
  gw.infer = [](const OpAttrs& a, const std::vector<TensorDesc>& in) {
    bn_check_input(in.at(1), "batchnorm_grad_weight");
    return channel_desc(a, in.at(1));
  };
  gw.cpu = bn_grad_weight_cpu;
#ifdef REMAT_HAVE_CUDA
  set_bn_cuda(gw, batchnorm_grad_weight_cuda, batchnorm_grad_weight_cuda_workspace);
#endif
  with_bf16(gw).bf16_cpu_native = gw.bf16_cuda_native = true;
  r.add(std::move(gw));

  OpDef gb = bn_backward_op("batchnorm_grad_bias", "batchnorm shift gradient", 1, 1);
  gb.infer = [](const OpAttrs& a, const std::vector<TensorDesc>& in) {
    bn_check_input(in.at(0), "batchnorm_grad_bias");
    return channel_desc(a, in.at(0));
  };
  gb.cpu = bn_grad_bias_cpu;
#ifdef REMAT_HAVE_CUDA
  gb.cuda = [](const ExecContext& ctx) {
    batchnorm_grad_bias_cuda(bn_cuda_params(*ctx.node), ctx);
  };
  gb.cuda_workspace = [](const ExecContext& ctx) {
    return batchnorm_grad_bias_cuda_workspace(bn_cuda_params(*ctx.node), ctx);
  };
#endif
  with_bf16(gb).bf16_cpu_native = gb.bf16_cuda_native = true;
  r.add(std::move(gb));
}

}  // namespace remat
