// Every strategy that decides a schedule, behind one entry point. All return the same Schedule
// type; every returned schedule has been replayed by simulate() and fits the budget.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "solver/problem.h"
#include "solver/schedule.h"

namespace remat {

struct SolveOptions {
  double time_limit_seconds = 60;  // MILP / LP rounding wall-clock limit
  double relative_gap = 1e-4;      // MILP stops when (incumbent - bound) / incumbent <= this
  int threads = 1;
  int log_level = 0;               // 0 silent; 1 live progress line; 2+ Cbc's own log
  uint64_t seed = 1;               // randomized rounding
  int rounding_samples = 64;
  // Called while the MILP runs: elapsed seconds, incumbent cost (or < 0 if none), bound.
  void (*progress)(double elapsed, double incumbent, double bound, void* user) = nullptr;
  void* progress_user = nullptr;
  // Called while max batch bisects: elapsed seconds, the largest batch known to fit, the
  // smallest batch proven not to (or the bracket's open end).
  void (*batch_progress)(double elapsed, int64_t lo, int64_t hi, void* user) = nullptr;
  // Called when a strategy starts a stage ("baselines", "LP relaxation", "held-set search",
  // "Checkmate MILP", "relaxation MILP", "local improvement"), so that progress shows what
  // runs from the first second.
  void (*phase)(const char* name, void* user) = nullptr;
  // Note [monotone sweeps]: schedules found earlier for the same problem (a sweep's answers at
  // smaller budgets). `checkmate` offers each that fits as an incumbent after its baselines, so
  // its answer never costs more than any of them. Not owned; may be null.
  const std::vector<Schedule>* candidates = nullptr;
  // When > 0, a search may stop at the first schedule that fits at most this cost (max batch's
  // probes need no cheaper one); the greedy searches do.
  double cost_cap = 0;
  // The offload strategies (solver/offload.h): bytes of host copies alive at once; 0: no limit.
  int64_t host_budget = 0;
  // false: Cbc without its preprocessing, which has called feasible models infeasible (Note
  // [confirmed infeasibility] in solver/relaxation_search.cpp).
  bool cbc_preprocess = true;
};

struct SolveResult {
  std::string strategy;
  bool feasible = false;
  std::string message;      // why infeasible / fallbacks taken
  Schedule schedule;        // valid only if feasible
  SimResult sim;            // simulate(problem, schedule) when feasible
  double solve_seconds = 0;
  double gap = 0;           // relative gap (MILP); 0 for exact/heuristics
};

// Known strategy names, in display order:
// "all-keep", "chen-sqrtn", "chen-sqrtn-linear", "chen-greedy", "chen-greedy-linear",
// "griewank", "lp", "checkmate".
const std::vector<std::string>& strategy_names();
// The strategies that may also offload (solver/offload.h), which solve() takes too:
// "all-keep-offload", "chen-sqrtn-offload", "greedy-offload", "lp-offload",
// "checkmate-offload". Not in
// strategy_names(): the tools' default lists run them only when asked.
const std::vector<std::string>& offload_strategy_names();

// Solves `p` with `strategy` at `budget` bytes (constant included). An unknown strategy is a
// UserError listing the known ones. A budget below problem_min_budget() is a UserError stating
// the minimum. Infeasible-at-this-budget is a result with feasible = false, not an exception.
SolveResult solve(const Problem& p, const std::string& strategy, int64_t budget,
                  const SolveOptions& opt = {});

// The UserError solve() raises for a budget below problem_min_budget(p) (naming the node that
// sets the minimum); does nothing otherwise. Tools call it before printing anything.
void solve_check_budget(const Problem& p, int64_t budget);

// Individual strategies (solver/*.cpp). Each returns nullopt when it finds no schedule that
// fits the budget.
std::optional<Schedule> solve_all_keep(const Problem& p);
std::optional<Schedule> solve_chen_sqrtn(const Problem& p, int64_t budget, bool linearized);
// The cheapest schedule of the greedy rule at every threshold where its checkpoints change
// (Note [greedy thresholds] in solver/baselines.cpp); stops early (with the best so far) after
// `seconds`. With cost_cap > 0 (max batch's probes), the first schedule found that fits at most
// the cap is returned.
std::optional<Schedule> solve_chen_greedy(const Problem& p, int64_t budget, bool linearized,
                                          double seconds = 1e30, double cost_cap = 0);
std::optional<Schedule> solve_griewank(const Problem& p, int64_t budget);
// Keep everything but the values cheapest to recompute per byte held (Note [cheap drops] in
// solver/cheap_drops.cpp); checkmate's baselines include it. Stops after `seconds`. With
// cost_cap > 0 (max batch's probes), the first schedule found that fits at most the cap is
// returned as it is, without the search that lowers its cost.
std::optional<Schedule> solve_cheap_drops(const Problem& p, int64_t budget, double seconds,
                                          double cost_cap = 0);
// An optimal LP basis: a status (0 free, 1 basic, 2 at upper, 3 at lower bound) per column, then
// per row, of the LP relaxation of the Checkmate MILP at one budget. LP rounding hands it to the
// MILP, whose root LP then takes no iterations (it can take a minute on ~250-node graphs).
using LpBasis = std::vector<unsigned char>;
// Without a schedule, `why` (when given) says what happened: a proof that none fits, an LP
// that did not finish, or roundings that could not be repaired in time. `lp_bound` and
// `bound_source` (the relaxation that proves it) are set with or without a schedule.
std::optional<Schedule> solve_lp_rounding(const Problem& p, int64_t budget, const SolveOptions& opt,
                                          double* lp_bound = nullptr, LpBasis* basis = nullptr,
                                          std::string* why = nullptr,
                                          std::string* bound_source = nullptr);
std::optional<Schedule> solve_checkmate_milp(const Problem& p, int64_t budget,
                                             const SolveOptions& opt,
                                             const Schedule* warm_start = nullptr,
                                             const LpBasis* root_basis = nullptr);
// Checkmate (solver/checkmate.cpp, Note [checkmate at scale]): the best schedule its stages find
// within opt.time_limit_seconds, with the largest lower bound they prove. Without one, `why`
// says why: a proof that nothing fits, or nothing found in time.
std::optional<Schedule> solve_checkmate(const Problem& p, int64_t budget, const SolveOptions& opt,
                                        std::string* why);

// Max batch (solver/max_batch.cpp): the largest batch whose schedule fits `budget` under
// `strategy`, with compute cost at most one extra forward pass over all-keep.
struct MaxBatchResult {
  std::string strategy;
  int64_t batch = 0;         // the size found (a batch, or a sequence length); 0: even 1 does not fit
  int64_t upper_bound = 0;   // proven bound on the max size (MILP); = batch for exact searches
  std::string bound_source;  // what proves upper_bound + 1 does not fit (checkmate), in words
  double solve_seconds = 0;
  std::string status;
  // The schedule that fits at `batch` (null for none or an exact size search that kept none):
  // what a later checkmate search of the same run starts from (Note [max-batch bisection]).
  std::shared_ptr<const Schedule> schedule;
  // That schedule's cost (copies' excess included) over one step without recomputation or
  // copies, at `batch`; 0 without a schedule.
  double overhead = 0;
  // checkmate: the largest size whose largest node's working set fits beside the constant, a
  // bound on every schedule, with copies or without (0: not computed).
  int64_t working_set_bound = 0;
};
// The problem at another batch. Default: problem_at_batch(p, b), which scales bytes, costs
// and workspace linearly; a model config instead rebuilds its graph at each batch, so that the
// batch reported is the one `plan --config --batch` plans with (Note [max-batch problems]).
using ProblemAtBatch = std::function<Problem(int64_t batch)>;
// Every strategy shares one wall-clock limit (opt.time_limit_seconds); opt.batch_progress, when
// set, hears the bracket [lo, hi] as it narrows.
// `earlier`: the answers of the strategies that ran before in the same search (a maxbatch run);
// checkmate starts from the best of them, so its answer is never below theirs.
MaxBatchResult max_batch(const Problem& p, const std::string& strategy, int64_t budget,
                         const SolveOptions& opt = {}, const ProblemAtBatch& at_batch = nullptr,
                         const std::vector<MaxBatchResult>& earlier = {});

// The same search over any size of one graph (max_batch is the family problem_at_batch(p, .)):
// at(s) is the problem at size s >= 1 (bytes and costs growing with s; the graph's structure,
// hence every schedule, the same at every size), and sizes above max_size do not exist (a
// sequence longer than a model's position table). A transformer's sequence length is such a
// size; its attention makes bytes and costs grow faster than linearly, so at() rebuilds the
// problem rather than scaling it.
struct SizeFamily {
  std::function<Problem(int64_t)> at;
  int64_t max_size = int64_t{1} << 40;
};
MaxBatchResult max_size(const SizeFamily& family, const std::string& strategy, int64_t budget,
                        const SolveOptions& opt = {},
                        const std::vector<MaxBatchResult>& earlier = {});
// A max_size result whose sizes are indices that stand for other sizes (a list of input sides,
// batches from an offset): its answer, bounds and the size its bound_source names (" at k")
// mapped through `size_of` (size_of(0) is 0: nothing fits).
MaxBatchResult with_sizes(MaxBatchResult r, const std::function<int64_t(int64_t)>& size_of);

}  // namespace remat
