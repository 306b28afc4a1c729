// Execution plans as JSON: a round trip, and every structural fault plan_check_structure finds,
// named by file and step (so the executor's internal checks never see a malformed plan).
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/core/check.h"
#include "runtime/memory/plan_io.h"
#include "tests/graph_test_util.h"

namespace remat {
namespace {

struct SmallCnn : test::SmallCnnGraph {
  nlohmann::json json() const { return nlohmann::json::parse(plan_to_json_text(plan, g)); }
  // The UserError of loading `j` as "p.json" ("" if it loads).
  std::string error(const nlohmann::json& j) const {
    try {
      plan_from_json_text(j.dump(), g, "p.json");
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  }
};

size_t first_free(const nlohmann::json& steps) {
  size_t i = 0;
  while (!steps[i].contains("free")) ++i;
  return i;
}

TEST(PlanIo, RoundTrip) {
  SmallCnn m;
  const ExecutionPlan q = plan_from_json_text(plan_to_json_text(m.plan, m.g), m.g, "p.json");
  ASSERT_EQ(q.steps.size(), m.plan.steps.size());
  for (size_t i = 0; i < q.steps.size(); ++i) {
    EXPECT_EQ(q.steps[i].kind, m.plan.steps[i].kind);
    EXPECT_EQ(q.steps[i].node, m.plan.steps[i].node);
    EXPECT_EQ(q.steps[i].value, m.plan.steps[i].value);
    EXPECT_EQ(q.steps[i].bytes_during, m.plan.steps[i].bytes_during);
  }
  EXPECT_EQ(q.predicted_peak, m.plan.predicted_peak);
}

TEST(PlanIo, StructuralFaultsNameFileAndStep) {
  SmallCnn m;
  auto expect = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& want) {
    nlohmann::json j = m.json();
    edit(j);
    const std::string e = m.error(j);
    EXPECT_NE(e.find(want), std::string::npos) << "want '" << want << "' in: " << e;
  };
  expect([](nlohmann::json& j) { j["steps"][0]["recompute"] = true; },
         "p.json: steps[0]: 'recompute' is true but 'conv1' is computed here for the first time");
  expect([](nlohmann::json& j) { std::swap(j["steps"][0], j["steps"][1]); },
         "p.json: steps[0]: computes 'bn1', whose input 'conv1' is not in memory");
  expect([](nlohmann::json& j) {
    auto& s = j["steps"];
    s.insert(s.begin() + static_cast<long>(first_free(s)), s[first_free(s)]);
  }, "which is not in memory at this step");
  expect([](nlohmann::json& j) { j["steps"].erase(j["steps"].size() - 1); },
         "is still in memory after the last step (a free is missing)");
  expect([](nlohmann::json& j) {
    auto& s = j["steps"];
    s.insert(s.begin() + 1, s[0]);
  }, "p.json: steps[1]: computes 'conv1' while its value is still in memory");
  expect([](nlohmann::json& j) {
    auto& s = j["steps"];
    for (size_t i = s.size(); i-- > 0;)
      if (s[i].value("compute", "") == "conv1.grad_weight") s.erase(i);
  }, "p.json: node 'conv1.grad_weight' is never computed");
  expect([](nlohmann::json& j) { j["steps"][0]["bytes_after"] = -1; },
         "p.json: steps[0]: field 'bytes_after': -1 is out of range");
  expect([](nlohmann::json& j) { j["steps"][0]["bytes_during"] = 1e300; },
         "p.json: steps[0]: field 'bytes_during': expected an integer");
  expect([](nlohmann::json& j) { j["steps"][0]["extra"] = 1; }, "p.json: steps[0]: unknown field 'extra'");
  expect([](nlohmann::json& j) { j["format"] = "remat-plan/9"; }, "not an execution plan");
}

// Copies (Note [host copies]): the first activation offloaded, freed, prefetched and its host
// copy released right after its compute round-trips, and each misplaced copy is named.
TEST(PlanIo, CopiesRoundTripAndMisplacedOnesAreNamed) {
  SmallCnn m;
  const ValueId v = m.plan.steps[0].value;
  std::vector<PlanStep> moved;
  for (PlanStepKind k : {PlanStepKind::Offload, PlanStepKind::Free, PlanStepKind::Prefetch,
                         PlanStepKind::HostFree}) {
    PlanStep s;
    s.kind = k;
    s.value = v;
    moved.push_back(s);
  }
  m.plan.steps.insert(m.plan.steps.begin() + 1, moved.begin(), moved.end());
  const ExecutionPlan q = plan_from_json_text(plan_to_json_text(m.plan, m.g), m.g, "p.json");
  ASSERT_EQ(q.steps.size(), m.plan.steps.size());
  for (size_t i = 1; i <= 4; ++i) {
    EXPECT_EQ(q.steps[i].kind, m.plan.steps[i].kind) << i;
    EXPECT_EQ(q.steps[i].value, v);
  }
  EXPECT_TRUE(q.has_copies());
  const std::string name = m.g.value(v).name;
  auto without = [&](size_t k) {
    nlohmann::json j = m.json();
    j["steps"].erase(k);
    return m.error(j);
  };
  EXPECT_NE(without(1).find("steps[2]: prefetches the host copy of '" + name + "', which has none"),
            std::string::npos)
      << without(1);
  EXPECT_NE(without(2).find("steps[2]: prefetches '" + name + "', which is in memory"),
            std::string::npos)
      << without(2);
  EXPECT_NE(without(4).find("'" + name + "' still has a host copy after the last step"),
            std::string::npos)
      << without(4);
  nlohmann::json twice = m.json();
  twice["steps"].insert(twice["steps"].begin() + 1, twice["steps"][1]);
  EXPECT_NE(m.error(twice).find("steps[2]: offloads '" + name + "', which is already on the host"),
            std::string::npos)
      << m.error(twice);
}

}  // namespace
}  // namespace remat
