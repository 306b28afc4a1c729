// dense (alias linear): y = act(x * W^T + b) over the last dimension of an input of any rank
// >= 2 ([N, F], [N, T, F], ...; the leading dimensions are rows) with PyTorch's weight layout
// [units, F], and its backward ops dense_grad_input [dy, weight], dense_grad_weight [dy, x],
// dense_grad_bias [dy]. CPU path through cpu_gemm; CUDA path through cuBLAS + kernels/.
// `learned: false` makes the weight a buffer (saved in checkpoints, never trained; no weight
// gradient, no bias): a fixed linear map over the last axis, as an imported Resize's
// interpolation matrix (Note [resize as linear maps] in models/onnx/onnx_resize.cpp).
#include <memory>

#include "ops/cpu_gemm.h"
#include "ops/cpu_storage.h"
#include "ops/gemm_bf16_cpu.h"
#include "ops/fused_activation.h"
#include "ops/registry.h"
#ifdef REMAT_HAVE_CUDA
#include "ops/cudnn_util.h"
#endif

namespace remat {
namespace {

struct DenseAttrs : OpAttrs {
  int64_t units = 0;
  bool bias = true;
  bool learned = true;  // false: the weight is a constant buffer
  Activation activation = Activation::None;
  double init_std = 0;  // > 0: weights ~ N(0, init_std^2) (GPT-2 uses 0.02)
};

// The backward ops share the forward node's attrs, so all four parse the same keys.
OpAttrsPtr dense_parse(AttrReader& r, const std::string& op_name) {
  auto a = std::make_shared<DenseAttrs>();
  a->units = r.require_int("units", 1, int64_t{1} << 24);
  a->learned = r.get_bool("learned", true);
  a->bias = r.get_bool("bias", a->learned);
  if (a->bias && !a->learned) r.fail("bias", "must be false when learned is false");
  a->activation = parse_activation(r);
  a->init_std = r.get_double("init_std", 0.0, 0.0, 100.0);
  r.finish(op_name);
  return a;
}

// Rows of an input [..., F]: the product of its leading dimensions.
int64_t rows_of(const Shape& s) { return shape_numel(s) / s.back(); }

TensorDesc dense_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const DenseAttrs&>(at);
  const DType t = require_float("dense", in, 1);
  const Shape& x = in.at(0).shape;
  if (x.size() < 2)
    REMAT_USER_ERROR("dense expects an input of rank >= 2 ([N, F], [N, T, F], ...), got "
                     << shape_str(x));
  for (int64_t d : x)
    if (d < 1) REMAT_USER_ERROR("dense input has an empty dimension: " << shape_str(x));
  Shape y = x;
  y.back() = a.units;
  return TensorDesc{y, t};
}

std::vector<ParamSpec> dense_params(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const DenseAttrs&>(at);
  int64_t f = in.at(0).shape.back();
  std::vector<ParamSpec> out;
  ParamSpec w;
  w.suffix = "weight";
  w.desc = TensorDesc{{a.units, f}, DType::F32};
  w.init = a.init_std > 0 ? InitKind::Normal : weight_init_for(a.activation);
  w.init_std = a.init_std;
  w.fan_in = f;
  w.fan_out = a.units;
  w.kind = a.learned ? ValueKind::Param : ValueKind::Buffer;
  w.constant = !a.learned;
  out.push_back(w);
  if (a.bias) {
    ParamSpec b;
    b.suffix = "bias";
    b.desc = TensorDesc{{a.units}, DType::F32};
    b.init = InitKind::Zeros;
    b.fan_in = f;
    b.fan_out = a.units;
    b.role = ParamRole::Bias;
    out.push_back(b);
  }
  return out;
}

// 2 * N * F * units flops for the forward GEMM and each of the two gradient GEMMs.
OpCost gemm_cost(int64_t n, int64_t f, int64_t units, const std::vector<TensorDesc>& in,
                 const TensorDesc& out) {
  OpCost c;
  c.flops = 2.0 * static_cast<double>(n) * static_cast<double>(f) * static_cast<double>(units);
  c.bytes_moved = io_bytes(in, out);
  return c;
}

// The CPU path's workspace: none in FP32; in bf16 the widened blocks (ops/gemm_bf16_cpu.h).
int64_t dense_cpu_workspace(DensePass pass, const TensorDesc& data, int64_t rows, int64_t f,
                            int64_t u) {
  return data.dtype == DType::BF16 ? dense_bf16_workspace(pass, rows, f, u) : 0;
}

OpCost dense_cost(const OpAttrs& at, const std::vector<TensorDesc>& in, const TensorDesc& out) {
  const auto& a = static_cast<const DenseAttrs&>(at);
  const Shape& x = in.at(0).shape;
  OpCost c = gemm_cost(rows_of(x), x.back(), a.units, in, out);
  c.workspace_bytes =
      dense_cpu_workspace(DensePass::Forward, in[0], rows_of(x), x.back(), a.units);
  double extra = (a.bias ? 1.0 : 0.0) + (a.activation != Activation::None ? 1.0 : 0.0);
  c.flops += extra * static_cast<double>(out.numel());
  return c;
}

// Every kernel views its tensors as matrices: rows = the product of the leading dimensions.
// y[N, U] = act(x[N, F] * W[U, F]^T + b[U]). inputs [x, W, (b)].
void dense_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<DenseAttrs>(*ctx.node);
  const int64_t n = rows_of(ctx.inputs[0].shape()), f = ctx.inputs[0].shape().back(), u = a.units;
  if (ctx.inputs[0].desc->dtype == DType::BF16)
    return dense_forward_bf16_cpu(ctx.inputs[0].bf16(), ctx.inputs[1].f32(),
                                  a.bias ? ctx.inputs[2].f32() : nullptr, a.activation, n, f, u,
                                  ctx.output.bf16(), ctx.workspace);
  float* y = ctx.output.f32();
  cpu_gemm(false, true, n, u, f, 1.0f, ctx.inputs[0].f32(), f, ctx.inputs[1].f32(), f, 0.0f, y, u);
  if (a.bias) {
    const float* b = ctx.inputs[2].f32();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < u; ++j) y[i * u + j] += b[j];
  }
  activation_forward_cpu(a.activation, y, n * u);
}

// dx[N, F] = dz[N, U] * W[U, F]. inputs [dz, W].
void dense_grad_input_cpu(const ExecContext& ctx) {
  const int64_t n = rows_of(ctx.inputs[0].shape()), u = ctx.inputs[0].shape().back(),
                f = ctx.inputs[1].dim(1);
  if (ctx.inputs[0].desc->dtype == DType::BF16)
    return dense_grad_input_bf16_cpu(ctx.inputs[0].bf16(), ctx.inputs[1].f32(), n, u, f,
                                     ctx.output.bf16(), ctx.workspace);
  cpu_gemm(false, false, n, f, u, 1.0f, ctx.inputs[0].f32(), u, ctx.inputs[1].f32(), f, 0.0f,
           ctx.output.f32(), f);
}

// dW[U, F] = dz[N, U]^T * x[N, F]. inputs [dz, x].
void dense_grad_weight_cpu(const ExecContext& ctx) {
  const int64_t n = rows_of(ctx.inputs[0].shape()), u = ctx.inputs[0].shape().back(),
                f = ctx.inputs[1].shape().back();
  if (ctx.inputs[0].desc->dtype == DType::BF16)
    return dense_grad_weight_bf16_cpu(ctx.inputs[0].bf16(), ctx.inputs[1].bf16(), n, u, f,
                                      ctx.output.f32(), ctx.workspace);
  cpu_gemm(true, false, u, f, n, 1.0f, ctx.inputs[0].f32(), u, ctx.inputs[1].f32(), f, 0.0f,
           ctx.output.f32(), f);
}

// db[U] = column sums of dz[N, U]. inputs [dz] (F32 or bf16: ops/cpu_storage.h).
void dense_grad_bias_cpu(const ExecContext& ctx) { column_sums_cpu(ctx.inputs[0], ctx.output); }

#ifdef REMAT_HAVE_CUDA
// The CUDA path. cuBLAS is column-major: a row-major [r, c] matrix is the column-major [c, r]
// matrix, so each row-major product C = A * B is issued as C^T = B^T * A^T.
// FP32 data: FP32 compute (PEDANTIC: no TF32 or BF16x9 emulation whatever the handle's math
// mode) unless the backend allows TF32. BF16 data (Note [bf16 GEMMs]): bf16 operands, the
// weight rounded into the workspace (Note [bf16 weights] in cudnn_util.h), CUBLAS_COMPUTE_32F.
// cuBLAS is bit-reproducible run to run on one GPU and stream (atomics are off by default),
// which recomputation relies on.
//
// Note [bf16 GEMMs]
// cuBLAS takes bf16 A and B with FP32 accumulation (CUBLAS_COMPUTE_32F; PEDANTIC would forbid
// the tensor-core paths bf16 exists for) and writes C in bf16 (activations) or FP32 (dense's
// weight gradient, then rounded to bf16 in place: OpDef::bf16_rounds_output, as a bf16 weight
// gradient of cuDNN's). The bias and fused activation follow in a kernels/ epilogue on the bf16
// output, a second rounding the CPU reference (one rounding after the epilogue) does not make.
void gemm_cuda(const ExecContext& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
               int64_t k, const void* a, int64_t lda, const void* b, int64_t ldb, void* c,
               int64_t ldc, DType ab, DType c_type) {
  const CudaContext& cc = cuda_context(ctx);
  const float one = 1.0f, zero = 0.0f;
  const bool bf16 = ab == DType::BF16;
  const cudaDataType_t t_ab = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cudaDataType_t t_c = c_type == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t compute = bf16              ? CUBLAS_COMPUTE_32F
                                      : cc.matmul_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                       : CUBLAS_COMPUTE_32F_PEDANTIC;
  REMAT_CUBLAS_CHECK(cublasGemmEx(
      cc.cublas, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
      to_int(m, "gemm m"), to_int(n, "gemm n"), to_int(k, "gemm k"), &one, a, t_ab,
      to_int(lda, "lda"), b, t_ab, to_int(ldb, "ldb"), &zero, c, t_c, to_int(ldc, "ldc"),
      compute, CUBLAS_GEMM_DEFAULT));
}

// The weight (inputs[1]) as the GEMM reads it: FP32, or rounded to bf16 in the workspace.
const void* dense_weight(const ExecContext& ctx) {
  const TensorView& w = ctx.inputs[1];
  if (ctx.inputs[0].desc->dtype != DType::BF16) return w.data;
  REMAT_CHECK(ctx.workspace && ctx.workspace_bytes >= bf16_copy_bytes(*w.desc),
              "node '" << ctx.node->name << "': no workspace for the bf16 weight copy");
  auto* copy = static_cast<uint16_t*>(ctx.workspace);
  bf16_narrow(copy, w.f32(), w.numel(), cuda_context(ctx).stream);
  return copy;
}

// Forward and data gradient need the bf16 weight copy (Note [bf16 weights]).
int64_t dense_weight_workspace(const ExecContext& ctx) {
  return ctx.inputs[0].desc->dtype == DType::BF16 ? bf16_copy_bytes(*ctx.inputs[1].desc) : 0;
}

// y[N, U] = act(x[N, F] W[U, F]^T + b): column-major y^T[U, N] = W^T^T[U, F] x^T[F, N].
void dense_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<DenseAttrs>(*ctx.node);
  const int64_t n = rows_of(ctx.inputs[0].shape()), f = ctx.inputs[0].shape().back(), u = a.units;
  const DType t = ctx.inputs[0].desc->dtype;
  gemm_cuda(ctx, true, false, u, n, f, dense_weight(ctx), f, ctx.inputs[0].data, f,
            ctx.output.data, u, t, t);
  if (a.bias || a.activation != Activation::None)
    with_storage(t, [&](auto tag) {
      bias_act_forward(storage<decltype(tag)>(ctx.output), a.bias ? ctx.inputs[2].f32() : nullptr,
                       n, u, 1, kernel_activation(a.activation), cuda_context(ctx).stream);
    });
}

// dx[N, F] = dz[N, U] W[U, F]: column-major dx^T[F, N] = W^T[F, U] dz^T[U, N].
void dense_grad_input_cuda(const ExecContext& ctx) {
  const int64_t n = rows_of(ctx.inputs[0].shape()), u = ctx.inputs[0].shape().back(),
                f = ctx.inputs[1].dim(1);
  const DType t = ctx.inputs[0].desc->dtype;
  gemm_cuda(ctx, false, false, f, n, u, dense_weight(ctx), f, ctx.inputs[0].data, u,
            ctx.output.data, f, t, t);
}

// dW[U, F] = dz[N, U]^T x[N, F]: column-major dW^T[F, U] = x^T[F, N] (dz^T[U, N])^T. The
// gradient is FP32; in bf16 it is then rounded to bf16 values (Note [bf16 GEMMs]).
void dense_grad_weight_cuda(const ExecContext& ctx) {
  const int64_t n = rows_of(ctx.inputs[0].shape()), u = ctx.inputs[0].shape().back(),
                f = ctx.inputs[1].shape().back();
  const DType t = ctx.inputs[0].desc->dtype;
  gemm_cuda(ctx, false, true, f, u, n, ctx.inputs[1].data, f, ctx.inputs[0].data, u,
            ctx.output.data, f, t, DType::F32);
  if (t == DType::BF16)
    bf16_round(ctx.output.f32(), ctx.output.f32(), ctx.output.numel(), cuda_context(ctx).stream);
}

// db[U] = column sums of dz[N, U] (deterministic reduction over fixed row slices, partial sums
// in the workspace).
int64_t dense_grad_bias_workspace(const ExecContext& ctx) {
  const Shape& s = ctx.inputs.at(0).shape();
  return bias_grad_workspace_bytes(rows_of(s), s.back(), 1);
}

void dense_grad_bias_cuda(const ExecContext& ctx) {
  REMAT_CHECK(ctx.workspace_bytes >= dense_grad_bias_workspace(ctx),
              "node '" << ctx.node->name << "': dense_grad_bias workspace too small");
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    bias_grad_reduce(ctx.output.f32(), storage<decltype(tag)>(ctx.inputs[0]),
                     rows_of(ctx.inputs[0].shape()), ctx.inputs[0].shape().back(), 1,
                     ctx.workspace, cuda_context(ctx).stream);
  });
}
#endif

std::vector<ValueId> dense_gradient(GradEmitter& g, const Node& fwd, ValueId dy) {
  // Copies first: emit() grows the graph, which may move `fwd` and the value table.
  const OpAttrsPtr typed = fwd.typed;
  const auto& a = static_cast<const DenseAttrs&>(*typed);
  const std::vector<ValueId> in = fwd.inputs;
  std::vector<TensorDesc> descs;
  for (ValueId v : in) descs.push_back(g.graph().value(v).desc);
  ValueId dz = emit_activation_grad(g, fwd, dy, a.activation);
  std::vector<ValueId> out(in.size(), kNoValue);
  out[0] = g.emit("grad_input", "dense_grad_input", {dz, in[1]}, descs[0]);
  if (a.learned) out[1] = g.emit("grad_weight", "dense_grad_weight", {dz, in[0]}, descs[1]);
  if (a.bias) out[2] = g.emit("grad_bias", "dense_grad_bias", {dz}, descs[2]);
  return out;
}

void require_matrix_like(const std::string& name, const std::vector<TensorDesc>& in) {
  for (const auto& d : in) REMAT_CHECK(d.shape.size() >= 2, name << " expects inputs of rank >= 2");
}

OpDef dense_backward_op(const std::string& name, const std::string& summary) {
  OpDef op;
  op.name = name;
  op.summary = summary;
  op.user_visible = false;
  op.parse = [name](AttrReader& r) { return dense_parse(r, name); };
  return op;
}

OpDef dense_forward_op(const std::string& name) {
  OpDef f;
  f.name = name;
  f.summary = "fully connected layer over the last dimension of [.., F] (bias, fused relu/relu6, "
              "init_std, learned)" + std::string(name == "linear" ? "; the same op as dense" : "");
  f.parse = [name](AttrReader& rd) { return dense_parse(rd, name); };
  f.infer = dense_infer;
  f.params = dense_params;
  f.cost = dense_cost;
  f.cpu = dense_cpu;
#ifdef REMAT_HAVE_CUDA
  f.cuda = dense_cuda;
  f.cuda_workspace = dense_weight_workspace;
  f.bf16_cuda_native = true;
#endif
  f.gradient = dense_gradient;
  with_bf16(f).autocast_bf16 = f.bf16_cpu_native = true;  // ops/gemm_bf16_cpu.h
  f.bf16_operands = {1};  // the weight; the bias is added in FP32
  return f;
}

}  // namespace

void register_dense_ops(OpRegistry& r) {
  r.add(dense_forward_op("dense"));
  r.add(dense_forward_op("linear"));

  OpDef gi = dense_backward_op("dense_grad_input", "dense input gradient [dy, weight]");
  gi.min_inputs = gi.max_inputs = 2;
  gi.infer = [](const OpAttrs&, const std::vector<TensorDesc>& in) {  // [.., U], [U, F] -> [.., F]
    require_matrix_like("dense_grad_input", in);
    const DType t = require_float("dense_grad_input", in, 1);
    Shape dx = in[0].shape;
    dx.back() = in[1].shape[1];
    return TensorDesc{dx, t};
  };
  gi.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    OpCost c = gemm_cost(rows_of(out.shape), out.shape.back(), in.at(0).shape.back(), in, out);
    c.workspace_bytes = dense_cpu_workspace(DensePass::GradInput, in[0], rows_of(out.shape),
                                            out.shape.back(), in[0].shape.back());
    return c;
  };
  gi.cpu = dense_grad_input_cpu;
#ifdef REMAT_HAVE_CUDA
  gi.cuda = dense_grad_input_cuda;
  gi.cuda_workspace = dense_weight_workspace;
  gi.bf16_cuda_native = true;
#endif
  with_bf16(gi).bf16_operands = {1};  // the weight
  gi.bf16_cpu_native = true;
  r.add(std::move(gi));

  OpDef gw = dense_backward_op("dense_grad_weight", "dense weight gradient [dy, x]");
  gw.min_inputs = gw.max_inputs = 2;
  gw.infer = [](const OpAttrs&, const std::vector<TensorDesc>& in) {  // [.., U], [.., F] -> [U, F]
    require_matrix_like("dense_grad_weight", in);
    require_float("dense_grad_weight", in);  // dy and x; the gradient is the F32 parameter's
    return TensorDesc{{in[0].shape.back(), in[1].shape.back()}, DType::F32};
  };
  gw.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    OpCost c = gemm_cost(rows_of(in.at(0).shape), out.shape[1], out.shape[0], in, out);
    c.workspace_bytes = dense_cpu_workspace(DensePass::GradWeight, in[0], rows_of(in[0].shape),
                                            out.shape[1], out.shape[0]);
    return c;
  };
  gw.cpu = dense_grad_weight_cpu;
#ifdef REMAT_HAVE_CUDA
  gw.cuda = dense_grad_weight_cuda;
  gw.bf16_cuda_native = true;
#endif
  with_bf16(gw).bf16_rounds_output = gw.bf16_cpu_native = true;
  r.add(std::move(gw));

  OpDef gb = dense_backward_op("dense_grad_bias", "dense bias gradient [dy]");
  gb.infer = [](const OpAttrs& at, const std::vector<TensorDesc>&) {
    return TensorDesc{{static_cast<const DenseAttrs&>(at).units}, DType::F32};
  };
  gb.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, static_cast<double>(in.at(0).numel()) / out.numel());
  };
  gb.cpu = dense_grad_bias_cpu;
#ifdef REMAT_HAVE_CUDA
  gb.cuda = dense_grad_bias_cuda;
  gb.cuda_workspace = dense_grad_bias_workspace;
  gb.bf16_cuda_native = true;
#endif
  gb.bf16_cpu_native = true;
  r.add(std::move(with_bf16(gb)));
}

}  // namespace remat
