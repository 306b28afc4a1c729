// conv2d's cuDNN plans: per pass and shapes, the descriptors, the layout (NCHW, or NHWC copies
// staged in the workspace), the chunk of samples per call and the algorithm, chosen by
// measurement and cached in CudaCache. See ops/conv2d_cuda_plan.h.
#include "ops/conv2d_cuda_plan.h"

#include <algorithm>
#include <optional>
#include <sstream>
#include <vector>

#include "ops/data_format.h"

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

// Note [staged NHWC convolutions]
// cuDNN's NCHW convolutions run far below its NHWC ones on tensor cores (an H200, bf16,
// ResNet-50 at batch 64: 218 us a forward convolution on average, against ~30 us for PyTorch's
// channels-last kernels; GPU_RESULTS.md, 2026-11-27). Activations stay NCHW in the graph (every
// other op, the CPU reference and the memory plan see NCHW), but a pass may run on channels-last
// copies staged in its workspace: per chunk of samples, its inputs are transposed into NHWC
// (kernels/layout.cu), cuDNN runs on NHWC descriptors with a KRSC filter (the weight transposed
// into the workspace, rounded to bf16 on the way for bf16 data), and the result is transposed
// back (the weight gradient from KRSC into the FP32 KCRS gradient, chunks added in FP32 in order
// as in NCHW). Values and their roundings are those of the NCHW path's cuDNN call up to cuDNN's
// own summation order, so the CPU comparison's GEMM tolerances hold unchanged; everything is
// deterministic, so recomputation stays bit-identical.
// The choice is measured (CudaContext::conv_layout Auto): a staged plan wins when its Find time
// plus the staging traffic (each staged tensor read and written once) at kStageBytesPerMs is
// below 0.95 of the NCHW plan's time for the whole batch, the same 5 % that buys a smaller
// workspace in Note [conv algorithm choice], since staging costs workspace: its chunk is the
// largest divisor of the batch whose staged x and y fit a quarter of workspace_limit (VGG19's
// first convolution at batch 64 in bf16 stages 16 samples, 205 MB). A bf16 weight gradient is
// staged only for the whole batch: in chunks, each chunk's gradient would be rounded to bf16
// before the chunks are added (an H200 measured errors of 2 % of the result that way), so
// where the whole batch does not fit the cap it runs NCHW, chunked only where no algorithm fits
// otherwise (Note [bf16 convolutions]). Nchw never stages; Nhwc always does where staging is
// possible and cuDNN offers an algorithm (the GPU tests force it to compare it with the CPU).
//
// Note [channels-last convolutions]
// In a channels-last model (Note [channels-last layout] in models/channels_last.cpp) x and y
// are NHWC in memory, so every pass runs on NHWC descriptors over the tensors themselves, with
// the weight transposed to KRSC in the workspace as when staging; nothing is staged and no
// NCHW plan is measured against it. Chunks, algorithm choice and the bf16 rules are those of NCHW
// plans (a bf16 weight gradient is chunked only where no algorithm fits the whole batch, Note
// [bf16 convolutions]). A 1 x 1 convolution may instead be one GEMM over the batch (Note [1x1
// convolutions as GEMMs]), measured against the NHWC plan.
// Bias and fused activation run over [N * Ho * Wo, K] rows; the bias gradient sums the columns.
// Where cuDNN offers no NHWC algorithm for a pass at any chunk (or REMAT_CONV_LAYOUT=nchw
// forces NCHW calls, to compare), the pass runs NCHW on copies staged in the workspace, the
// staging of Note [staged NHWC convolutions] the other way round.
constexpr double kStageBytesPerMs = 1.5e9;  // 1.5 TB/s: a conservative HBM3 transpose rate

}  // namespace

const char* conv_pass_name(ConvPass p) {
  switch (p) {
    case ConvPass::Forward: return "conv2d_fwd";
    case ConvPass::BackwardData: return "conv2d_bwd_data";
    case ConvPass::BackwardFilter: return "conv2d_bwd_filter";
  }
  return "?";
}

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

namespace {

// Samples per call to try, largest first: divisors of the batch whose x and y chunks stay
// within cuDNN's element limit (Note [cuDNN's element limit]); at most a few, since each costs
// a Find at setup.
std::vector<int64_t> chunk_candidates(const ConvTensors& t, int64_t max_elements) {
  const int64_t n = t.x->shape[0];
  const int64_t per = std::max(t.x->numel() / std::max<int64_t>(n, 1),
                               t.y->numel() / std::max<int64_t>(n, 1));
  std::vector<int64_t> out;
  for (int64_t parts = 1; parts <= n && out.size() < 6; ++parts) {
    if (n % parts) continue;
    const int64_t c = n / parts;
    if (c * per <= max_elements) out.push_back(c);
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
  k << conv_pass_name(pass) << ":" << shape_key(t.x->shape) << ":" << shape_key(t.w->shape) << ":"
    << shape_key(t.y->shape) << ":s" << p.stride_h << "," << p.stride_w << "p" << p.pad_h << ","
    << p.pad_w << "d" << p.dilation_h << "," << p.dilation_w << "g" << p.groups
    << (t.x->dtype == DType::BF16 ? ":bf16" : cc.conv_tf32 ? ":tf32" : ":fp32") << ":lim"
    << cc.workspace_limit << (p.channels_last ? ":nhwc" : "");
  return k.str();
}

Shape with_batch(Shape s, int64_t n) {
  s.at(0) = n;
  return s;
}

// Descriptors for calls of `chunk` samples in the tensors' layout (NCHW, or NHWC for
// p.channels_last: Note [channels-last convolutions]) or, `staged`, in the other one on copies
// in the workspace (Note [staged NHWC convolutions]).
ConvPlan make_plan(const ConvCudaParams& p, const ConvTensors& t, const CudaContext& cc,
                   int64_t chunk, bool staged) {
  ConvPlan plan;
  plan.chunk = chunk;
  plan.nhwc = p.channels_last != staged;
  plan.staged = staged;
  plan.x_per_sample = t.x->numel() / t.x->shape[0];
  plan.y_per_sample = t.y->numel() / t.y->shape[0];
  plan.dtype = t.x->dtype;
  const int64_t size = dtype_size(plan.dtype);
  if (plan.nhwc)
    plan.weight_copy = checked_mul(t.w->numel(), size, "", "KRSC weight copy bytes");
  else
    plan.weight_copy = plan.dtype == DType::BF16 ? bf16_copy_bytes(*t.w) : 0;
  if (plan.staged) {
    plan.stage_x = checked_mul(chunk * plan.x_per_sample, size, "", "staged x bytes");
    plan.stage_y = checked_mul(chunk * plan.y_per_sample, size, "", "staged y bytes");
  }
  const cudnnTensorFormat_t format = plan.nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  REMAT_CHECK(t.x->shape.size() == 4 && t.y->shape.size() == 4, "conv2d: 4-D tensors expected");
  const ImageDims xs = image_dims(with_batch(t.x->shape, chunk), p.channels_last);
  const ImageDims ys = image_dims(with_batch(t.y->shape, chunk), p.channels_last);
  plan.x = cudnn_tensor_4d(xs.n, xs.c, xs.h, xs.w, plan.dtype, format);
  plan.y = cudnn_tensor_4d(ys.n, ys.c, ys.h, ys.w, plan.dtype, format);
  plan.w = cudnn_filter_4d(t.w->shape, plan.dtype, format);
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
  REMAT_CHECK(ys.n == n && ys.c == c && ys.h == h && ys.w == w,
              "cuDNN conv output [" << n << ", " << c << ", " << h << ", " << w
                                    << "] differs from the graph's " << shape_str(ys.shape()));
  return plan;
}

// Find's status, kept in `seen` when it is not success: cuDNN may refuse a layout or chunk
// (NOT_SUPPORTED, BAD_PARAM, an allocation of its own that fails), and the caller then tries the
// other plans; the error when none works names every refusal.
bool find_ok(cudnnStatus_t status, std::ostringstream& seen) {
  if (status == CUDNN_STATUS_SUCCESS) return true;
  (void)cudaGetLastError();  // a runtime error it left must not fail the next launch check
  seen << " Find failed: " << cudnnGetErrorString(status);
  return false;
}

// What Find offers for `plan` (nothing when Find itself fails: find_ok).
std::vector<ConvCandidate> find_candidates(ConvPass pass, const ConvPlan& plan,
                                           const ConvTensors& t, const CudaContext& cc,
                                           std::ostringstream& seen) {
  const bool ex = cc.search_scratch != nullptr && t.x_data && t.w_data && t.y_data;
  void* scratch = cc.search_scratch;
  const size_t scratch_bytes = static_cast<size_t>(std::max<int64_t>(cc.workspace_limit, 0));
  int max_count = 0, got = 0;
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  switch (pass) {
    case ConvPass::Forward: {
      REMAT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(cc.cudnn, &max_count));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(std::max(max_count, 1)));
      if (ex)
        st = cudnnFindConvolutionForwardAlgorithmEx(
            cc.cudnn, plan.x.get(), t.x_data, plan.w.get(), t.w_data, plan.conv.get(), plan.y.get(),
            t.y_data, max_count, &got, perf.data(), scratch, scratch_bytes);
      else
        st = cudnnFindConvolutionForwardAlgorithm(cc.cudnn, plan.x.get(), plan.w.get(),
                                                  plan.conv.get(), plan.y.get(), max_count, &got,
                                                  perf.data());
      if (!find_ok(st, seen)) return {};
      return to_candidates(perf, got);
    }
    case ConvPass::BackwardData: {
      REMAT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cc.cudnn, &max_count));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(std::max(max_count, 1)));
      if (ex)
        st = cudnnFindConvolutionBackwardDataAlgorithmEx(
            cc.cudnn, plan.w.get(), t.w_data, plan.y.get(), t.y_data, plan.conv.get(), plan.x.get(),
            t.x_data, max_count, &got, perf.data(), scratch, scratch_bytes);
      else
        st = cudnnFindConvolutionBackwardDataAlgorithm(cc.cudnn, plan.w.get(), plan.y.get(),
                                                       plan.conv.get(), plan.x.get(), max_count,
                                                       &got, perf.data());
      if (!find_ok(st, seen)) return {};
      return to_candidates(perf, got);
    }
    case ConvPass::BackwardFilter: {
      REMAT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cc.cudnn, &max_count));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(std::max(max_count, 1)));
      if (ex)
        st = cudnnFindConvolutionBackwardFilterAlgorithmEx(
            cc.cudnn, plan.x.get(), t.x_data, plan.y.get(), t.y_data, plan.conv.get(), plan.w.get(),
            t.w_data, max_count, &got, perf.data(), scratch, scratch_bytes);
      else
        st = cudnnFindConvolutionBackwardFilterAlgorithm(cc.cudnn, plan.x.get(), plan.y.get(),
                                                         plan.conv.get(), plan.w.get(), max_count,
                                                         &got, perf.data());
      if (!find_ok(st, seen)) return {};
      return to_candidates(perf, got);
    }
  }
  return {};
}

// The workspace `algo` needs under the plan's math type, or cuDNN's refusal: a query may
// refuse an algorithm Find offered (seen with NHWC descriptors and grouped filters), which then
// drops out of the choice like one Find failed (Note [conv algorithm choice]).
cudnnStatus_t algo_workspace(ConvPass pass, const ConvPlan& plan, int algo, const CudaContext& cc,
                             size_t* bytes) {
  *bytes = 0;
  switch (pass) {
    case ConvPass::Forward:
      return cudnnGetConvolutionForwardWorkspaceSize(
          cc.cudnn, plan.x.get(), plan.w.get(), plan.conv.get(), plan.y.get(),
          static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
    case ConvPass::BackwardData:
      return cudnnGetConvolutionBackwardDataWorkspaceSize(
          cc.cudnn, plan.w.get(), plan.y.get(), plan.conv.get(), plan.x.get(),
          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
    case ConvPass::BackwardFilter:
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(
          cc.cudnn, plan.x.get(), plan.y.get(), plan.conv.get(), plan.w.get(),
          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
  }
  return CUDNN_STATUS_BAD_PARAM;
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
  for (const ConvCandidate& c : find_candidates(pass, plan, t, cc, seen)) {
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
    size_t queried = 0;
    const cudnnStatus_t status = algo_workspace(pass, plan, c.algo, cc, &queried);
    if (status != CUDNN_STATUS_SUCCESS) {
      seen << " algo" << c.algo << " workspace query: " << cudnnGetErrorString(status);
      continue;
    }
    const int64_t bytes = static_cast<int64_t>(std::max(c.memory, queried));
    if (bytes > cc.workspace_limit) continue;
    if (!best || bytes < best_bytes || (bytes == best_bytes && c.time_ms < best->time_ms))
      best = &c, best_bytes = bytes;
  }
  if (!best) return false;
  REMAT_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv.get(), best->math));
  plan.algo = best->algo;
  plan.time_ms = best->time_ms;
  plan.workspace = best_bytes;
  plan.chosen = true;
  return true;
}

// The largest divisor of the batch, at most `limit` samples, whose staged x and y fit a
// quarter of the workspace limit; 0 if not even one sample does (Note [staged NHWC
// convolutions]).
int64_t staged_chunk(const ConvTensors& t, int64_t limit, const CudaContext& cc) {
  const int64_t n = t.x->shape[0];
  const int64_t per = (t.x->numel() / n + t.y->numel() / n) * dtype_size(t.x->dtype);
  for (int64_t c = std::min(limit, n); c >= 1; --c)
    if (n % c == 0 && c * per <= cc.workspace_limit / 4) return c;
  return 0;
}

// Milliseconds a plan is expected to take for the whole batch: its calls, plus (staged) each
// staged tensor read and written once more.
double plan_ms(const ConvPlan& plan, const ConvTensors& t) {
  const int64_t calls = t.x->shape[0] / plan.chunk;
  double ms = static_cast<double>(plan.time_ms) * static_cast<double>(calls);
  if (plan.staged)
    ms += 2.0 * static_cast<double>((plan.stage_x + plan.stage_y) * calls) / kStageBytesPerMs;
  return ms;
}

// The best cuDNN plan (Note [conv algorithm choice], Note [staged NHWC convolutions]), if any;
// `seen` collects what Find offered, for the error when nothing fits.
std::optional<ConvPlan> choose_cudnn_plan(ConvPass pass, const ConvCudaParams& p,
                                          const ConvTensors& t, const CudaContext& cc,
                                          const ExecContext& ctx, std::ostringstream& seen) {
  const std::vector<int64_t> chunks = chunk_candidates(t, cc.cudnn_max_elements);
  REMAT_CHECK(!chunks.empty(),
              "node '" << (ctx.node ? ctx.node->name : std::string("?")) << "': one sample of "
                       << shape_str(t.x->shape) << " holds more elements than a cuDNN tensor may ("
                       << cc.cudnn_max_elements << ", Note [cuDNN's element limit])");
  const bool bf16_filter = pass == ConvPass::BackwardFilter && t.x->dtype == DType::BF16;
  if (p.channels_last) {  // Note [channels-last convolutions]: NHWC is the tensors' layout
    for (int64_t chunk : chunks) {
      if (cc.conv_layout == ConvLayout::Nchw) break;
      ConvPlan plan = make_plan(p, t, cc, chunk, false);
      if (choose_at_chunk(pass, plan, t, cc, seen)) return plan;
    }
    // No NHWC algorithm at any chunk (Find offered none or failed, or REMAT_CONV_LAYOUT=nchw):
    // NCHW calls on copies staged in the workspace.
    for (int64_t chunk : chunks) {
      int64_t sc = staged_chunk(t, chunk, cc);
      if (bf16_filter && sc != t.x->shape[0]) sc = 0;
      if (sc == 0) continue;
      ConvPlan plan = make_plan(p, t, cc, sc, true);
      seen << " NCHW";
      if (choose_at_chunk(pass, plan, t, cc, seen)) return plan;
    }
    return std::nullopt;
  }
  for (int64_t chunk : chunks) {
    int64_t sc = cc.conv_layout == ConvLayout::Nchw ? 0 : staged_chunk(t, chunk, cc);
    if (bf16_filter && sc != t.x->shape[0]) sc = 0;  // whole batch only (the Note)
    ConvPlan nchw = make_plan(p, t, cc, chunk, false);
    const bool nchw_ok = (cc.conv_layout != ConvLayout::Nhwc || sc == 0) &&
                         choose_at_chunk(pass, nchw, t, cc, seen);
    if (sc > 0) {
      ConvPlan staged = make_plan(p, t, cc, sc, true);
      seen << " NHWC";
      if (choose_at_chunk(pass, staged, t, cc, seen) &&
          (cc.conv_layout == ConvLayout::Nhwc || !nchw_ok ||
           plan_ms(staged, t) < 0.95 * plan_ms(nchw, t)))
        return staged;
    }
    if (nchw_ok) return nchw;
  }
  return std::nullopt;
}

}  // namespace

ConvPlan& ready_plan(ConvPass pass, const ConvCudaParams& p, const ExecContext& ctx) {
  CudaContext& cc = cuda_context(ctx);
  const ConvTensors t = conv_tensors(pass, ctx);
  ConvPlan& plan = cuda_cache(ctx).get_or_create<ConvPlan>(plan_key(pass, p, t, cc), [&] {
    ConvPlan fresh;  // descriptors come with the chunk size, below
    return fresh;
  });
  if (plan.chosen) return plan;
  // Note [1x1 convolutions as GEMMs]: forced, or measured against cuDNN's best plan (not
  // where the layout is forced to staged NHWC: that stages wherever it can).
  const bool gemm = (cc.conv_gemm == ConvGemm::On ||
                     (cc.conv_gemm == ConvGemm::Auto && cc.conv_layout != ConvLayout::Nhwc)) &&
                    conv_gemm_applies(pass, p, t);
  if (gemm && cc.conv_gemm == ConvGemm::On) return plan = conv_gemm_plan(pass, t);
  std::ostringstream seen;
  std::optional<ConvPlan> best = choose_cudnn_plan(pass, p, t, cc, ctx, seen);
  if (gemm) {
    const double ms = conv_gemm_time_ms(pass, t, p.channels_last, cc);
    if (ms >= 0 && (!best || ms <= 1.05 * plan_ms(*best, t))) {
      plan = conv_gemm_plan(pass, t);
      plan.time_ms = static_cast<float>(ms);
      return plan;
    }
  }
  if (best) return plan = std::move(*best);
  REMAT_FAIL("node '" << (ctx.node ? ctx.node->name : std::string("?")) << "': no deterministic "
                      << conv_pass_name(pass) << " algorithm"
                      << (cc.conv_layout == ConvLayout::Nhwc ? " in NHWC" : "")
                      << " fits the workspace limit of " << cc.workspace_limit
                      << " bytes; cuDNN offered:" << seen.str());
}

}  // namespace remat
