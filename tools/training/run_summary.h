// How a finished `train` run reports itself: the closing lines a person reads, the JSON summary
// scripts read (remat-train-summary/1), and the keep-everything run `--compare` measures it
// against.
#pragma once

#include <string>

#include "runtime/executor.h"
#include "runtime/graph/graph.h"
#include "tools/training/step_plan.h"
#include "tools/training/training.h"

namespace remat {

// The run in numbers, for scripts (tools/bench/bench_pytorch.py): remat-train-summary/1.
void write_summary(const std::string& path, const Graph& g, const TrainOptions& opt,
                   const StepPlan& sp, const TrainSummary& sum);

// --compare FILE: the ms/step of a keep-everything run of the same model, batch and device (its
// --summary), checked before training so that a wrong file fails at once.
double compared_ms_per_step(const Graph& g, const TrainOptions& opt);

// The closing lines: steps and loss, predicted against measured memory (and time), the ranks'
// agreement under data parallel, and the measured slowdown against a keep-everything run when
// --compare gave its ms/step (base_ms > 0).
void print_run_summary(const Graph& g, const TrainOptions& opt, const StepPlan& sp, Executor& ex,
                       const TrainSummary& sum, double base_ms);

}  // namespace remat
