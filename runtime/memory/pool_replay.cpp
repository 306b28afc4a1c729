// replay_pool(): the caching allocator over an address-only backend (it never reads or writes
// pool memory), fed the executor's exact sequence of requests.
#include "runtime/memory/pool_replay.h"

#include <vector>

#include "runtime/memory/allocator.h"
#include "runtime/core/check.h"
#include "runtime/memory/param_layout.h"

namespace remat {

namespace {
// Hands out one fake, never-dereferenced base address: the allocator only does arithmetic.
class AddressOnlyBackend : public Backend {
 public:
  DeviceKind kind() const override { return DeviceKind::Cpu; }
  std::string name() const override { return "address-only"; }
  void* raw_alloc(int64_t) override { return reinterpret_cast<void*>(uintptr_t{1} << 40); }
  void raw_free(void*) override {}
  void* host_alloc(int64_t) override { fail(); }
  void host_free(void*) override {}
  void copy_from_host(void*, const void*, int64_t) override { fail(); }
  void copy_to_host(void*, const void*, int64_t) override { fail(); }
  void copy(void*, const void*, int64_t) override { fail(); }
  void fill_zero(void*, int64_t) override { fail(); }
  void synchronize() override {}
  int64_t workspace_bytes(const OpDef&, const ExecContext&) override { return 0; }
  void run(const OpDef&, ExecContext&) override { fail(); }
  std::vector<double> time_run(const OpDef&, ExecContext&, int, int) override { fail(); }

 private:
  [[noreturn]] static void fail() { REMAT_FAIL("the address-only backend holds no data"); }
};
}  // namespace

PoolReplay replay_pool(const Graph& g, const ExecutionPlan& plan,
                       const std::function<int64_t(NodeId)>& workspace, int64_t pool_bytes,
                       int64_t persistent_bytes) {
  if (persistent_bytes < 0) persistent_bytes = persistent_layout(g, {}).region_bytes;
  AddressOnlyBackend be;
  PoolAllocator pool(be, pool_bytes);
  std::vector<void*> ptr(g.values.size(), nullptr);
  PoolReplay r;
  try {
    pool.allocate(persistent_bytes, "persistent values");
    auto run = [&](NodeId n) {
      const int64_t ws = workspace(n);
      if (ws > 0) pool.free(pool.allocate(ws, "workspace"));
    };
    for (const PlanStep& s : plan.steps) {
      if (s.kind == PlanStepKind::Free) {
        pool.free(ptr[static_cast<size_t>(s.value)]);
        ptr[static_cast<size_t>(s.value)] = nullptr;
        continue;
      }
      if (s.kind == PlanStepKind::Prefetch)
        ptr[static_cast<size_t>(s.value)] =
            pool.allocate(g.value(s.value).desc.bytes(), g.value(s.value).name);
      if (s.kind != PlanStepKind::Compute) continue;
      const ValueId out = g.node(s.node).output;
      if (g.value(out).kind == ValueKind::Activation)
        ptr[static_cast<size_t>(out)] = pool.allocate(g.value(out).desc.bytes(), g.node(s.node).name);
      run(s.node);
    }
    for (size_t n = 0; n < g.nodes.size(); ++n)
      if (g.nodes[n].kind == NodeKind::Update) run(static_cast<NodeId>(n));
  } catch (const OutOfPoolError& e) {
    r.shortfall = e.requested - e.largest_free;
    return r;
  }
  r.fits = true;
  r.peak_in_use = pool.stats().peak_in_use;
  return r;
}

}  // namespace remat
