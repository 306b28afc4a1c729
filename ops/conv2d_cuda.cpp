// conv2d on the GPU through cuDNN's legacy convolution API (NCHW float, groups, dilation):
// per-shape descriptors and a measured, deterministic algorithm choice cached in CudaCache;
// bias and fused relu/relu6 as one kernels/ epilogue; bias gradient by a kernels/ reduction.
#include "ops/conv2d_cuda.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "kernels/kernels.h"
#include "ops/cudnn_util.h"

namespace remat {
namespace {

// Note [conv algorithm choice]
// The first time a (pass, shapes, attributes, TF32 flag, workspace limit) is seen, cuDNN's Find
// measures every algorithm. We keep the fastest one that (1) succeeded, (2) is
// CUDNN_DETERMINISTIC, because a recomputed node must be bit-identical to its first computation,
// (3) needs at most CudaContext::workspace_limit bytes, and (4) uses the math we allow: without
// allow_tf32 the descriptor is CUDNN_FMA_MATH (CUDNN_DEFAULT_MATH would permit TF32 on Ampere
// and newer) and only FMA results are accepted; with allow_tf32 it is CUDNN_DEFAULT_MATH and any
// result but TENSOR_OP_MATH_ALLOW_CONVERSION (an FP16 down-conversion) is accepted. The choice
// and its workspace (max of Find's figure and cudnnGet*WorkspaceSize) are cached; cuda_workspace
// reports that workspace and cuda() reuses the choice. Find runs the Ex variant over
// CudaContext::search_scratch when it and every data pointer are present (it overwrites only
// the op's own output), otherwise the plain variant, which allocates its own scratch; both
// happen only on a cache miss, i.e. at profiling time, never inside a planned step.

enum class ConvPass { Forward, BackwardData, BackwardFilter };

const char* pass_name(ConvPass p) {
  switch (p) {
    case ConvPass::Forward: return "conv2d_fwd";
    case ConvPass::BackwardData: return "conv2d_bwd_data";
    case ConvPass::BackwardFilter: return "conv2d_bwd_filter";
  }
  return "?";
}

// x [N, C, H, W], w [K, C/g, R, S], y [N, K, Ho, Wo] and their data (null at sizing time).
struct ConvTensors {
  const TensorDesc* x;
  const TensorDesc* w;
  const TensorDesc* y;
  void* x_data;
  void* w_data;
  void* y_data;
};

ConvTensors conv_tensors(ConvPass pass, const ExecContext& ctx) {
  const TensorView& a = ctx.inputs.at(0);
  const TensorView& b = ctx.inputs.at(1);
  const TensorView& o = ctx.output;
  switch (pass) {
    case ConvPass::Forward: return {a.desc, b.desc, o.desc, a.data, b.data, o.data};       // [x, w] -> y
    case ConvPass::BackwardData: return {o.desc, b.desc, a.desc, o.data, b.data, a.data};  // [dy, w] -> dx
    case ConvPass::BackwardFilter: return {b.desc, o.desc, a.desc, b.data, o.data, a.data};  // [dy, x] -> dw
  }
  REMAT_FAIL("bad conv pass");
}

struct ConvPlan {
  CudnnTensorDesc x, y;
  CudnnFilterDesc w;
  CudnnConvDesc conv;
  bool chosen = false;
  int algo = 0;
  int64_t workspace = 0;
};

// One Find result, whichever pass it came from.
struct ConvCandidate {
  int algo;
  cudnnStatus_t status;
  float time_ms;
  size_t memory;
  cudnnDeterminism_t determinism;
  cudnnMathType_t math;
};

template <typename Perf>
std::vector<ConvCandidate> to_candidates(const std::vector<Perf>& perf, int n) {
  std::vector<ConvCandidate> out;
  for (int i = 0; i < n; ++i)
    out.push_back({static_cast<int>(perf[i].algo), perf[i].status, perf[i].time, perf[i].memory,
                   perf[i].determinism, perf[i].mathType});
  return out;
}

std::string plan_key(ConvPass pass, const ConvCudaParams& p, const ConvTensors& t,
                     const CudaContext& cc) {
  std::ostringstream k;
  k << pass_name(pass) << ":" << shape_key(t.x->shape) << ":" << shape_key(t.w->shape) << ":"
    << shape_key(t.y->shape) << ":s" << p.stride_h << "," << p.stride_w << "p" << p.pad_h << ","
    << p.pad_w << "d" << p.dilation_h << "," << p.dilation_w << "g" << p.groups
    << (cc.allow_tf32 ? ":tf32" : ":fp32") << ":lim" << cc.workspace_limit;
  return k.str();
}

ConvPlan make_plan(const ConvCudaParams& p, const ConvTensors& t, const CudaContext& cc) {
  ConvPlan plan;
  plan.x = cudnn_tensor_of(t.x->shape);
  plan.y = cudnn_tensor_of(t.y->shape);
  plan.w = cudnn_filter_4d(t.w->shape);
  plan.conv = cudnn_conv_desc();
  REMAT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      plan.conv.get(), to_int(p.pad_h, "pad_h"), to_int(p.pad_w, "pad_w"),
      to_int(p.stride_h, "stride_h"), to_int(p.stride_w, "stride_w"),
      to_int(p.dilation_h, "dilation_h"), to_int(p.dilation_w, "dilation_w"),
      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  REMAT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(plan.conv.get(), to_int(p.groups, "groups")));
  REMAT_CUDNN_CHECK(cudnnSetConvolutionMathType(
      plan.conv.get(), cc.allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
  int n = 0, c = 0, h = 0, w = 0;
  REMAT_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(plan.conv.get(), plan.x.get(),
                                                          plan.w.get(), &n, &c, &h, &w));
  const Shape& y = t.y->shape;
  REMAT_CHECK(y.size() == 4 && y[0] == n && y[1] == c && y[2] == h && y[3] == w,
              "cuDNN conv output [" << n << ", " << c << ", " << h << ", " << w
                                    << "] differs from the graph's " << shape_str(y));
  return plan;
}

std::vector<ConvCandidate> find_candidates(ConvPass pass, const ConvPlan& plan,
                                           const ConvTensors& t, const CudaContext& cc) {
  const bool ex = cc.search_scratch != nullptr && t.x_data && t.w_data && t.y_data;
  void* scratch = cc.search_scratch;
  const size_t scratch_bytes = static_cast<size_t>(std::max<int64_t>(cc.workspace_limit, 0));
  int max_count = 0, got = 0;
  switch (pass) {
    case ConvPass::Forward: {
      REMAT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(cc.cudnn, &max_count));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(std::max(max_count, 1)));
      if (ex)
        REMAT_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
            cc.cudnn, plan.x.get(), t.x_data, plan.w.get(), t.w_data, plan.conv.get(),
            plan.y.get(), t.y_data, max_count, &got, perf.data(), scratch, scratch_bytes));
      else
        REMAT_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(
            cc.cudnn, plan.x.get(), plan.w.get(), plan.conv.get(), plan.y.get(), max_count, &got,
            perf.data()));
      return to_candidates(perf, got);
    }
    case ConvPass::BackwardData: {
      REMAT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cc.cudnn, &max_count));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(std::max(max_count, 1)));
      if (ex)
        REMAT_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
            cc.cudnn, plan.w.get(), t.w_data, plan.y.get(), t.y_data, plan.conv.get(),
            plan.x.get(), t.x_data, max_count, &got, perf.data(), scratch, scratch_bytes));
      else
        REMAT_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(
            cc.cudnn, plan.w.get(), plan.y.get(), plan.conv.get(), plan.x.get(), max_count, &got,
            perf.data()));
      return to_candidates(perf, got);
    }
    case ConvPass::BackwardFilter: {
      REMAT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cc.cudnn, &max_count));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(std::max(max_count, 1)));
      if (ex)
        REMAT_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
            cc.cudnn, plan.x.get(), t.x_data, plan.y.get(), t.y_data, plan.conv.get(),
            plan.w.get(), t.w_data, max_count, &got, perf.data(), scratch, scratch_bytes));
      else
        REMAT_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(
            cc.cudnn, plan.x.get(), plan.y.get(), plan.conv.get(), plan.w.get(), max_count, &got,
            perf.data()));
      return to_candidates(perf, got);
    }
  }
  return {};
}

size_t algo_workspace(ConvPass pass, const ConvPlan& plan, int algo, const CudaContext& cc) {
  size_t bytes = 0;
  switch (pass) {
    case ConvPass::Forward:
      REMAT_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
          cc.cudnn, plan.x.get(), plan.w.get(), plan.conv.get(), plan.y.get(),
          static_cast<cudnnConvolutionFwdAlgo_t>(algo), &bytes));
      break;
    case ConvPass::BackwardData:
      REMAT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
          cc.cudnn, plan.w.get(), plan.y.get(), plan.conv.get(), plan.x.get(),
          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &bytes));
      break;
    case ConvPass::BackwardFilter:
      REMAT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
          cc.cudnn, plan.x.get(), plan.y.get(), plan.conv.get(), plan.w.get(),
          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), &bytes));
      break;
  }
  return bytes;
}

bool math_allowed(cudnnMathType_t m, bool allow_tf32) {
  return allow_tf32 ? m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION : m == CUDNN_FMA_MATH;
}

// Note [conv algorithm choice].
void choose_algorithm(ConvPass pass, ConvPlan& plan, const ConvTensors& t, const CudaContext& cc,
                      const ExecContext& ctx) {
  const std::vector<ConvCandidate> cands = find_candidates(pass, plan, t, cc);
  std::ostringstream seen;
  for (const ConvCandidate& c : cands) {
    seen << " algo" << c.algo << "(status " << c.status << ", " << c.memory << " B, "
         << (c.determinism == CUDNN_DETERMINISTIC ? "det" : "nondet") << ", math " << c.math
         << ")";
    if (c.status != CUDNN_STATUS_SUCCESS || c.determinism != CUDNN_DETERMINISTIC ||
        !math_allowed(c.math, cc.allow_tf32) ||
        static_cast<int64_t>(c.memory) > cc.workspace_limit)
      continue;
    REMAT_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv.get(), c.math));
    const int64_t bytes =
        static_cast<int64_t>(std::max(c.memory, algo_workspace(pass, plan, c.algo, cc)));
    if (bytes > cc.workspace_limit) continue;
    plan.algo = c.algo;
    plan.workspace = bytes;
    plan.chosen = true;
    return;
  }
  REMAT_FAIL("node '" << (ctx.node ? ctx.node->name : std::string("?")) << "': no deterministic "
                      << pass_name(pass) << " algorithm fits the workspace limit of "
                      << cc.workspace_limit << " bytes; cuDNN offered:" << seen.str());
}

// The cached plan of this pass and shapes, its algorithm chosen.
ConvPlan& ready_plan(ConvPass pass, const ConvCudaParams& p, const ExecContext& ctx) {
  CudaContext& cc = cuda_context(ctx);
  const ConvTensors t = conv_tensors(pass, ctx);
  ConvPlan& plan = cuda_cache(ctx).get_or_create<ConvPlan>(
      plan_key(pass, p, t, cc), [&] { return make_plan(p, t, cc); });
  if (!plan.chosen) choose_algorithm(pass, plan, t, cc, ctx);
  return plan;
}

void* workspace_for(const ConvPlan& plan, const ExecContext& ctx) {
  if (plan.workspace == 0) return nullptr;
  REMAT_CHECK(ctx.workspace != nullptr && ctx.workspace_bytes >= plan.workspace,
              "node '" << (ctx.node ? ctx.node->name : std::string("?")) << "' needs "
                       << plan.workspace << " workspace bytes, got " << ctx.workspace_bytes);
  return ctx.workspace;
}

}  // namespace

void conv2d_forward_cuda(const ConvCudaParams& p, const ExecContext& ctx) {
  CudaContext& cc = cuda_context(ctx);
  ConvPlan& plan = ready_plan(ConvPass::Forward, p, ctx);
  const float one = 1.0f, zero = 0.0f;
  float* y = ctx.output.f32();  // [N, K, Ho, Wo]
  REMAT_CUDNN_CHECK(cudnnConvolutionForward(
      cc.cudnn, &one, plan.x.get(), ctx.inputs[0].data, plan.w.get(), ctx.inputs[1].data,
      plan.conv.get(), static_cast<cudnnConvolutionFwdAlgo_t>(plan.algo), workspace_for(plan, ctx),
      static_cast<size_t>(plan.workspace), &zero, plan.y.get(), y));
  if (p.bias || p.activation != Activation::None) {
    const Shape& s = ctx.output.shape();
    bias_act_forward(y, p.bias ? ctx.inputs.at(2).f32() : nullptr, s[0], s[1], s[2] * s[3],
                     kernel_activation(p.activation), cc.stream);
  }
}

int64_t conv2d_forward_cuda_workspace(const ConvCudaParams& p, const ExecContext& ctx) {
  return ready_plan(ConvPass::Forward, p, ctx).workspace;
}

void conv2d_grad_input_cuda(const ConvCudaParams& p, const ExecContext& ctx) {
  CudaContext& cc = cuda_context(ctx);
  ConvPlan& plan = ready_plan(ConvPass::BackwardData, p, ctx);
  const float one = 1.0f, zero = 0.0f;
  REMAT_CUDNN_CHECK(cudnnConvolutionBackwardData(
      cc.cudnn, &one, plan.w.get(), ctx.inputs[1].data, plan.y.get(), ctx.inputs[0].data,
      plan.conv.get(), static_cast<cudnnConvolutionBwdDataAlgo_t>(plan.algo),
      workspace_for(plan, ctx), static_cast<size_t>(plan.workspace), &zero, plan.x.get(),
      ctx.output.data));
}

int64_t conv2d_grad_input_cuda_workspace(const ConvCudaParams& p, const ExecContext& ctx) {
  return ready_plan(ConvPass::BackwardData, p, ctx).workspace;
}

void conv2d_grad_weight_cuda(const ConvCudaParams& p, const ExecContext& ctx) {
  CudaContext& cc = cuda_context(ctx);
  ConvPlan& plan = ready_plan(ConvPass::BackwardFilter, p, ctx);
  const float one = 1.0f, zero = 0.0f;
  REMAT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
      cc.cudnn, &one, plan.x.get(), ctx.inputs[1].data, plan.y.get(), ctx.inputs[0].data,
      plan.conv.get(), static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan.algo),
      workspace_for(plan, ctx), static_cast<size_t>(plan.workspace), &zero, plan.w.get(),
      ctx.output.data));
}

int64_t conv2d_grad_weight_cuda_workspace(const ConvCudaParams& p, const ExecContext& ctx) {
  return ready_plan(ConvPass::BackwardFilter, p, ctx).workspace;
}

void conv2d_grad_bias_cuda(const ExecContext& ctx) {
  const Shape& s = ctx.inputs.at(0).shape();  // dz [N, K, Ho, Wo]
  bias_grad_reduce(ctx.output.f32(), ctx.inputs[0].f32(), s[0], s[1], s[2] * s[3],
                   cuda_context(ctx).stream);
}

}  // namespace remat
