// Schedules and lower bounds from the stage relaxation (Note [stage relaxation]): its LP with
// rounding and repair, and Cbc on its MILP. These carry the solver past a few hundred nodes,
// where the full Checkmate MILP does not even finish its root LP in a minute.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "solver/milp_model.h"
#include "solver/problem.h"
#include "solver/schedule.h"
#include "solver/strategies.h"

namespace remat {

struct RelaxationSearch {
  std::optional<Schedule> best;  // the cheapest schedule found that fits the budget
  double bound = 0;              // proven lower bound on every schedule's cost (0: none)
  bool infeasible = false;       // proof that no schedule fits the budget
  std::string bound_source;      // which relaxation proved `bound`, e.g. "stage LP, width 4"
  std::string model;             // the model solved and its size, "... R rows x C cols"
  std::string failure;           // without `best`: what happened, in words
};

// The width of the finest uniform super-stages whose relaxation has at most `max_cols`
// columns (1, 2, 4, ... up to n).
int relaxation_width(const Problem& p, int64_t max_cols);

// The LP of the stage relaxation at `width` (0: relaxation_width(p, 40000)), rounded at
// several thresholds and at random, every rounding turned into a schedule and repaired to the
// budget where it exceeds it (Note [budget repair]); LP rounds at tighter budgets follow when
// nothing fits (Note [relaxation margin]); then the all-keep schedule repaired to the budget,
// and local search on the best (schedule_improve). Deterministic for a given seed, apart from where the
// wall-clock `seconds` cut it short.
// With cost_cap > 0, only schedules costing at most the cap count (max batch's probes).
RelaxationSearch relaxation_lp_search(const Problem& p, int64_t budget, const SolveOptions& opt,
                                      double seconds, int width = 0, double cost_cap = 0);

// Cbc on the MILP of the stage relaxation at `width` (0: relaxation_width(p, 15000), or 30000
// where the Checkmate MILP is small),
// started from `incumbent` (which must fit the budget) when given; its incumbent is turned into
// a schedule and repaired. `bound` is Cbc's proven bound on the relaxation.
RelaxationSearch relaxation_milp_search(const Problem& p, int64_t budget, const SolveOptions& opt,
                                        double seconds, const Schedule* incumbent, int width = 0,
                                        double cost_cap = 0);

// The integer columns (R', S') of relaxation_build's model for a schedule that fits the budget
// (the mapping of Note [stage relaxation]); the continuous columns are left 0 (Cbc completes a
// MIP start, and so does an LP with the integer columns fixed): some completion is feasible
// and its objective is at most the schedule's cost.
std::vector<double> relaxation_point(const MilpModel& m, const Problem& p,
                                     const std::vector<int>& stage_ends, const Schedule& s);

}  // namespace remat
