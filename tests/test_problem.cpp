// Problem JSON round trip, validation messages (file, node, field), min budget and rescaling.
#include <gtest/gtest.h>

#include <fstream>

#include "runtime/core/check.h"
#include "solver/chain.h"
#include "solver/problem.h"

namespace remat {
namespace {

std::string node_json(const std::string& body) {
  return R"({"format": "remat-problem/1", "name": "t", "batch": 2, "constant_bytes": 10,
    "nodes": [{"name": "a", "kind": "forward", "cost": 1, "bytes": 4, "deps": []},
              {"name": "b", "kind": "forward", "cost": 2, "bytes": 8, "deps": [0]},
              )" + body + "]}";
}

// Parses `text` as "p.json" and returns the UserError message ("" if it parsed).
std::string parse_error(const std::string& text) {
  try {
    problem_from_json_text(text, "p.json");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(Problem, JsonRoundTrip) {
  Problem p = make_chain_problem({1.5, 2.0, 3.0}, {100, 200, 300}, 77);
  p.nodes[1].workspace_bytes = 9;
  p.batch = 4;
  p.cost_unit = "ms";
  Problem q = problem_from_json_text(problem_to_json_text(p), "mem");
  ASSERT_EQ(q.size(), p.size());
  EXPECT_EQ(q.name, p.name);
  EXPECT_EQ(q.batch, 4);
  EXPECT_EQ(q.constant_bytes, 77);
  EXPECT_EQ(q.cost_unit, "ms");
  for (int i = 0; i < p.size(); ++i) {
    EXPECT_EQ(q.nodes[i].name, p.nodes[i].name);
    EXPECT_EQ(q.nodes[i].kind, p.nodes[i].kind);
    EXPECT_EQ(q.nodes[i].cost, p.nodes[i].cost);
    EXPECT_EQ(q.nodes[i].bytes, p.nodes[i].bytes);
    EXPECT_EQ(q.nodes[i].workspace_bytes, p.nodes[i].workspace_bytes);
    EXPECT_EQ(q.nodes[i].deps, p.nodes[i].deps);
  }
}

TEST(Problem, SaveAndLoadFile) {
  Problem p = make_uniform_chain(3);
  std::string path = ::testing::TempDir() + "/remat_problem_test.json";
  problem_save(p, path);
  Problem q = problem_load(path);
  EXPECT_EQ(q.size(), 7);
  EXPECT_EQ(q.nodes[6].deps, (std::vector<int>{0, 5}));
}

TEST(Problem, ValidFileParses) {
  Problem p = problem_from_json_text(
      node_json(R"({"name": "c", "kind": "loss", "cost": 3, "bytes": 4, "workspace_bytes": 6,
                    "deps": [1, 0]})"),
      "p.json");
  EXPECT_EQ(p.nodes[2].deps, (std::vector<int>{0, 1}));  // order in the file is free
  EXPECT_EQ(p.nodes[2].workspace_bytes, 6);
  EXPECT_EQ(p.nodes[2].kind, ProblemNodeKind::Loss);
}

TEST(Problem, MalformedNodesNameFileNodeAndField) {
  struct Case {
    std::string node, expect;
  };
  std::vector<Case> cases = {
      {R"({"name": "c", "kind": "forward", "cost": 1, "bytes": -5, "deps": []})",
       "p.json: nodes[2] 'c': field 'bytes': must be >= 0, got -5"},
      {R"({"name": "c", "kind": "forward", "cost": -1, "bytes": 5, "deps": []})",
       "p.json: nodes[2] 'c': field 'cost': must be >= 0, got -1"},
      {R"({"name": "c", "kind": "forward", "cost": 1, "bytes": 5, "workspace_bytes": -2,
           "deps": []})",
       "p.json: nodes[2] 'c': field 'workspace_bytes': must be >= 0, got -2"},
      {R"({"name": "c", "kind": "forward", "cost": 1, "deps": []})",
       "p.json: nodes[2] 'c': missing field 'bytes'"},
      {R"({"kind": "forward", "cost": 1, "bytes": 1, "deps": []})",
       "p.json: nodes[2]: missing field 'name'"},
      {R"({"name": "c", "kind": "forward", "cost": "big", "bytes": 5, "deps": []})",
       "p.json: nodes[2] 'c': field 'cost': expected a number"},
      {R"({"name": "c", "kind": "forward", "cost": 1, "bytes": 5.5, "deps": []})",
       "p.json: nodes[2] 'c': field 'bytes': expected an integer"},
      {R"({"name": "c", "kind": "forward", "cost": 1, "bytes": 5, "deps": 0})",
       "p.json: nodes[2] 'c': field 'deps': expected an array"},
      {R"({"name": "c", "kind": "forward", "cost": 1, "bytes": 5, "deps": [3]})",
       "p.json: nodes[2] 'c': field 'deps': dependency 3 is not an earlier node"},
      {R"({"name": "c", "kind": "forward", "cost": 1, "bytes": 5, "deps": [2]})",
       "p.json: nodes[2] 'c': field 'deps': depends on itself"},
      {R"({"name": "c", "kind": "forward", "cost": 1, "bytes": 5, "deps": [1, 1]})",
       "p.json: nodes[2] 'c': field 'deps': duplicate dependency 1"},
      {R"({"name": "c", "kind": "middle", "cost": 1, "bytes": 5, "deps": []})",
       "p.json: nodes[2] 'c': field 'kind': unknown kind 'middle'"},
      {R"({"name": "c", "kind": "forward", "cost": 1, "bytes": 5, "deps": [], "byts": 1})",
       "p.json: nodes[2] 'c': unknown field 'byts'"},
  };
  for (const Case& c : cases) {
    std::string msg = parse_error(node_json(c.node));
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "got: " << msg << "\nwant: " << c.expect;
  }
}

TEST(Problem, MalformedTopLevel) {
  EXPECT_NE(parse_error(R"({"format": "remat-problem/9", "nodes": []})")
                .find("p.json: field 'format': unknown format 'remat-problem/9'"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"format": "remat-problem/1"})").find("p.json: missing field 'nodes'"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"format": "remat-problem/1", "nodes": []})").find("no nodes"),
            std::string::npos);
  std::string msg = parse_error("{\"format\": \n  \"remat-problem/1\", nodes}");
  EXPECT_EQ(msg.rfind("p.json: invalid JSON", 0), 0u) << msg;
  EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
}

TEST(Problem, LoadMissingFileNamesIt) {
  try {
    problem_load("/nonexistent/x.json");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/x.json"), std::string::npos);
  }
}

TEST(Problem, MinBudgetIsLargestWorkingSet) {
  // chain {10, 20, 30}, constant 5. b2 = 20 bytes (layer 2's input) + deps f1 20, f2 30,
  // loss 4: 5 + 74 = 79. Next largest: b1 = 10 + f0 10 + f1 20 + b2 20 = 5 + 60 = 65.
  Problem p = make_chain_problem({1, 1, 1}, {10, 20, 30}, 5);
  EXPECT_EQ(problem_min_budget(p), 79);
  p.nodes[2].workspace_bytes = 100;  // f2: 5 + 30 + 100 + 20 = 155
  EXPECT_EQ(problem_min_budget(p), 155);
  EXPECT_EQ(problem_total_bytes(p), 5 + 10 + 20 + 30 + 4 + 20 + 10 + 10 + 100);
}

TEST(Problem, AtBatchScalesActivationsNotConstant) {
  Problem p = make_chain_problem({2, 4}, {3, 5}, 1000);
  p.batch = 2;
  p.nodes[1].workspace_bytes = 7;
  Problem q = problem_at_batch(p, 3);
  EXPECT_EQ(q.batch, 3);
  EXPECT_EQ(q.constant_bytes, 1000);
  EXPECT_EQ(q.nodes[0].bytes, 5);   // ceil(3 * 3 / 2)
  EXPECT_EQ(q.nodes[1].bytes, 8);   // ceil(5 * 3 / 2)
  EXPECT_EQ(q.nodes[1].workspace_bytes, 11);  // ceil(7 * 3 / 2)
  EXPECT_DOUBLE_EQ(q.nodes[1].cost, 6.0);
}

// The input batch and labels are constant during a step but grow with the batch.
TEST(Problem, AtBatchScalesTheBatchPartOfTheConstant) {
  Problem p = make_chain_problem({2, 4}, {3, 5}, 1000);
  p.batch = 2;
  p.batch_constant_bytes = 200;  // 800 bytes of parameters and state, 200 of input and labels
  Problem q = problem_at_batch(p, 5);
  EXPECT_EQ(q.batch_constant_bytes, 500);
  EXPECT_EQ(q.constant_bytes, 1300);
  Problem r = problem_from_json_text(problem_to_json_text(q), "q.json");
  EXPECT_EQ(r.batch_constant_bytes, 500);
  p.batch_constant_bytes = 1001;
  EXPECT_THROW(problem_validate(p, "p.json"), UserError);
}

// The UBSan finding: sizes near INT64_MAX were summed with signed overflow and planned as
// feasible with a tiny peak. Every such sum is now a UserError naming the node and field.
TEST(Problem, SizesWhoseSumOverflowsNameTheNodeAndField) {
  const std::string ws = parse_error(node_json(
      R"({"name": "c", "kind": "loss", "cost": 1, "bytes": 4, "workspace_bytes": 9223372036854775800, "deps": [1]})"));
  EXPECT_NE(ws.find("p.json: nodes[2] 'c': field 'workspace_bytes'"), std::string::npos) << ws;
  EXPECT_NE(ws.find("out of range"), std::string::npos) << ws;
  // Each value fits; constant + bytes does not.
  const std::string sum = parse_error(node_json(
      R"({"name": "c", "kind": "loss", "cost": 1, "bytes": 4611686018427387900, "deps": [1]})"));
  EXPECT_NE(sum.find("p.json: nodes[2] 'c': field 'bytes"), std::string::npos) << sum;
  // The largest workspace on top of every node's bytes.
  const std::string total = parse_error(
      R"({"format": "remat-problem/1", "constant_bytes": 2305843009213693952, "nodes": [
      {"name": "a", "kind": "forward", "cost": 1, "bytes": 1152921504606846976, "deps": []},
      {"name": "b", "kind": "loss", "cost": 1, "bytes": 8, "workspace_bytes": 1152921504606846976, "deps": [0]}]})");
  EXPECT_NE(total.find("p.json: field 'workspace_bytes"), std::string::npos) << total;
  // A dependency index that does not fit an int is not truncated into a valid one.
  const std::string dep = parse_error(node_json(
      R"({"name": "c", "kind": "loss", "cost": 1, "bytes": 4, "deps": [4294967297]})"));
  EXPECT_NE(dep.find("p.json: nodes[2] 'c': field 'deps': dependency 4294967297"), std::string::npos)
      << dep;
}

TEST(Problem, SizesAtTheLimitAreValid) {
  Problem p;
  p.constant_bytes = int64_t{1} << 61;
  p.nodes.resize(2);
  p.nodes[0].name = "a";
  p.nodes[1].name = "b";
  p.nodes[0].bytes = p.nodes[1].bytes = int64_t{1} << 60;
  p.nodes[1].deps = {0};
  EXPECT_NO_THROW(problem_validate(p));
  EXPECT_EQ(problem_min_budget(p), int64_t{1} << 62);
  EXPECT_EQ(problem_total_bytes(p), int64_t{1} << 62);
  p.nodes[0].workspace_bytes = 1;
  EXPECT_THROW(problem_validate(p), UserError);
}

TEST(Problem, DuplicateNodeNamesAreRefused) {
  const std::string e = parse_error(node_json(
      R"({"name": "a", "kind": "loss", "cost": 1, "bytes": 4, "deps": [1]})"));
  EXPECT_NE(e.find("p.json: nodes[2] 'a': field 'name': duplicate node name (also nodes[0])"),
            std::string::npos)
      << e;
}

TEST(Problem, AtBatchPastTheLimitNamesTheNode) {
  Problem p = make_chain_problem({1, 1}, {1 << 20, 1 << 10}, 0);
  p.name = "c";
  try {
    problem_at_batch(p, int64_t{1} << 43);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("problem 'c' at batch 8796093022208: nodes["), std::string::npos) << m;
    EXPECT_NE(m.find("field 'bytes'"), std::string::npos) << m;
  }
  EXPECT_EQ(problem_at_batch(p, int64_t{1} << 30).nodes[0].bytes, int64_t{1} << 50);
}

TEST(Problem, ChainLayout) {
  Problem p = make_chain_problem({1, 2, 3}, {10, 20, 30});
  ASSERT_EQ(p.size(), 7);
  EXPECT_EQ(p.nodes[3].name, "loss");
  EXPECT_EQ(p.nodes[3].deps, (std::vector<int>{2}));
  EXPECT_EQ(p.nodes[4].name, "b2");
  EXPECT_EQ(p.nodes[4].deps, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(p.nodes[4].bytes, 20);
  EXPECT_DOUBLE_EQ(p.nodes[4].cost, 6);
  EXPECT_EQ(p.nodes[6].name, "b0");
  EXPECT_EQ(p.nodes[6].deps, (std::vector<int>{0, 5}));
  EXPECT_NO_THROW(problem_validate(p));
}

}  // namespace
}  // namespace remat
