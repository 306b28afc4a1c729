// The Backend interface: raw memory (the allocator's pool primitive), copies, and running or
// timing one node's kernel. CPU implementation in cpu_backend.cpp; CUDA in cuda_backend.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/op.h"

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

  virtual void copy_from_host(void* dst, const void* src, int64_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, int64_t bytes) = 0;
  virtual void copy(void* dst, const void* src, int64_t bytes) = 0;
  virtual void fill_zero(void* dst, int64_t bytes) = 0;
  virtual void synchronize() = 0;

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

  // Planning is over: release memory only setup needed (the CUDA backend's algorithm-search
  // scratch), so that training uses nothing outside the budget's pool.
  virtual void end_setup() {}
};

// Range colours: first computation, recomputation, optimizer update, whole phases.
constexpr uint32_t kRangeCompute = 0x3C78D8;
constexpr uint32_t kRangeRecompute = 0xE06666;
constexpr uint32_t kRangeUpdate = 0x6AA84F;
constexpr uint32_t kRangePhase = 0x999999;

std::unique_ptr<Backend> make_cpu_backend();

// True when this binary was built with the CUDA backend.
bool cuda_backend_built();
// Options of the CUDA backend: TF32 tensor-core math for cuBLAS (and, through CudaContext,
// for the ops' cuDNN calls) is off unless asked for; workspace_limit caps the workspace an
// algorithm choice may need (bytes).
struct CudaOptions {
  bool allow_tf32 = false;
  int64_t workspace_limit = int64_t{1} << 30;
};
// nullptr with `why` set when no device is usable (or the build has no CUDA).
std::unique_ptr<Backend> make_cuda_backend(int device, std::string* why,
                                           const CudaOptions& opt = {});

}  // namespace remat
