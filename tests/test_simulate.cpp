// Simulator on hand-built graphs: exact peak and cost counted by hand, invalid schedules named
// by stage/node/dependency; derive_cheapest_r recomputes exactly the missing transitive deps.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "runtime/core/check.h"
#include "solver/chain.h"
#include "solver/milp_model.h"
#include "solver/schedule.h"

namespace remat {
namespace {

ProblemNode node(const std::string& name, double cost, int64_t bytes, std::vector<int> deps,
                 int64_t workspace = 0) {
  ProblemNode n;
  n.name = name;
  n.cost = cost;
  n.bytes = bytes;
  n.deps = std::move(deps);
  n.workspace_bytes = workspace;
  return n;
}

// a (10 B, cost 1) -> b (20 B, cost 2, 7 B workspace) -> c (30 B, cost 3); constant 5.
Problem tiny_chain() {
  Problem p;
  p.constant_bytes = 5;
  p.nodes = {node("a", 1, 10, {}), node("b", 2, 20, {0}, 7), node("c", 3, 30, {1})};
  return p;
}

Schedule empty_schedule(int n) {
  Schedule s;
  s.R = BoolMatrix(n, n);
  s.S = BoolMatrix(n, n);
  for (int t = 0; t < n; ++t) s.R.set(t, t, true);
  return s;
}

TEST(Simulate, KeepChainExactMemory) {
  Problem p = tiny_chain();
  Schedule s = empty_schedule(3);
  s.S.set(1, 0, true);
  s.S.set(2, 1, true);
  SimResult r = simulate(p, s);
  ASSERT_TRUE(r.valid) << r.error;
  // a: 5 + 10 = 15. b: 15 + 20 + 7 ws = 42 while running, 35 after, free a -> 25.
  // c: 25 + 30 = 55, free b -> 35, c unused -> 5.
  EXPECT_EQ(r.peak_bytes, 55);
  EXPECT_DOUBLE_EQ(r.total_cost, 6);
  EXPECT_EQ(r.computes, 3);
  EXPECT_EQ(r.recomputes, 0);
  ASSERT_EQ(r.steps.size(), 6u);
  EXPECT_EQ(r.steps[1].kind, StepKind::Compute);
  EXPECT_EQ(r.steps[1].bytes_during, 42);
  EXPECT_EQ(r.steps[1].bytes_after, 35);
  EXPECT_EQ(r.steps[2].kind, StepKind::Free);
  EXPECT_EQ(r.steps[2].node, 0);
  EXPECT_EQ(r.steps[2].bytes_after, 25);
  EXPECT_EQ(r.steps[3].node, 2);
  EXPECT_EQ(r.peak_step, 3);
  EXPECT_EQ(r.steps.back().bytes_after, 5);
}

TEST(Simulate, WorkspaceCanSetThePeak) {
  Problem p = tiny_chain();
  p.nodes[1].workspace_bytes = 100;  // b runs at 15 + 20 + 100 = 135
  Schedule s = empty_schedule(3);
  s.S.set(1, 0, true);
  s.S.set(2, 1, true);
  SimResult r = simulate(p, s);
  ASSERT_TRUE(r.valid);
  EXPECT_EQ(r.peak_bytes, 135);
  EXPECT_EQ(r.peak_step, 1);
}

TEST(Simulate, RecomputeFreesOldInstanceEarly) {
  Problem p = tiny_chain();
  Schedule s = empty_schedule(3);
  s.S.set(1, 0, true);
  s.S.set(2, 0, true);  // keep a, drop b, recompute b in stage 2
  s.R.set(2, 1, true);
  SimResult r = simulate(p, s);
  ASSERT_TRUE(r.valid) << r.error;
  // a 15; b 42/35, first b unused later -> 15; b again 42/35, free a -> 25; c 55.
  EXPECT_EQ(r.peak_bytes, 55);
  EXPECT_DOUBLE_EQ(r.total_cost, 1 + 2 + 2 + 3);
  EXPECT_EQ(r.computes, 4);
  EXPECT_EQ(r.recomputes, 1);
  EXPECT_EQ(r.steps[2].kind, StepKind::Free);
  EXPECT_EQ(r.steps[2].node, 1);
  EXPECT_EQ(r.steps[2].bytes_after, 15);
  EXPECT_TRUE(r.steps[3].recompute);
  EXPECT_EQ(r.steps[3].stage, 2);
}

TEST(Simulate, DiamondLivenessAcrossStages) {
  // x (8) -> y (4), x -> z (2), w (1) needs y and z. Keep everything the frontier needs.
  Problem p;
  p.nodes = {node("x", 1, 8, {}), node("y", 1, 4, {0}), node("z", 1, 2, {0}),
             node("w", 1, 1, {1, 2})};
  Schedule s = empty_schedule(4);
  s.S.set(1, 0, true);
  s.S.set(2, 0, true);
  s.S.set(2, 1, true);
  s.S.set(3, 1, true);
  s.S.set(3, 2, true);
  SimResult r = simulate(p, s);
  ASSERT_TRUE(r.valid) << r.error;
  // x 8; y 12; z 14 then free x -> 6; w 7, free y, z, w -> 0.
  EXPECT_EQ(r.peak_bytes, 14);
  EXPECT_EQ(r.steps.back().bytes_after, 0);
}

TEST(Simulate, MissingDependencyNamesStageNodeAndDependency) {
  Problem p = tiny_chain();
  Schedule s = empty_schedule(3);
  s.S.set(1, 0, true);  // stage 2 neither holds nor recomputes b
  SimResult r = simulate(p, s);
  EXPECT_FALSE(r.valid);
  EXPECT_NE(r.error.find("stage 2"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("'c'"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("needs 'b'"), std::string::npos) << r.error;
}

TEST(Simulate, HoldingUnavailableValueRejected) {
  // a; b <- a; c (no deps); d <- a. a is dropped after stage 1, then "held" entering stage 3.
  Problem p;
  p.nodes = {node("a", 1, 1, {}), node("b", 1, 1, {0}), node("c", 1, 1, {}),
             node("d", 1, 1, {0})};
  Schedule s = empty_schedule(4);
  s.S.set(1, 0, true);
  s.S.set(3, 0, true);
  SimResult r = simulate(p, s);
  EXPECT_FALSE(r.valid);
  EXPECT_NE(r.error.find("stage 3: holds node 'a'"), std::string::npos) << r.error;
  s.S.set(2, 0, true);  // held continuously: valid
  EXPECT_TRUE(simulate(p, s).valid);
}

TEST(Simulate, ShapeErrors) {
  Problem p = tiny_chain();
  Schedule s = empty_schedule(3);
  s.R.set(1, 1, false);
  EXPECT_NE(simulate(p, s).error.find("stage 1: does not compute its frontier node 'b'"),
            std::string::npos);
  Schedule t = empty_schedule(3);
  t.R.set(0, 2, true);
  EXPECT_FALSE(simulate(p, t).valid);
  Schedule u = empty_schedule(2);
  EXPECT_FALSE(simulate(p, u).valid);
}

TEST(DeriveCheapestR, RecomputesExactlyMissingTransitiveDeps) {
  // a; b <- a; c <- b; d <- c, a.
  Problem p;
  p.nodes = {node("a", 1, 1, {}), node("b", 1, 1, {0}), node("c", 1, 1, {1}),
             node("d", 1, 1, {0, 2})};
  auto row = [&](std::vector<int> held) {
    BoolMatrix S(4, 4);
    for (int i : held) S.set(3, i, true);
    BoolMatrix R = derive_cheapest_r(p, S);
    std::vector<int> out;
    for (int i = 0; i < 4; ++i)
      if (R(3, i)) out.push_back(i);
    return out;
  };
  EXPECT_EQ(row({}), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(row({0}), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(row({1}), (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(row({2}), (std::vector<int>{0, 3}));
  EXPECT_EQ(row({0, 2}), (std::vector<int>{3}));
  EXPECT_EQ(row({0, 1, 2}), (std::vector<int>{3}));
}

// A value held entering stage t+1 but not stage t is computed in stage t even when stage t does
// not read it (the MILP recomputes values only to checkpoint them), with its missing deps.
TEST(DeriveCheapestR, ComputesValuesHeldForLaterStages) {
  // a; b <- a; c <- b; d <- c, a.
  Problem p;
  p.nodes = {node("a", 1, 1, {}), node("b", 1, 1, {0}), node("c", 1, 1, {1}),
             node("d", 1, 1, {0, 2})};
  BoolMatrix S(4, 4);
  S.set(3, 1, true);  // b held entering stage 3: stage 2 must produce it
  S.set(3, 0, true);  // a too
  BoolMatrix R = derive_cheapest_r(p, S);
  for (int i : {0, 1, 2}) EXPECT_TRUE(R(2, i)) << i;  // a, b (for c and for S), c
  EXPECT_TRUE(R(3, 2)) << "c is not held entering stage 3";
  EXPECT_FALSE(R(3, 1));
  EXPECT_FALSE(R(3, 0));
  Schedule sch;
  sch.S = S;
  sch.R = R;
  EXPECT_TRUE(simulate(p, sch).valid) << simulate(p, sch).error;
}

TEST(DeriveCheapestR, MakesAnyRetentionValidSchedule) {
  Problem p = make_uniform_chain(5);
  Schedule s;
  s.S = BoolMatrix(p.size(), p.size());
  // Hold only the chain's immediate predecessor and the gradient chain.
  for (int t = 1; t < p.size(); ++t) s.S.set(t, t - 1, true);
  s.R = derive_cheapest_r(p, s.S);
  SimResult r = simulate(p, s);
  ASSERT_TRUE(r.valid) << r.error;
  // b4 holds loss, needs f3, f4 -> recompute f0..f4 (5); b3 needs f2, f3 -> 4; b2 -> 3;
  // b1 -> 2; b0 needs f0 -> 1. Total recomputes 15.
  EXPECT_EQ(r.recomputes, 15);
}

// Note [row scans]: first_set and last_set equal a byte-by-byte scan at every offset and length,
// across word boundaries and with the set entry in either half of a word.
TEST(RowScans, EqualAByteByByteScan) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 400; ++trial) {
    const int len = int(rng() % 40);
    std::vector<uint8_t> row(size_t(len) + 1, 0);
    for (int k = int(rng() % 3); k > 0 && len > 0; --k) row[rng() % size_t(len)] = 1;
    for (int from = 0; from <= len; ++from)
      for (int to = from; to <= len; ++to) {
        int first = to, last = from - 1;
        for (int i = from; i < to; ++i)
          if (row[size_t(i)]) first = std::min(first, i), last = i;
        ASSERT_EQ(first_set(row.data(), from, to), first) << from << " " << to;
        ASSERT_EQ(last_set(row.data(), from, to), last) << from << " " << to;
      }
  }
}

// A DAG of n nodes where node i reads up to three earlier ones (wide enough for word scans).
Problem random_dag(int n, unsigned seed) {
  std::mt19937 rng(seed);
  Problem p;
  for (int i = 0; i < n; ++i) {
    std::vector<int> deps;
    for (int k = 0; i > 0 && k < 3; ++k) {
      const int d = i - 1 - int(rng() % std::min(i, 20));
      if (std::find(deps.begin(), deps.end(), d) == deps.end()) deps.push_back(d);
    }
    std::sort(deps.begin(), deps.end());
    p.nodes.push_back(node("n" + std::to_string(i), 1, 1 + int64_t(rng() % 9), deps));
  }
  return p;
}

// derive_cheapest_r as first written: a full pass per stage, one entry at a time.
BoolMatrix cheapest_r_by_entries(const Problem& p, const BoolMatrix& S) {
  const int n = p.size();
  BoolMatrix R(n, n);
  for (int t = 0; t < n; ++t) {
    std::vector<uint8_t> need(size_t(n), 0);
    need[size_t(t)] = 1;
    for (int i = 0; i < t && t + 1 < n; ++i)
      if (S(t + 1, i) && !S(t, i)) need[size_t(i)] = 1;
    for (int i = t; i >= 0; --i) {
      if (!need[size_t(i)]) continue;
      R.set(t, i, true);
      for (int d : p.nodes[size_t(i)].deps)
        if (!S(t, d)) need[size_t(d)] = 1;
    }
  }
  return R;
}

// schedule_repair_s as first written: derive R, drop the first bad stage's unavailable holds,
// derive again, until no stage is bad.
BoolMatrix repair_by_rederiving(const Problem& p, BoolMatrix S) {
  const int n = p.size();
  for (;;) {
    const BoolMatrix R = derive_cheapest_r(p, S, false);
    int bad = -1;
    for (int t = 0; t + 1 < n && bad < 0; ++t)
      for (int i = 0; i <= t; ++i)
        if (S(t + 1, i) && !R(t, i) && !(i < t && S(t, i))) bad = t;
    if (bad < 0) return S;
    for (int i = 0; i <= bad; ++i)
      if (S(bad + 1, i) && !R(bad, i) && !(i < bad && S(bad, i))) S.set(bad + 1, i, false);
  }
}

TEST(DeriveCheapestR, EqualsTheEntryByEntryDerivationOnWideGraphs) {
  for (unsigned seed : {1u, 2u, 3u}) {
    const Problem p = random_dag(90, seed);
    std::mt19937 rng(seed);
    for (double density : {0.0, 0.05, 0.3, 0.9}) {
      BoolMatrix S(p.size(), p.size());
      for (int t = 1; t < p.size(); ++t)
        for (int i = 0; i < t; ++i) S.set(t, i, std::uniform_real_distribution<>()(rng) < density);
      const BoolMatrix R = derive_cheapest_r(p, S);
      ASSERT_TRUE(R == cheapest_r_by_entries(p, S)) << "seed " << seed << ", density " << density;
      Schedule s;
      s.S = schedule_repair_s(p, S, &s.R);
      EXPECT_TRUE(s.S == repair_by_rederiving(p, S)) << "seed " << seed << ", density " << density;
      EXPECT_TRUE(s.R == derive_cheapest_r(p, s.S, false));
      EXPECT_TRUE(simulate(p, s).valid) << simulate(p, s).error;
    }
  }
}

// Each rule of a valid schedule, broken past the first words of a 90-node schedule, is named
// at the entry that breaks it.
TEST(Simulate, InvalidEntriesFoundPastTheFirstWords) {
  const Problem p = random_dag(90, 5);
  Schedule keep;
  keep.S = BoolMatrix(p.size(), p.size());
  for (int t = 1; t < p.size(); ++t)
    for (int i = 0; i < t; ++i) keep.S.set(t, i, true);
  keep.R = derive_cheapest_r(p, keep.S);
  ASSERT_TRUE(simulate(p, keep).valid) << simulate(p, keep).error;
  auto error_of = [&](auto&& change) {
    Schedule s = keep;
    change(s);
    const SimResult r = simulate(p, s);
    EXPECT_FALSE(r.valid);
    return r.error;
  };
  EXPECT_NE(error_of([](Schedule& s) { s.R.set(61, 61, false); })
                .find("stage 61: does not compute its frontier node 'n61'"),
            std::string::npos);
  EXPECT_NE(error_of([](Schedule& s) { s.R.set(40, 77, true); })
                .find("stage 40: computes node 'n77' (77) beyond the frontier"),
            std::string::npos);
  EXPECT_NE(error_of([](Schedule& s) { s.S.set(40, 53, true); })
                .find("stage 40: holds node 'n53' (53), which is not computed before"),
            std::string::npos);
  const std::string unavailable = error_of([](Schedule& s) {
    s.S.set(70, 37, false);  // dropped entering 70; stage 70 does not compute it
    s.R.set(70, 37, false);
  });
  EXPECT_NE(unavailable.find("stage 71: holds node 'n37' (37), which is neither held entering"),
            std::string::npos)
      << unavailable;
  // A stage whose node reads a dependency (index 9 or more) it neither holds nor computes.
  int t = 20;
  while (t < p.size() && (p.nodes[size_t(t)].deps.empty() || p.nodes[size_t(t)].deps.back() < 9))
    ++t;
  ASSERT_LT(t, p.size());
  const int d = p.nodes[size_t(t)].deps.back();
  const std::string missing = error_of([&](Schedule& s) { s.S.set(t, d, false); });
  EXPECT_NE(missing.find("stage " + std::to_string(t) + ": computing node 'n" +
                         std::to_string(t) + "' (" + std::to_string(t) + ") needs 'n" +
                         std::to_string(d) + "'"),
            std::string::npos)
      << missing;
}

TEST(ScheduleIo, JsonRoundTripAndErrors) {
  Problem p = tiny_chain();
  Schedule s = empty_schedule(3);
  s.strategy = "hand";
  s.S.set(1, 0, true);
  s.S.set(2, 0, true);
  s.R.set(2, 1, true);
  SimResult sim = simulate(p, s);
  std::string text = schedule_to_json_text(s, &sim);
  EXPECT_NE(text.find("\"R\":[[0],[1],[1,2]]"), std::string::npos) << text;
  EXPECT_NE(text.find("\"peak_bytes\":55"), std::string::npos) << text;
  Schedule q = schedule_from_json_text(text, "s.json");
  EXPECT_EQ(q.strategy, "hand");
  EXPECT_TRUE(q.R == s.R);
  EXPECT_TRUE(q.S == s.S);
  try {
    schedule_from_json_text(R"({"format": "remat-schedule/1", "n": 2, "R": [[0], [1, 5]],
                               "S": [[], []]})", "s.json");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("s.json: field 'R' stage 1: bad node index 5"),
              std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace remat
