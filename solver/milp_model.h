// The Checkmate MILP as plain arrays (no Cbc types): one builder shared by the MILP
// (milp.cpp), the LP relaxation (lp_round.cpp) and the max-batch MILP (max_batch_probe.cpp).
// See Note [tight Checkmate formulation] in milp_model.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "solver/problem.h"
#include "solver/schedule.h"
#include "solver/strategies.h"

namespace remat {

enum class MilpObjective {
  MinCost,  // minimise total compute cost under U <= budget
  MinPeak,  // minimise P, the peak activation bytes per sample, under a compute-cost cap
};

struct MilpBuildOptions {
  MilpObjective objective = MilpObjective::MinCost;
  int64_t budget = 0;             // MinCost: total bytes, constant included
  double cost_cap = 0;            // total cost must not exceed this (Problem units); MinCost:
                                  // only when > 0
  bool paper_formulation = false; // the paper's big-M FREE rows, binary FREE, no fixings
  // Offload and prefetch columns (Note [offload in the MILP], milp_offload.cpp); MinCost only,
  // and only with Problem::copy_cost_per_byte > 0.
  bool offload = false;
  int64_t host_budget = 0;        // bytes of host copies alive at once; 0: no limit
};

struct MilpFreeVar {
  int t, i, k, col;  // value i may be freed after node k runs in stage t
};

// Column-major LP/MIP data plus the maps from (t, i) to columns (-1: no column, value 0).
struct MilpModel {
  int n = 0;
  std::vector<int> r_col, s_col, u_col;  // n*n, indexed [t*n + i]
  std::vector<MilpFreeVar> free_vars;
  std::vector<int> out_col, in_col, host_col;  // n*n: offload, prefetch, on host entering t
  std::vector<int> excess_col;                 // n: stage t's copy time beyond its computes
  int p_col = -1;                        // MinPeak only
  double byte_scale = 1;                 // model bytes = real bytes / byte_scale
  double cost_scale = 1;                 // model objective = real cost / cost_scale (MinCost)

  std::vector<double> col_lb, col_ub, obj;
  std::vector<char> is_int;
  std::vector<double> row_lb, row_ub;
  std::vector<int> starts, index;  // column-major matrix
  std::vector<double> value;

  int num_cols() const { return static_cast<int>(col_lb.size()); }
  int num_rows() const { return static_cast<int>(row_lb.size()); }
  int r(int t, int i) const { return r_col[size_t(t) * n + i]; }
  int s(int t, int i) const { return s_col[size_t(t) * n + i]; }
  int u(int t, int k) const { return u_col[size_t(t) * n + k]; }
  int out(int t, int i) const { return out_col.empty() ? -1 : out_col[size_t(t) * n + i]; }
  int in(int t, int i) const { return in_col.empty() ? -1 : in_col[size_t(t) * n + i]; }
  int host(int t, int i) const { return host_col.empty() ? -1 : host_col[size_t(t) * n + i]; }
};

MilpModel milp_build(const Problem& p, const MilpBuildOptions& opt);

// Whether the full Checkmate MILP is small enough to solve directly (its LP in seconds): at
// most kSmallMilpPairs (stage, value) pairs that get R and S columns.
constexpr int64_t kSmallMilpPairs = 6000;
bool full_milp_is_small(const Problem& p);
// The (stage, value) pairs that get R and S columns in the full Checkmate MILP.
int64_t full_milp_pairs(const Problem& p);

// md[i] = the largest node index that depends on i transitively (i itself included): past
// stage md[i], nothing can use i, so no model holds or computes it there.
std::vector<int> max_descendant(const Problem& p, const std::vector<std::vector<int>>& users);

// A full column vector for the schedule (R, S): FREE at its largest allowed value, U by its
// recurrence, P = the schedule's peak per sample. Used as a MIP start.
// `copies` (an offload model): the schedule whose offload and prefetch rows go with (R, S).
std::vector<double> milp_point_from_schedule(const MilpModel& m, const Problem& p,
                                             const BoolMatrix& R, const BoolMatrix& S,
                                             const Schedule* copies = nullptr);

// The offload columns and rows of an offload model (milp_offload.cpp), added by milp_build once
// the Checkmate columns exist; and their values for a schedule (a MIP start) and back.
struct LpBuilder;
void milp_add_offload_columns(const MilpBuildOptions& opt, MilpModel& m, LpBuilder& b);
void milp_add_offload_rows(const Problem& p, const MilpBuildOptions& opt, MilpModel& m,
                           LpBuilder& b);
void milp_offload_point(const MilpModel& m, const Problem& p, const Schedule& s,
                        std::vector<double>& x);
// The schedule a solution of an offload model states: R, S and the copies as they are.
Schedule milp_offload_schedule(const MilpModel& m, const double* x);

// S read from a column vector (x >= threshold); not yet retention-consistent (see
// schedule_repair_s).
BoolMatrix milp_s_from_solution(const MilpModel& m, const double* x, double threshold);

// The two schedules for a given S (a MILP solution's or a rounding's): S with the cheapest R
// for it, which computes values only to hold them as the MILP does (Note [frontier-advancing
// stages]); and S made retention-consistent by dropping such values (schedule_repair_s).
// Callers simulate both and keep the better one that fits: neither is always cheaper.
std::vector<Schedule> schedule_candidates_for_s(const Problem& p, const BoolMatrix& S);

// Drops held values that are never used again before being dropped (a schedule that holds a
// value it never reads costs the MILP memory the simulator does not count), returning S.
BoolMatrix schedule_trim_s(const Problem& p, const BoolMatrix& S);

// S made retention-consistent: drops S[t+1][i] when i is neither held entering t nor computed
// in t under derive_cheapest_r. Returns the matching cheapest R through `R_out`.
BoolMatrix schedule_repair_s(const Problem& p, BoolMatrix S, BoolMatrix* R_out);

// The cheapest-looking schedule that fits `budget` reached from S0 by dropping held values at
// the peak stage (Note [budget repair], lp_round.cpp); nullopt if none within the deadline.
std::optional<Schedule> schedule_fit_budget(const Problem& p, const BoolMatrix& S0,
                                            int64_t budget, double deadline_seconds);

// The LP relaxation of `m` with Clp (lp_round.cpp). Infeasible is a proof that the MILP (and so
// the problem it models) has no solution; Unknown: time limit or numerical trouble.
enum class LpStatus { Optimal, Infeasible, Unknown };
LpStatus milp_solve_lp(const MilpModel& m, double seconds, int log_level,
                       std::vector<double>* x, double* objective, LpBasis* basis = nullptr);

// One Cbc branch-and-cut run on `m` (defined in milp.cpp, the only Cbc caller), in a child
// process with a hard deadline (Note [hard solver deadline]). Values are in model units
// (objective = real cost / cost_scale, or P in byte_scale units).
struct MilpRun {
  bool has_solution = false;  // Cbc returned an incumbent
  std::vector<double> x;      // the incumbent's columns
  double objective = 0;       // incumbent objective
  double bound = 0;           // best proven bound
  bool optimal = false;       // proven optimal (within the gap)
  bool infeasible = false;    // proven infeasible
  bool root_lp_unfinished = false;  // the root LP did not finish within the time limit
  bool killed = false;        // Cbc ignored the limit and was stopped from outside
  std::string failure;        // the Cbc process crashed: how (empty otherwise)
  double seconds = 0;
};
// progress(elapsed seconds, incumbent or < 0, bound), model units, called about once a second
// and on every new incumbent; returning true stops the search (the incumbent and bound stay).
using MilpProgress = std::function<bool(double, double, double)>;
// `root_basis` (optional): an optimal basis of m's LP relaxation (milp_solve_lp).
MilpRun milp_run_cbc(const MilpModel& m, const SolveOptions& opt,
                     const std::vector<double>* start, const MilpProgress& progress,
                     const LpBasis* root_basis = nullptr);

}  // namespace remat
