// Streamed copies (Note [streamed copies]): copies that queue on their streams and run across
// stages. The simulator's time and lifetimes under CopyOverlap::Stream, the bound it keeps
// against the stage model, and the offload strategies' use of it.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "runtime/core/check.h"
#include "solver/offload.h"
#include "solver/schedule.h"
#include "solver/strategies.h"
#include "tests/solver_test_util.h"

namespace remat {
namespace {

// x0 (10 bytes, cost 10) is read by x1, then waits while x2..x6 run (x3 is large) until g
// reads it with x6. At 0.3 per byte x0's copy takes 3: longer than any one stage after x0's
// (cost 2 each), shorter than two.
Problem long_wait(CopyOverlap overlap) {
  Problem p;
  p.name = "long-wait";
  p.copy_cost_per_byte = 0.3;
  p.copy_overlap = overlap;
  using K = ProblemNodeKind;
  add_problem_node(p, "x0", K::Forward, 10, 10, 0, {});
  add_problem_node(p, "x1", K::Forward, 2, 4, 0, {0});
  add_problem_node(p, "x2", K::Forward, 2, 4, 0, {1});
  add_problem_node(p, "x3", K::Forward, 2, 12, 0, {2});
  add_problem_node(p, "x4", K::Forward, 2, 4, 0, {3});
  add_problem_node(p, "x5", K::Forward, 2, 4, 0, {4});
  add_problem_node(p, "x6", K::Forward, 2, 4, 0, {5});
  add_problem_node(p, "g", K::Loss, 1, 1, 0, {0, 6});
  return p;
}

// all-keep with x0 offloaded in stage `out`, off the device from stage `gone` through stage
// `in`, and prefetched in stage `in`.
Schedule moved_x0(const Problem& p, int out, int gone, int in) {
  Schedule s = *solve_all_keep(p);
  s.offload = BoolMatrix(p.size(), p.size());
  s.prefetch = BoolMatrix(p.size(), p.size());
  s.offload.set(out, 0, true);
  for (int t = gone; t <= in; ++t) s.S.set(t, 0, false);
  s.prefetch.set(in, 0, true);
  return s;
}

double compute_of_all_keep(const Problem& p) {
  double c = 0;
  for (const ProblemNode& n : p.nodes) c += n.cost;
  return c;
}

// Offloaded in stage 1 (while x1 reads it) and kept through stage 2, x0's copy (3) runs behind
// stages 1 and 2 (4); prefetched in stage 5, it arrives behind stages 5 and 6. Under Stream both
// hide; under Stage each copy must end with its own stage and costs 3 - 2 = 1.
TEST(StreamedCopies, ACopyLongerThanItsStageHidesBehindTheNext) {
  const Problem stream = long_wait(CopyOverlap::Stream);
  const Problem stage = long_wait(CopyOverlap::Stage);
  const Schedule s = moved_x0(stream, 1, 3, 5);
  SimResult a = simulate(stream, s), b = simulate(stage, s);
  ASSERT_TRUE(a.valid && b.valid) << a.error << b.error;
  EXPECT_DOUBLE_EQ(a.copy_cost, 0);
  EXPECT_DOUBLE_EQ(a.total_cost, compute_of_all_keep(stream));
  EXPECT_DOUBLE_EQ(b.copy_cost, 1 + 1);
  // Under Stream x0 stays on the device through stage 2, which holds it for its copy: stage 2
  // has x0, x1 and x2 (18). Under Stage it leaves after stage 1, where x1 reads it, and stage 2
  // has x1 and x2; both are off the device for x3 and x4 (x3's 12 with a neighbour's 4).
  EXPECT_EQ(a.peak_bytes, 10 + 4 + 4);
  EXPECT_EQ(b.peak_bytes, 10 + 4 + 4);  // stages 5 and 6: x0 back, with x4/x5 or x5/x6
  EXPECT_EQ(a.host_peak_bytes, 10);
}

// A copy that does not fit its stages stalls the compute stream where its value is needed: the
// offload in stage 2 alone (3 against 2) holds up the free at stage 2's end; the prefetch in
// stage 6 alone holds up g.
TEST(StreamedCopies, ACopyThatCannotHideStallsWhereItIsNeeded) {
  const Problem p = long_wait(CopyOverlap::Stream);
  SimResult r = simulate(p, moved_x0(p, 2, 3, 6));
  ASSERT_TRUE(r.valid) << r.error;
  EXPECT_DOUBLE_EQ(r.copy_cost, 1 + 1);
  // Queued behind it: a second offload of x3 in stage 4 starts when x0's has ended.
  Schedule s = moved_x0(p, 1, 3, 5);
  s.offload.set(4, 3, true);
  SimResult q = simulate(p, s);
  ASSERT_TRUE(q.valid) << q.error;
  EXPECT_EQ(q.offloads, 2);
  // x3 (12 bytes, 3.6) from stage 4's start: freed after x4 reads it (2 later): stall 1.6.
  EXPECT_NEAR(q.copy_cost, 1.6, 1e-12);
}

// For any schedule the time under Stream is at most the time under Stage (every wait is one
// the stage model meets by the same point), and its device peak at least (copies keep their
// values longer): over the offload strategies' schedules on several graphs and budgets.
TEST(StreamedCopies, NeverSlowerThanTheStageModel) {
  std::vector<Problem> problems = {long_wait(CopyOverlap::Stage), varied_chain(4),
                                   residual_problem(3), dense_problem(3)};
  problems[1].copy_cost_per_byte = 0.4;
  problems[2].copy_cost_per_byte = 2;
  problems[3].copy_cost_per_byte = 5;
  int compared = 0, faster = 0;
  for (const Problem& stage : problems) {
    Problem stream = stage;
    stream.copy_overlap = CopyOverlap::Stream;
    for (double f : {0.9, 0.7, 0.5}) {
      const int64_t budget = std::max(budget_at(stage, f), problem_min_budget(stage));
      for (const Problem* made_for : {&stage, static_cast<const Problem*>(&stream)})
        for (const char* strategy : {"all-keep-offload", "chen-sqrtn-offload", "greedy-offload",
                                     "lp-offload", "checkmate-offload"}) {
          SolveResult r = solve(*made_for, strategy, budget, exact_options(1));
          if (!r.feasible || !r.schedule.has_copies()) continue;
          SimResult a = simulate(stream, r.schedule), b = simulate(stage, r.schedule);
          ASSERT_TRUE(a.valid && b.valid) << a.error << b.error;
          EXPECT_LE(a.total_cost, b.total_cost + 1e-9 * b.total_cost)
              << stage.name << " " << strategy << " at " << budget;
          EXPECT_GE(a.peak_bytes, b.peak_bytes) << stage.name << " " << strategy;
          EXPECT_DOUBLE_EQ(a.compute_cost, b.compute_cost);
          ++compared;
          faster += a.total_cost < b.total_cost - 1e-9;
        }
    }
  }
  EXPECT_GT(compared, 10);
  EXPECT_GT(faster, 0) << "no schedule's copies ever outlasted their stage (" << compared
                       << " compared)";
}

// all-keep-offload under Stream starts x0's copies early enough to hide (offload in stage 1,
// prefetch in stage 5) and fits the budget for the compute alone; under Stage the same budget
// costs the two stages' excess.
TEST(StreamedCopies, OffloadToFitStartsCopiesEarlyEnoughToHide) {
  const Problem stream = long_wait(CopyOverlap::Stream);
  const Problem stage = long_wait(CopyOverlap::Stage);
  const int64_t budget = 20;  // all-keep needs 26 (x0, x2 or x4, x3)
  SolveResult a = solve(stream, "all-keep-offload", budget, exact_options(5));
  SolveResult b = solve(stage, "all-keep-offload", budget, exact_options(5));
  ASSERT_TRUE(a.feasible && b.feasible) << a.message << b.message;
  EXPECT_LE(a.sim.peak_bytes, budget);
  EXPECT_DOUBLE_EQ(a.sim.total_cost, compute_of_all_keep(stream));
  EXPECT_TRUE(a.schedule.offload(1, 0));
  EXPECT_TRUE(a.schedule.prefetch(5, 0));
  EXPECT_DOUBLE_EQ(b.sim.total_cost, compute_of_all_keep(stage) + 2);
  // checkmate-offload finds the same under Stream (recomputing x0 would cost 10), and says its
  // bound is not the stage-bound MILP's.
  SolveResult c = solve(stream, "checkmate-offload", budget, exact_options(10));
  ASSERT_TRUE(c.feasible) << c.message;
  EXPECT_DOUBLE_EQ(c.sim.total_cost, compute_of_all_keep(stream));
  EXPECT_NE(c.schedule.bound_source, "offload MILP");
}

// Within 20 bytes checkmate recomputes x0 (cost 10) where g reads it. Trading that
// recomputation for copies (Note [copies for recomputations]) moves x0 to host memory for its
// wait instead: under Stream the copies hide and the step costs its compute alone; under Stage
// they cost their excess, still less than the recomputation; without a link nothing is traded.
TEST(StreamedCopies, ARecomputationTradedForCopies) {
  const int64_t budget = 20;
  for (CopyOverlap overlap : {CopyOverlap::Stream, CopyOverlap::Stage}) {
    const Problem p = long_wait(overlap);
    SolveResult base = solve(p, "checkmate", budget, exact_options(5));
    ASSERT_TRUE(base.feasible) << base.message;
    ASSERT_DOUBLE_EQ(base.sim.total_cost, compute_of_all_keep(p) + 10);
    std::optional<Schedule> traded = trade_recomputes_for_copies(p, base.schedule, budget, 0, 5);
    ASSERT_TRUE(traded.has_value());
    const SimResult sim = simulate(p, *traded);
    ASSERT_TRUE(sim.valid) << sim.error;
    EXPECT_LE(sim.peak_bytes, budget);
    for (int t = 1; t < p.size(); ++t) EXPECT_FALSE(traded->R(t, 0)) << "x0 recomputed in " << t;
    int offloads = 0, prefetches = 0;
    for (int t = 0; t < p.size(); ++t)
      offloads += traded->offload(t, 0), prefetches += traded->prefetch(t, 0);
    EXPECT_EQ(offloads, 1);
    EXPECT_EQ(prefetches, 1);
    if (overlap == CopyOverlap::Stream)
      EXPECT_DOUBLE_EQ(sim.total_cost, compute_of_all_keep(p));
    else
      EXPECT_LT(sim.total_cost, base.sim.total_cost);
  }
  Problem no_link = long_wait(CopyOverlap::Stream);
  no_link.copy_cost_per_byte = 0;
  SolveResult base = solve(no_link, "checkmate", budget, exact_options(5));
  ASSERT_TRUE(base.feasible) << base.message;
  EXPECT_FALSE(trade_recomputes_for_copies(no_link, base.schedule, budget, 0, 5).has_value());
}

// Prefetched in stage 6, x0's copy (3) outlasts x6 (2): g waits 1 for it. Started a stage
// earlier (Note [earlier prefetches]) it hides behind x5 and x6, and the step costs its compute
// alone, within the late schedule's own peak (x0 held in stage 5 weighs no more than x0 still on
// the device in stage 2 while its offload runs). Then nothing is late: nothing moves. The trade
// search ends with the same move.
TEST(StreamedCopies, ALatePrefetchStartsEarlier) {
  const Problem p = long_wait(CopyOverlap::Stream);
  Schedule s = moved_x0(p, 1, 3, 6);
  const SimResult before = simulate(p, s);
  ASSERT_TRUE(before.valid) << before.error;
  ASSERT_DOUBLE_EQ(before.total_cost, compute_of_all_keep(p) + 1);
  ASSERT_TRUE(prefetch_earlier(p, before.peak_bytes, 0, 5, s));
  const SimResult after = simulate(p, s);
  ASSERT_TRUE(after.valid) << after.error;
  EXPECT_DOUBLE_EQ(after.total_cost, compute_of_all_keep(p));
  EXPECT_LE(after.peak_bytes, before.peak_bytes);
  EXPECT_TRUE(s.prefetch(5, 0));
  EXPECT_FALSE(s.prefetch(6, 0));
  EXPECT_FALSE(prefetch_earlier(p, before.peak_bytes, 0, 5, s));
  // The trade search (Note [copies for recomputations]) ends with the same search.
  std::optional<Schedule> traded =
      trade_recomputes_for_copies(p, moved_x0(p, 1, 3, 6), before.peak_bytes, 0, 5);
  ASSERT_TRUE(traded.has_value());
  EXPECT_DOUBLE_EQ(simulate(p, *traded).total_cost, compute_of_all_keep(p));
}

TEST(StreamedCopies, TheProblemFileSaysHowCopiesOverlap) {
  const Problem p = long_wait(CopyOverlap::Stream);
  const std::string text = problem_to_json_text(p);
  EXPECT_NE(text.find("\"copy_overlap\": \"stream\""), std::string::npos) << text;
  EXPECT_EQ(problem_from_json_text(text, "p.json").copy_overlap, CopyOverlap::Stream);
  EXPECT_EQ(problem_to_json_text(long_wait(CopyOverlap::Stage)).find("copy_overlap"),
            std::string::npos);
  std::string bad = text;
  bad.replace(bad.find("\"stream\""), 8, "\"async\"");
  try {
    problem_from_json_text(bad, "p.json");
    ADD_FAILURE() << "an unknown copy_overlap loaded";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "p.json: field 'copy_overlap': must be 'stage' or 'stream', got 'async'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace remat
