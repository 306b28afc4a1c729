// Offload (Note [offload semantics]): the simulator's accounting of copies, the offload MILP
// against an exhaustive search over keep / recompute / offload on tiny graphs, the greedy
// baselines, checkmate-offload where copies fit, and the schedule file's copies.
#include <gtest/gtest.h>

#include <functional>
#include <optional>

#include "runtime/core/check.h"
#include "solver/offload.h"
#include "solver/schedule.h"
#include "solver/strategies.h"
#include "tests/offload_test_util.h"
#include "tests/solver_test_util.h"

namespace remat {
namespace {

// all-keep with x0 offloaded in stage 2 and prefetched in stage 5.
Schedule moved_x0(const Problem& p) {
  Schedule s = *solve_all_keep(p);
  s.offload = BoolMatrix(p.size(), p.size());
  s.prefetch = BoolMatrix(p.size(), p.size());
  s.offload.set(2, 0, true);
  s.S.set(3, 0, false), s.S.set(4, 0, false), s.S.set(5, 0, false);
  s.prefetch.set(5, 0, true);
  return s;
}

TEST(OffloadSimulate, AMovedValueLeavesTheDeviceBetweenItsCopies) {
  const Problem p = waiting_chain(0.1);
  SimResult keep = simulate(p, *solve_all_keep(p));
  ASSERT_TRUE(keep.valid) << keep.error;
  EXPECT_EQ(keep.peak_bytes, 10 + 4 + 12);  // x0, x2, x3 while x3 runs
  SimResult moved = simulate(p, moved_x0(p));
  ASSERT_TRUE(moved.valid) << moved.error;
  // Stage 2 keeps x0 until its copy ends (x0 + x1 + x2); stage 5 has it back from its start
  // (x0 + x4 + x5); x3's stages hold x2/x4 and x3 only.
  EXPECT_EQ(moved.peak_bytes, 10 + 4 + 4);
  EXPECT_EQ(moved.host_peak_bytes, 10);
  EXPECT_EQ(moved.offloads, 1);
  EXPECT_EQ(moved.prefetches, 1);
  EXPECT_EQ(moved.copied_bytes, 20);
  // 10 bytes at 0.1 per byte hide behind each stage's compute of 2.
  EXPECT_DOUBLE_EQ(moved.copy_cost, 0);
  EXPECT_DOUBLE_EQ(moved.total_cost, keep.total_cost);
  int offload_steps = 0, prefetch_steps = 0;
  for (const SimStep& st : moved.steps) {
    offload_steps += st.kind == StepKind::Offload && st.stage == 2 && st.node == 0;
    prefetch_steps += st.kind == StepKind::Prefetch && st.stage == 5 && st.node == 0;
  }
  EXPECT_EQ(offload_steps, 1);
  EXPECT_EQ(prefetch_steps, 1);
}

TEST(OffloadSimulate, CopiesLongerThanTheirStageCostTheExcess) {
  const Problem p = waiting_chain(0.5);  // 10 bytes: 5 units against a stage compute of 2
  SimResult moved = simulate(p, moved_x0(p));
  ASSERT_TRUE(moved.valid) << moved.error;
  EXPECT_DOUBLE_EQ(moved.copy_cost, 3 + 3);
  EXPECT_DOUBLE_EQ(moved.total_cost, moved.compute_cost + 6);
}

TEST(OffloadSimulate, InvalidCopiesAreNamed) {
  const Problem p = waiting_chain(0.1);
  auto error_of = [&](const std::function<void(Schedule&)>& edit, const Problem& q) {
    Schedule s = moved_x0(q);
    edit(s);
    SimResult r = simulate(q, s);
    EXPECT_FALSE(r.valid);
    return r.error;
  };
  EXPECT_NE(error_of([](Schedule& s) { s.offload.set(4, 0, true); }, p)
                .find("stage 4: offloads node 'x0' (0), which is not held entering stage 4"),
            std::string::npos);
  EXPECT_NE(error_of([](Schedule& s) { s.offload.set(2, 0, false); }, p)
                .find("stage 5: prefetches node 'x0' (0), which no earlier stage offloads"),
            std::string::npos);
  EXPECT_NE(error_of([](Schedule& s) { s.R.set(5, 0, true); }, p)
                .find("prefetches node 'x0' (0), which is already on the device in stage 5"),
            std::string::npos);
  EXPECT_NE(error_of([](Schedule& s) { s.prefetch.set(5, 0, false); }, p)
                .find("stage 6: holds node 'x0' (0), which is neither held entering stage 5 nor"
                      " computed or prefetched in it"),
            std::string::npos);
  EXPECT_NE(
      error_of([](Schedule&) {}, waiting_chain(0)).find("a host link the problem does not have"),
      std::string::npos);
  EXPECT_NE(error_of([](Schedule& s) { s.prefetch = BoolMatrix(3, 3); }, p).find("do not match"),
            std::string::npos);
}

// A value prefetched in stage t arrives for t + 1: the cheapest R with copies does not compute
// it to hold it, where derive_cheapest_r (S alone) must; without copies the two agree.
TEST(OffloadSchedule, APrefetchedValueIsNotComputedToBeHeld) {
  const Problem p = waiting_chain(0.1);
  const Schedule s = moved_x0(p);
  EXPECT_TRUE(derive_cheapest_r(p, s.S)(5, 0));
  const BoolMatrix R = derive_cheapest_r_with_copies(p, s);
  EXPECT_FALSE(R(5, 0));
  EXPECT_TRUE(R == s.R);  // each stage computes its own node only, as keep-everything does
  Schedule derived = s;
  derived.R = R;
  EXPECT_TRUE(simulate(p, derived).valid);
  const Schedule keep = *solve_all_keep(p);
  EXPECT_TRUE(derive_cheapest_r_with_copies(p, keep) == derive_cheapest_r(p, keep.S));
}

TEST(OffloadSchedule, CopiesSurviveTheScheduleFile) {
  const Problem p = waiting_chain(0.1);
  const Schedule s = moved_x0(p);
  SimResult sim = simulate(p, s);
  Schedule back = schedule_from_json_text(schedule_to_json_text(s, &sim, &p), "s.json");
  EXPECT_TRUE(back.offload == s.offload);
  EXPECT_TRUE(back.prefetch == s.prefetch);
  EXPECT_EQ(simulate(p, back).peak_bytes, sim.peak_bytes);
  std::string text = schedule_to_json_text(s);
  text.replace(text.find("\"offload\""), 9, "\"offloads\"");
  EXPECT_THROW(
      {
        try {
          schedule_from_json_text(text, "s.json");
        } catch (const UserError& e) {
          EXPECT_NE(
              std::string(e.what()).find("s.json: fields 'offload' and 'prefetch' come together"),
              std::string::npos)
              << e.what();
          throw;
        }
      },
      UserError);
}

TEST(OffloadProblem, TheLinkCostIsReadWrittenAndChecked) {
  const Problem p = waiting_chain(0.25);
  EXPECT_DOUBLE_EQ(problem_from_json_text(problem_to_json_text(p), "p.json").copy_cost_per_byte,
                   0.25);
  std::string text = problem_to_json_text(p);
  text.replace(text.find("0.25"), 4, "-1.0");
  try {
    problem_from_json_text(text, "p.json");
    FAIL() << "a negative copy cost was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(
        std::string(e.what()).find("p.json: field 'copy_cost_per_byte': must be finite and >= 0"),
        std::string::npos)
        << e.what();
  }
}

TEST(OffloadGreedy, AllKeepOffloadMovesTheWaitingValueAndNoMore) {
  const Problem p = waiting_chain(0.5);
  auto s = solve_all_keep_offload(p, 18, 0);
  ASSERT_TRUE(s.has_value());
  SimResult sim = simulate(p, *s);
  EXPECT_EQ(sim.peak_bytes, 18);
  EXPECT_EQ(sim.offloads, 1);
  EXPECT_FALSE(solve_all_keep_offload(p, 17, 0).has_value());  // stage 2 keeps x0, x1, x2
  EXPECT_FALSE(solve_all_keep_offload(p, 18, 9).has_value());  // x0's host copy is 10 bytes
  EXPECT_FALSE(solve_all_keep_offload(waiting_chain(0), 18, 0).has_value());  // no link
  SolveOptions opt;
  opt.host_budget = 9;
  SolveResult r = solve(p, "all-keep-offload", 18, opt);
  EXPECT_FALSE(r.feasible);
  EXPECT_NE(r.message.find("the host budget 9 B is too small: its copies need 10 B"),
            std::string::npos)
      << r.message;
}

// The offload MILP's optimum equals the exhaustive one at every budget, is never above the
// optimum without copies, and is below it somewhere.
void check_offload_milp(Problem p, double copy_cost_per_byte, bool copies_help = true) {
  p.copy_cost_per_byte = copy_cost_per_byte;
  const int64_t lo = problem_min_budget(p) - 1, hi = problem_total_bytes(p);
  int cheaper = 0, feasible = 0;
  for (int64_t budget = lo; budget <= hi; ++budget) {
    auto want = OffloadBruteForce(p, budget).run();
    auto without = BruteForce(p, budget).run();
    auto got = solve_offload_milp(p, budget, 0, exact_options(20));
    ASSERT_EQ(got.has_value(), want.has_value()) << "budget " << budget;
    if (!want) continue;
    ++feasible;
    SimResult sim = simulate(p, *got);
    ASSERT_TRUE(sim.valid) << sim.error;
    EXPECT_LE(sim.peak_bytes, budget);
    EXPECT_NEAR(sim.total_cost, *want, 1e-6) << "budget " << budget;
    EXPECT_LE(got->lower_bound, sim.total_cost + 1e-6);
    if (without) {
      EXPECT_LE(*want, *without + 1e-9) << "budget " << budget;
    }
    if (!without || *want < *without - 1e-9) ++cheaper;
  }
  EXPECT_GT(feasible, 2);
  if (copies_help) {
    EXPECT_GT(cheaper, 0) << "copies never helped: the test does not exercise them";
  }
}

// Copies that hide behind their stages (x0 moves for free where recomputing it costs 1);
// copies that cost 6 beyond their stages, where recomputing x0 costs 10; and a training chain
// too short for any value to wait long enough to move (copies never help there, and must
// not hurt).
TEST(OffloadMilp, EqualsExhaustiveSearchWithHiddenCopies) {
  check_offload_milp(waiting_chain(0), 0.1);
}
TEST(OffloadMilp, EqualsExhaustiveSearchWithExposedCopies) {
  check_offload_milp(waiting_chain(0, 10), 0.5);
}
TEST(OffloadMilp, EqualsExhaustiveSearchOnATrainingChain) {
  check_offload_milp(varied_chain(2), 0.05, /*copies_help=*/false);
}

// greedy-offload frees x0 at the peak the cheaper way per byte (Note [greedy offload]): with a
// slow link (copies 6 beyond their stages) and x0 cheap to recompute (1), by recomputing it;
// with a fast link (copies hidden) and x0 dear (10), by moving it.
TEST(GreedyOffload, RecomputesOrMovesWhicheverCostsLessPerByte) {
  const Problem slow = waiting_chain(0.5, 1), fast = waiting_chain(0.1, 10);
  SolveResult r = solve(slow, "greedy-offload", 18, exact_options(5));
  SolveResult m = solve(fast, "greedy-offload", 18, exact_options(5));
  ASSERT_TRUE(r.feasible && m.feasible) << r.message << m.message;
  EXPECT_EQ(r.sim.offloads, 0);
  EXPECT_EQ(r.sim.recomputes, 1);
  EXPECT_DOUBLE_EQ(r.sim.total_cost, simulate(slow, *solve_all_keep(slow)).total_cost + 1);
  EXPECT_EQ(m.sim.offloads, 1);
  EXPECT_EQ(m.sim.recomputes, 0);
  EXPECT_DOUBLE_EQ(m.sim.total_cost, simulate(fast, *solve_all_keep(fast)).total_cost);
  // checkmate-offload tries greedy-offload's schedule among its candidates.
  SolveResult c = solve(fast, "checkmate-offload", 18, exact_options(5));
  ASSERT_TRUE(c.feasible) << c.message;
  EXPECT_LE(c.sim.total_cost, m.sim.total_cost + 1e-9);
  SolveResult none = solve(waiting_chain(0), "greedy-offload", 18, exact_options(5));
  EXPECT_FALSE(none.feasible);
  EXPECT_NE(none.message.find("no host link"), std::string::npos) << none.message;
}

// a (cost 10) and b (cost 1, from a) wait while c, e and f (8 bytes each) and d run, then g
// reads a, b and d: keep-everything peaks at 24 bytes while f runs. A start that recomputes a
// for g fits 20 but costs 10 more. Trading that recomputation (Note [copies for
// recomputations]) holds a, which overshoots; moving a waiting value to host memory costs more
// than a's recomputation (each copy 20, 19 beyond its stage), so offload_to_fit's answer is no
// better: the greedy's moves (Note [greedy offload]) recompute b instead, 1 more than
// keep-everything.
TEST(OffloadTrade, WhereCopiesCostMoreItRecomputesACheaperValue) {
  Problem p;
  p.name = "dear_and_cheap";
  p.copy_cost_per_byte = 5;
  using K = ProblemNodeKind;
  add_problem_node(p, "a", K::Forward, 10, 4, 0, {});
  add_problem_node(p, "b", K::Forward, 1, 4, 0, {0});
  add_problem_node(p, "c", K::Forward, 1, 4, 0, {1});
  add_problem_node(p, "e", K::Forward, 1, 8, 0, {2});
  add_problem_node(p, "f", K::Forward, 1, 8, 0, {3});
  add_problem_node(p, "d", K::Forward, 1, 4, 0, {4});
  add_problem_node(p, "g", K::Loss, 1, 1, 0, {0, 1, 5});
  const double keep = simulate(p, *solve_all_keep(p)).total_cost;
  Schedule start = *solve_all_keep(p);
  for (int t = 2; t < p.size(); ++t) start.S.set(t, 0, false);
  start.R = derive_cheapest_r(p, start.S);
  const SimResult before = simulate(p, start);
  ASSERT_TRUE(before.valid) << before.error;
  ASSERT_LE(before.peak_bytes, 20);
  ASSERT_DOUBLE_EQ(before.total_cost, keep + 10);
  std::optional<Schedule> traded = trade_recomputes_for_copies(p, start, 20, 0, 5);
  ASSERT_TRUE(traded.has_value());
  const SimResult after = simulate(p, *traded);
  ASSERT_TRUE(after.valid) << after.error;
  EXPECT_LE(after.peak_bytes, 20);
  EXPECT_DOUBLE_EQ(after.total_cost, keep + 1);
  EXPECT_EQ(after.offloads, 0);
  EXPECT_TRUE(traded->R(p.size() - 1, 1)) << "b is recomputed for g";
}

// greedy-offload's schedules on both chains fit their budgets and are never below the
// exhaustive optimum with both choices.
TEST(OffloadMilp, GreedyOffloadNeverBelowTheExhaustiveOptimum) {
  for (const Problem& p : {waiting_chain(0.5, 1), waiting_chain(0.1, 10)})
    for (int64_t budget : {18, 20, 24}) {
      SolveResult g = solve(p, "greedy-offload", budget, exact_options(5));
      if (!g.feasible) continue;
      EXPECT_LE(g.sim.peak_bytes, budget);
      std::optional<double> best = OffloadBruteForce(p, budget).run();
      ASSERT_TRUE(best.has_value()) << "budget " << budget;
      EXPECT_GE(g.sim.total_cost, *best - 1e-9) << "budget " << budget;
    }
}

// chen-sqrtn-offload moves every value waiting in chen-sqrtn's schedule (Note [offload every
// checkpoint]): the same recomputation, a lower peak, and nothing without a link.
TEST(ChenSqrtnOffload, MovesEveryWaitingValueOfChenSqrtn) {
  const Problem p = waiting_chain(0.1);
  const int64_t roomy = 1000;
  SolveResult chen = solve(p, "chen-sqrtn", roomy, exact_options(5));
  SolveResult off = solve(p, "chen-sqrtn-offload", roomy, exact_options(5));
  ASSERT_TRUE(chen.feasible && off.feasible) << chen.message << off.message;
  EXPECT_TRUE(off.schedule.has_copies());
  EXPECT_LT(off.sim.peak_bytes, chen.sim.peak_bytes);
  EXPECT_EQ(off.sim.compute_cost, chen.sim.compute_cost);  // the same recomputation
  for (int t = 0; t < p.size(); ++t)
    for (int i = 0; i < p.size(); ++i) EXPECT_EQ(off.schedule.R(t, i), chen.schedule.R(t, i));
  // At its own peak it fits; a byte below, it does not (it has nothing to adjust).
  EXPECT_TRUE(solve(p, "chen-sqrtn-offload", off.sim.peak_bytes, exact_options(5)).feasible);
  EXPECT_FALSE(solve(p, "chen-sqrtn-offload", off.sim.peak_bytes - 1, exact_options(5)).feasible);
  SolveResult none = solve(waiting_chain(0), "chen-sqrtn-offload", roomy, exact_options(5));
  EXPECT_FALSE(none.feasible);
  EXPECT_NE(none.message.find("no host link"), std::string::npos) << none.message;
}

TEST(CheckmateOffload, FitsWhereNothingWithoutCopiesDoes) {
  const Problem p = waiting_chain(0.1);
  // Without copies, 18 bytes need x0 recomputed... which x0's own 10 bytes at stage 2 allow;
  // below the all-keep peak, checkmate-offload is never dearer than checkmate.
  for (int64_t budget = problem_min_budget(p); budget <= 26; ++budget) {
    SolveResult plain = solve(p, "checkmate", budget, exact_options(10));
    SolveResult off = solve(p, "checkmate-offload", budget, exact_options(10));
    if (!plain.feasible) continue;
    ASSERT_TRUE(off.feasible) << "budget " << budget << ": " << off.message;
    EXPECT_LE(off.sim.total_cost, plain.sim.total_cost + 1e-9) << "budget " << budget;
  }
}

}  // namespace
}  // namespace remat
