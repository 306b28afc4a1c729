// The held-set searches (solver/held_set_search.h) against the exhaustive search and the
// Checkmate MILP on tiny graphs, and inside checkmate on a chain the MILP cannot prove.
#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <optional>

#include "solver/chain.h"
#include "solver/held_set_search.h"
#include "solver/strategies.h"
#include "tests/solver_test_util.h"

namespace remat {
namespace {

constexpr double kNone = std::numeric_limits<double>::infinity();
const HeldSetLimits kGenerous{100'000'000, 120};

std::optional<double> cost_of(const Problem& p, const HeldSetSearch& h) {
  if (!h.best) return std::nullopt;
  SimResult sim = simulate(p, *h.best);
  EXPECT_TRUE(sim.valid) << sim.error;
  return sim.total_cost;
}

std::optional<double> milp_optimum(const Problem& p, int64_t budget) {
  SolveOptions o;
  o.time_limit_seconds = 30;
  o.relative_gap = 0;
  std::optional<Schedule> s = solve_checkmate_milp(p, budget, o);
  if (!s) return std::nullopt;
  EXPECT_EQ(s->status, "optimal") << "budget " << budget;
  return simulate(p, *s).total_cost;
}

// At every budget from below the minimum to keep-everything: the exact search equals the
// Checkmate MILP's proven optimum and finishes; the keep-only search equals the exhaustive
// search (whose space it is: stages compute only what their node needs); both fit.
void check_every_budget(const Problem& p) {
  for (int64_t budget = problem_min_budget(p) - 1; budget <= problem_total_bytes(p); ++budget) {
    HeldSetSearch exact = held_set_search(p, budget, kNone, HeldSetSpace::Exact, kGenerous);
    HeldSetSearch keep = held_set_search(p, budget, kNone, HeldSetSpace::KeepOnly, kGenerous);
    ASSERT_TRUE(exact.complete) << "budget " << budget << ": " << exact.stopped;
    ASSERT_TRUE(keep.complete) << "budget " << budget << ": " << keep.stopped;
    std::optional<double> want = budget < problem_min_budget(p) ? std::nullopt
                                                                 : milp_optimum(p, budget);
    EXPECT_EQ(cost_of(p, exact), want) << "budget " << budget;
    EXPECT_EQ(cost_of(p, keep), BruteForce(p, budget).run()) << "budget " << budget;
    for (const HeldSetSearch* h : {&exact, &keep}) {
      if (h->best) {
        EXPECT_LE(simulate(p, *h->best).peak_bytes, budget);
      }
    }
    if (exact.best) {
      EXPECT_EQ(exact.best->status, "optimal");
      EXPECT_EQ(exact.best->lower_bound, *want);
    }
  }
}

TEST(HeldSetSearch, EqualsMilpAndBruteForceOnChains) {
  check_every_budget(varied_chain(2));
  check_every_budget(varied_chain(3));
}

TEST(HeldSetSearch, EqualsMilpAndBruteForceOnSkipDag) { check_every_budget(skip_dag()); }

// A graph (found by random search against the MILP) where the optimum computes a value in a
// stage only to hold it: n1's workspace does not fit beside n3 later, so the cheapest schedule
// recomputes n1 early. The exact search finds the MILP's 31; stages that compute only what
// their node needs cost 36. The test fails if the exact search leaves those stages out.
Problem held_only_dag() {
  Problem p;
  struct Spec {
    double cost;
    int64_t bytes, workspace;
    std::vector<int> deps;
  };
  const std::vector<Spec> specs = {{3, 2, 3, {}},  {5, 3, 3, {0}}, {3, 6, 0, {}},
                                   {5, 4, 0, {0}}, {5, 1, 0, {}},  {5, 1, 0, {1, 4}}};
  for (const Spec& s : specs) {
    ProblemNode nd;
    nd.name = "n" + std::to_string(p.nodes.size());
    nd.cost = s.cost;
    nd.bytes = s.bytes;
    nd.workspace_bytes = s.workspace;
    nd.deps = s.deps;
    p.nodes.push_back(nd);
  }
  return p;
}

TEST(HeldSetSearch, ComputesValuesOnlyToHoldThemWhereThatIsCheaper) {
  const Problem p = held_only_dag();
  HeldSetSearch exact = held_set_search(p, 8, kNone, HeldSetSpace::Exact, kGenerous);
  HeldSetSearch keep = held_set_search(p, 8, kNone, HeldSetSpace::KeepOnly, kGenerous);
  EXPECT_EQ(cost_of(p, exact), milp_optimum(p, 8));
  EXPECT_EQ(cost_of(p, exact), 31.0);
  EXPECT_EQ(cost_of(p, keep), 36.0);
  check_every_budget(p);
}

// The ceiling: a finished search below the optimum returns nothing (a proof that nothing is
// cheaper); just above it returns the optimum. A transition cap leaves it incomplete.
TEST(HeldSetSearch, CeilingAndCap) {
  const Problem p = skip_dag();
  const int64_t budget = problem_min_budget(p) + 2;
  HeldSetSearch free = held_set_search(p, budget, kNone, HeldSetSpace::Exact, kGenerous);
  ASSERT_TRUE(free.best.has_value());
  const double opt = *cost_of(p, free);
  HeldSetSearch at = held_set_search(p, budget, opt, HeldSetSpace::Exact, kGenerous);
  EXPECT_TRUE(at.complete);
  EXPECT_FALSE(at.best.has_value());
  HeldSetSearch above = held_set_search(p, budget, opt + 0.5, HeldSetSpace::Exact, kGenerous);
  EXPECT_EQ(cost_of(p, above), opt);
  HeldSetSearch capped =
      held_set_search(p, budget, kNone, HeldSetSpace::Exact, HeldSetLimits{3, 120});
  EXPECT_FALSE(capped.complete);
  EXPECT_FALSE(capped.best.has_value());
  EXPECT_NE(capped.stopped.find("transition cap"), std::string::npos) << capped.stopped;
}

// A 12-layer chain of varied costs and widths (20 bytes down to 9).
Problem varied_width_chain() {
  std::vector<double> cost;
  std::vector<int64_t> bytes;
  for (int k = 0; k < 12; ++k) {
    cost.push_back(4 + (k * 5) % 7);
    bytes.push_back(20 - k);
  }
  return make_chain_problem(cost, bytes, 10);
}

// The time limit stops a search that would take minutes (a 12-layer chain, no ceiling).
TEST(HeldSetSearch, StopsAtItsTimeLimit) {
  const Problem p = varied_width_chain();
  const auto t0 = std::chrono::steady_clock::now();
  HeldSetSearch h = held_set_search(p, problem_min_budget(p) + 40, kNone, HeldSetSpace::Exact,
                                    HeldSetLimits{int64_t(1) << 60, 0.3});
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(h.complete);
  EXPECT_FALSE(h.best.has_value());
  EXPECT_EQ(h.stopped, "time limit");
  EXPECT_LT(took, 5.0);
}

// Inside checkmate: a 12-layer chain of varied widths two activations above its minimum
// is proven optimal, at the exact search's optimum.
TEST(HeldSetSearch, CheckmateReachesTheExactOptimumOnATightChain) {
  const Problem p = varied_width_chain();
  const int64_t budget = problem_min_budget(p) + 20;
  SolveOptions o;
  o.time_limit_seconds = 30;
  SolveResult r = solve(p, "checkmate", budget, o);
  ASSERT_TRUE(r.feasible) << r.message;
  EXPECT_EQ(r.schedule.status, "optimal") << r.schedule.bound_source;
  // Checked apart: the exact search finds nothing cheaper (a tiny margin against rounding).
  HeldSetSearch below = held_set_search(p, budget, r.sim.total_cost * (1 - 1e-9),
                                        HeldSetSpace::Exact, kGenerous);
  ASSERT_TRUE(below.complete) << below.stopped;
  EXPECT_FALSE(below.best.has_value()) << *cost_of(p, below) << " < " << r.sim.total_cost;
}

}  // namespace
}  // namespace remat
