// Exact search over held sets: the cheapest schedule of a small problem, proven optimal by
// dynamic programming over the values live between stages (Note [held-set search]).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "solver/problem.h"
#include "solver/schedule.h"

namespace remat {

// Problems with more nodes are not searched (held sets are fixed-size bitsets).
constexpr int kHeldSetMaxNodes = 256;

// Which schedules the search ranges over.
enum class HeldSetSpace {
  Exact,     // every schedule: a finished search is a proof (Note [held-set search])
  KeepOnly,  // stages compute only what their node needs (no value computed only to be kept):
             // far fewer transitions; a finished search is the best such schedule, no proof
};

struct HeldSetLimits {
  int64_t max_transitions = 200'000'000;  // give up after this many stage transitions
  double seconds = 60;                    // or this much wall clock
};

struct HeldSetSearch {
  // The cheapest schedule that fits and costs less than the ceiling (nullopt: none does, or
  // the search stopped early).
  std::optional<Schedule> best;
  // The search finished: `best` is the cheapest schedule of the space, or (without it) no
  // schedule of the space fits and costs less than the ceiling. With HeldSetSpace::Exact that is
  // a proof over every schedule.
  bool complete = false;
  int64_t transitions = 0;  // stage transitions evaluated
  bool capped = false;        // it stopped at max_transitions (not at the clock)
  std::string stopped;        // why it stopped early ("" when complete)
};

// Searches the schedules of `p` within `budget` (bytes, constant included) that cost less than
// `ceiling` (Problem cost units; pass the best known schedule's cost, or infinity), within
// `limits` (when it gives up it returns no schedule and is not complete).
HeldSetSearch held_set_search(const Problem& p, int64_t budget, double ceiling,
                              HeldSetSpace space, const HeldSetLimits& limits);

}  // namespace remat
