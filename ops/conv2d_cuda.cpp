// conv2d on the GPU through cuDNN's legacy convolution API (NCHW, F32 or BF16 data with FP32
// compute, groups, dilation): per-shape descriptors and a measured, deterministic algorithm
// choice cached in CudaCache; bias and fused relu/relu6 as one kernels/ epilogue; bias gradient
// by a kernels/ reduction. bf16: Note [bf16 convolutions].
#include "ops/conv2d_cuda.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "kernels/kernels.h"
#include "ops/cpu_storage.h"
#include "ops/cudnn_util.h"

namespace remat {
namespace {

// Note [conv algorithm choice]
// The first time a (pass, shapes, attributes, TF32 flag, workspace limit) is seen, cuDNN's Find
// measures every algorithm. The candidates are those that (1) succeeded, (2) are
// CUDNN_DETERMINISTIC, because a recomputed node must be bit-identical to its first computation,
// (3) need at most CudaContext::workspace_limit bytes, and (4) use the math we allow. Of the
// candidates within 5 % of the fastest we keep the one with the smallest workspace: workspace is
// memory the schedule must find room for, so a few percent of speed is worth a lot less of it.
// When no candidate exists at the whole batch (a deterministic weight-gradient algorithm may
// want more workspace than the limit), or a tensor has 2^31 elements or more (the legacy API's
// int sizes), the batch is split: each cuDNN call sees `chunk` samples, the batch a multiple of
// it; forward and data-gradient chunks write disjoint slices, weight-gradient chunks accumulate
// (beta = 1) in chunk order, so the result is still deterministic. For (4): without
// conv_tf32 the descriptor is CUDNN_FMA_MATH (CUDNN_DEFAULT_MATH would permit TF32 on Ampere
// and newer) and only FMA results are accepted; with conv_tf32 it is CUDNN_DEFAULT_MATH and any
// result but TENSOR_OP_MATH_ALLOW_CONVERSION (an FP16 down-conversion) is accepted. The choice
// and its workspace (max of Find's figure and cudnnGet*WorkspaceSize) are cached; cuda_workspace
// reports that workspace and cuda() reuses the choice. Find runs the Ex variant over
// CudaContext::search_scratch when it and every data pointer are present (it overwrites only
// the op's own output), otherwise the plain variant, which allocates its own scratch; both
// happen only on a cache miss, i.e. at profiling time, never inside a planned step.

// Note [bf16 convolutions]
// With BF16 data, x, y and the filter descriptors are CUDNN_DATA_BFLOAT16 and the convolution's
// compute type stays CUDNN_DATA_FLOAT (cuDNN's BFLOAT16 configuration: bf16 tensor cores
// accumulating in FP32). The FP32 weight is rounded into the workspace for the forward and data
// passes (Note [bf16 weights] in cudnn_util.h); the filter pass writes the weight gradient in
// bf16 into the workspace and widens it into the FP32 gradient (so it is bf16-valued, as the
// CPU reference's OpDef::bf16_rounds_output); when the batch is split into chunks, each chunk's
// bf16 gradient is added in FP32 in chunk order and the sum rounded once more. Workspace layout:
// [bf16 weight or weight-gradient copy][cuDNN's workspace]. Any math type but an FP16
// down-conversion is accepted: bf16 has no FP32-only mode to protect.

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
  CudnnTensorDesc x, y;  // of one chunk of `chunk` samples
  CudnnFilterDesc w;
  CudnnConvDesc conv;
  bool chosen = false;
  int algo = 0;
  int64_t workspace = 0;  // cuDNN's
  int64_t chunk = 0;     // samples per cuDNN call (Note [conv algorithm choice])
  int64_t x_per_sample = 0, y_per_sample = 0;  // elements
  DType dtype = DType::F32;  // the data's (x, y); BF16: Note [bf16 convolutions]
  int64_t weight_copy = 0;   // BF16: bytes of the bf16 weight (or gradient) copy before cuDNN's
};

// Samples per call to try, largest first: divisors of the batch whose x and y chunks stay
// below 2^31 elements; at most a few, since each costs a Find at setup.
std::vector<int64_t> chunk_candidates(const ConvTensors& t) {
  const int64_t n = t.x->shape[0];
  const int64_t per = std::max(t.x->numel() / std::max<int64_t>(n, 1),
                               t.y->numel() / std::max<int64_t>(n, 1));
  std::vector<int64_t> out;
  for (int64_t parts = 1; parts <= n && out.size() < 6; ++parts) {
    if (n % parts) continue;
    const int64_t c = n / parts;
    if (c * per < (int64_t{1} << 31)) out.push_back(c);
  }
  return out;
}

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
    << (t.x->dtype == DType::BF16 ? ":bf16" : cc.conv_tf32 ? ":tf32" : ":fp32") << ":lim"
    << cc.workspace_limit;
  return k.str();
}

Shape with_batch(Shape s, int64_t n) {
  s.at(0) = n;
  return s;
}

// Descriptors for calls of `chunk` samples.
ConvPlan make_plan(const ConvCudaParams& p, const ConvTensors& t, const CudaContext& cc,
                   int64_t chunk) {
  ConvPlan plan;
  plan.chunk = chunk;
  plan.x_per_sample = t.x->numel() / t.x->shape[0];
  plan.y_per_sample = t.y->numel() / t.y->shape[0];
  plan.dtype = t.x->dtype;
  plan.weight_copy = plan.dtype == DType::BF16 ? bf16_copy_bytes(*t.w) : 0;
  plan.x = cudnn_tensor_of(with_batch(t.x->shape, chunk), plan.dtype);
  plan.y = cudnn_tensor_of(with_batch(t.y->shape, chunk), plan.dtype);
  plan.w = cudnn_filter_4d(t.w->shape, plan.dtype);
  plan.conv = cudnn_conv_desc();
  REMAT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      plan.conv.get(), to_int(p.pad_h, "pad_h"), to_int(p.pad_w, "pad_w"),
      to_int(p.stride_h, "stride_h"), to_int(p.stride_w, "stride_w"),
      to_int(p.dilation_h, "dilation_h"), to_int(p.dilation_w, "dilation_w"),
      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  REMAT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(plan.conv.get(), to_int(p.groups, "groups")));
  REMAT_CUDNN_CHECK(cudnnSetConvolutionMathType(
      plan.conv.get(), plan.dtype == DType::BF16 ? CUDNN_TENSOR_OP_MATH
                       : cc.conv_tf32            ? CUDNN_DEFAULT_MATH
                                                 : CUDNN_FMA_MATH));
  int n = 0, c = 0, h = 0, w = 0;
  REMAT_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(plan.conv.get(), plan.x.get(),
                                                          plan.w.get(), &n, &c, &h, &w));
  const Shape y = with_batch(t.y->shape, chunk);
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

bool math_allowed(cudnnMathType_t m, bool allow_tf32, DType dtype) {
  if (dtype == DType::BF16 || allow_tf32) return m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
  return m == CUDNN_FMA_MATH;
}

// Note [conv algorithm choice]: the chosen algorithm at plan.chunk samples, or false.
bool choose_at_chunk(ConvPass pass, ConvPlan& plan, const ConvTensors& t, const CudaContext& cc,
                     std::ostringstream& seen) {
  std::vector<ConvCandidate> ok;
  seen << " [" << plan.chunk << " samples:";
  for (const ConvCandidate& c : find_candidates(pass, plan, t, cc)) {
    seen << " algo" << c.algo << "(status " << c.status << ", " << c.memory << " B, "
         << (c.determinism == CUDNN_DETERMINISTIC ? "det" : "nondet") << ", math " << c.math
         << ")";
    if (c.status == CUDNN_STATUS_SUCCESS && c.determinism == CUDNN_DETERMINISTIC &&
        math_allowed(c.math, cc.conv_tf32, plan.dtype) &&
        static_cast<int64_t>(c.memory) <= cc.workspace_limit)
      ok.push_back(c);
  }
  seen << "]";
  if (ok.empty()) return false;
  float fastest = ok.front().time_ms;
  for (const ConvCandidate& c : ok) fastest = std::min(fastest, c.time_ms);
  const ConvCandidate* best = nullptr;
  int64_t best_bytes = 0;
  for (const ConvCandidate& c : ok) {
    if (c.time_ms > 1.05f * fastest) continue;
    REMAT_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv.get(), c.math));
    const int64_t bytes =
        static_cast<int64_t>(std::max(c.memory, algo_workspace(pass, plan, c.algo, cc)));
    if (bytes > cc.workspace_limit) continue;
    if (!best || bytes < best_bytes || (bytes == best_bytes && c.time_ms < best->time_ms))
      best = &c, best_bytes = bytes;
  }
  if (!best) return false;
  REMAT_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv.get(), best->math));
  plan.algo = best->algo;
  plan.workspace = best_bytes;
  plan.chosen = true;
  return true;
}

// The cached plan of this pass and shapes, its algorithm (and chunk) chosen.
ConvPlan& ready_plan(ConvPass pass, const ConvCudaParams& p, const ExecContext& ctx) {
  CudaContext& cc = cuda_context(ctx);
  const ConvTensors t = conv_tensors(pass, ctx);
  ConvPlan& plan = cuda_cache(ctx).get_or_create<ConvPlan>(plan_key(pass, p, t, cc), [&] {
    ConvPlan fresh;  // descriptors come with the chunk size, below
    return fresh;
  });
  if (plan.chosen) return plan;
  const std::vector<int64_t> chunks = chunk_candidates(t);
  REMAT_CHECK(!chunks.empty(), "node '" << (ctx.node ? ctx.node->name : std::string("?"))
                                        << "': one sample of " << shape_str(t.x->shape)
                                        << " already has 2^31 elements or more (cuDNN's limit)");
  std::ostringstream seen;
  for (int64_t chunk : chunks) {
    plan = make_plan(p, t, cc, chunk);
    if (choose_at_chunk(pass, plan, t, cc, seen)) return plan;
  }
  REMAT_FAIL("node '" << (ctx.node ? ctx.node->name : std::string("?")) << "': no deterministic "
                      << pass_name(pass) << " algorithm fits the workspace limit of "
                      << cc.workspace_limit << " bytes; cuDNN offered:" << seen.str());
}

// cuDNN's part of the node's workspace: after the bf16 copy (Note [bf16 convolutions]).
void* workspace_for(const ConvPlan& plan, const ExecContext& ctx) {
  if (plan.workspace == 0) return nullptr;
  REMAT_CHECK(ctx.workspace != nullptr && ctx.workspace_bytes >= plan.weight_copy + plan.workspace,
              "node '" << (ctx.node ? ctx.node->name : std::string("?")) << "' needs "
                       << plan.weight_copy + plan.workspace << " workspace bytes, got "
                       << ctx.workspace_bytes);
  return static_cast<char*>(ctx.workspace) + plan.weight_copy;
}

// The bf16 copy at the start of the workspace (a rounded weight, or the weight gradient).
uint16_t* bf16_copy_in(const ConvPlan& plan, const ExecContext& ctx) {
  REMAT_CHECK(ctx.workspace != nullptr && ctx.workspace_bytes >= plan.weight_copy,
              "node '" << (ctx.node ? ctx.node->name : std::string("?"))
                       << "': no room for the bf16 weight copy");
  return static_cast<uint16_t*>(ctx.workspace);
}

// The weight as cuDNN reads it: the F32 master, or its bf16 rounding in the workspace.
const void* weight_for(const ConvPlan& plan, const ExecContext& ctx, cudaStream_t stream) {
  const TensorView& w = ctx.inputs.at(1);
  if (plan.dtype != DType::BF16) return w.data;
  uint16_t* copy = bf16_copy_in(plan, ctx);
  bf16_narrow(copy, w.f32(), w.numel(), stream);
  return copy;
}

// Byte offset of chunk k of a tensor with `per_sample` elements per sample.
inline int64_t chunk_offset(const ConvPlan& plan, int64_t k, int64_t per_sample) {
  return k * plan.chunk * per_sample * dtype_size(plan.dtype);
}

inline const void* at(const void* p, int64_t bytes) { return static_cast<const char*>(p) + bytes; }
inline void* at(void* p, int64_t bytes) { return static_cast<char*>(p) + bytes; }

// Calls of plan.chunk samples for the batch of inputs[0] (x or dy).
int64_t chunks_of(const ConvPlan& plan, const ExecContext& ctx) {
  return ctx.inputs.at(0).shape()[0] / plan.chunk;
}

}  // namespace

void conv2d_forward_cuda(const ConvCudaParams& p, const ExecContext& ctx) {
  CudaContext& cc = cuda_context(ctx);
  ConvPlan& plan = ready_plan(ConvPass::Forward, p, ctx);
  const float one = 1.0f, zero = 0.0f;
  const void* x = ctx.inputs[0].data;  // [N, C, H, W]
  void* y = ctx.output.data;           // [N, K, Ho, Wo]
  const void* w = weight_for(plan, ctx, cc.stream);
  for (int64_t k = 0, n = chunks_of(plan, ctx); k < n; ++k)
    REMAT_CUDNN_CHECK(cudnnConvolutionForward(
        cc.cudnn, &one, plan.x.get(), at(x, chunk_offset(plan, k, plan.x_per_sample)),
        plan.w.get(), w, plan.conv.get(), static_cast<cudnnConvolutionFwdAlgo_t>(plan.algo),
        workspace_for(plan, ctx), static_cast<size_t>(plan.workspace), &zero, plan.y.get(),
        at(y, chunk_offset(plan, k, plan.y_per_sample))));
  if (p.bias || p.activation != Activation::None) {
    const Shape& s = ctx.output.shape();
    const float* bias = p.bias ? ctx.inputs.at(2).f32() : nullptr;
    with_storage(plan.dtype, [&](auto tag) {
      bias_act_forward(storage<decltype(tag)>(ctx.output), bias, s[0], s[1], s[2] * s[3],
                       kernel_activation(p.activation), cc.stream);
    });
  }
}

int64_t conv2d_forward_cuda_workspace(const ConvCudaParams& p, const ExecContext& ctx) {
  const ConvPlan& plan = ready_plan(ConvPass::Forward, p, ctx);
  return plan.weight_copy + plan.workspace;
}

// dx [N, C, H, W] from dy [N, K, Ho, Wo] (inputs[0]) and w (inputs[1]); plan.x is dx's chunk.
void conv2d_grad_input_cuda(const ConvCudaParams& p, const ExecContext& ctx) {
  CudaContext& cc = cuda_context(ctx);
  ConvPlan& plan = ready_plan(ConvPass::BackwardData, p, ctx);
  const float one = 1.0f, zero = 0.0f;
  const void* dy = ctx.inputs[0].data;
  void* dx = ctx.output.data;
  const void* w = weight_for(plan, ctx, cc.stream);
  for (int64_t k = 0, n = chunks_of(plan, ctx); k < n; ++k)
    REMAT_CUDNN_CHECK(cudnnConvolutionBackwardData(
        cc.cudnn, &one, plan.w.get(), w, plan.y.get(),
        at(dy, chunk_offset(plan, k, plan.y_per_sample)), plan.conv.get(),
        static_cast<cudnnConvolutionBwdDataAlgo_t>(plan.algo), workspace_for(plan, ctx),
        static_cast<size_t>(plan.workspace), &zero, plan.x.get(),
        at(dx, chunk_offset(plan, k, plan.x_per_sample))));
}

int64_t conv2d_grad_input_cuda_workspace(const ConvCudaParams& p, const ExecContext& ctx) {
  const ConvPlan& plan = ready_plan(ConvPass::BackwardData, p, ctx);
  return plan.weight_copy + plan.workspace;
}

// dw [K, C/g, R, S] from dy (inputs[0]) and x (inputs[1]); chunks accumulate in order. bf16:
// into the workspace, then widened (Note [bf16 convolutions]).
void conv2d_grad_weight_cuda(const ConvCudaParams& p, const ExecContext& ctx) {
  CudaContext& cc = cuda_context(ctx);
  ConvPlan& plan = ready_plan(ConvPass::BackwardFilter, p, ctx);
  const float one = 1.0f, zero = 0.0f;
  const void* dy = ctx.inputs[0].data;
  const void* x = ctx.inputs[1].data;
  float* dw = ctx.output.f32();
  const bool bf16 = plan.dtype == DType::BF16;
  const int64_t n = ctx.inputs[1].shape()[0] / plan.chunk, count = ctx.output.numel();
  if (n == 0) {
    fill(dw, 0.0f, count, cc.stream);
    return;
  }
  void* out = bf16 ? static_cast<void*>(bf16_copy_in(plan, ctx)) : static_cast<void*>(dw);
  for (int64_t k = 0; k < n; ++k) {
    // bf16 chunks each start from zero and are added in FP32 below; FP32 chunks accumulate.
    REMAT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
        cc.cudnn, &one, plan.x.get(), at(x, chunk_offset(plan, k, plan.x_per_sample)),
        plan.y.get(), at(dy, chunk_offset(plan, k, plan.y_per_sample)), plan.conv.get(),
        static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan.algo), workspace_for(plan, ctx),
        static_cast<size_t>(plan.workspace), k == 0 || bf16 ? &zero : &one, plan.w.get(), out));
    if (!bf16) continue;
    const uint16_t* part = static_cast<const uint16_t*>(out);
    if (k == 0) bf16_widen(dw, part, count, cc.stream);
    else bf16_widen_add(dw, part, count, cc.stream);
  }
  if (bf16 && n > 1) bf16_round(dw, dw, count, cc.stream);
}

int64_t conv2d_grad_weight_cuda_workspace(const ConvCudaParams& p, const ExecContext& ctx) {
  const ConvPlan& plan = ready_plan(ConvPass::BackwardFilter, p, ctx);
  return plan.weight_copy + plan.workspace;
}

void conv2d_grad_bias_cuda(const ExecContext& ctx) {
  const Shape& s = ctx.inputs.at(0).shape();  // dz [N, K, Ho, Wo]
  with_storage(ctx.inputs[0].desc->dtype, [&](auto tag) {
    bias_grad_reduce(ctx.output.f32(), storage<decltype(tag)>(ctx.inputs[0]), s[0], s[1],
                     s[2] * s[3], ctx.workspace, cuda_context(ctx).stream);
  });
}

int64_t conv2d_grad_bias_cuda_workspace(const ExecContext& ctx) {
  const Shape& s = ctx.inputs.at(0).shape();
  return bias_grad_workspace_bytes(s[0], s[1], s[2] * s[3]);
}

}  // namespace remat
