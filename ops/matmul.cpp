// matmul: batched matrix product C = scale * op(A) op(B) over the last two dimensions, with the
// leading (batch) dimensions equal (no broadcasting): A [.., M, K] (transpose_a: [.., K, M]),
// B [.., K, N] (transpose_b: [.., N, K]) -> C [.., M, N]. Attention is written with it:
// scores = matmul(q, k, transpose_b, scale 1/sqrt(D)), out = matmul(probs, v). Its gradients are
// matmul nodes themselves (with their own transpose flags). CPU path: cpu_gemm per batch; CUDA
// path: one cuBLAS strided batched GEMM, FP32 compute unless the backend allows TF32.
#include <string>
#include <vector>

#include "ops/cpu_gemm.h"
#include "ops/gemm_bf16_cpu.h"
#include "ops/op_common.h"
#include "ops/registry.h"
#ifdef REMAT_HAVE_CUDA
#include "ops/cudnn_util.h"
#endif

namespace remat {
namespace {

struct MatmulAttrs : OpAttrs {
  bool transpose_a = false, transpose_b = false;
  double scale = 1.0;
};

OpAttrsPtr matmul_parse(AttrReader& r) {
  auto a = std::make_shared<MatmulAttrs>();
  a->transpose_a = r.get_bool("transpose_a", false);
  a->transpose_b = r.get_bool("transpose_b", false);
  a->scale = r.get_double("scale", 1.0, -1e30, 1e30);
  r.finish("matmul");
  return a;
}

// The GEMM of one call: batch count and M, N, K.
struct MatmulDims {
  int64_t batch = 1, m = 0, n = 0, k = 0;
};

MatmulDims matmul_dims(const MatmulAttrs& a, const Shape& sa, const Shape& sb) {
  const size_t r = sa.size();
  MatmulDims d;
  for (size_t i = 0; i + 2 < r; ++i) d.batch *= sa[i];
  d.m = a.transpose_a ? sa[r - 1] : sa[r - 2];
  d.k = a.transpose_a ? sa[r - 2] : sa[r - 1];
  d.n = a.transpose_b ? sb[r - 2] : sb[r - 1];
  return d;
}

TensorDesc matmul_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const MatmulAttrs&>(at);
  const DType t = require_float("matmul", in);
  const Shape& sa = in.at(0).shape;
  const Shape& sb = in.at(1).shape;
  if (sa.size() < 2 || sa.size() != sb.size())
    REMAT_USER_ERROR("matmul expects two inputs of the same rank >= 2, got " << shape_str(sa)
                                                                            << " and " << shape_str(sb));
  const size_t r = sa.size();
  for (size_t i = 0; i + 2 < r; ++i)
    if (sa[i] != sb[i])
      REMAT_USER_ERROR("matmul: batch dimensions differ: " << shape_str(sa) << " and "
                                                           << shape_str(sb) << " (no broadcasting)");
  const int64_t kb = a.transpose_b ? sb[r - 1] : sb[r - 2];
  const MatmulDims d = matmul_dims(a, sa, sb);
  if (d.k != kb)
    REMAT_USER_ERROR("matmul: inner dimensions differ: " << shape_str(sa)
                     << (a.transpose_a ? " (transposed)" : "") << " x " << shape_str(sb)
                     << (a.transpose_b ? " (transposed)" : "") << ": " << d.k << " vs " << kb);
  Shape c(sa.begin(), sa.end() - 2);
  c.push_back(d.m);
  c.push_back(d.n);
  return checked_desc(c, t, "matmul output");
}

OpCost matmul_cost(const OpAttrs& at, const std::vector<TensorDesc>& in, const TensorDesc& out) {
  const MatmulDims d = matmul_dims(static_cast<const MatmulAttrs&>(at), in.at(0).shape, in.at(1).shape);
  OpCost c;
  c.flops = 2.0 * static_cast<double>(d.batch) * static_cast<double>(d.m) *
            static_cast<double>(d.n) * static_cast<double>(d.k);
  c.bytes_moved = io_bytes(in, out);
  // The CPU path in bf16 widens one product's operands and result (ops/gemm_bf16_cpu.h).
  if (out.dtype == DType::BF16) c.workspace_bytes = matmul_bf16_workspace(d.m, d.n, d.k);
  return c;
}

// Row strides of the stored A and B (row-major).
int64_t lda_of(const MatmulAttrs& a, const MatmulDims& d) { return a.transpose_a ? d.m : d.k; }
int64_t ldb_of(const MatmulAttrs& a, const MatmulDims& d) { return a.transpose_b ? d.k : d.n; }

void matmul_cpu(const ExecContext& ctx) {
  const auto& a = attrs_of<MatmulAttrs>(*ctx.node);
  const MatmulDims d = matmul_dims(a, ctx.inputs[0].shape(), ctx.inputs[1].shape());
  if (ctx.output.desc->dtype == DType::BF16) {
    const uint16_t* pa = ctx.inputs[0].bf16();
    const uint16_t* pb = ctx.inputs[1].bf16();
    uint16_t* pc = ctx.output.bf16();
    for (int64_t b = 0; b < d.batch; ++b)
      matmul_bf16_cpu(a.transpose_a, a.transpose_b, d.m, d.n, d.k, static_cast<float>(a.scale),
                      pa + b * d.m * d.k, lda_of(a, d), pb + b * d.k * d.n, ldb_of(a, d),
                      pc + b * d.m * d.n, ctx.workspace);
    return;
  }
  const float* pa = ctx.inputs[0].f32();
  const float* pb = ctx.inputs[1].f32();
  float* pc = ctx.output.f32();
  for (int64_t b = 0; b < d.batch; ++b)
    cpu_gemm(a.transpose_a, a.transpose_b, d.m, d.n, d.k, static_cast<float>(a.scale),
             pa + b * d.m * d.k, lda_of(a, d), pb + b * d.k * d.n, ldb_of(a, d), 0.0f,
             pc + b * d.m * d.n, d.n);
}

#ifdef REMAT_HAVE_CUDA
// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets B first (a
// stored row-major matrix is its column-major transpose, so an untransposed operand is OP_N
// with its row stride as leading dimension), m = N, n = M.
void matmul_cuda(const ExecContext& ctx) {
  const auto& a = attrs_of<MatmulAttrs>(*ctx.node);
  const MatmulDims d = matmul_dims(a, ctx.inputs[0].shape(), ctx.inputs[1].shape());
  const CudaContext& cc = cuda_context(ctx);
  const float alpha = static_cast<float>(a.scale), zero = 0.0f;
  // bf16: Note [bf16 GEMMs] in dense.cpp (bf16 operands and output, FP32 accumulation).
  const bool bf16 = ctx.output.desc->dtype == DType::BF16;
  const cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  REMAT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      cc.cublas, a.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, a.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      to_int(d.n, "matmul N"), to_int(d.m, "matmul M"), to_int(d.k, "matmul K"), &alpha,
      ctx.inputs[1].data, t, to_int(ldb_of(a, d), "matmul ldb"),
      static_cast<long long>(d.k * d.n), ctx.inputs[0].data, t,
      to_int(lda_of(a, d), "matmul lda"), static_cast<long long>(d.m * d.k), &zero,
      ctx.output.data, t, to_int(d.n, "matmul ldc"), static_cast<long long>(d.m * d.n),
      to_int(d.batch, "matmul batch"),
      bf16             ? CUBLAS_COMPUTE_32F
      : cc.matmul_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                       : CUBLAS_COMPUTE_32F_PEDANTIC,
      CUBLAS_GEMM_DEFAULT));
}
#endif

// A backward matmul node: x = scale * op(p) op(q) with the given flags.
ValueId emit_matmul(GradEmitter& g, const Node& fwd, const std::string& suffix, ValueId p,
                    ValueId q, bool ta, bool tb, double scale, const TensorDesc& out) {
  AttrMap m;
  m.origin = fwd.attrs.origin;
  m.set("transpose_a", ta);
  m.set("transpose_b", tb);
  m.set("scale", scale);
  AttrReader r(m);
  OpAttrsPtr typed = matmul_parse(r);
  return g.emit(suffix, "matmul", {p, q}, out, m, typed);
}

// C = s op(A) op(B): dA and dB are matmuls of dC with the other operand (derivations per case
// in the comments; each result has its input's layout).
std::vector<ValueId> matmul_gradient(GradEmitter& g, const Node& fwd, ValueId dc) {
  const auto& at = static_cast<const MatmulAttrs&>(*fwd.typed);
  const bool ta = at.transpose_a, tb = at.transpose_b;
  const double s = at.scale;
  const ValueId a = fwd.inputs.at(0), b = fwd.inputs.at(1);
  const TensorDesc da = g.graph().value(a).desc, db = g.graph().value(b).desc;
  if (!ta && !tb)  // dA = s dC B^T, dB = s A^T dC
    return {emit_matmul(g, fwd, "grad_a", dc, b, false, true, s, da),
            emit_matmul(g, fwd, "grad_b", a, dc, true, false, s, db)};
  if (!ta && tb)  // B is [N, K]: dA = s dC B, dB = s dC^T A
    return {emit_matmul(g, fwd, "grad_a", dc, b, false, false, s, da),
            emit_matmul(g, fwd, "grad_b", dc, a, true, false, s, db)};
  if (ta && !tb)  // A is [K, M]: dA = s B dC^T, dB = s A dC
    return {emit_matmul(g, fwd, "grad_a", b, dc, false, true, s, da),
            emit_matmul(g, fwd, "grad_b", a, dc, false, false, s, db)};
  // both: dA = s B^T dC^T, dB = s dC^T A^T
  return {emit_matmul(g, fwd, "grad_a", b, dc, true, true, s, da),
          emit_matmul(g, fwd, "grad_b", dc, a, true, true, s, db)};
}

}  // namespace

void register_matmul_ops(OpRegistry& r) {
  OpDef f;
  f.name = "matmul";
  f.summary = "batched matrix product scale * op(A) op(B) over the last two dims "
              "(transpose_a, transpose_b, scale)";
  f.min_inputs = f.max_inputs = 2;
  f.parse = matmul_parse;
  f.infer = matmul_infer;
  f.cost = matmul_cost;
  f.cpu = matmul_cpu;
#ifdef REMAT_HAVE_CUDA
  f.cuda = matmul_cuda;
#endif
  f.gradient = matmul_gradient;
  with_bf16(f).autocast_bf16 = f.bf16_cpu_native = true;
  f.bf16_cuda_native = true;  // Note [bf16 GEMMs] in dense.cpp
  r.add(std::move(f));
}

}  // namespace remat
