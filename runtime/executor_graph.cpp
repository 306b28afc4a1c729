// The executor's side of Note [step graphs] (runtime/backends/backend.h): which steps may replay
// a record of the plan, recording one, replaying it, and running eagerly when it may not.
#include <exception>

#include "runtime/core/check.h"
#include "runtime/executor.h"

namespace remat {

std::string Executor::graph_blocker(const TraceWriter* trace) const {
  if (!opt_.step_graphs) return "turned off (--no-cuda-graph)";
  if (opt_.memory != MemoryMode::Arena)
    return std::string("memory mode ") + memory_mode_name(opt_.memory) +
           " (only the arena fixes every address)";
  if (opt_.borrow) return "a validation pass in a training run's memory";
  if (opt_.parallel.active()) return "data parallel (collectives run between the plan's nodes)";
  if (g_.micro_batches > 1) return "gradient accumulation (the plan runs once per micro-batch)";
  if (!opt_.check_finite)
    return "the finite check is off (a recorded loss cannot report a bad label; the check does)";
  if (!captures_.empty()) return "values are copied to the host during the step";
  if (plan_copies_) return "the plan offloads values to host memory (Note [host copies])";
  if (trace) return "this step is traced (spans need a synchronisation per node)";
  return "";
}

void Executor::drop_step_graph() {
  if (graph_.id >= 0) be_.drop_graph(graph_.id);
  graph_ = StepGraph{};
}

void Executor::run_plan(const ExecutionPlan& plan, int64_t step, TraceWriter* trace,
                        StepResult* r) {
  const std::string blocker = graph_blocker(trace);
  if (!blocker.empty()) {
    if (trace == nullptr || graph_.note.empty()) graph_.note = "off: " + blocker;
    run_plan_steps(plan, step, trace, r, /*scan=*/false);
    return;
  }
  if (graph_.id >= 0) {
    graph_.replaying = true;
    be_.replay(graph_.id, step);
    r->computes += graph_.recorded.computes;
    r->recomputes += graph_.recorded.recomputes;
    peak_ = graph_.recorded.peak_bytes;
    r->replayed = true;
    return;
  }
  if (!graph_.ran_eagerly || !graph_.failure.empty()) {
    graph_.ran_eagerly = true;
    if (graph_.failure.empty())
      graph_.note = "the plan's first step runs eagerly; the next is recorded";
    run_plan_steps(plan, step, trace, r, /*scan=*/false);
    return;
  }
  // Record this step, then replay the record to run it (recording runs nothing).
  StepResult rec;
  std::string why;
  int64_t launches = 0;
  int id = -1;
  try {
    if (!be_.begin_capture()) {
      why = "backend " + be_.name() + " runs every call as it comes";
    } else {
      run_plan_steps(plan, step, nullptr, &rec, /*scan=*/false);
      id = be_.end_capture(&why, &launches);
    }
  } catch (const std::exception& e) {
    be_.abort_capture();
    release_activations();
    why = std::string("recording stopped: ") + e.what();
  }
  graph_.recorded_at = step;
  graph_.replaying = id >= 0;
  if (id >= 0) {
    try {
      be_.replay(id, step);
    } catch (const std::exception& e) {  // the record does not launch
      graph_.replaying = false;
      be_.drop_graph(id);
      id = -1;
      why = std::string("the first replay failed: ") + e.what();
    }
  }
  if (id < 0) {  // nothing ran: the step runs eagerly, as will every later one of this plan
    graph_.failure = why;
    graph_.note = "off: " + why;
    peak_ = in_use_;
    run_plan_steps(plan, step, trace, r, /*scan=*/false);
    return;
  }
  graph_.id = id;
  graph_.recorded = rec;
  graph_.recorded.peak_bytes = peak_;
  graph_.note = "step " + std::to_string(step) + " recorded as " + std::to_string(launches) +
                " operations, replayed with one launch from then on";
  r->computes += rec.computes;
  r->recomputes += rec.recomputes;
  r->replayed = true;
  r->recorded = true;
}

}  // namespace remat
