// libFuzzer harness: remat-schedule/1 JSON, checked against small_dag's problem and replayed by
// the simulator (which must report an invalid schedule, never crash on one), without a host
// link and with one under each copy model (Note [streamed copies]).
#include "solver/schedule.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace remat;
  const Problem& p = fuzz::small_dag().gp.problem;
  fuzz::user_errors_only([&] {
    const Schedule s = schedule_from_json_text(fuzz::as_text(data, size), "fuzz.json");
    schedule_check_problem(s, p, "fuzz.json");
    simulate(p, s);
    Problem linked = p;
    linked.copy_cost_per_byte = 1;
    for (CopyOverlap overlap : {CopyOverlap::Stage, CopyOverlap::Stream}) {
      linked.copy_overlap = overlap;
      simulate(linked, s);
    }
  });
  return 0;
}
