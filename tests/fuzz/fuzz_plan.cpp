// libFuzzer harness: remat-plan/1 JSON resolved against small_dag's training graph, then laid
// out as the arena-mode executor would before running it.
#include "runtime/executor.h"
#include "runtime/memory/plan_io.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace remat;
  const fuzz::SmallDag& m = fuzz::small_dag();
  static const std::unique_ptr<Backend> cpu = make_cpu_backend();
  fuzz::user_errors_only([&] {
    const ExecutionPlan plan = plan_from_json_text(fuzz::as_text(data, size), m.g, "fuzz.json");
    Executor::arena_region_bytes(m.g, m.ops, *cpu, plan);
  });
  return 0;
}
