// The CPU backend: host memory, memcpy, and each op's CPU reference kernel.
#include <sys/mman.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "runtime/backends/backend.h"
#include "runtime/backends/bf16_staging.h"
#include "runtime/backends/copy_queues.h"
#include "runtime/core/bf16.h"
#include "runtime/core/check.h"
#include "runtime/memory/allocator.h"

namespace remat {

namespace {

// Note [huge pages]
// A CPU step touches its region, its persistent values and the host copies' pool once each,
// hundreds of MB for the zoo's larger models: with 4 KB pages that is one page fault per 4 KB,
// and on a virtual machine a fault costs far more than clearing its page. Blocks of 4 MB and up
// are aligned to 2 MB and advised to the kernel as huge pages (madvise MADV_HUGEPAGE; ignored
// where transparent huge pages are off), which takes 512 times fewer faults; the executor fills
// every initial value through one host buffer (Executor::init_parameters). On a 2-core Intel Xeon
// virtual machine (2026-12-02) the two took one bf16 zoo step of FCN-8 from 31 to 15-17 s, and 56
// of the model tests (the bf16 zoo, eight ONNX models, RematExec) from 245 to 175 s.
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugeFrom = size_t{4} << 20;

std::vector<TensorDesc> input_descs(const ExecContext& ctx) {
  std::vector<TensorDesc> d;
  d.reserve(ctx.inputs.size());
  for (const auto& v : ctx.inputs) d.push_back(*v.desc);
  return d;
}

int64_t cpu_kernel_workspace(const OpDef& op, const ExecContext& ctx) {
  return op.cost(*ctx.node->typed, input_descs(ctx), *ctx.output.desc).workspace_bytes;
}

// Runs op.cpu on ctx, staged through FP32 when the node runs in bf16 and the kernel is FP32-only
// (Note [bf16 execution]).
void run_cpu(const OpDef& op, const ExecContext& ctx) {
  if (!node_runs_bf16(ctx)) return op.cpu(ctx);
  require_bf16_path(op, ctx);
  if (op.bf16_cpu_native) return op.cpu(ctx);
  const Bf16Staging s =
      bf16_staging(op, ctx, [&](const ExecContext& v) { return cpu_kernel_workspace(op, v); });
  for (int64_t sample = 0; sample < s.samples; ++sample) {
    const ExecContext k = bf16_staged_context(s, ctx, sample);
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      if (s.input_offset[i] < 0 || (sample > 0 && !s.input_batched[i])) continue;
      const Bf16Slice in = bf16_slice(s, ctx, static_cast<int>(i), sample);
      float* dst = k.inputs[i].f32();
      if (s.input_rounded[i]) {
        const float* src = static_cast<const float*>(in.data);
        for (int64_t e = 0; e < in.count; ++e) dst[e] = bf16_round(src[e]);
      } else {
        bf16_widen(static_cast<const uint16_t*>(in.data), dst, in.count);
      }
    }
    op.cpu(k);
    const Bf16Slice out = bf16_slice(s, ctx, -1, sample);
    if (s.output_offset >= 0)
      bf16_narrow(k.output.f32(), static_cast<uint16_t*>(out.data), out.count);
    if (s.round_output) bf16_round_in_place(static_cast<float*>(out.data), out.count);
  }
}

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(CpuCopyOrder order)
      : copies_({order == CpuCopyOrder::Latest || order == CpuCopyOrder::ToHostLatest,
                 order == CpuCopyOrder::Latest || order == CpuCopyOrder::ToDeviceLatest}) {}
  DeviceKind kind() const override { return DeviceKind::Cpu; }
  std::string name() const override { return "cpu"; }

  void* raw_alloc(int64_t bytes) override {
    REMAT_CHECK(bytes >= 0, "negative allocation " << bytes);
    const size_t align = static_cast<size_t>(bytes) >= kHugeFrom ? kHugePage : 64;
    size_t rounded = (static_cast<size_t>(bytes) + align - 1) / align * align;
    void* p = std::aligned_alloc(align, rounded ? rounded : 64);
    if (!p)
      REMAT_USER_ERROR("host allocation of " << pool_format_bytes(bytes) << " (" << bytes
                                             << " bytes) failed (out of memory)");
    if (align == kHugePage) ::madvise(p, rounded, MADV_HUGEPAGE);  // Note [huge pages]
    return p;
  }
  void raw_free(void* p) override { std::free(p); }
  void* host_alloc(int64_t bytes) override { return raw_alloc(bytes); }
  void host_free(void* p) override { std::free(p); }

  void copy_from_host(void* dst, const void* src, int64_t bytes) override {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
  }
  void copy_to_host(void* dst, const void* src, int64_t bytes) override {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
  }
  void copy(void* dst, const void* src, int64_t bytes) override {
    std::memmove(dst, src, static_cast<size_t>(bytes));
  }
  void fill_zero(void* dst, int64_t bytes) override { std::memset(dst, 0, static_cast<size_t>(bytes)); }
  int64_t copy_async(CopyDirection dir, void* dst, const void* src, int64_t bytes) override {
    return copies_.queue(dir == CopyDirection::ToHost ? 0 : 1, dst, src, bytes);
  }
  void wait_copy(int64_t ticket) override { copies_.run_through(ticket); }
  void synchronize() override { copies_.run_all(); }
  using Backend::all_finite;  // the span list: each span in turn
  bool all_finite(const void* p, int64_t count, DType dtype) override {
    // A float is NaN or +-inf exactly when its exponent bits are all ones: an integer test
    // the compiler vectorises, without a branch per element. bf16 keeps FP32's exponent in
    // its high bits.
    uint32_t bad = 0;
    if (dtype == DType::BF16) {
      const auto* x = static_cast<const uint16_t*>(p);
      for (int64_t i = 0; i < count; ++i) bad |= (x[i] & 0x7F80u) == 0x7F80u;
      return bad == 0;
    }
    REMAT_CHECK(dtype == DType::F32, "all_finite of " << dtype_name(dtype) << " values");
    const auto* x = static_cast<const float*>(p);
    for (int64_t i = 0; i < count; ++i) {
      uint32_t bits;
      std::memcpy(&bits, x + i, sizeof bits);
      bad |= (bits & 0x7F800000u) == 0x7F800000u;
    }
    return bad == 0;
  }

  int64_t workspace_bytes(const OpDef& op, const ExecContext& ctx) override {
    if (node_runs_bf16(ctx) && !op.bf16_cpu_native)
      return bf16_staging(op, ctx, [&](const ExecContext& v) {
               return cpu_kernel_workspace(op, v);
             }).total_bytes;
    return cpu_kernel_workspace(op, ctx);
  }

  void run(const OpDef& op, ExecContext& ctx) override { run_cpu(op, ctx); }

  std::vector<double> time_run(const OpDef& op, ExecContext& ctx, int warmup,
                               int repeats) override {
    for (int i = 0; i < warmup; ++i) run_cpu(op, ctx);
    std::vector<double> ms;
    for (int i = 0; i < repeats; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      run_cpu(op, ctx);
      auto t1 = std::chrono::steady_clock::now();
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    return ms;
  }

 private:
  CopyQueues copies_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(CpuCopyOrder copies) {
  return std::make_unique<CpuBackend>(copies);
}

}  // namespace remat
