// Chen's segment schedule on a prefix, the rest of the forward pass kept (Note [kept tail]).
#pragma once

#include <cstdint>
#include <optional>

#include "solver/problem.h"
#include "solver/schedule.h"

namespace remat {

// The cheapest schedule that fits `budget` of the greedy rule's segmentations of a prefix of
// the forward nodes with every node after it held, over tails and thresholds spread over their
// ranges, searched for at most `seconds`; nullopt when none was found to fit.
std::optional<Schedule> solve_kept_tail(const Problem& p, int64_t budget, double seconds);

}  // namespace remat
