// checkmate: every baseline and heuristic, the LP rounding, the moment bounds, held-set
// searches, the Checkmate and stage-relaxation MILPs and local search, each while the time limit
// lasts, keeping the best schedule and the largest proven lower bound (Note [checkmate at scale]).
#include <algorithm>
#include <chrono>
#include <limits>

#include "solver/griewank.h"
#include "solver/held_set_search.h"
#include "solver/kept_tail.h"
#include "solver/local_search.h"
#include "solver/milp_model.h"
#include "solver/moment_bound.h"
#include "solver/relaxation_search.h"
#include "solver/segment_revolve.h"
#include "solver/strategies.h"

namespace remat {
namespace {

// Keeps the cheapest of the schedules offered that fit the budget.
struct Incumbent {
  const Problem& p;
  int64_t budget;
  std::optional<Schedule> s;
  double cost = 0;
  void offer(std::optional<Schedule> c) {
    if (!c) return;
    SimResult sim = simulate(p, *c);
    if (!sim.valid || sim.peak_bytes > budget || (s && sim.total_cost >= cost)) return;
    cost = sim.total_cost;
    s = std::move(c);
  }
};

// The cheapest baseline schedule that fits, to warm-start the MILP; the searches stop after
// `seconds` each. Besides the baselines, checkmate's own heuristics: cheap drops, a kept tail
// and revolve over segments (Notes [cheap drops], [kept tail], [segment revolve]).
std::optional<Schedule> best_baseline(const Problem& p, int64_t budget, double seconds) {
  Incumbent best{p, budget, std::nullopt, 0};
  best.offer(solve_all_keep(p));
  best.offer(solve_chen_sqrtn(p, budget, false));
  best.offer(solve_chen_sqrtn(p, budget, true));
  best.offer(solve_chen_greedy(p, budget, false, seconds));
  best.offer(solve_chen_greedy(p, budget, true, seconds));
  best.offer(solve_griewank(p, budget));
  best.offer(solve_cheap_drops(p, budget, seconds));
  // Half the time each: they rarely need more, and the LP and MILP steps after them use it.
  best.offer(solve_kept_tail(p, budget, seconds / 2));
  best.offer(solve_segment_revolve(p, budget, seconds / 2));
  return std::move(best.s);
}

constexpr double kNoCeiling = std::numeric_limits<double>::infinity();
// Work caps of the held-set searches (Note [held sets in checkmate]): the quick round (well
// under a second), the probe of the full round (a few seconds), each later search (about a
// minute on one core at most).
constexpr int64_t kHeldSetQuick = 10'000'000;
constexpr int64_t kHeldSetProbe = 30'000'000;
constexpr int64_t kHeldSetTransitions = 300'000'000;

// Note [checkmate at scale]
// `checkmate` runs, in order, each step only while the wall-clock limit lasts:
// 1. every baseline and cheap drops (Note [cheap drops]; milliseconds to a second; the greedy
//    searches and cheap drops get a tenth of the limit each);
// 2. the moment bounds (Note [moment bounds]; at most a tenth of the limit); then exactly
//    what `lp` does, with the rest of the limit (Note [lp strategy]), so checkmate is never
//    worse than lp or a baseline at the same limit when they finish within it; if that found
//    nothing, the same at smaller budgets (Note [smaller budgets]); then, while the gap is
//    open and over 5 s are left, the strongest moment's MILP (at most 10 s);
// 3. on graphs of at most kHeldSetMaxNodes nodes, a quick round of the held-set searches
//    (Note [held sets in checkmate]): it proves small chains in milliseconds;
// 4. where the Checkmate MILP itself is small (full_milp_is_small), that MILP for a tenth of the
//    time left, started from the best schedule and from the LP basis of step 2 (Note
//    [checkmate warm start]): on VGG-like graphs it proves optimality in seconds; then the
//    full round of held-set searches (up to 60 % of the time left), then the small MILP again
//    for 30 % of what is left (from the better schedule; its root LP costs nothing);
// 5. Cbc on the stage relaxation's MILP (Note [stage relaxation]), started from the best
//    schedule so far: its incumbent becomes a schedule, its bound a lower bound (on U-Net- and
//    SegNet-like graphs near the minimum budget, the step that finds and proves the optimum);
// 6. local search that lowers the cost of the best schedule (schedule_improve), then the same
//    moves with a budget repair after each, for the rest of the limit (Note [repairing local
//    search]).
// Steps 3 to 6 run only while the gap is open.
// The lower bound is the largest proven one: every node runs at least once (the all-keep
// cost), the moment LPs and MILP and the LPs of step 2, a finished exact held-set search, the
// relaxation MILP's bound, the Checkmate MILP's bound.
//
// Note [monotone sweeps]
// Every schedule that fits a budget fits every larger one, so the optimum's cost never rises
// with the budget — but a time-limited search may find a worse schedule at the larger budget
// (DenseNet-121: 1.141x at 60 % of the activations where 40 % got 1.133x). Callers that solve
// one problem at rising budgets (sweep) pass the answers so far as SolveOptions::candidates;
// checkmate starts from the best of them that fits, so its answers are monotone in the budget
// by construction, and the later stages search only for something better.
//
// Note [held sets in checkmate]
// Searches over held sets (Note [held-set search]) for graphs of at most kHeldSetMaxNodes
// nodes, in two rounds: a quick one (kHeldSetQuick transitions per search, a tenth of the time
// left) before the small Checkmate MILP, and a full one (kHeldSetProbe for the first search,
// kHeldSetTransitions for the others, up to 60 % of the time left) after it. A round first
// searches stages that compute only what their node needs (HeldSetSpace::KeepOnly) below
// ceilings rising from the lower bound (bound x 1.005, 1.02, 1.08, ... then the best cost so
// far): a low ceiling prunes most transitions, and the first one that admits a schedule gives
// the best schedule of that space (no proof). It finds the optimum of chains a few activations
// above their constant (linear16 at +4 units: 6.96e12 where LP rounding, the Checkmate MILP and
// the relaxation MILP stopped at 7.44e12 in 60 s). Then the exact search below the best cost:
// when it finishes, the best cost is proven optimal (or the budget proven infeasible). Where
// the full round's first search reaches its cap, the graph has too many held sets and the
// searches stop (a few seconds lost); the exact search runs only after a keep-only search
// that finished.
// One checkmate search (Note [checkmate at scale]): the clock, the best schedule and the
// largest proven bound, and the steps that improve them. Each step is announced, and what it
// found reported, so a progress line shows the best schedule and bound between the MILPs' own
// reports (the times are the line's).
class CheckmateSearch {
 public:
  CheckmateSearch(const Problem& p, int64_t budget, const SolveOptions& opt)
      : p_(p), budget_(budget), opt_(opt), t0_(std::chrono::steady_clock::now()),
        best_{p, budget, std::nullopt, 0}, small_(full_milp_is_small(p)),
        searchable_(p.size() <= kHeldSetMaxNodes) {
    for (const auto& nd : p.nodes) bound_ += nd.cost;
  }

  // The steps in order; nullopt with `why` when nothing fits (or nothing was found in time).
  std::optional<Schedule> run(std::string* why) {
    baselines();
    if (!lp_rounding(why)) return std::nullopt;
    smaller_budgets();
    moment_milp();
    bool fits = held_sets(kHeldSetQuick, kHeldSetQuick, 0.1, false);
    // A short Checkmate MILP where it is small: it proves VGG-like graphs in seconds.
    if (fits && small_ && left() > 0.5 && open_gap()) full_milp(0.1 * left());
    if (fits) fits = held_sets(kHeldSetProbe, kHeldSetTransitions, 0.6, true);
    if (!fits) {
      *why = "no schedule fits the budget (held-set search, exhaustive: a proof)";
      return std::nullopt;
    }
    if (small_ && left() > 0.5 && open_gap()) full_milp(0.3 * left());
    if (!relaxation_milp(why)) return std::nullopt;
    if (!best_.s) {
      *why = "no schedule found within the time limit (" + lp_why_ + ")";
      return std::nullopt;
    }
    local_improvement();
    return result();
  }

 private:
  double left() const {
    return opt_.time_limit_seconds -
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  void report() {
    if (opt_.progress) opt_.progress(0, best_.s ? best_.cost : -1, bound_, opt_.progress_user);
  }
  void phase(const char* name) {
    report();
    if (opt_.phase) opt_.phase(name, opt_.progress_user);
  }
  void raise(double b, const std::string& why) {
    if (b > bound_) bound_ = b, source_ = why;
  }
  void solved(const std::string& m) {
    if (!m.empty()) models_ += (models_.empty() ? "" : "; ") + m;
  }
  bool open_gap() const {
    return !best_.s || (best_.cost - bound_) / best_.cost > opt_.relative_gap;
  }

  // Step 1, and the moment bounds (Note [moment bounds]: LPs of milliseconds to a second; at
  // most a tenth of the limit).
  void baselines() {
    phase("baselines");
    best_.offer(best_baseline(p_, budget_, opt_.time_limit_seconds / 10));
    if (opt_.candidates)  // Note [monotone sweeps]
      for (const Schedule& c : *opt_.candidates) best_.offer(c);
    phase("moment bounds");
    moment_ = moment_lower_bound(p_, budget_, std::max(0.05, left() / 10));
    raise(moment_.bound, moment_.source);
  }

  // Step 2: what `lp` does, with the rest of the limit. False (and `why`) when its LP proves
  // that nothing fits.
  bool lp_rounding(std::string* why) {
    double lp_bound = 0;
    lp_opt_ = opt_;
    lp_opt_.time_limit_seconds = std::max(0.05, left());
    lp_opt_.phase = nullptr;  // its stages are this one
    phase("LP relaxation and rounding");
    std::string lp_source;
    std::optional<Schedule> lp =
        solve_lp_rounding(p_, budget_, lp_opt_, &lp_bound, &basis_, &lp_why_, &lp_source);
    raise(lp_bound, lp_source);  // a proof whether or not a rounding fitted
    if (lp) solved(lp->models);
    if (!best_.s && lp_why_.find("(a proof)") != std::string::npos) {
      *why = lp_why_;
      return false;
    }
    best_.offer(std::move(lp));
    return true;
  }

  // Note [smaller budgets]
  // Every schedule that fits a smaller budget fits this one, and the LP's roundings and their
  // repair can fit near the minimum budget where they fit nothing above it: U-Net on MobileNet
  // at 1.05 GB (40 % of its activations) got no schedule in 60 s, where at its minimum budget,
  // 713 MB, lp found 1.99x in 3 s and checkmate 1.71x. With nothing found yet, the rounding
  // runs again at budgets between the minimum and this one, nearest first, each with a quarter
  // of the time left; the later stages start from what it finds (there: 1.029x, gap 0.95 %).
  void smaller_budgets() {
    for (int k = 2; k >= 0 && !best_.s && left() > 0.5; --k) {
      const int64_t lowest = problem_min_budget(p_);
      const int64_t smaller = lowest + (budget_ - lowest) / 4 * k;  // budget >= lowest here
      if (smaller == budget_) continue;
      SolveOptions so = lp_opt_;
      so.time_limit_seconds = left() / 4;
      best_.offer(solve_lp_rounding(p_, smaller, so));
    }
  }

  // The strongest moment, in binary; not with under 5 s left: Cbc's child process may overrun
  // its share by half a second (Note [hard solver deadline]), all of a short limit (a sweep's
  // 0.5 s solves under ASan found schedules at 3 of 6 budgets where they had found 4).
  void moment_milp() {
    if (moment_.node < 0 || left() <= 5 || !open_gap()) return;
    phase("moment MILP");
    SolveOptions mo = opt_;
    mo.time_limit_seconds = std::min(left() / 10, 10.0);
    const MomentBound mm = moment_milp_bound(p_, budget_, moment_.node, mo);
    raise(mm.bound, mm.source);
  }

  void full_milp(double seconds) {
    phase("Checkmate MILP");
    SolveOptions mo = opt_;
    mo.time_limit_seconds = seconds;
    std::optional<Schedule> m =
        solve_checkmate_milp(p_, budget_, mo, best_.s ? &*best_.s : nullptr, &basis_);
    if (m) solved(m->models);
    if (m && m->lower_bound > 0) raise(m->lower_bound, "Checkmate MILP bound");
    if (m && m->status == "optimal") raise(simulate(p_, *m).total_cost, "Checkmate MILP optimum");
    best_.offer(std::move(m));
  }

  // Note [held sets in checkmate]. Returns false when the exact search proves that nothing fits.
  bool held_sets(int64_t probe_cap, int64_t cap, double share, bool probe_decides) {
    if (!searchable_ || left() <= 0.5 || !open_gap()) return true;
    phase("held-set search");
    const double stop_at = left() * (1 - share);
    auto limits = [&](int64_t transitions) {
      return HeldSetLimits{transitions, std::max(0.0, left() - stop_at)};
    };
    // Keep-only, below ceilings rising from the bound; the first is the probe.
    int64_t transitions = probe_cap;
    bool finished = false;  // the last keep-only search
    for (double step = 0.005; left() > stop_at && open_gap(); step *= 4, transitions = cap) {
      const double rising = bound_ > 0 && step < 1e6 ? bound_ * (1 + step) : kNoCeiling;
      const bool last = best_.s ? rising >= best_.cost : rising == kNoCeiling;
      const double ceiling = last && best_.s ? best_.cost * (1 + 1e-9) : rising;
      HeldSetSearch ko =
          held_set_search(p_, budget_, ceiling, HeldSetSpace::KeepOnly, limits(transitions));
      const bool found = ko.best.has_value();
      finished = ko.complete;
      best_.offer(std::move(ko.best));
      if (probe_decides && ko.capped && transitions == probe_cap) {
        searchable_ = false;  // too many held sets
        return true;
      }
      if (found || !ko.complete || last) break;
    }
    if (!finished || left() <= 0.5 || !open_gap()) return true;
    HeldSetSearch exact =
        held_set_search(p_, budget_, best_.s ? best_.cost * (1 + 1e-9) : kNoCeiling,
                        HeldSetSpace::Exact, limits(cap));
    if (!exact.complete) return true;
    solved("held-set search");
    if (!exact.best && !best_.s) return false;
    best_.offer(std::move(exact.best));
    raise(best_.cost, "held-set search (exact)");
    return true;
  }

  // Step 5. False (and `why`) when it proves that nothing fits.
  bool relaxation_milp(std::string* why) {
    if (left() <= 0.5 || !open_gap()) return true;
    phase("relaxation MILP");
    RelaxationSearch rm = relaxation_milp_search(p_, budget_, opt_, 0.8 * left(),
                                                 best_.s ? &*best_.s : nullptr);
    raise(rm.bound, rm.bound_source);
    solved(rm.model);
    best_.offer(std::move(rm.best));
    if (!best_.s && rm.infeasible) {
      *why = rm.failure;
      return false;
    }
    if (!best_.s && !rm.failure.empty()) lp_why_ += "; " + rm.failure;
    return true;
  }

  // Step 6.
  void local_improvement() {
    if (left() <= 0 || !open_gap()) return;
    phase("local improvement");
    best_.offer(schedule_improve(p_, *best_.s, budget_, left()));
    if (left() > 0 && open_gap())
      best_.offer(schedule_improve_repairing(p_, *best_.s, budget_, left()));
  }

  Schedule result() {
    Schedule s = std::move(*best_.s);
    const double cost = best_.cost;
    s.strategy = "checkmate";
    s.lower_bound = std::min(cost, bound_);
    s.bound_source = source_;
    s.models = models_;
    const double gap = cost > 0 ? (cost - s.lower_bound) / cost : 0;
    s.status = gap <= opt_.relative_gap ? "optimal" : left() <= 0 ? "time-limit" : "feasible";
    s.solve_seconds = opt_.time_limit_seconds - left();
    return s;
  }

  const Problem& p_;
  const int64_t budget_;
  const SolveOptions& opt_;
  const std::chrono::steady_clock::time_point t0_;
  double bound_ = 0;                             // the largest proven lower bound
  std::string source_ = "every node runs once";  // what proves it
  Incumbent best_;
  std::string models_;    // the models solved, for Schedule::models
  MomentBound moment_;
  LpBasis basis_;         // step 2's LP basis, for the Checkmate MILP's root
  SolveOptions lp_opt_;   // step 2's options, for the smaller budgets
  std::string lp_why_;    // why step 2 found nothing (when it did not)
  const bool small_;      // full_milp_is_small
  bool searchable_;       // held-set searches still worth running
};

}  // namespace

std::optional<Schedule> solve_checkmate(const Problem& p, int64_t budget, const SolveOptions& opt,
                                        std::string* why) {
  return CheckmateSearch(p, budget, opt).run(why);
}

}  // namespace remat
