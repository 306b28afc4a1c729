// The Backend interface: raw memory (the allocator's pool primitive), copies, and running or
// timing one node's kernel. CPU implementation in cpu_backend.cpp; CUDA in cuda_backend.cpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/graph/op.h"

namespace remat {

enum class DeviceKind { Cpu, Cuda };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;  // "cpu", "cuda:0 NVIDIA H100 80GB HBM3"

  // Raw memory: one call per pool (or per tensor in simple executors). Never null; throws.
  virtual void* raw_alloc(int64_t bytes) = 0;
  virtual void raw_free(void* p) = 0;

  // Host memory the device copies from and to without staging (pinned on CUDA, plain on the
  // CPU); never null, throws. From it, copy_from_host may return before the copy is done: the
  // caller leaves `src` alone until the next synchronize().
  virtual void* host_alloc(int64_t bytes) = 0;
  virtual void host_free(void* p) = 0;

  virtual void copy_from_host(void* dst, const void* src, int64_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, int64_t bytes) = 0;  // synchronous
  // Into host_alloc memory: the bytes are there after the next synchronize().
  virtual void copy_to_host_async(void* dst, const void* src, int64_t bytes) {
    copy_to_host(dst, src, bytes);
  }
  // Note [copy streams]
  // A plan's copies between device memory and host_alloc memory (Note [host copies] in
  // runtime/executor.h) run on copy streams of their own, one each way, beside the computes.
  // copy_async queues one: it starts after everything issued so far on the compute stream and
  // after the copies queued before it in its direction, and returns its ticket (> 0; 0 when it
  // is already done). Nothing waits for it until wait_copy(ticket), which makes what is issued
  // later (computes, and so the copies queued after them) wait for it without blocking the
  // host, or until synchronize(), which waits for every copy. So the caller waits before a
  // compute reads what a copy writes and before memory a copy reads or writes is reused; two
  // copies of opposite directions are ordered only through such a wait. The default runs the
  // copy at once, in the compute stream's order.
  enum class CopyDirection { ToHost, ToDevice };
  virtual int64_t copy_async(CopyDirection dir, void* dst, const void* src, int64_t bytes) {
    if (dir == CopyDirection::ToHost)
      copy_to_host(dst, src, bytes);
    else
      copy_from_host(dst, src, bytes);
    return 0;
  }
  virtual void wait_copy(int64_t ticket) { (void)ticket; }
  virtual void copy(void* dst, const void* src, int64_t bytes) = 0;
  virtual void fill_zero(void* dst, int64_t bytes) = 0;
  virtual void synchronize() = 0;
  // True when none of the `count` floats (F32 or BF16) at `p` (backend memory) is a NaN or an
  // infinity. Synchronous. The default copies them to the host; backends override it to scan
  // in place.
  virtual bool all_finite(const void* p, int64_t count, DType dtype) {
    REMAT_CHECK(dtype_is_float(dtype), "all_finite of " << dtype_name(dtype) << " values");
    std::vector<char> host(static_cast<size_t>(count * dtype_size(dtype)));
    copy_to_host(host.data(), p, static_cast<int64_t>(host.size()));
    for (int64_t i = 0; i < count; ++i) {
      float x;
      if (dtype == DType::BF16) {
        uint16_t h;
        std::memcpy(&h, host.data() + 2 * i, 2);
        const uint32_t u = uint32_t{h} << 16;
        std::memcpy(&x, &u, 4);
      } else {
        std::memcpy(&x, host.data() + 4 * i, 4);
      }
      if (!std::isfinite(x)) return false;
    }
    return true;
  }

  // True when every span's floats are finite: all_finite over each, which the CUDA backend
  // does with one flag and one pair of synchronisations for them all (the finite check reads
  // every parameter gradient each step: hundreds of tensors for GPT-2 or ResNet-50).
  struct FloatSpan {
    const void* data;
    int64_t count;
    DType dtype;
  };
  virtual bool all_finite(const std::vector<FloatSpan>& spans) {
    for (const FloatSpan& s : spans)
      if (!all_finite(s.data, s.count, s.dtype)) return false;
    return true;
  }

  // Workspace bytes `op` needs to run `ctx` (ctx.workspace unset). CPU: op.cost's workspace;
  // CUDA: the chosen algorithm's workspace.
  virtual int64_t workspace_bytes(const OpDef& op, const ExecContext& ctx) = 0;
  // Runs one kernel (asynchronously on a device backend).
  virtual void run(const OpDef& op, ExecContext& ctx) = 0;
  // Runs `warmup` + `repeats` times and returns each repeat's time in milliseconds.
  virtual std::vector<double> time_run(const OpDef& op, ExecContext& ctx, int warmup,
                                       int repeats) = 0;

  // Named ranges for timeline tools (NVTX on CUDA; no-ops on the CPU). `color` is 0xRRGGBB.
  virtual void range_push(const std::string& name, uint32_t color) {
    (void)name;
    (void)color;
  }
  virtual void range_pop() {}

  // Backend state a device communicator orders its work with (the CudaContext, whose stream
  // runs the kernels, on CUDA; null on the CPU). The backend keeps ownership.
  virtual void* device_context() { return nullptr; }

  // Note [step graphs]
  // In arena mode a plan launches the same kernels on the same addresses every step, so a
  // backend that can record launches replays a plan's whole compute and free walk with one
  // launch (CUDA graphs). The executor (runtime/executor_graph.cpp) runs a plan eagerly once
  // (algorithm choices and lazy set-up happen there), records it at its next step and replays
  // that record from then on; a new plan is recorded anew. What may change between steps
  // cannot be baked into the record: the input batch is uploaded before the replay, the
  // optimizer updates and the finite check run eagerly after it, and a kernel that depends on
  // the step reads it from the backend's device copy (Note [step source] in kernels/rng.h).
  // Only the host's bookkeeping is skipped on a replay: the memory counters and the step's
  // compute counts are those of the recorded step, which ran the same plan.
  //
  // begin_capture: later calls are recorded, not run; false when this backend cannot record
  // (the CPU backend runs every call at once).
  virtual bool begin_capture() { return false; }
  // Stops recording: a handle >= 0 with `launches` set to the operations recorded, or -1 with
  // `why` set when the record cannot be replayed (none of it ran).
  virtual int end_capture(std::string* why, int64_t* launches) {
    (void)launches;
    *why = "backend " + name() + " does not record launches";
    return -1;
  }
  // After a call failed while recording: stops and discards the record.
  virtual void abort_capture() {}
  // Runs record `graph` for 0-based training step `step` (asynchronously, like run()).
  virtual void replay(int graph, int64_t step) {
    (void)step;
    REMAT_FAIL("backend " << name() << " has no record " << graph << " to replay");
  }
  virtual void drop_graph(int graph) { (void)graph; }

  // Planning is over: release memory only setup needed (the CUDA backend's algorithm-search
  // scratch), so that training uses nothing outside the budget's pool.
  virtual void end_setup() {}
};

// be.raw_alloc(bytes), or be.host_alloc(bytes) with `host`, naming `who` ("node 'conv1'", "the
// input batch") in front of a failure: "node 'conv1': host allocation of 4096 bytes failed".
inline void* backend_alloc(Backend& be, int64_t bytes, const std::string& who, bool host = false) {
  try {
    return host ? be.host_alloc(bytes) : be.raw_alloc(bytes);
  } catch (const UserError& e) {
    throw UserError(who + ": " + e.what());
  }
}

// Range colours: first computation, recomputation, optimizer update, whole phases.
constexpr uint32_t kRangeCompute = 0x3C78D8;
constexpr uint32_t kRangeRecompute = 0xE06666;
constexpr uint32_t kRangeUpdate = 0x6AA84F;
constexpr uint32_t kRangePhase = 0x999999;

// When the CPU backend runs a copy_async (Note [copy orders]): at once, or as late as Note
// [copy streams] allows, in both directions or in one.
enum class CpuCopyOrder { AtOnce, Latest, ToHostLatest, ToDeviceLatest };
std::unique_ptr<Backend> make_cpu_backend(CpuCopyOrder copies = CpuCopyOrder::AtOnce);

// True when this binary was built with the CUDA backend.
bool cuda_backend_built();
// Options of the CUDA backend. TF32 tensor-core math is chosen separately for cuDNN
// convolutions and for cuBLAS GEMMs (PyTorch's defaults are conv_tf32 on, matmul_tf32 off;
// both are off here, the exact setting tests compare with the CPU); workspace_limit caps the
// workspace an algorithm choice may need (bytes); conv_layout lets a convolution run on
// channels-last copies when that is faster (Note [staged NHWC convolutions] in
// ops/conv2d_cuda.cpp): Auto measures, Nchw never, Nhwc always (tests); conv_gemm lets a
// 1 x 1 convolution's passes (forward, data and weight gradients) run as cuBLAS GEMMs on NCHW
// (Note [1x1 convolutions as GEMMs] in ops/conv2d_cuda_gemm.cpp): Auto measures (except under
// a forced Nhwc layout), Off never, On wherever the shape allows (tests); bn_kernels picks who
// runs train-mode batch norm (Note [batchnorm on the GPU] in ops/batchnorm_cuda.cpp): Auto our
// kernels on planes of 56 x 56 and more and cuDNN below, Own our kernels on every plane, Cudnn
// cuDNN on every plane (to compare the two on a GPU); attention_kernel picks the fused attention
// op's kernels (Note [tiled attention kernels] in kernels/attention_tiled.cu): Rows one block per
// row, Tiled blocks of 32 rows (head sizes up to 128; rows above), Flash (the default) bf16
// tensor cores (Note [flash attention kernels] in kernels/attention_flash.cu; bf16 data and head
// sizes 32, 64, 128 only; rows otherwise). An H200 trained gpt2_fused in bf16 at 104.0 samples/s
// on the flash kernels and 8.9 on the rows (GPU_RESULTS.md, 2026-11-27 and 2026-12-04).
enum class ConvLayout { Auto, Nchw, Nhwc };
constexpr int64_t kCudnnMaxElements = (int64_t{1} << 31) - 1;
enum class ConvGemm { Auto, Off, On };
enum class BnKernels { Auto, Own, Cudnn };
enum class AttentionKernel { Rows, Tiled, Flash };
struct CudaOptions {
  bool conv_tf32 = false;
  bool matmul_tf32 = false;
  int64_t workspace_limit = int64_t{1} << 30;
  ConvLayout conv_layout = ConvLayout::Auto;
  ConvGemm conv_gemm = ConvGemm::Auto;
  BnKernels bn_kernels = BnKernels::Auto;
  AttentionKernel attention_kernel = AttentionKernel::Flash;
  // Elements one cuDNN tensor may hold: the legacy API refuses 2^31 and more (Note [cuDNN's
  // element limit] in ops/cudnn_util.h). Tests lower it to run the split calls at small sizes.
  int64_t cudnn_max_elements = kCudnnMaxElements;
};
// The convolution layout REMAT_CONV_LAYOUT names: unset or "auto", "nchw", "nhwc" (a user
// error for anything else). Every tool reads it, so a profile and a train run agree.
ConvLayout conv_layout_from_env();
// The same for REMAT_CONV_GEMM: unset or "auto", "off", "on".
ConvGemm conv_gemm_from_env();
// The same for REMAT_BN_KERNELS: unset or "auto", "own", "cudnn".
BnKernels bn_kernels_from_env();
// The same for REMAT_ATTENTION_KERNEL: unset or "flash", "rows", "tiled".
AttentionKernel attention_kernel_from_env();
// The options for a precision name as the tools spell it: "fp32" (no TF32), "tf32" (TF32 in
// convolutions, FP32 GEMMs: PyTorch's defaults) or "tf32-all" (TF32 in both); the convolution
// layout, GEMM, batch-norm and attention choices from REMAT_CONV_LAYOUT, REMAT_CONV_GEMM,
// REMAT_BN_KERNELS and REMAT_ATTENTION_KERNEL.
inline CudaOptions cuda_precision_options(const std::string& precision) {
  CudaOptions o;
  o.conv_tf32 = precision != "fp32";
  o.matmul_tf32 = precision == "tf32-all";
  o.conv_layout = conv_layout_from_env();
  o.conv_gemm = conv_gemm_from_env();
  o.bn_kernels = bn_kernels_from_env();
  o.attention_kernel = attention_kernel_from_env();
  return o;
}
// nullptr with `why` set when no device is usable (or the build has no CUDA). The backend's
// name() is the device label, with " tf32" or " tf32-all" appended when TF32 is on (so that
// profiles measured in different precisions are cached apart).
std::unique_ptr<Backend> make_cuda_backend(int device, std::string* why,
                                           const CudaOptions& opt = {});

}  // namespace remat
