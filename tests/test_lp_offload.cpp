// lp-offload (Note [lp-offload]): the offload LP's roundings and the strategy against the
// exhaustive optimum with copies, lp without a link, and the bounds the offload strategies
// report.
#include <gtest/gtest.h>

#include <optional>
#include <utility>

#include "solver/offload.h"
#include "solver/offload_pick.h"
#include "solver/schedule.h"
#include "solver/strategies.h"
#include "tests/offload_test_util.h"
#include "tests/solver_test_util.h"

namespace remat {
namespace {

double all_nodes_once(const Problem& p) {
  double once = 0;
  for (const ProblemNode& nd : p.nodes) once += nd.cost;
  return once;
}

// At every other budget: lp-offload's schedule fits, costs no less than the exhaustive optimum
// with copies, no more than lp's, and its bound (the offload LP's) is at most that optimum.
void check_against_exhaustive(const Problem& p) {
  int feasible = 0;
  for (int64_t budget = problem_min_budget(p); budget <= problem_total_bytes(p); budget += 2) {
    const std::optional<double> best = OffloadBruteForce(p, budget).run();
    SolveResult r = solve(p, "lp-offload", budget, exact_options(5));
    ASSERT_EQ(r.feasible, best.has_value()) << "budget " << budget << ": " << r.message;
    if (!best) continue;
    ++feasible;
    EXPECT_LE(r.sim.peak_bytes, budget);
    EXPECT_GE(r.sim.total_cost, *best - 1e-9) << "budget " << budget;
    EXPECT_LE(r.schedule.lower_bound, *best + 1e-9) << "budget " << budget;
    EXPECT_EQ(r.schedule.bound_source, "offload LP") << "budget " << budget;
    SolveResult lp = solve(p, "lp", budget, exact_options(5));
    if (lp.feasible) {
      EXPECT_LE(r.sim.total_cost, lp.sim.total_cost + 1e-9) << "budget " << budget;
    }
  }
  EXPECT_GT(feasible, 2);
  // Where everything fits, the offload LP's bound is every node once: the answer is proved.
  SolveResult all = solve(p, "lp-offload", problem_total_bytes(p), exact_options(5));
  ASSERT_TRUE(all.feasible) << all.message;
  EXPECT_EQ(all.schedule.status, "optimal");
}

TEST(LpOffload, NeverBelowTheExhaustiveOptimumNorAboveLp) {
  check_against_exhaustive(waiting_chain(0.1, 10));
  check_against_exhaustive(waiting_chain(0.5, 10));
}

// x0 costs 10 to recompute and its copies hide behind their stages: at 18 bytes the optimum
// moves it (the cost of keeping everything), and the LP's roundings alone find that optimum.
TEST(LpOffload, TheOffloadLpRoundingFindsTheCopiesThatAreFree) {
  const Problem p = waiting_chain(0.1, 10);
  const double keep = simulate(p, *solve_all_keep(p)).total_cost;
  const std::optional<double> best = OffloadBruteForce(p, 18).run();
  ASSERT_TRUE(best.has_value());
  ASSERT_DOUBLE_EQ(*best, keep);
  double bound = 0;
  std::optional<Schedule> s = offload_lp_rounding(p, 18, exact_options(5), &bound);
  ASSERT_TRUE(s.has_value());
  SimResult sim = simulate(p, *s);
  ASSERT_TRUE(sim.valid) << sim.error;
  EXPECT_LE(sim.peak_bytes, 18);
  EXPECT_GE(sim.offloads, 1);
  EXPECT_DOUBLE_EQ(sim.total_cost, keep);
  EXPECT_GT(bound, 0);
  EXPECT_LE(bound, keep + 1e-9);
  // lp cannot move x0 and recomputes it.
  SolveResult lp = solve(p, "lp", 18, exact_options(5));
  ASSERT_TRUE(lp.feasible) << lp.message;
  EXPECT_GT(lp.sim.total_cost, keep);
}

// Without a link each offload strategy answers as the strategy it extends, with a bound of
// that strategy's (proved without copies, and there are none).
TEST(OffloadWithoutALink, EachIsTheStrategyItExtends) {
  const Problem p = skip_dag();
  const int64_t budget = problem_min_budget(p) + 2;
  for (auto [plain_name, offload_name] : {std::pair{"lp", "lp-offload"},
                                          std::pair{"checkmate", "checkmate-offload"}}) {
    SolveResult plain = solve(p, plain_name, budget, exact_options(10));
    SolveResult off = solve(p, offload_name, budget, exact_options(10));
    ASSERT_TRUE(plain.feasible && off.feasible) << plain.message << off.message;
    EXPECT_FALSE(off.schedule.has_copies()) << offload_name;
    EXPECT_DOUBLE_EQ(off.sim.total_cost, plain.sim.total_cost) << offload_name;
    EXPECT_NE(off.message.find("no host link"), std::string::npos) << off.message;
    // checkmate-offload runs checkmate with a third of the limit: a bound of its own search.
    EXPECT_NE(off.schedule.bound_source, "every node runs once") << offload_name;
    EXPECT_GT(off.schedule.lower_bound, 0) << offload_name;
  }
}

// Copies that would beat recomputing x0 (10) but do not fit the host budget: both strategies
// recompute and say why.
TEST(OffloadHostBudget, TooSmallFallsBackAndSaysSo) {
  const Problem p = waiting_chain(0.5, 10);
  SolveOptions opt = exact_options(5);
  opt.host_budget = 9;
  for (const char* strategy : {"lp-offload", "checkmate-offload"}) {
    SolveResult r = solve(p, strategy, 18, opt);
    ASSERT_TRUE(r.feasible) << strategy << ": " << r.message;
    EXPECT_FALSE(r.schedule.has_copies()) << strategy;
    EXPECT_NE(r.message.find("the host budget 9 B is too small for the copies that would help"),
              std::string::npos)
        << r.message;
  }
}

// Under streamed copies a stage-bound bound bounds nothing (Note [streamed copies]), nor does
// a bound checkmate or lp proved without copies: both offload strategies report every node's
// cost once, whichever schedule they keep (at the total bytes, checkmate's keep-everything,
// which that bound proves optimal).
TEST(OffloadBounds, StreamedCopiesKeepOnlyTheBoundEveryNodeRunsOnce) {
  Problem p = waiting_chain(0.5, 10);
  p.copy_overlap = CopyOverlap::Stream;
  for (const char* strategy : {"lp-offload", "checkmate-offload"})
    for (int64_t budget : {int64_t(18), problem_total_bytes(p)}) {
      SolveResult r = solve(p, strategy, budget, exact_options(5));
      ASSERT_TRUE(r.feasible) << strategy << ": " << r.message;
      EXPECT_EQ(r.schedule.bound_source, "every node runs once") << strategy << " " << budget;
      EXPECT_DOUBLE_EQ(r.schedule.lower_bound, all_nodes_once(p)) << strategy << " " << budget;
      const bool tight = r.sim.total_cost <= all_nodes_once(p);
      EXPECT_EQ(r.schedule.status, tight ? "optimal" : "heuristic") << strategy << " " << budget;
    }
}

// An answer whose copy matrices have nothing set is a schedule without copies (`plan` prints
// no copies line under it); one that copies keeps its copies.
TEST(OffloadPick, CopyMatricesWithNothingSetAreDropped) {
  const Problem p = waiting_chain(0.1);
  Schedule keep = *solve_all_keep(p);
  keep.offload = BoolMatrix(p.size(), p.size());
  keep.prefetch = BoolMatrix(p.size(), p.size());
  OffloadPick empty(p, problem_total_bytes(p), 0);
  empty.offer(keep);
  std::optional<Schedule> a = empty.finish("lp-offload", "", "", nullptr);
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(a->has_copies());
  std::optional<Schedule> moved = solve_all_keep_offload(p, 18, 0);
  ASSERT_TRUE(moved.has_value());
  OffloadPick copying(p, 18, 0);
  copying.offer(moved);
  std::optional<Schedule> b = copying.finish("lp-offload", "", "", nullptr);
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE(b->has_copies());
}

}  // namespace
}  // namespace remat
