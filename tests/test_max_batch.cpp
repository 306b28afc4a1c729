// Max batch (Note [max-batch bisection] in solver/max_batch.cpp): checkmate's answer against
// every baseline's, the cheap drops' and the held drops' batches, the answers before it in a
// run, checkmate-offload's search above it, and an exhaustive search on a tiny chain.
#include <gtest/gtest.h>

#include <optional>

#include "solver/chain.h"
#include "solver/local_search.h"
#include "solver/schedule.h"
#include "solver/strategies.h"
#include "tests/solver_test_util.h"

namespace remat {
namespace {

// Max batch's cost cap: all-keep's cost plus one forward pass.
double max_batch_cost_cap(const Problem& pb) {
  double all = 0, fwd = 0;
  for (const auto& nd : pb.nodes)
    all += nd.cost, fwd += nd.kind == ProblemNodeKind::Forward ? nd.cost : 0;
  return all + fwd;
}

// The dense block at batch 4 with a budget of about 12 images at half its activations, and a
// 5 s limit: room above every baseline, a bracket that stays open.
struct DenseCase {
  Problem p = dense_problem(12);
  int64_t budget = 0;
  SolveOptions opt;
  DenseCase() {
    p.batch = 4;
    budget = budget_at(p, 0.5) * 3;
    opt.time_limit_seconds = 5;
  }
};

TEST(MilpMaxBatch, CheckmateAtLeastEveryBaselineAndFits) {
  std::vector<double> cost;
  std::vector<int64_t> bytes;
  for (int k = 0; k < 6; ++k) cost.push_back(1 + (k * 3) % 4), bytes.push_back(4 * (3 + k % 4));
  Problem p = make_chain_problem(cost, bytes, 1000);
  p.batch = 4;
  const int64_t budget = 2000;
  SolveOptions opt = exact_options(20);
  MaxBatchResult cm = max_batch(p, "checkmate", budget, opt);
  ASSERT_GT(cm.batch, 0);
  EXPECT_GE(cm.upper_bound, cm.batch);
  for (const std::string& strategy : strategy_names()) {
    if (strategy == "checkmate" || strategy == "lp") continue;
    MaxBatchResult r = max_batch(p, strategy, budget, opt);
    EXPECT_GE(cm.batch, r.batch) << strategy;
  }
  // The found batch fits within the cost cap (all-keep plus one forward pass); the status says
  // one more batch does not.
  Problem pb = problem_at_batch(p, cm.batch);
  SolveResult r = solve(pb, "checkmate", budget, opt);
  ASSERT_TRUE(r.feasible) << r.message;
  EXPECT_LE(r.sim.total_cost, max_batch_cost_cap(pb) * (1 + 1e-9));
  EXPECT_EQ(cm.status, "optimal");
  EXPECT_EQ(cm.upper_bound, cm.batch);
}

// On a dense block the cheap drops (Note [cheap drops]) fit batches the segment baselines do
// not; checkmate's max batch reaches at least the largest batch whose cheap drops fit within
// the cost cap (Note [max-batch bisection]), within its limit.
TEST(MilpMaxBatch, CheckmateReachesTheCheapDropsBatch) {
  Problem p = dense_problem(12);
  p.batch = 4;
  const int64_t budget = budget_at(p, 0.5) * 3;  // about 12 images at half the activations
  int64_t drops_batch = 0;
  for (int64_t b = 1; b < 200; ++b) {
    const Problem pb = problem_at_batch(p, b);
    const std::optional<Schedule> s = solve_cheap_drops(pb, budget, 5);
    if (!s) break;
    const SimResult sim = simulate(pb, *s);
    if (!sim.valid || sim.peak_bytes > budget || sim.total_cost > max_batch_cost_cap(pb) * (1 + 1e-9)) break;
    drops_batch = b;
  }
  ASSERT_GT(drops_batch, 0);
  SolveOptions opt;
  opt.time_limit_seconds = 5;  // all of it: the bracket stays open
  const MaxBatchResult cm = max_batch(p, "checkmate", budget, opt);
  EXPECT_GE(cm.batch, drops_batch) << "upper bound " << cm.upper_bound;
  EXPECT_GE(cm.upper_bound, cm.batch);
  for (const char* baseline : {"chen-sqrtn", "chen-greedy"})
    EXPECT_GE(cm.batch, max_batch(p, baseline, budget, opt).batch) << baseline;
}

// Note [held to the cost cap]: near the largest batch the cheap drops fit the budget at more
// than the cost cap; held toward the cap by schedule_improve they fit both at larger batches,
// and checkmate's max batch reaches at least the largest of those.
// (On the dense block the cheap drops' own undoing gets as far.)
TEST(MilpMaxBatch, CheckmateHoldsTheCheapDropsToTheCap) {
  Problem p = residual_problem(8);
  p.batch = 4;
  const int64_t budget = budget_at(p, 0.5) * 3;
  int64_t drops_batch = 0, held_batch = 0;
  for (int64_t b = 1; b < 200; ++b) {
    const Problem pb = problem_at_batch(p, b);
    const double cap = max_batch_cost_cap(pb) * (1 + 1e-9);
    const std::optional<Schedule> s = solve_cheap_drops(pb, budget, 5);
    if (!s) break;
    const SimResult sim = simulate(pb, *s);
    if (!sim.valid || sim.peak_bytes > budget) break;
    if (sim.total_cost <= cap) drops_batch = b;
    const SimResult held = simulate(pb, schedule_improve(pb, *s, budget, 5, cap));
    ASSERT_TRUE(held.valid && held.peak_bytes <= budget) << "batch " << b;
    if (held.total_cost <= cap) held_batch = b;
  }
  ASSERT_GT(held_batch, drops_batch);  // 25 against 23 when written
  SolveOptions opt;
  opt.time_limit_seconds = 5;
  const MaxBatchResult cm = max_batch(p, "checkmate", budget, opt);
  EXPECT_GE(cm.batch, held_batch) << "upper bound " << cm.upper_bound;
}

// In one maxbatch run checkmate starts from the answers before it (Note [max-batch bisection]):
// its answer is never below another strategy's, even with no time of its own, and its schedule
// is checked at that answer, not taken on trust.
TEST(MilpMaxBatch, CheckmateStartsFromTheEarlierAnswersOfTheRun) {
  const DenseCase c;
  const MaxBatchResult greedy = max_batch(c.p, "chen-greedy", c.budget, c.opt);
  ASSERT_GT(greedy.batch, 1);
  ASSERT_TRUE(greedy.schedule);
  SolveOptions none = c.opt;
  none.time_limit_seconds = 1e-9;  // no probe, no baseline of its own
  EXPECT_LT(max_batch(c.p, "checkmate", c.budget, none).batch, greedy.batch) << "alone, in no time";
  EXPECT_GE(max_batch(c.p, "checkmate", c.budget, none, nullptr, {greedy}).batch, greedy.batch);
  MaxBatchResult claimed = greedy;  // a schedule that does not fit at the answer claimed
  claimed.batch = greedy.batch * 100;
  EXPECT_LT(max_batch(c.p, "checkmate", c.budget, none, nullptr, {claimed}).batch, greedy.batch);
}

// Where copies cost next to nothing, checkmate-offload's search above checkmate's answer
// (Note [offload above the floor]) moves values where checkmate recomputes up to its cost cap.
// Its seeds need checkmate's solves to finish in their share of 5 s, too little under the
// sanitizers, whose stage skips it (tools/run_tests.sh).
TEST(MilpMaxBatch, CheckmateOffloadFindsALargerBatchWhereCopiesAreFree) {
  DenseCase c;
  c.p.copy_cost_per_byte = 1e-9;
  const Problem& p = c.p;
  const int64_t budget = c.budget;
  const SolveOptions& opt = c.opt;
  const MaxBatchResult cm = max_batch(p, "checkmate", budget, opt);
  ASSERT_GT(cm.batch, 1);
  ASSERT_LT(cm.batch, cm.working_set_bound) << "no room above checkmate's answer";
  const MaxBatchResult off = max_batch(p, "checkmate-offload", budget, opt, nullptr, {cm});
  EXPECT_GT(off.batch, cm.batch);
  EXPECT_LE(off.batch, cm.working_set_bound);
  ASSERT_TRUE(off.schedule);
  EXPECT_TRUE(off.schedule->has_copies());
  const SimResult sim = simulate(problem_at_batch(p, off.batch), *off.schedule);
  EXPECT_TRUE(sim.valid);
  EXPECT_LE(sim.peak_bytes, budget);
}

// Checkmate's answer carries the schedule that fits there, so the strategies after it in a run
// (checkmate-offload) start from it.
TEST(MilpMaxBatch, CheckmateAnswerCarriesItsSchedule) {
  const DenseCase c;
  const MaxBatchResult r = max_batch(c.p, "checkmate", c.budget, c.opt);
  ASSERT_GT(r.batch, 1);
  ASSERT_TRUE(r.schedule);
  const SimResult sim = simulate(problem_at_batch(c.p, r.batch), *r.schedule);
  EXPECT_TRUE(sim.valid);
  EXPECT_LE(sim.peak_bytes, c.budget);
}

// Max batch against exhaustive search: batch b admits a schedule within the cost cap (all-keep
// plus one forward pass) and, when the result says optimal, b + 1 admits none.
TEST(MilpMaxBatch, BatchFitsAndNextBatchInfeasibleByBruteForce) {
  Problem p = make_chain_problem({1, 3, 2}, {12, 16, 20}, 100);
  p.batch = 4;
  const int64_t budget = 400;
  MaxBatchResult cm = max_batch(p, "checkmate", budget, exact_options(20));
  ASSERT_GT(cm.batch, 0);
  ASSERT_EQ(cm.status, "optimal");
  EXPECT_EQ(cm.upper_bound, cm.batch);
  // The bound names its proof and the batch that proof is about: the next one.
  EXPECT_NE(cm.bound_source.find(" at " + std::to_string(cm.batch + 1)), std::string::npos)
      << cm.bound_source;
  Problem at = problem_at_batch(p, cm.batch);
  BruteForce fits{at, budget};
  auto best = fits.run();
  ASSERT_TRUE(best.has_value()) << "batch " << cm.batch;
  EXPECT_LE(*best, max_batch_cost_cap(at) * (1 + 1e-9));
  Problem next = problem_at_batch(p, cm.batch + 1);
  BruteForce more{next, budget};
  auto best_next = more.run();
  EXPECT_TRUE(!best_next || *best_next > max_batch_cost_cap(next) * (1 + 1e-9)) << "batch " << cm.batch + 1;
  for (const std::string& strategy : strategy_names()) {
    if (strategy == "checkmate" || strategy == "lp") continue;
    EXPECT_GE(cm.batch, max_batch(p, strategy, budget, exact_options(20)).batch) << strategy;
  }
}

}  // namespace
}  // namespace remat
