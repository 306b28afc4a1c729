// A relaxation of the Checkmate MILP over super-stages (Note [stage relaxation]): any lower
// bound on its optimum is a lower bound on the cost of every schedule of the problem.
#pragma once

#include <cstdint>
#include <vector>

#include "solver/milp_model.h"
#include "solver/problem.h"

namespace remat {

// stage_ends: the last node of each super-stage, strictly ascending, ending with n - 1.
// r_col / s_col of the result are indexed [super-stage * n + node]; u_col is empty.
// With `recompute_memory`, the memory rows of Note [stage relaxation] for nodes a super-stage
// recomputes are included (tighter; harder for Cbc). With cost_cap > 0 the objective must not
// exceed it (a schedule costing at most the cap maps to a point that does not either).
MilpModel relaxation_build(const Problem& p, int64_t budget, const std::vector<int>& stage_ends,
                           bool recompute_memory = true, double cost_cap = 0);

// Super-stages of about `width` nodes each (the last may be shorter).
std::vector<int> uniform_stage_ends(int n, int width);

}  // namespace remat

namespace remat {

// A schedule from held sets per super-stage (Note [stage relaxation rounding]): held[tau][i]
// says value i is held entering super-stage tau (held[0] empty). Not checked against a budget.
Schedule schedule_from_held_sets(const Problem& p, const std::vector<int>& stage_ends,
                                 const std::vector<std::vector<uint8_t>>& held);

// The held sets of a relaxation solution x (relaxation_build's columns), S' >= threshold.
std::vector<std::vector<uint8_t>> relaxation_held_sets(const MilpModel& m,
                                                       const std::vector<int>& stage_ends,
                                                       const double* x, double threshold);

}  // namespace remat
