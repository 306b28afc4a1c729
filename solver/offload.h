// The strategies that also move values to host memory (Note [offload semantics] in
// solver/schedule.h): the baselines and checkmate's offload counterpart.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "solver/problem.h"
#include "solver/schedule.h"
#include "solver/strategies.h"

namespace remat {

// `base` with values moved to host memory where they wait, one at a time at the peak, the
// largest first, until the schedule fits `budget` (and `host_budget` when > 0); nullopt if
// the peak has no waiting value left to move. Under streamed copies, also with each move's
// copies spread over the stages around it, and the faster answer kept. Note [offload to fit].
std::optional<Schedule> offload_to_fit(const Problem& p, const Schedule& base, int64_t budget,
                                       int64_t host_budget);

// `base` with values waiting at the peak freed one at a time, each moved to host memory or
// recomputed, whichever adds the least time per byte, until it fits both budgets (Note [greedy
// offload]); nullopt where the peak has nothing left to free, the time runs out first or a
// schedule on the way costs `cost_cap` or more.
std::optional<Schedule> greedy_to_fit(const Problem& p, const Schedule& base, int64_t budget,
                                      int64_t host_budget, double time_limit_seconds,
                                      double cost_cap);

// "all-keep-offload": every value kept, and offload_to_fit from there (no recomputation).
// Without a schedule, `why` (when given) names a host budget too small for the copies.
std::optional<Schedule> solve_all_keep_offload(const Problem& p, int64_t budget,
                                               int64_t host_budget, std::string* why = nullptr);

// "chen-sqrtn-offload": chen-sqrtn's schedule with every waiting value moved to host memory
// (Note [offload every checkpoint]); nullopt without a link or where it does not fit.
std::optional<Schedule> solve_chen_sqrtn_offload(const Problem& p, int64_t budget,
                                                 int64_t host_budget);

// "greedy-offload": from keep-everything, at the peak, the waiting value that costs least time
// per byte to free, recomputed or moved to host memory, until the schedule fits (Note [greedy
// offload]); nullopt without a link, where the peak has nothing left to free, or when
// `time_limit_seconds` runs out first.
std::optional<Schedule> solve_greedy_offload(const Problem& p, int64_t budget, int64_t host_budget,
                                             double time_limit_seconds);

// `base` (which fits) with recomputations replaced by copies to host memory and back while
// that makes it cheaper and it fits (Note [copies for recomputations]).
std::optional<Schedule> trade_recomputes_for_copies(const Problem& p, const Schedule& base,
                                                    int64_t budget, int64_t host_budget,
                                                    double time_limit_seconds);

// `s` (which fits) with prefetches started earlier while that makes it cheaper and it fits
// (Note [earlier prefetches]); true when it changed.
bool prefetch_earlier(const Problem& p, int64_t budget, int64_t host_budget,
                      double time_limit_seconds, Schedule& s);

// The Checkmate MILP with the offload columns (Note [offload in the MILP]), started from
// `warm_start` when it fits; the schedule its incumbent states, or the warm start.
std::optional<Schedule> solve_offload_milp(const Problem& p, int64_t budget, int64_t host_budget,
                                           const SolveOptions& opt,
                                           const Schedule* warm_start = nullptr);

// The offload MILP's LP relaxation rounded in three phases (Note [lp-offload]): the cheapest
// rounding that fits both budgets, and the LP's objective through `bound` (0 when the LP was
// not solved). lp-offload runs it where full_milp_is_small(p).
std::optional<Schedule> offload_lp_rounding(const Problem& p, int64_t budget,
                                            const SolveOptions& opt, double* bound);

// "lp-offload": lp's answer, the offload LP's roundings with values moved until they fit, the
// stage relaxation's roundings at larger budgets moved until they fit, improved by
// trade_recomputes_for_copies. Note [lp-offload].
std::optional<Schedule> solve_lp_offload(const Problem& p, int64_t budget,
                                         const SolveOptions& opt, std::string* why);

// "checkmate-offload": the cheapest of checkmate (a third of the limit), all-keep-offload,
// greedy-offload and offload_to_fit from checkmate's schedule at larger budgets, improved by
// trade_recomputes_for_copies, and, where the MILP is small (full_milp_is_small), the offload
// MILP from there. Note [checkmate-offload].
std::optional<Schedule> solve_checkmate_offload(const Problem& p, int64_t budget,
                                                const SolveOptions& opt, std::string* why);

}  // namespace remat
