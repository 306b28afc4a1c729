// The CPU backend: host memory, memcpy, and each op's CPU reference kernel.
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "runtime/memory/allocator.h"
#include "runtime/backends/backend.h"
#include "runtime/core/check.h"

namespace remat {

namespace {

std::vector<TensorDesc> input_descs(const ExecContext& ctx) {
  std::vector<TensorDesc> d;
  d.reserve(ctx.inputs.size());
  for (const auto& v : ctx.inputs) d.push_back(*v.desc);
  return d;
}

class CpuBackend : public Backend {
 public:
  DeviceKind kind() const override { return DeviceKind::Cpu; }
  std::string name() const override { return "cpu"; }

  void* raw_alloc(int64_t bytes) override {
    REMAT_CHECK(bytes >= 0, "negative allocation " << bytes);
    size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded ? rounded : 64);
    if (!p)
      REMAT_USER_ERROR("host allocation of " << pool_format_bytes(bytes) << " (" << bytes
                                             << " bytes) failed (out of memory)");
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
  void synchronize() override {}
  bool all_finite(const void* p, int64_t count) override {
    // A float is NaN or +-inf exactly when its exponent bits are all ones: an integer test
    // the compiler vectorises, without a branch per element.
    const auto* x = static_cast<const float*>(p);
    uint32_t bad = 0;
    for (int64_t i = 0; i < count; ++i) {
      uint32_t bits;
      std::memcpy(&bits, x + i, sizeof bits);
      bad |= (bits & 0x7F800000u) == 0x7F800000u;
    }
    return bad == 0;
  }

  int64_t workspace_bytes(const OpDef& op, const ExecContext& ctx) override {
    return op.cost(*ctx.node->typed, input_descs(ctx), *ctx.output.desc).workspace_bytes;
  }

  void run(const OpDef& op, ExecContext& ctx) override { op.cpu(ctx); }

  std::vector<double> time_run(const OpDef& op, ExecContext& ctx, int warmup,
                               int repeats) override {
    for (int i = 0; i < warmup; ++i) op.cpu(ctx);
    std::vector<double> ms;
    for (int i = 0; i < repeats; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      op.cpu(ctx);
      auto t1 = std::chrono::steady_clock::now();
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    return ms;
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace remat
