// What run_training() (training.cpp) does before its first step and prints about it: the
// backend for --device and --precision, the plan and the executor that holds it within the
// budget, and the header lines on the plan and on data parallelism.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ops/registry.h"
#include "runtime/backends/backend.h"
#include "runtime/comm/communicator.h"
#include "runtime/executor.h"
#include "runtime/graph/graph.h"
#include "runtime/memory/param_layout.h"
#include "tools/training/data_parallel.h"
#include "tools/training/step_plan.h"
#include "tools/training/training.h"

namespace remat {

// The backend --device names, CUDA with the precision's options and a workspace limit from the
// budget.
std::unique_ptr<Backend> make_backend(const Graph& g, const TrainOptions& opt,
                                      const std::string& precision, int device);

// The run header's words for a precision: what is stored in which dtype and, on the GPU, the math.
std::string precision_description(const std::string& precision, const std::string& device);

// Plans the step and creates the executor that runs it within the budget (see the definition).
std::unique_ptr<Executor> executor_with_plan(const Graph& g, const OpRegistry& ops, Backend& be,
                                             const TrainOptions& opt, ExecutorOptions eo,
                                             ParallelJob* job, StepPlan* sp, int64_t eval_arena);

// "plan STRATEGY: predicted peak ..." and, data parallel, the line on how the ranks share it.
void print_plan(const StepPlan& sp, const TrainOptions& opt, Executor& ex);
void print_parallel(const ParallelJob& job, int64_t step_batch, const PersistentLayout& L,
                    const Communicator& grads);

}  // namespace remat
