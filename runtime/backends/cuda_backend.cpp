// The CUDA backend: one device, one non-blocking stream, cuDNN and cuBLAS handles bound to it,
// the per-shape CudaCache, and the CudaContext every op's CUDA path receives. No globals.
//
// Memory: raw_alloc is cudaMalloc (the pool allocator calls it once for the whole budget).
// Besides the pool the backend may hold one algorithm-search scratch buffer of
// workspace_limit bytes (Note [search scratch]); cuDNN keeps its own small internal buffers,
// and cuBLAS gets a fixed workspace of kCublasWorkspaceBytes at start-up (cuBLAS's
// recommendation for Hopper): eager and captured GEMMs then use the same buffer, and a captured
// GEMM records no allocation into a CUDA graph (cuBLAS allocates stream-ordered memory under
// capture from CUDA 12.2 when it has no workspace of its own). None of these counts against
// the budget. all_finite's flag is 4 bytes of mapped pinned host memory; the device copy of the
// step that captured kernels read (Note [step graphs] in backend.h) is 8 bytes of device memory
// outside the budget, allocated at start-up too.
#include "runtime/backends/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "runtime/backends/backend.h"
#include "runtime/backends/bf16_staging.h"
#include "runtime/backends/cuda_context.h"
#include "runtime/backends/cuda_copy_streams.h"
#include "runtime/backends/cuda_graphs.h"
#include "runtime/core/check.h"

namespace remat {

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

// Note [search scratch]
// Ops may benchmark algorithms (cudnnFind*) in their cuda_workspace function, which needs
// device memory outside any step. The backend allocates workspace_limit bytes for that the
// first time an op with a cuda_workspace function is asked for its workspace, and hands it out
// as CudaContext::search_scratch. If that fails the pointer stays null (ops fall back to
// heuristics). If a later raw_alloc runs out of memory, the scratch is released for good and
// the allocation retried, so the pool of a tight budget still fits.

namespace {

// The kernel choices set away from their defaults (REMAT_CONV_LAYOUT, REMAT_CONV_GEMM,
// REMAT_BN_KERNELS, REMAT_ATTENTION_KERNEL, the tests' lowered cuDNN element limit, and the
// workspace limit), as " (attention flash, conv layout nchw)", or "".
// They change kernels, timings and workspaces, so they are part of the backend's name: logs say
// what ran, and a profiled cost table cached under one setting (runtime/profiler.cpp keys the
// cache by the name) is not reused under another, where its workspaces would be wrong.
std::string knob_suffix(const CudaOptions& o) {
  std::vector<std::string> set;
  if (o.attention_kernel != AttentionKernel::Flash)
    set.push_back(std::string("attention ") +
                  (o.attention_kernel == AttentionKernel::Tiled ? "tiled" : "rows"));
  if (o.bn_kernels != BnKernels::Auto)
    set.push_back(std::string("bn kernels ") + (o.bn_kernels == BnKernels::Own ? "own" : "cudnn"));
  if (o.conv_gemm != ConvGemm::Auto)
    set.push_back(std::string("conv gemm ") + (o.conv_gemm == ConvGemm::Off ? "off" : "on"));
  if (o.conv_layout != ConvLayout::Auto)
    set.push_back(std::string("conv layout ") +
                  (o.conv_layout == ConvLayout::Nchw ? "nchw" : "nhwc"));
  if (o.cudnn_max_elements != kCudnnMaxElements)
    set.push_back("cudnn elements " + std::to_string(o.cudnn_max_elements));
  if (o.workspace_limit != CudaOptions{}.workspace_limit) {
    constexpr int64_t kMiB = int64_t{1} << 20;
    set.push_back("workspace limit " + (o.workspace_limit % kMiB == 0
                                            ? std::to_string(o.workspace_limit / kMiB) + " MiB"
                                            : std::to_string(o.workspace_limit) + " bytes"));
  }
  std::string s;
  for (const std::string& k : set) s += (s.empty() ? " (" : ", ") + k;
  return s.empty() ? s : s + ")";
}

class CudaBackend : public Backend {
 public:
  CudaBackend(int device, const CudaOptions& opt) : device_(device), opt_(opt) {}

  // Creates everything; throws remat::Error. The destructor releases whatever was created,
  // so a failure half-way leaks nothing.
  void init() {
    info_ = cuda_device_info(device_);
    name_ = cuda_device_label(info_);
    if (opt_.conv_tf32 || opt_.matmul_tf32)
      name_ += opt_.conv_tf32 && opt_.matmul_tf32 ? " tf32-all" : opt_.conv_tf32 ? " tf32" : " tf32-gemm";
    name_ += knob_suffix(opt_);
    REMAT_CUDA_CHECK(cudaSetDevice(device_));
    REMAT_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx_.stream, cudaStreamNonBlocking));
    REMAT_CUDNN_CHECK(cudnnCreate(&ctx_.cudnn));
    REMAT_CUDNN_CHECK(cudnnSetStream(ctx_.cudnn, ctx_.stream));
    REMAT_CUBLAS_CHECK(cublasCreate(&ctx_.cublas));
    REMAT_CUBLAS_CHECK(cublasSetStream(ctx_.cublas, ctx_.stream));
    REMAT_CUDA_CHECK(cudaMalloc(&cublas_workspace_, kCublasWorkspaceBytes));
    REMAT_CUBLAS_CHECK(cublasSetWorkspace(ctx_.cublas, cublas_workspace_, kCublasWorkspaceBytes));
    graphs_.init();
    // Default math keeps FP32 GEMMs in FP32; TF32 tensor cores only when asked for.
    REMAT_CUBLAS_CHECK(cublasSetMathMode(
        ctx_.cublas, opt_.matmul_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    REMAT_CUDA_CHECK(cudaEventCreate(&start_));
    REMAT_CUDA_CHECK(cudaEventCreate(&stop_));
    ctx_.conv_tf32 = opt_.conv_tf32;
    ctx_.matmul_tf32 = opt_.matmul_tf32;
    ctx_.workspace_limit = opt_.workspace_limit;
    ctx_.conv_layout = opt_.conv_layout;
    ctx_.conv_gemm = opt_.conv_gemm;
    ctx_.bn_kernels = opt_.bn_kernels;
    ctx_.attention_kernel = opt_.attention_kernel;
    ctx_.cudnn_max_elements = opt_.cudnn_max_elements;
    ctx_.cache = &cache_;
  }

  ~CudaBackend() override {
    // Errors here cannot be reported (destructors do not throw); the device is going away.
    if (ctx_.stream) (void)cudaStreamSynchronize(ctx_.stream);
    if (ctx_.search_scratch) (void)cudaFree(ctx_.search_scratch);
    if (finite_flag_) (void)cudaFreeHost(finite_flag_);
    if (stop_) (void)cudaEventDestroy(stop_);
    if (start_) (void)cudaEventDestroy(start_);
    if (ctx_.cublas) (void)cublasDestroy(ctx_.cublas);
    if (cublas_workspace_) (void)cudaFree(cublas_workspace_);
    if (ctx_.cudnn) (void)cudnnDestroy(ctx_.cudnn);
    if (ctx_.stream) (void)cudaStreamDestroy(ctx_.stream);
  }

  DeviceKind kind() const override { return DeviceKind::Cuda; }
  std::string name() const override { return name_; }

  void* raw_alloc(int64_t bytes) override {
    REMAT_CHECK(bytes >= 0, "negative allocation " << bytes);
    const size_t n = std::max<size_t>(static_cast<size_t>(bytes), 256);  // never a null block
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, n);
    if (e == cudaErrorMemoryAllocation && ctx_.search_scratch) {
      (void)cudaGetLastError();
      release_search_scratch();
      e = cudaMalloc(&p, n);
    }
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      REMAT_USER_ERROR("cudaMalloc of " << bytes << " bytes on " << name_ << " failed: "
                                  << cudaGetErrorString(e) << " (device has " << free_b
                                  << " bytes free of " << total_b << ")");
    }
    return p;
  }

  // Never throws (the executor frees in its destructor): a failure is kept and reported by
  // the next synchronize() or run().
  void raw_free(void* p) override {
    if (!p) return;
    cudaError_t e = cudaFree(p);
    if (e != cudaSuccess && deferred_error_.empty())
      deferred_error_ = std::string("cudaFree failed: ") + cudaGetErrorString(e);
  }

  void* host_alloc(int64_t bytes) override {
    REMAT_CHECK(bytes >= 0, "negative host allocation " << bytes);
    void* p = nullptr;
    cudaError_t e = cudaMallocHost(&p, std::max<size_t>(static_cast<size_t>(bytes), 64));
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      REMAT_USER_ERROR("pinned host allocation of " << bytes << " bytes failed: "
                       << cudaGetErrorString(e));
    }
    return p;
  }
  void host_free(void* p) override {
    if (p) (void)cudaFreeHost(p);
  }

  void copy_to_host_async(void* dst, const void* src, int64_t bytes) override {
    if (bytes <= 0) return;
    REMAT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                     cudaMemcpyDeviceToHost, ctx_.stream));
  }

  void copy_from_host(void* dst, const void* src, int64_t bytes) override {
    if (bytes <= 0) return;
    // From pageable memory the call returns once `src` has been staged, so the caller may
    // reuse it at once; from host_alloc memory it is asynchronous.
    REMAT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                     cudaMemcpyHostToDevice, ctx_.stream));
  }
  void copy_to_host(void* dst, const void* src, int64_t bytes) override {
    if (bytes <= 0) return;
    REMAT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                     cudaMemcpyDeviceToHost, ctx_.stream));
    REMAT_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  }
  void copy(void* dst, const void* src, int64_t bytes) override {
    if (bytes <= 0) return;
    REMAT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                     cudaMemcpyDeviceToDevice, ctx_.stream));
  }
  void fill_zero(void* dst, int64_t bytes) override {
    if (bytes <= 0) return;
    REMAT_CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(bytes), ctx_.stream));
  }
  int64_t copy_async(CopyDirection dir, void* dst, const void* src, int64_t bytes) override {
    REMAT_CHECK(!ctx_.capturing, "a copy stream's copy inside a CUDA graph capture");
    return copies_.queue(ctx_.stream, dir == CopyDirection::ToHost ? 0 : 1, dst, src, bytes);
  }
  void wait_copy(int64_t ticket) override { copies_.wait(ctx_.stream, ticket); }
  void synchronize() override {
    report_deferred_error();
    REMAT_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    copies_.synchronize();
  }
  // The flag lives in mapped pinned host memory: the kernel writes it over the bus, so the
  // check needs no device memory outside the budget's pool.
  bool all_finite(const void* p, int64_t count, DType dtype) override {
    return all_finite(std::vector<FloatSpan>{{p, count, dtype}});
  }
  bool all_finite(const std::vector<FloatSpan>& spans) override {
    for (const FloatSpan& s : spans)
      REMAT_CHECK(dtype_is_float(s.dtype), "all_finite of " << dtype_name(s.dtype) << " values");
    if (!finite_flag_) {
      REMAT_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&finite_flag_), sizeof(unsigned int),
                                     cudaHostAllocMapped));
      REMAT_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&finite_flag_device_),
                                                finite_flag_, 0));
    }
    synchronize();  // no earlier kernel may still write the flag
    *finite_flag_ = 0;
    for (const FloatSpan& s : spans) {  // each kernel only ever sets the flag
      if (s.dtype == DType::BF16)
        flag_nonfinite_bf16(static_cast<const uint16_t*>(s.data), s.count, finite_flag_device_,
                            ctx_.stream);
      else
        flag_nonfinite(static_cast<const float*>(s.data), s.count, finite_flag_device_,
                       ctx_.stream);
    }
    synchronize();
    return *const_cast<volatile unsigned int*>(finite_flag_) == 0;
  }

  int64_t workspace_bytes(const OpDef& op, const ExecContext& ctx) override {
    if (staged(op, ctx))
      return bf16_staging(op, ctx, [&](const ExecContext& v) {
               return kernel_workspace(op, v);
             }).total_bytes;
    return kernel_workspace(op, ctx);
  }

  void run(const OpDef& op, ExecContext& ctx) override {
    check_runnable(op, ctx);
    ctx.device = &ctx_;
    run_cuda(op, ctx);
  }

  std::vector<double> time_run(const OpDef& op, ExecContext& ctx, int warmup,
                               int repeats) override {
    check_runnable(op, ctx);
    ctx.device = &ctx_;
    for (int i = 0; i < warmup; ++i) run_cuda(op, ctx);
    std::vector<double> ms;
    ms.reserve(static_cast<size_t>(std::max(repeats, 0)));
    for (int i = 0; i < repeats; ++i) {
      REMAT_CUDA_CHECK(cudaEventRecord(start_, ctx_.stream));
      run_cuda(op, ctx);
      REMAT_CUDA_CHECK(cudaEventRecord(stop_, ctx_.stream));
      REMAT_CUDA_CHECK(cudaEventSynchronize(stop_));
      float t = 0;
      REMAT_CUDA_CHECK(cudaEventElapsedTime(&t, start_, stop_));
      ms.push_back(static_cast<double>(t));
    }
    return ms;
  }

  void range_push(const std::string& name, uint32_t color) override {
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.colorType = NVTX_COLOR_ARGB;
    a.color = 0xFF000000u | (color & 0x00FFFFFFu);
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = name.c_str();
    nvtxRangePushEx(&a);
  }
  void range_pop() override { nvtxRangePop(); }

  void* device_context() override { return &ctx_; }

 private:
  int64_t kernel_workspace(const OpDef& op, const ExecContext& ctx) {
    if (!op.cuda_workspace) return 0;
    ensure_search_scratch();
    ExecContext c = ctx;
    c.device = &ctx_;
    const int64_t ws = op.cuda_workspace(c);
    REMAT_CHECK(ws >= 0, "op '" << op.name << "' reported a negative CUDA workspace " << ws);
    return ws;
  }

  // A node running in bf16 whose CUDA kernel is FP32-only (Note [bf16 execution]).
  static bool staged(const OpDef& op, const ExecContext& ctx) {
    if (!node_runs_bf16(ctx)) return false;
    require_bf16_path(op, ctx);
    return !op.bf16_cuda_native;
  }

  void run_cuda(const OpDef& op, const ExecContext& ctx) {
    if (!staged(op, ctx)) return op.cuda(ctx);
    const Bf16Staging s =
        bf16_staging(op, ctx, [&](const ExecContext& v) { return kernel_workspace(op, v); });
    for (int64_t sample = 0; sample < s.samples; ++sample) {
      const ExecContext k = bf16_staged_context(s, ctx, sample);
      for (size_t i = 0; i < ctx.inputs.size(); ++i) {
        if (s.input_offset[i] < 0 || (sample > 0 && !s.input_batched[i])) continue;
        const Bf16Slice in = bf16_slice(s, ctx, static_cast<int>(i), sample);
        if (s.input_rounded[i])
          bf16_round(k.inputs[i].f32(), static_cast<const float*>(in.data), in.count, ctx_.stream);
        else
          bf16_widen(k.inputs[i].f32(), static_cast<const uint16_t*>(in.data), in.count,
                     ctx_.stream);
      }
      op.cuda(k);
      const Bf16Slice out = bf16_slice(s, ctx, -1, sample);
      if (s.output_offset >= 0)
        bf16_narrow(static_cast<uint16_t*>(out.data), k.output.f32(), out.count, ctx_.stream);
      if (s.round_output)
        bf16_round(static_cast<float*>(out.data), static_cast<const float*>(out.data), out.count,
                   ctx_.stream);
    }
  }

  void check_runnable(const OpDef& op, const ExecContext& ctx) {
    report_deferred_error();
    if (!op.cuda)
      REMAT_FAIL("op '" << op.name << "'" << (ctx.node ? " (node '" + ctx.node->name + "')" : "")
                        << " has no CUDA path");
  }

  void report_deferred_error() {
    if (deferred_error_.empty()) return;
    std::string e;
    e.swap(deferred_error_);
    REMAT_FAIL(e);
  }

  bool begin_capture() override {
    // A deferred error is the eager step's to report (the executor runs one when this says no).
    if (!deferred_error_.empty()) return false;
    graphs_.begin(ctx_);
    return true;
  }
  int end_capture(std::string* why, int64_t* launches) override {
    return graphs_.end(ctx_, why, launches);
  }
  void abort_capture() override { graphs_.abort(ctx_); }
  void replay(int graph, int64_t step) override { graphs_.replay(ctx_, graph, step); }
  void drop_graph(int graph) override { graphs_.drop(graph); }

  void end_setup() override {
    scratch_tried_ = true;  // later shapes (none expected) fall back to cuDNN's own Find
    if (ctx_.search_scratch) release_search_scratch();
  }

  void ensure_search_scratch() {
    if (scratch_tried_ || opt_.workspace_limit <= 0) return;
    scratch_tried_ = true;
    void* p = nullptr;
    if (cudaMalloc(&p, static_cast<size_t>(opt_.workspace_limit)) == cudaSuccess)
      ctx_.search_scratch = p;
    else
      (void)cudaGetLastError();  // no scratch: ops use heuristics
  }

  void release_search_scratch() {
    (void)cudaFree(ctx_.search_scratch);
    ctx_.search_scratch = nullptr;
  }

  int device_;
  CudaOptions opt_;
  CudaDeviceInfo info_;
  std::string name_;
  CudaCache cache_;
  CudaContext ctx_;
  CudaGraphs graphs_;  // destroyed after the destructor has synchronised the stream
  CudaCopyStreams copies_;  // Note [copy streams]
  void* cublas_workspace_ = nullptr;  // cuBLAS's, kCublasWorkspaceBytes
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  bool scratch_tried_ = false;
  std::string deferred_error_;
  unsigned int* finite_flag_ = nullptr;         // all_finite's flag, mapped pinned host memory
  unsigned int* finite_flag_device_ = nullptr;  // the same flag, as the device addresses it
};

}  // namespace

bool cuda_backend_built() { return true; }

std::unique_ptr<Backend> make_cuda_backend(int device, std::string* why, const CudaOptions& opt) {
  std::string reason;
  if (!cuda_device_available(&reason) || !cuda_libraries_compatible(&reason)) {
    if (why) *why = reason;
    return nullptr;
  }
  auto be = std::make_unique<CudaBackend>(device, opt);
  try {
    be->init();
  } catch (const Error& e) {
    if (why) *why = std::string("CUDA backend setup on device ") + std::to_string(device) +
                    " failed: " + e.what();
    return nullptr;
  }
  return be;
}

}  // namespace remat
