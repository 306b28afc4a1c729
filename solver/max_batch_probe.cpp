// A max-batch probe's steps, cheapest first (Note [max-batch bisection] in max_batch.cpp).
#include "solver/max_batch_probe.h"

#include <algorithm>
#include <cstdio>

#include "solver/local_search.h"
#include "solver/milp_model.h"
#include "solver/relaxation_search.h"

namespace remat {

// Note [held to the cost cap]
// Cheap drops and the budget repair answer the memory question: what to drop until the
// schedule fits. Near the largest batch the schedule they find fits but costs more than the cap
// allows, while holding some of what it recomputes would still fit: DenseNet-121 at 16 GB,
// batch 750, cheap drops fit at 1.049 times the cap. So a probe's schedule that fits the budget
// but not the cap goes through schedule_improve with the cap as its target (hold a value a
// stage recomputes, the costliest first, while it fits; stop at the cap): 0.998 times the cap
// after 0.06 s there (stage by stage, the order it had before, took 6.8 s). At 16 GB, 60 s, one
// thread, DenseNet-121's answer went from 695 to 1029 (2-core Intel Xeon, no other load,
// 2026-11-29).
// The hold gets the probe's time up to its half (NASNet-Mobile at 1077 needs 3.3 s); with a
// target, schedule_improve passes over moves whose value would not fit beside some stage's peak
// and gives up when its rate would not reach the target in time, which leaves the repairs
// their time where holding fails (one run each after that: Xception 326, NASNet-Mobile 969,
// DenseNet-121 1042; the zoo's brackets table has the runs before it).
// Note [newest repaired first]
// `known` grows in the order schedules are found: the baselines', then each probe's fit, and a
// probe fits only above lo, so the newest schedule is the one found at the largest batch, the
// closest to the next probe and the likeliest to repair there. The repairs go newest first.
// Oldest first, the useful repair came last and got what the others left of half the probe:
// ResNet-101 v2 at 16 GB, probe 808 of 10.5 s, repaired the LP's schedule from 766 (the fifth of
// five) in one run and ran out of time in another, and the answers of three runs were 806, 821
// and 778; newest first, 928. In the same runs Xception went from 326 to 424, DenseNet-121 from
// 1042 to 1056, NASNet-Mobile from 969 to 977 (60 s, one thread, 2-core Intel Xeon, nothing
// else running, 2026-11-30). Before the hold to the cost cap (a59f4e3), on the same machine,
// Xception found 299 in one run: what looked like the hold's loss against older rows was the
// machine (those ran on an AMD EPYC: 405) and the repair order.
// Note [full MILP after the relaxation]
// A probe's last step is the stage relaxation's MILP, or the full Checkmate MILP where that is
// small (kSmallMilpPairs). The relaxation's optimum need not be a schedule that fits, and it can
// come long before the probe's time is up: PSPNet in bf16 at batch 8 and 1728 x 1728 (9,051
// pairs) has its relaxation solved in 7 s of a 52 s probe, no schedule from it fits, and the
// search ended at 1536 after 16 s of its 60. The full MILP there finds a schedule, Cbc's first
// incumbent, in 17 s within a probe and 32 s alone (peak 14.88 GB, the working set of the
// largest node, at 0.78 of the cost cap). So the time the relaxation leaves goes to the full
// MILP where its model is at most twice the small size (9,051 pairs make 50 thousand columns
// and 103 thousand rows; of the zoo's graphs at their configs' sizes only PSPNet lies between
// 6,000 and 12,000 pairs: FCN-8 has 5,559, SegNet (MobileNet) 23,635).

Probe Prober::probe(int64_t b, double seconds, bool use_milp) {
  const Probe r = answer_probe(b, seconds, use_milp);
  if (opt.log_level >= 2) {
    static const char* const kNames[] = {"fits", "infeasible", "unknown"};
    std::fprintf(stderr, "max batch probe %lld (%.2f s): %s (%s)\n", static_cast<long long>(b),
                 seconds, kNames[static_cast<int>(r)], answer.c_str());
  }
  return r;
}

bool Prober::known_fit(int64_t b) {
  for (const Schedule& s : known)
    if (batches.fits(s, b, budget)) return true;
  return false;
}

bool Prober::accept(int64_t b, const std::optional<Schedule>& s) {
  if (!s || !batches.fits(*s, b, budget)) return false;
  known.push_back(*s);
  return true;
}

bool Prober::accept_held(int64_t b, const std::optional<Schedule>& s, double secs) {
  if (accept(b, s)) return true;
  const Problem& pb = batches.at(b);
  if (!s || !accept(b, schedule_improve(pb, *s, budget, secs, cost_cap(pb)))) return false;
  answer += " held to the cost cap";
  return true;
}

Probe Prober::answer_probe(int64_t b, double seconds, bool use_milp) {
  const Deadline d{Clock::now(), seconds};
  const Problem& pb = batches.at(b);
  answer = "the working set of the largest node";
  if (problem_min_budget(pb) > budget) return Probe::Infeasible;
  answer = "a schedule found at another batch";
  if (known_fit(b)) return Probe::Feasible;
  const double cap = cost_cap(pb);
  // Cheap drops (Note [cheap drops]) first, in at most a quarter of the probe's time: within
  // the cost cap they stop at their first fit (milliseconds when nothing fits), and on dense
  // graphs they fit at a fraction of the memory the baselines need.
  answer = "cheap drops";
  const std::optional<Schedule> drops =
      solve_cheap_drops(pb, budget, std::max(0.05, seconds / 4), cap);
  // Held to the cap until half the probe's time (NASNet-Mobile at batch 1077: 3.3 s, where
  // the LP search below needs 10 s to fit).
  if (accept_held(b, drops, std::max(seconds / 4, seconds / 2 - d.elapsed())))
    return Probe::Feasible;
  // Repair the known schedules at this batch (Note [budget repair]), until half the probe's
  // time: at 3,581 nodes one repair can take seconds, and the LP below is what answers there.
  // The newest first (Note [newest repaired first]).
  const double repair_until = seconds / 2;
  answer = "a known schedule repaired";
  for (size_t k = known.size(); k-- > 0 && d.elapsed() < repair_until;) {
    const double share = (repair_until - d.elapsed()) / 2;
    if (accept_held(b, schedule_fit_budget(pb, known[k].S, budget, share), share))
      return Probe::Feasible;
  }
  // Without the MILP to follow, the LP gets all the time left.
  const double lp_start = d.elapsed();
  RelaxationSearch lp = relaxation_lp_search(
      pb, budget, opt, std::max(0.05, use_milp ? d.left() / 2 : d.left()), 0, cap);
  answer = lp.model.empty() ? "the stage relaxation's LP" : lp.model;
  if (lp.infeasible) return Probe::Infeasible;
  if (accept(b, lp.best)) {
    lp_fit_seconds = std::max(lp_fit_seconds, d.elapsed() - lp_start);
    return Probe::Feasible;
  }
  answer = "nothing fit in time";
  if (!use_milp || d.left() <= 0) return Probe::Unknown;
  SolveOptions mopt = opt;
  mopt.time_limit_seconds = std::max(0.05, d.left());
  if (full_milp_is_small(pb)) return full_milp_probe(b, mopt);
  RelaxationSearch mip = relaxation_milp_search(pb, budget, mopt, mopt.time_limit_seconds,
                                                nullptr, 0, cap);
  answer = mip.model + " (Cbc)";
  if (mip.infeasible) return Probe::Infeasible;
  if (accept(b, mip.best)) return Probe::Feasible;
  // Note [full MILP after the relaxation]
  mopt.time_limit_seconds = d.left();
  if (d.left() > 1 && full_milp_pairs(pb) <= 2 * kSmallMilpPairs) return full_milp_probe(b, mopt);
  answer = "nothing fit in time";
  return Probe::Unknown;
}

Probe Prober::full_milp_probe(int64_t b, const SolveOptions& mopt) {
  const Problem& pb = batches.at(b);
  MilpBuildOptions bo;
  bo.budget = budget;
  bo.cost_cap = cost_cap(pb);
  MilpModel m = milp_build(pb, bo);
  MilpProgress stop_at_incumbent = [](double, double inc, double) { return inc >= 0; };
  MilpRun run = milp_run_cbc(m, mopt, nullptr, stop_at_incumbent);
  answer = "the Checkmate MILP with the cost cap (Cbc)";
  if (run.infeasible) {  // Note [confirmed infeasibility] in solver/relaxation_search.cpp
    SolveOptions plain = mopt;
    plain.cbc_preprocess = false;
    if (milp_run_cbc(m, plain, nullptr, stop_at_incumbent).infeasible) return Probe::Infeasible;
  }
  if (run.has_solution)
    for (Schedule& c : schedule_candidates_for_s(pb, milp_s_from_solution(m, run.x.data(), 0.5)))
      if (accept(b, c)) return Probe::Feasible;
  answer = "nothing fit in time";
  return Probe::Unknown;
}

}  // namespace remat
