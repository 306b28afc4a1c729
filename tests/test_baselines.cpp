// Baselines (all-keep, Chen sqrt(n)/greedy in both variants, Griewank/revolve) and solve():
// hand-counted peaks, validity at the requested budget, revolve's binomial optimum,
// monotonicity in the budget, and the user errors of solve().
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "runtime/core/check.h"
#include "solver/baselines.h"
#include "solver/chain.h"
#include "solver/griewank.h"
#include "solver/strategies.h"
#include "tests/solver_test_util.h"

namespace remat {
namespace {

// A small residual-style DAG: f0 -> f1 -> f2 -> f3 with a skip f1 -> f3, then f4, loss and
// backward nodes mirroring the forward dependencies.
Problem skip_problem() {
  Problem p;
  auto add = [&](const std::string& name, ProblemNodeKind kind, double cost, int64_t bytes,
                 std::vector<int> deps) {
    ProblemNode n;
    n.name = name;
    n.kind = kind;
    n.cost = cost;
    n.bytes = bytes;
    n.deps = deps;
    p.nodes.push_back(n);
  };
  using K = ProblemNodeKind;
  add("f0", K::Forward, 1, 8, {});
  add("f1", K::Forward, 2, 4, {0});
  add("f2", K::Forward, 3, 6, {1});
  add("f3", K::Forward, 1, 4, {1, 2});
  add("f4", K::Forward, 2, 2, {3});
  add("loss", K::Loss, 1, 1, {4});
  add("b4", K::Backward, 4, 4, {3, 4, 5});
  add("b3", K::Backward, 2, 4, {1, 2, 3, 6});
  add("b2", K::Backward, 6, 4, {1, 2, 7});
  add("b1", K::Backward, 4, 8, {0, 1, 7, 8});
  add("b0", K::Backward, 2, 8, {0, 9});
  return p;
}

Problem mixed_chain(int n) {
  std::vector<double> cost;
  std::vector<int64_t> bytes;
  for (int k = 0; k < n; ++k) {
    cost.push_back(1 + (k * 7) % 5);
    bytes.push_back(10 + (k * 13) % 17);
  }
  return make_chain_problem(cost, bytes, 100);
}

// Griewank's closed form for the fewest forward steps reversing l steps with c slots:
// t*l - C(c+t, t-1), t the repetition number with C(c+t-1, t-1) < l <= C(c+t, t).
int64_t binomial(int64_t a, int64_t b) {
  if (b < 0 || b > a) return 0;
  int64_t r = 1;
  for (int64_t i = 1; i <= b; ++i) r = r * (a - b + i) / i;
  return r;
}
int64_t revolve_closed_form(int64_t l, int64_t c) {
  if (l <= 1) return 0;
  int64_t t = 0;
  while (binomial(c + t, t) < l) ++t;
  return t * l - binomial(c + t, t - 1);
}

TEST(Baselines, AllKeepPeakByHand) {
  // f0 10, f1 20, f2 30, loss 4 all resident, then b2 (20) runs: 84; constant 7 on top.
  Problem p = make_chain_problem({1, 1, 1}, {10, 20, 30}, 7);
  SimResult r = simulate(p, *solve_all_keep(p));
  ASSERT_TRUE(r.valid) << r.error;
  EXPECT_EQ(r.peak_bytes, 7 + 84);
  EXPECT_EQ(r.recomputes, 0);
  EXPECT_DOUBLE_EQ(r.total_cost, 3 + 1 + 6);
}

TEST(Baselines, ArticulationPoints) {
  EXPECT_EQ(forward_articulation_points(make_uniform_chain(5)), (std::vector<int>{1, 2, 3, 4}));
  // f2 sits inside the skip f1 -> f3, so it separates nothing.
  EXPECT_EQ(forward_articulation_points(skip_problem()), (std::vector<int>{1, 3, 4}));
}

TEST(Baselines, EveryScheduleValidAndWithinBudget) {
  for (const Problem& p : {make_uniform_chain(20), mixed_chain(13), skip_problem()}) {
    const int64_t lo = problem_min_budget(p);
    const int64_t hi = simulate(p, *solve_all_keep(p)).peak_bytes;
    for (int step = 0; step <= 8; ++step) {
      const int64_t budget = lo + (hi - lo) * step / 8;
      std::vector<std::optional<Schedule>> all = {
          solve_chen_sqrtn(p, budget, false), solve_chen_sqrtn(p, budget, true),
          solve_chen_greedy(p, budget, false), solve_chen_greedy(p, budget, true),
          solve_griewank(p, budget)};
      for (const auto& s : all) {
        if (!s) continue;
        SimResult r = simulate(p, *s);
        EXPECT_TRUE(r.valid) << p.name << " " << s->strategy << ": " << r.error;
        EXPECT_LE(r.peak_bytes, budget) << p.name << " " << s->strategy;
      }
    }
    // With every forward node a checkpoint, greedy-linear keeps everything: feasible at the
    // all-keep peak with all-keep's cost.
    auto g = solve_chen_greedy(p, hi, true);
    ASSERT_TRUE(g.has_value());
    EXPECT_DOUBLE_EQ(simulate(p, *g).total_cost, simulate(p, *solve_all_keep(p)).total_cost);
  }
}

TEST(Baselines, SqrtNUsesLessMemoryThanAllKeepAndRecomputesEachNodeOnce) {
  Problem p = make_uniform_chain(16);
  const int64_t keep_peak = simulate(p, *solve_all_keep(p)).peak_bytes;
  for (bool linear : {false, true}) {
    auto s = solve_chen_sqrtn(p, keep_peak, linear);
    ASSERT_TRUE(s.has_value());
    SimResult r = simulate(p, *s);
    EXPECT_LT(r.peak_bytes, keep_peak);
    // Each segment is recomputed once, not once per backward stage.
    std::map<int, int> recomputed;
    for (const SimStep& st : r.steps)
      if (st.kind == StepKind::Compute && st.recompute) ++recomputed[st.node];
    for (auto [node, count] : recomputed) EXPECT_EQ(count, 1) << "node " << node;
    EXPECT_LE(r.recomputes, 16);
    EXPECT_GT(r.recomputes, 0);
  }
}

TEST(Baselines, SegmentScheduleByHand) {
  // Uniform chain of 6 with checkpoint f2: forward holds f2 and the chain's predecessor only.
  // Segments {f0, f1} and {f3, f4, f5}. Backward: b5 recomputes f3, f4, f5 (3), b2 needs
  // f1, f2 (f2 held): recompute f0, f1 once (2). 5 recomputes in all.
  Problem p = make_uniform_chain(6);
  Schedule s = segment_schedule(p, {2}, "test");
  SimResult r = simulate(p, s);
  ASSERT_TRUE(r.valid) << r.error;
  EXPECT_EQ(r.recomputes, 5);
  // Stage of b5 (index 7) recomputes f3, f4, f5; stage of b2 (index 10) recomputes f0, f1.
  for (int i : {3, 4, 5}) EXPECT_TRUE(s.R(7, i));
  for (int i : {0, 1}) EXPECT_TRUE(s.R(10, i));
  // Entering the first backward stage only f2 (checkpoint) and the loss are held.
  for (int i = 0; i < 7; ++i) EXPECT_EQ(s.S(7, i), i == 2 || i == 6) << i;
}

TEST(Baselines, GreedyFitsTightBudget) {
  // Uniform chain of 16, 1-byte layers; loss 4 bytes. Checkpoints every 4 layers give at most
  // 4 checkpoints + a 3-node segment + loss 4 + 2 gradients + the running node: <= 14 bytes,
  // against all-keep's 21.
  Problem p = make_uniform_chain(16);
  EXPECT_EQ(simulate(p, *solve_all_keep(p)).peak_bytes, 16 + 4 + 1);
  for (bool linear : {false, true}) {
    auto s = solve_chen_greedy(p, 14, linear);
    ASSERT_TRUE(s.has_value()) << linear;
    SimResult r = simulate(p, *s);
    EXPECT_TRUE(r.valid);
    EXPECT_LE(r.peak_bytes, 14);
  }
}

// Note [greedy thresholds]: the thresholds the walk visits give exactly the segmentations that
// every integer threshold from 0 to the whole forward pass gives, each once, and the greedy rule
// picks what its definition says (by hand on the skip problem).
TEST(Baselines, GreedyThresholdsVisitEverySegmentationOnce) {
  const std::vector<int> skip_aps = forward_articulation_points(skip_problem());
  EXPECT_EQ(greedy_checkpoints(skip_problem(), skip_aps, 0), (std::vector<int>{1, 3, 4}));
  // Running sums 8+4 = 12 at f1 (> 11: chosen), then 6+4 = 10 at f3 (not > 11), 10+2 = 12 at f4
  // (chosen); at 12 neither is, and the sum reaches 8+4+6+4 = 22 at f3 (chosen), then 2 at f4.
  int64_t next = 0;
  EXPECT_EQ(greedy_checkpoints(skip_problem(), skip_aps, 11, &next), (std::vector<int>{1, 4}));
  EXPECT_EQ(next, 12);
  EXPECT_EQ(greedy_checkpoints(skip_problem(), skip_aps, 12, &next), (std::vector<int>{3}));
  EXPECT_EQ(next, 22);
  for (const Problem& p : {mixed_chain(14), make_uniform_chain(9), skip_problem()}) {
    for (bool linear : {false, true}) {
      const std::vector<int> cand = linear ? forward_nodes(p) : forward_articulation_points(p);
      int64_t total = 0;
      for (int i : forward_nodes(p)) total += p.nodes[i].bytes;
      std::set<std::vector<int>> every;
      for (int64_t b = 0; b <= total; ++b) every.insert(greedy_checkpoints(p, cand, b));
      const std::vector<int64_t> walk = greedy_thresholds(p, cand, 1000);
      std::set<std::vector<int>> visited;
      for (int64_t b : walk)
        EXPECT_TRUE(visited.insert(greedy_checkpoints(p, cand, b)).second) << b;
      EXPECT_EQ(visited, every) << p.name << (linear ? " linear" : "");
      EXPECT_TRUE(std::is_sorted(walk.begin(), walk.end()));
      EXPECT_EQ(greedy_thresholds(p, cand, 2).size(), std::min<size_t>(2, walk.size()));
    }
  }
}

// The segment schedules the greedy rule gives at every integer threshold over `cand` (with
// each threshold's cut sets too when `cut_sets`), as their valid (peak bytes, cost) pairs.
struct ThresholdSchedules {
  std::vector<std::pair<int64_t, double>> peak_cost;
  ThresholdSchedules(const Problem& p, const std::vector<int>& cand, bool cut_sets) {
    int64_t total = 0;
    for (int i : forward_nodes(p)) total += p.nodes[i].bytes;
    for (int64_t b = 0; b <= total; ++b) {
      const std::vector<int> chosen = greedy_checkpoints(p, cand, b);
      std::vector<std::vector<int>> tried = {chosen};
      if (cut_sets) tried.push_back(with_cut_sets(p, chosen));
      for (const std::vector<int>& held : tried) {
        const SimResult r = simulate(p, segment_schedule(p, held, "x"));
        if (r.valid) peak_cost.emplace_back(r.peak_bytes, r.total_cost);
      }
    }
  }
  // The cheapest of them within `budget`, or -1 if none fits.
  double cheapest(int64_t budget) const {
    double best = -1;
    for (const auto& [peak, cost] : peak_cost)
      if (peak <= budget && (best < 0 || cost < best)) best = cost;
    return best;
  }
};

// The greedy search (with its lower bound that skips simulations) finds the cheapest schedule
// that any integer threshold gives at every budget, with or without the checkpoints' cut sets;
// with a cost cap it may stop at any schedule that fits within the cap.
TEST(Baselines, GreedyIsTheCheapestOverEveryThreshold) {
  for (const Problem& p : {mixed_chain(14), make_uniform_chain(12), skip_problem()}) {
    const int64_t lo = problem_min_budget(p);
    const int64_t hi = simulate(p, *solve_all_keep(p)).peak_bytes;
    for (bool linear : {false, true}) {
      const std::vector<int> cand = linear ? forward_nodes(p) : forward_articulation_points(p);
      const ThresholdSchedules by_threshold(p, cand, true);
      for (int64_t budget = lo; budget <= hi; ++budget) {
        const double cheapest = by_threshold.cheapest(budget);
        const std::optional<Schedule> s = solve_chen_greedy(p, budget, linear);
        ASSERT_EQ(s.has_value(), cheapest >= 0) << p.name << " budget " << budget;
        if (!s) continue;
        EXPECT_DOUBLE_EQ(simulate(p, *s).total_cost, cheapest) << p.name << " budget " << budget;
        const double cap = 1.5 * cheapest;
        const std::optional<Schedule> capped = solve_chen_greedy(p, budget, linear, 1e30, cap);
        ASSERT_TRUE(capped.has_value());
        const SimResult c = simulate(p, *capped);
        EXPECT_LE(c.peak_bytes, budget);
        EXPECT_LE(c.total_cost, cap);
      }
    }
  }
}

// Note [cut sets], by hand on the skip problem: f2 sits inside the skip f1 -> f3, so its cut
// holds f1 as well; f0 is read by f1 alone, and nothing crosses the articulation points here.
TEST(Baselines, CutSetsHoldWhatCrossesACheckpoint) {
  const Problem p = skip_problem();
  EXPECT_EQ(with_cut_sets(p, {2}), (std::vector<int>{1, 2}));
  EXPECT_EQ(with_cut_sets(p, {0, 2}), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(with_cut_sets(p, {}), (std::vector<int>{}));
  EXPECT_EQ(with_cut_sets(p, forward_articulation_points(p)), forward_articulation_points(p));
  // The segment after f2 ({f3, f4}) is recomputed from f1 and f2 without touching {f0}: only
  // b1 and b0, which read f0, recompute it.
  const SimResult r = simulate(p, segment_schedule(p, with_cut_sets(p, {2}), "x"));
  ASSERT_TRUE(r.valid) << r.error;
  for (const SimStep& st : r.steps) {
    if (st.kind == StepKind::Compute && st.recompute && st.node == 0) {
      EXPECT_GE(st.stage, 9) << "f0 recomputed before b1";
    }
  }
}

// Chen's segments of the recurrent shape recompute step after step back to the start, while the
// cut sets hold each step's state: at every budget from the smallest to keeping everything the
// linearised greedy is never dearer than the cheapest plain segmentation, strictly cheaper at
// some, and fits at budgets where no plain segmentation does.
TEST(Baselines, CutSetsPlanRecurrentStates) {
  const Problem p = recurrent_problem(8);
  const std::vector<int> cand = forward_nodes(p);
  const int64_t lo = problem_min_budget(p);
  const int64_t hi = simulate(p, *solve_all_keep(p)).peak_bytes;
  const ThresholdSchedules by_threshold(p, cand, false);
  int cheaper = 0, only_with_cuts = 0;
  for (int64_t budget = lo; budget <= hi; ++budget) {
    const double plain = by_threshold.cheapest(budget);
    const std::optional<Schedule> s = solve_chen_greedy(p, budget, true);
    if (!s) {
      EXPECT_LT(plain, 0) << "budget " << budget;
      continue;
    }
    const SimResult r = simulate(p, *s);
    EXPECT_LE(r.peak_bytes, budget);
    if (plain < 0) {
      ++only_with_cuts;
      continue;
    }
    EXPECT_LE(r.total_cost, plain) << "budget " << budget;
    cheaper += r.total_cost < plain;
  }
  EXPECT_GT(cheaper, 0);
  EXPECT_GT(only_with_cuts, 0);
}

TEST(Baselines, MoreBudgetNeverCostsMore) {
  for (const Problem& p : {mixed_chain(12), make_uniform_chain(15)}) {
    const int64_t lo = problem_min_budget(p);
    const int64_t hi = simulate(p, *solve_all_keep(p)).peak_bytes;
    double prev_greedy = 1e300, prev_linear = 1e300, prev_griewank = 1e300;
    for (int64_t b = lo; b <= hi; b += std::max<int64_t>(1, (hi - lo) / 40)) {
      auto check = [&](std::optional<Schedule> s, double* prev, const char* what) {
        if (!s) {
          EXPECT_EQ(*prev, 1e300) << what << " infeasible at " << b << " after feasible";
          return;
        }
        double c = simulate(p, *s).total_cost;
        EXPECT_LE(c, *prev) << what << " at budget " << b;
        *prev = c;
      };
      check(solve_chen_greedy(p, b, false), &prev_greedy, "greedy");
      check(solve_chen_greedy(p, b, true), &prev_linear, "greedy-linear");
      check(solve_griewank(p, b), &prev_griewank, "griewank");
    }
    EXPECT_LT(prev_greedy, 1e300);
    EXPECT_LT(prev_griewank, 1e300);
  }
}

TEST(Griewank, TableMatchesClosedForm) {
  RevolveTable t = revolve_table(40, 8);
  for (int c = 1; c <= 8; ++c)
    for (int l = 1; l <= 40; ++l)
      EXPECT_EQ(t.cost[c][l], revolve_closed_form(l, c)) << "l=" << l << " c=" << c;
  EXPECT_EQ(t.cost[1][10], 45);  // one slot: 9 + 8 + ... + 1
  EXPECT_EQ(t.cost[2][10], 10 * 3 - binomial(5, 2));  // t = 3: C(4,2) = 6 < 10 <= C(5,3) = 10
}

TEST(Griewank, ScheduleRecomputesBinomialOptimum) {
  for (int l = 1; l <= 12; ++l) {
    Problem p = make_uniform_chain(l);
    for (int c = 1; c <= l; ++c) {
      auto s = griewank_schedule(p, c);
      ASSERT_TRUE(s.has_value());
      SimResult r = simulate(p, *s);
      ASSERT_TRUE(r.valid) << "l=" << l << " c=" << c << ": " << r.error;
      // Advances beyond the first sweep plus one re-evaluation per reversed step but the last
      // equals the forward-step count of revolve: T(l, c) - (l - 1) + (l - 1).
      EXPECT_EQ(r.recomputes, revolve_closed_form(l, c)) << "l=" << l << " c=" << c;
      // Holding f_i from b_{i+1}'s stage saves every re-evaluation but the first sweep's.
      auto k = griewank_schedule(p, c, true);
      SimResult rk = simulate(p, *k);
      ASSERT_TRUE(rk.valid) << rk.error;
      EXPECT_EQ(rk.recomputes, revolve_closed_form(l, c) - (l - 1)) << "l=" << l << " c=" << c;
    }
  }
}

TEST(Griewank, NotApplicableToNonChains) {
  Problem p = skip_problem();
  EXPECT_FALSE(problem_is_chain(p));
  EXPECT_FALSE(griewank_schedule(p, 3).has_value());
  SolveResult r = solve(p, "griewank", problem_total_bytes(p));
  EXPECT_FALSE(r.feasible);
  EXPECT_EQ(r.message, "griewank: not applicable, graph is not a chain");
  EXPECT_TRUE(problem_is_chain(mixed_chain(5)));
}

TEST(Solve, MinBudgetError) {
  Problem p = make_chain_problem({1, 1, 1}, {10, 20, 30}, 5);
  try {
    solve(p, "all-keep", 78);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "budget 78 B is below the minimum 79 B any schedule needs (node 'b2': "
              "constant 5 B + working set 74 B)");
  }
  EXPECT_NO_THROW(solve(p, "all-keep", 79));
}

TEST(Solve, UnknownStrategyListsKnown) {
  Problem p = make_uniform_chain(3);
  try {
    solve(p, "magic", 100);
    FAIL();
  } catch (const UserError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("unknown strategy 'magic'"), std::string::npos);
    EXPECT_NE(m.find("chen-greedy-linear"), std::string::npos);
    EXPECT_NE(m.find("checkmate"), std::string::npos);
  }
}

TEST(Solve, BaselinesThroughDispatcher) {
  Problem p = mixed_chain(10);
  const int64_t hi = simulate(p, *solve_all_keep(p)).peak_bytes;
  for (const char* name : {"all-keep", "chen-sqrtn", "chen-sqrtn-linear", "chen-greedy",
                           "chen-greedy-linear", "griewank"}) {
    SolveResult r = solve(p, name, hi);
    EXPECT_TRUE(r.feasible) << name << ": " << r.message;
    EXPECT_TRUE(r.sim.valid);
    EXPECT_LE(r.sim.peak_bytes, hi);
    EXPECT_EQ(r.strategy, name);
  }
  // all-keep does not fit below its own peak: a result, not an exception.
  SolveResult tight = solve(p, "all-keep", hi - 1);
  EXPECT_FALSE(tight.feasible);
  EXPECT_FALSE(tight.message.empty());
}

}  // namespace
}  // namespace remat
