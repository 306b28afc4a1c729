// Max batch: the largest batch (or any size of a SizeFamily: a sequence length) whose schedule
// fits a budget with compute cost at most one extra forward pass over all-keep. Baselines: binary
// search over the size with solve(). "checkmate": bisection on the size with exact probes,
// Note [max-batch bisection].
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>

#include "runtime/check.h"
#include "solver/milp_model.h"
#include "solver/strategies.h"

namespace remat {
namespace {
using Clock = std::chrono::steady_clock;

// All-keep cost plus one forward pass, at the problem's own batch.
double cost_cap(const Problem& p) {
  double all = 0, fwd = 0;
  for (const auto& nd : p.nodes) {
    all += nd.cost;
    if (nd.kind == ProblemNodeKind::Forward) fwd += nd.cost;
  }
  return all + fwd;
}

// The problems of a family, built once per size.
class Sizes {
 public:
  explicit Sizes(const SizeFamily& f) : f_(f) {}
  const Problem& at(int64_t size) {
    auto it = cache_.find(size);
    if (it == cache_.end()) it = cache_.emplace(size, f_.at(size)).first;
    return it->second;
  }
  int64_t max_size() const { return f_.max_size; }

 private:
  const SizeFamily& f_;
  std::map<int64_t, Problem> cache_;
};

// Whether `s` fits `budget` on `pb` within the cost cap.
bool schedule_fits(const Problem& pb, const Schedule& s, int64_t budget) {
  SimResult sim = simulate(pb, s);
  return sim.valid && sim.peak_bytes <= budget && sim.total_cost <= cost_cap(pb) * (1 + 1e-9);
}

// A baseline strategy's schedule at `size` if it fits within the cap.
std::optional<Schedule> baseline_at(Sizes& sizes, const std::string& strategy, int64_t size,
                                    int64_t budget, const SolveOptions& opt) {
  if (size > sizes.max_size()) return std::nullopt;
  const Problem& pb = sizes.at(size);
  if (problem_min_budget(pb) > budget) return std::nullopt;
  SolveResult r = solve(pb, strategy, budget, opt);
  if (!r.feasible || r.sim.total_cost > cost_cap(pb) * (1 + 1e-9)) return std::nullopt;
  return r.schedule;
}

// Binary search for the largest size at which the strategy fits (0 if even 1 does not).
MaxBatchResult search_strategy(Sizes& sizes, const std::string& strategy, int64_t budget,
                               const SolveOptions& opt, std::optional<Schedule>* best_sched) {
  MaxBatchResult res;
  res.strategy = strategy;
  auto fits = [&](int64_t b) {
    auto s = baseline_at(sizes, strategy, b, budget, opt);
    if (s && best_sched && b > res.batch) *best_sched = s;
    return s.has_value();
  };
  if (!fits(1)) return res;
  int64_t lo = 1, hi = 2;  // fits(lo); hi unknown
  while (fits(hi)) {
    lo = hi;
    res.batch = lo;
    hi *= 2;
  }
  res.batch = lo;
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid)) lo = mid, res.batch = lo;
    else hi = mid;
  }
  res.batch = lo;
  res.upper_bound = lo;
  res.status = lo == sizes.max_size() ? "exact-search (largest size)" : "exact-search";
  return res;
}

// Note [max-batch bisection]
// Whether a batch b admits a schedule is monotone in b: bytes scale up with b (rounded up) and
// cost and the cost cap both scale linearly, so a schedule that fits at b + 1 fits at b. A probe
// at b answers Feasible (a schedule verified by simulate on the family's problem at b), Infeasible
// (a proof: the budget is below problem_min_budget, or the LP relaxation of the cost-capped
// MILP is infeasible, or Cbc proves the MILP infeasible) or Unknown (its time ran out). Cheap
// answers come first: schedules already found at other batches (a schedule's structure is
// batch-independent) and the baselines; the LP relaxation and its rounding (with budget repair)
// next; the MILP, stopped at its first incumbent, last. The bisection keeps lo feasible and hi
// proven infeasible, so upper_bound = hi - 1 is proven; an Unknown probe narrows only the search
// for lo.
enum class Probe { Feasible, Infeasible, Unknown };

struct Prober {
  Sizes& sizes;
  int64_t budget;
  SolveOptions opt;
  std::vector<Schedule> known;  // schedules that fit at some size

  bool known_fit(const Problem& pb) {
    for (const Schedule& s : known)
      if (schedule_fits(pb, s, budget)) return true;
    return false;
  }

  Probe probe(int64_t b, double seconds, bool use_milp) {
    const auto t0 = Clock::now();
    auto left = [&] {
      return seconds - std::chrono::duration<double>(Clock::now() - t0).count();
    };
    if (b > sizes.max_size()) return Probe::Infeasible;
    const Problem& pb = sizes.at(b);
    if (problem_min_budget(pb) > budget) return Probe::Infeasible;
    if (known_fit(pb)) return Probe::Feasible;
    // Repair the known schedules at this size (Note [budget repair]).
    for (size_t k = 0, n = known.size(); k < n && left() > 0; ++k) {
      auto s = schedule_fit_budget(pb, known[k].S, budget, std::max(0.0, left() / 8));
      if (s && schedule_fits(pb, *s, budget)) {
        known.push_back(*s);
        return Probe::Feasible;
      }
    }
    MilpBuildOptions bo;
    bo.budget = budget;
    bo.cost_cap = cost_cap(pb);
    MilpModel m = milp_build(pb, bo);
    std::vector<double> x;
    LpStatus lp = milp_solve_lp(m, std::max(0.05, left()), opt.log_level, &x, nullptr);
    if (lp == LpStatus::Infeasible) return Probe::Infeasible;
    if (lp == LpStatus::Optimal) {
      for (double th : {0.5, 0.95}) {
        auto s = schedule_fit_budget(pb, milp_s_from_solution(m, x.data(), th), budget,
                                     std::max(0.0, left() / 4));
        if (s && schedule_fits(pb, *s, budget)) {
          known.push_back(*s);
          return Probe::Feasible;
        }
      }
    }
    if (!use_milp || left() <= 0) return Probe::Unknown;
    SolveOptions mopt = opt;
    mopt.time_limit_seconds = std::max(0.05, left());
    MilpProgress stop_at_incumbent = [&](double el, double inc, double bound) {
      if (opt.progress) opt.progress(el, inc < 0 ? -1 : inc * m.cost_scale,
                                     bound * m.cost_scale, opt.progress_user);
      return inc >= 0;
    };
    MilpRun run = milp_run_cbc(m, mopt, nullptr, stop_at_incumbent);
    if (run.infeasible) return Probe::Infeasible;
    if (run.has_solution) {
      BoolMatrix S = milp_s_from_solution(m, run.x.data(), 0.5);
      for (Schedule& c : schedule_candidates_for_s(pb, S)) {
        if (!schedule_fits(pb, c, budget)) continue;
        known.push_back(std::move(c));
        return Probe::Feasible;
      }
    }
    return Probe::Unknown;
  }
};

const char* const kBaselines[] = {"all-keep",           "chen-sqrtn", "chen-sqrtn-linear",
                                  "chen-greedy",        "chen-greedy-linear", "griewank"};

}  // namespace

MaxBatchResult max_batch(const Problem& p, const std::string& strategy, int64_t budget,
                         const SolveOptions& opt) {
  SizeFamily batches;
  batches.at = [&p](int64_t b) { return problem_at_batch(p, b); };
  return max_size(batches, strategy, budget, opt);
}

MaxBatchResult max_size(const SizeFamily& family, const std::string& strategy, int64_t budget,
                        const SolveOptions& opt) {
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  REMAT_CHECK(family.at && family.max_size >= 1, "max_size: an empty size family");
  Sizes sizes(family);
  if (strategy != "checkmate") {
    MaxBatchResult r = search_strategy(sizes, strategy, budget, opt, nullptr);
    r.solve_seconds = elapsed();
    return r;
  }
  MaxBatchResult res;
  res.strategy = strategy;
  if (budget <= sizes.at(1).constant_bytes || problem_min_budget(sizes.at(1)) > budget) {
    res.status = "optimal";  // not even size 1 fits: 0 is exact
    res.solve_seconds = elapsed();
    return res;
  }
  Prober prober{sizes, budget, opt, {}};
  // lo: the best baseline (verified by simulate); its schedules seed every probe.
  int64_t lo = 0;
  for (const char* b : kBaselines) {
    std::optional<Schedule> s;
    MaxBatchResult r = search_strategy(sizes, b, budget, opt, &s);
    if (s) prober.known.push_back(*s);
    lo = std::max(lo, r.batch);
  }
  if (auto all = solve_all_keep(sizes.at(1))) prober.known.push_back(*all);
  lo = std::max<int64_t>(lo, 1);
  // hi: the first size whose working set alone exceeds the budget, or past the largest size
  // (proven infeasible).
  auto min_fits = [&](int64_t b) {
    return b <= sizes.max_size() && problem_min_budget(sizes.at(b)) <= budget;
  };
  int64_t hi = lo + 1;
  while (min_fits(hi)) hi *= 2;
  {
    int64_t a = lo, z = hi;  // min budget fits at a, not at z
    while (z - a > 1) {
      int64_t mid = a + (z - a) / 2;
      (min_fits(mid) ? a : z) = mid;
    }
    hi = z;
  }
  // Narrow with LP/heuristic probes first (no MILP), then with MILP probes.
  for (bool use_milp : {false, true}) {
    int64_t soft_hi = hi;
    while (soft_hi - lo > 1) {
      const double left = opt.time_limit_seconds - elapsed();
      if (left <= 0) break;
      const int steps = int(std::ceil(std::log2(double(soft_hi - lo)))) + 1;
      const int64_t mid = lo + (soft_hi - lo) / 2;
      Probe r = prober.probe(mid, use_milp ? left / steps : left, use_milp);
      if (r == Probe::Feasible) lo = mid;
      else if (r == Probe::Infeasible) hi = soft_hi = mid;
      else soft_hi = mid;
    }
  }
  res.batch = lo;
  res.upper_bound = hi - 1;
  res.status = lo == hi - 1 ? "optimal" : elapsed() >= opt.time_limit_seconds ? "time-limit"
                                                                               : "feasible";
  res.solve_seconds = elapsed();
  return res;
}

}  // namespace remat
