// The training graph: JSON round trip (typed attributes re-parsed), persistent bytes, and
// validation of malformed graphs.
#include <gtest/gtest.h>

#include "tests/source_dir.h"
#include "models/build.h"
#include "models/config.h"
#include "ops/registry.h"
#include "runtime/graph/autodiff.h"
#include "runtime/core/check.h"

namespace remat {
namespace {

Graph small_dag_training_graph(const OpRegistry& ops) {
  ModelConfig cfg = load_model_config(test_source_dir() + "/configs/small_dag.yaml");
  return make_training_graph(build_forward_graph(cfg, ops), ops, cfg.optimizer.op,
                             cfg.optimizer.attrs);
}

TEST(Graph, JsonRoundTripKeepsEverything) {
  OpRegistry ops = make_builtin_registry();
  Graph g = small_dag_training_graph(ops);
  std::string text = graph_to_json_text(g);
  Graph h = graph_from_json_text(text, ops, "g.json");
  ASSERT_EQ(h.nodes.size(), g.nodes.size());
  ASSERT_EQ(h.values.size(), g.values.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    EXPECT_EQ(h.nodes[i].name, g.nodes[i].name);
    EXPECT_EQ(h.nodes[i].op, g.nodes[i].op);
    EXPECT_EQ(h.nodes[i].kind, g.nodes[i].kind);
    EXPECT_EQ(h.nodes[i].inputs, g.nodes[i].inputs);
    EXPECT_EQ(h.nodes[i].output, g.nodes[i].output);
    EXPECT_EQ(h.nodes[i].seed, g.nodes[i].seed);
    EXPECT_TRUE(h.nodes[i].typed != nullptr);
  }
  for (size_t v = 0; v < g.values.size(); ++v) {
    EXPECT_EQ(h.values[v].name, g.values[v].name);
    EXPECT_EQ(h.values[v].desc, g.values[v].desc);
    EXPECT_EQ(h.values[v].kind, g.values[v].kind);
    EXPECT_EQ(h.values[v].producer, g.values[v].producer);
  }
  EXPECT_EQ(h.persistent_bytes(), g.persistent_bytes());
  EXPECT_EQ(graph_to_json_text(h), text);
}

TEST(Graph, PersistentBytesCountParamsGradsStateAndBatch) {
  OpRegistry ops = make_builtin_registry();
  Graph g = small_dag_training_graph(ops);
  int64_t expect = 0;
  for (const auto& v : g.values)
    if (v.kind != ValueKind::Activation) expect += alloc_bytes(v.desc.numel() * 4);  // 256-B units
  EXPECT_EQ(g.persistent_bytes(), expect);
  EXPECT_GT(expect, 0);
}

TEST(Graph, ValidateRejectsUseBeforeDefinition) {
  OpRegistry ops = make_builtin_registry();
  Graph g = small_dag_training_graph(ops);
  // Make the first node read the output of the last forward node.
  g.nodes[0].inputs[0] = g.nodes[3].output;
  EXPECT_THROW(g.validate(), Error);
}

TEST(Graph, LoadErrorsNameTheFile) {
  OpRegistry ops = make_builtin_registry();
  try {
    graph_from_json_text("{\"format\": \"other\"}", ops, "bad.json");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
  }
  try {
    graph_from_json_text("{not json", ops, "broken.json");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("broken.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace remat
