// Local search on a schedule that fits its budget: moves that lower its cost, each checked by
// the simulator (Note [repairing local search] in local_search.cpp).
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include "solver/problem.h"
#include "solver/schedule.h"

namespace remat {

// The recomputations R[t][i] (i < t) as (-cost_i, t, i), the costliest first (the most a move
// can save); without the free ones when `priced_only`.
using Recomputation = std::tuple<double, int, int>;
std::vector<Recomputation> recomputations_costliest_first(const Problem& p,
                                                          const Schedule& s, bool priced_only);

// Lowers the cost of a schedule that fits the budget: holds values a stage recomputes, from
// where they were last available, wherever the schedule still fits and gets cheaper, until no
// such move helps, the deadline passes or (target_cost > 0) it costs at most target_cost, or,
// a tenth of the time in, its rate so far would not reach target_cost in the time.
Schedule schedule_improve(const Problem& p, Schedule s, int64_t budget, double seconds,
                          double target_cost = 0);

// The same move where it does not fit, followed by a budget repair (Note [budget repair]); the
// result is kept when it is cheaper. Candidates by the cost the move saves, largest first,
// until a pass over them finds nothing or the deadline passes.
Schedule schedule_improve_repairing(const Problem& p, Schedule s, int64_t budget,
                                    double seconds);

}  // namespace remat
