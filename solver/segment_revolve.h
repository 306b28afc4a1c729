// Revolve's multi-level checkpointing over a segmentation of any graph (Note [segment revolve]).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "solver/problem.h"
#include "solver/schedule.h"

namespace remat {

// The schedule of revolve with `slots` states over the steps that cuts after each of
// `checkpoints` (forward nodes) make; nullopt when there is no step or slot.
std::optional<Schedule> segment_revolve_schedule(const Problem& p,
                                                 const std::vector<int>& checkpoints, int slots);

// The cheapest such schedule that fits `budget`, over the greedy rule's segmentations of every
// forward node (Note [greedy thresholds]) and the slot counts, searched for at most `seconds`;
// nullopt when none was found to fit.
std::optional<Schedule> solve_segment_revolve(const Problem& p, int64_t budget, double seconds);

}  // namespace remat
