// The moves the offload strategies make (Note [offload to fit]): the values waiting on the
// device around a stage, and a value moved to host memory for its wait.
#pragma once

#include <vector>

#include "solver/problem.h"
#include "solver/schedule.h"

namespace remat {

// Note [offload to fit]
// A value held entering stages a..c (S[a..c][i] = 1), neither computed nor read in stages
// a+1..c-1, and read in stage c, waits on the device through stages a+1..c-1. Moving it: an
// offload in the first of those stages where it is held (a, or a+1 when stage a computes it)
// unless an earlier offload made a host copy, S cleared in between, and a prefetch in stage
// c-1 (S[c] stays: the prefetch provides it). The device then holds it through neither stage
// between the offload's stage and the prefetch's. Where the peak is, the largest value
// waiting there moves first; the simulator judges each result.
// Under CopyOverlap::Stream (Note [streamed copies]) a copy may take several stages, so each
// one starts as many stages early as it needs to hide behind their compute: the offload in an
// earlier stage that holds the value (it is on the device there anyway), then, if that is not
// enough, the value stays on the device after stage a; the prefetch that many stages before the
// read. Neither reaches the stage being relieved.
struct Wait {
  int value = -1;
  int offload_stage = -1;  // -1: an earlier offload's host copy serves
  int clear_from = -1;     // S[clear_from..prefetch_stage][value] are cleared
  int prefetch_stage = -1;
  int first = -1;  // a: the wait's first stage (the value is read or made in a - 1)
  int read = -1;   // c: the stage that reads it again
};

// Each stage's compute cost in `s` (what a streamed copy hides behind); empty under Stage
// overlap (Note [streamed copies]).
std::vector<double> stage_costs(const Problem& p, const Schedule& s);

// The waiting values around stage t whose move would free their bytes in stage t, their copies
// spread over `stage_cost` when it is not empty.
std::vector<Wait> waits_at(const Problem& p, const std::vector<std::vector<int>>& users,
                           const std::vector<double>& stage_cost, const Schedule& s, int t);

// True when `sim` is valid and within the device budget and (when > 0) the host budget.
bool fits_budgets(const SimResult& sim, int64_t budget, int64_t host_budget);

// [i] = 1 where `s` offloads or prefetches value i in some stage (all 0 without copies).
std::vector<uint8_t> values_with_copies(const Schedule& s, int n);

// Moves w's value: its offload (unless a host copy serves), S cleared, its prefetch. `s` has
// copy matrices.
void apply_wait(Schedule& s, const Wait& w);

}  // namespace remat
