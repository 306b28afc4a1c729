// Cheap drops (Note [cheap drops] in solver/cheap_drops.cpp): on a dense block's graph, where
// the large values are the cheap ones, it keeps the overhead to the cheap nodes' cost where the
// Chen baselines pay for whole segments, and checkmate (which starts from it) is no worse; on
// residual graphs and chains every schedule it returns is valid and fits.
#include <gtest/gtest.h>

#include "solver/baselines.h"
#include "solver/strategies.h"
#include "tests/solver_test_util.h"

namespace remat {
namespace {

double all_keep_cost(const Problem& p) { return simulate(p, all_keep_schedule(p)).total_cost; }

TEST(CheapDrops, DenseBlockPaysOnlyForItsCheapNodes) {
  const Problem p = dense_problem(12);
  const double keep = all_keep_cost(p);
  // Everything that is not a convolution (normalise, rectify, concatenate: 3.5 per layer and
  // their gradients) is what dropping may cost; the convolutions alone are 10 x width each.
  double cheap = 0;
  for (const ProblemNode& nd : p.nodes)
    if (nd.kind == ProblemNodeKind::Forward && nd.cost < 10) cheap += nd.cost;
  for (double fraction : {0.8, 0.6}) {
    SCOPED_TRACE(fraction);
    const int64_t budget = budget_at(p, fraction);
    const std::optional<Schedule> s = solve_cheap_drops(p, budget, 10);
    ASSERT_TRUE(s.has_value());
    const SimResult sim = simulate(p, *s);
    ASSERT_TRUE(sim.valid) << sim.error;
    EXPECT_LE(sim.peak_bytes, budget);
    // At most every cheap node recomputed once per later reader (at most 3 of them).
    EXPECT_LE(sim.total_cost, keep + 3 * cheap) << "keep " << keep << ", cheap " << cheap;
    const std::optional<Schedule> greedy = solve_chen_greedy(p, budget, false, 10);
    if (greedy) {
      EXPECT_LT(sim.total_cost, simulate(p, *greedy).total_cost) << "chen-greedy recomputes convs";
    }
    SolveOptions opt;
    opt.time_limit_seconds = 2;
    const SolveResult cm = solve(p, "checkmate", budget, opt);
    ASSERT_TRUE(cm.feasible) << cm.message;
    EXPECT_LE(cm.sim.total_cost, sim.total_cost * (1 + 1e-12));
  }
}

// Memory-Efficient DenseNet by hand: every convolution held, every other forward value dropped
// from after its last forward read to the end (recomputed wherever the backward reads it).
Schedule convolutions_only(const Problem& p) {
  const auto users = problem_users(p);
  Schedule s = all_keep_schedule(p);
  for (int i = 0; i < p.size(); ++i) {
    const ProblemNode& nd = p.nodes[size_t(i)];
    if (nd.kind != ProblemNodeKind::Forward || nd.cost >= 10) continue;
    int last_forward = i;
    for (int j : users[size_t(i)])
      if (p.nodes[size_t(j)].kind != ProblemNodeKind::Backward) last_forward = j;
    for (int t = last_forward + 1; t < p.size(); ++t) s.S.set(t, i, false);
  }
  s.R = derive_cheapest_r(p, s.S);
  return s;
}

// At the peak of that hand-built schedule (well below what dropping across single stretches
// reaches), cheap drops find a schedule at least as cheap (Note [cheap drops]: the gap drops).
TEST(CheapDrops, DenseBlockReachesTheMemoryEfficientSchedule) {
  const Problem p = dense_problem(12);
  const SimResult hand = simulate(p, convolutions_only(p));
  ASSERT_TRUE(hand.valid) << hand.error;
  const int64_t keep_peak = simulate(p, all_keep_schedule(p)).peak_bytes;
  ASSERT_LT(hand.peak_bytes - p.constant_bytes, (keep_peak - p.constant_bytes) / 2);
  const std::optional<Schedule> s = solve_cheap_drops(p, hand.peak_bytes, 10);
  ASSERT_TRUE(s.has_value());
  const SimResult sim = simulate(p, *s);
  ASSERT_TRUE(sim.valid) << sim.error;
  EXPECT_LE(sim.peak_bytes, hand.peak_bytes);
  EXPECT_LE(sim.total_cost, hand.total_cost * (1 + 1e-12));
}

TEST(CheapDrops, EveryScheduleItReturnsFits) {
  int found = 0;
  for (const Problem& p : {residual_problem(12), varied_chain(30), dense_problem(6), skip_dag()}) {
    for (double fraction : {0.2, 0.4, 0.6, 0.8, 1.0}) {
      const int64_t budget = budget_at(p, fraction);
      const std::optional<Schedule> s = solve_cheap_drops(p, budget, 5);
      if (!s) continue;
      ++found;
      const SimResult sim = simulate(p, *s);
      EXPECT_TRUE(sim.valid) << p.name << " at " << fraction << ": " << sim.error;
      EXPECT_LE(sim.peak_bytes, budget) << p.name << " at " << fraction;
      EXPECT_EQ(s->strategy, "cheap-drops");
      // Within a cost cap (max batch's probes) it may stop at the first schedule that fits.
      const double cap = 2 * all_keep_cost(p);
      const std::optional<Schedule> capped = solve_cheap_drops(p, budget, 5, cap);
      ASSERT_TRUE(capped.has_value()) << p.name << " at " << fraction;
      const SimResult capped_sim = simulate(p, *capped);
      EXPECT_TRUE(capped_sim.valid) << capped_sim.error;
      EXPECT_LE(capped_sim.peak_bytes, budget);
      EXPECT_GE(capped_sim.total_cost, sim.total_cost * (1 - 1e-12)) << "the search lowers cost";
    }
  }
  EXPECT_GE(found, 12);
}

// An evaluation graph (train's validation plans one): every value is read by the next node
// only, so there is no stretch to drop a value across; the strategy finds nothing (it wrote
// past an empty list before).
TEST(CheapDrops, AGraphWithNothingToDropFindsNothing) {
  Problem p;
  p.name = "forward-only";
  for (int i = 0; i < 4; ++i) {
    ProblemNode nd;
    nd.name = "x" + std::to_string(i);
    nd.kind = ProblemNodeKind::Forward;
    nd.cost = 1;
    nd.bytes = 4;
    if (i > 0) nd.deps = {i - 1};
    p.nodes.push_back(nd);
  }
  EXPECT_FALSE(solve_cheap_drops(p, 8, 5).has_value());
  SolveOptions opt;
  opt.time_limit_seconds = 2;
  EXPECT_TRUE(solve(p, "checkmate", 8, opt).feasible);
}

}  // namespace
}  // namespace remat
