// The profiler on the CPU backend (and on a GPU when one exists): one entry per non-update
// node in order, positive times, bytes and workspace as the graph and backend say, valid input
// data, JSON round trip, graph matching and the cache path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "models/build.h"
#include "models/config.h"
#include "ops/registry.h"
#include "runtime/backends/cuda_backend.h"
#include "runtime/core/check.h"
#include "runtime/graph/autodiff.h"
#include "runtime/profiler.h"
#include "tests/scoped_env.h"
#include "tests/source_dir.h"

namespace remat {
namespace {

Graph small_cnn_training_graph(const OpRegistry& ops, int64_t batch) {
  ModelConfig cfg = load_model_config(test_source_dir() + "/configs/small_cnn.yaml");
  BuildOptions bo;
  bo.batch = batch;
  return make_training_graph(build_forward_graph(cfg, ops, bo), ops, cfg.optimizer.op,
                             cfg.optimizer.attrs);
}

std::vector<const Node*> non_update_nodes(const Graph& g) {
  std::vector<const Node*> r;
  for (const Node& n : g.nodes)
    if (n.kind != NodeKind::Update) r.push_back(&n);
  return r;
}

// What the backend reports for a node's workspace, asked independently of the profiler.
int64_t backend_workspace(Backend& be, const Graph& g, const OpRegistry& ops, const Node& n) {
  ExecContext ctx;
  ctx.node = &n;
  for (ValueId v : n.inputs) ctx.inputs.push_back(TensorView{&g.value(v).desc, nullptr});
  ctx.output = TensorView{&g.value(n.output).desc, nullptr};
  return be.workspace_bytes(ops.get(n.op), ctx);
}

void expect_table_describes(const CostTable& t, const Graph& g, int64_t link_bytes) {
  const auto nodes = non_update_nodes(g);
  ASSERT_EQ(t.nodes.size(), nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeCost& c = t.nodes[i];
    const Value& out = g.value(nodes[i]->output);
    EXPECT_EQ(c.name, nodes[i]->name);
    EXPECT_GT(c.cost, 0) << c.name;
    EXPECT_TRUE(std::isfinite(c.spread) && c.spread >= 0) << c.name << " spread " << c.spread;
    EXPECT_EQ(c.bytes, out.kind == ValueKind::Activation ? out.desc.bytes() : 0) << c.name;
  }
  EXPECT_EQ(t.unit, "ms");
  EXPECT_EQ(t.model, g.name);
  EXPECT_EQ(t.batch, g.batch);
  // The host link, each way: above 100 MB/s (a 1 MiB copy within 10 ms, on any host or link)
  // and below 10 TB/s (no memory system copies faster).
  EXPECT_EQ(t.link.bytes, link_bytes);
  for (double rate : {t.link.to_host_bytes_per_second, t.link.from_host_bytes_per_second}) {
    EXPECT_GT(rate, 1e8);
    EXPECT_LT(rate, 1e13);
  }
}

TEST(Profiler, SmallCnnOnCpu) {
  const OpRegistry ops = make_builtin_registry();
  const Graph g = small_cnn_training_graph(ops, 4);
  auto be = make_cpu_backend();
  ProfileOptions po;
  po.warmup = 1;
  po.repeats = 3;
  po.link_bytes = int64_t(1) << 20;
  size_t reported = 0;
  po.on_node = [&](size_t i, size_t n, const NodeCost&) {
    EXPECT_EQ(i, reported);
    EXPECT_EQ(n, non_update_nodes(g).size());
    ++reported;
  };
  const CostTable t = profile_graph(g, ops, *be, po);
  expect_table_describes(t, g, po.link_bytes);
  EXPECT_EQ(reported, t.nodes.size());
  EXPECT_EQ(t.device, "cpu");
  EXPECT_EQ(t.batch, 4);
  // The graph has persistent outputs (parameter gradients) and some workspace somewhere, so
  // the checks below compare non-trivial values.
  int64_t zero_bytes = 0;
  const auto nodes = non_update_nodes(g);
  for (size_t i = 0; i < nodes.size(); ++i) {
    EXPECT_EQ(t.nodes[i].workspace_bytes, backend_workspace(*be, g, ops, *nodes[i]))
        << t.nodes[i].name;
    zero_bytes += t.nodes[i].bytes == 0;
  }
  EXPECT_GT(zero_bytes, 0);
  std::string why;
  EXPECT_TRUE(costs_match_graph(t, g, &why)) << why;

  // JSON round trip.
  const std::string path = ::testing::TempDir() + "/remat_profiler_costs.json";
  costs_save(t, path);
  const CostTable u = costs_load(path);
  std::remove(path.c_str());
  EXPECT_EQ(u.model, t.model);
  EXPECT_EQ(u.device, t.device);
  EXPECT_EQ(u.unit, t.unit);
  EXPECT_EQ(u.batch, t.batch);
  ASSERT_EQ(u.nodes.size(), t.nodes.size());
  for (size_t i = 0; i < t.nodes.size(); ++i) {
    EXPECT_EQ(u.nodes[i].name, t.nodes[i].name);
    EXPECT_DOUBLE_EQ(u.nodes[i].cost, t.nodes[i].cost);
    EXPECT_EQ(u.nodes[i].bytes, t.nodes[i].bytes);
    EXPECT_EQ(u.nodes[i].workspace_bytes, t.nodes[i].workspace_bytes);
    EXPECT_DOUBLE_EQ(u.nodes[i].spread, t.nodes[i].spread);
  }
  EXPECT_DOUBLE_EQ(u.link.to_host_bytes_per_second, t.link.to_host_bytes_per_second);
  EXPECT_DOUBLE_EQ(u.link.from_host_bytes_per_second, t.link.from_host_bytes_per_second);
  EXPECT_EQ(u.link.bytes, t.link.bytes);
}

// A table's link is optional; when present, both rates are finite and positive.
TEST(Profiler, TheLinkFieldIsCheckedOnLoad) {
  const std::string head = R"({"format": "remat-costs/1", "unit": "ms", "batch": 1, "nodes": [])";
  EXPECT_FALSE(costs_from_json_text(head + "}", "c.json").link.measured());
  const CostTable t = costs_from_json_text(
      head + R"(, "link": {"to_host_bytes_per_second": 2e10, "from_host_bytes_per_second": 1e10}})",
      "c.json");
  EXPECT_DOUBLE_EQ(t.link.bytes_per_second(), 1e10);  // the slower direction
  for (const char* bad : {R"("link": 5)", R"("link": {"to_host_bytes_per_second": 1e10})",
                          R"("link": {"to_host_bytes_per_second": 0, "from_host_bytes_per_second": 1})",
                          R"("link": {"to_host_bytes_per_second": 1, "from_host_bytes_per_second": -1})"}) {
    try {
      costs_from_json_text(head + ", " + bad + "}", "c.json");
      ADD_FAILURE() << bad << " loaded";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("c.json: field 'link'"), std::string::npos)
          << bad << ": " << e.what();
    }
  }
}

TEST(Profiler, MatchRejectsAnotherGraph) {
  const OpRegistry ops = make_builtin_registry();
  const Graph g = small_cnn_training_graph(ops, 4);
  const Graph g8 = small_cnn_training_graph(ops, 8);
  CostTable t;
  for (const Node* n : non_update_nodes(g)) {
    const Value& out = g.value(n->output);
    t.nodes.push_back({n->name, 1.0, out.kind == ValueKind::Activation ? out.desc.bytes() : 0, 0, 0});
  }
  std::string why;
  EXPECT_TRUE(costs_match_graph(t, g, &why)) << why;
  EXPECT_FALSE(costs_match_graph(t, g8, &why));  // same names, other batch: bytes differ
  EXPECT_NE(why.find("bytes"), std::string::npos) << why;
  CostTable renamed = t;
  renamed.nodes[2].name = "other";
  EXPECT_FALSE(costs_match_graph(renamed, g, &why));
  EXPECT_NE(why.find("other"), std::string::npos) << why;
  CostTable shorter = t;
  shorter.nodes.pop_back();
  EXPECT_FALSE(costs_match_graph(shorter, g, &why));
  CostTable longer = t;
  longer.nodes.push_back(t.nodes.back());
  EXPECT_FALSE(costs_match_graph(longer, g, &why));
}

// A hand-made graph with a probe op that checks what it is given: labels within the classes of
// its logits, positive buffers, floats in [-1, 1], its workspace; an update node that must
// not run; a node writing a persistent value (bytes 0).
TEST(Profiler, FillsValidInputsAndSkipsUpdates) {
  struct Probe {
    int calls = 0;
    std::string problem;
  } probe;
  auto typed = std::make_shared<const OpAttrs>();
  OpRegistry ops;
  OpDef loss;
  loss.name = "probe_loss";
  loss.kind = NodeKind::Loss;
  loss.parse = [typed](AttrReader&) { return typed; };
  loss.infer = [](const OpAttrs&, const std::vector<TensorDesc>&) {
    return TensorDesc{{1}, DType::F32};
  };
  loss.cost = [](const OpAttrs&, const std::vector<TensorDesc>&, const TensorDesc&) {
    OpCost c;
    c.workspace_bytes = 96;
    return c;
  };
  loss.cpu = [&probe](const ExecContext& ctx) {
    ++probe.calls;
    const TensorView& logits = ctx.inputs.at(0);
    const TensorView& labels = ctx.inputs.at(1);
    const TensorView& var = ctx.inputs.at(2);
    for (int64_t i = 0; i < logits.numel(); ++i)
      if (!(logits.f32()[i] >= -1 && logits.f32()[i] <= 1)) probe.problem = "logit out of range";
    for (int64_t i = 0; i < labels.numel(); ++i)
      if (labels.i32()[i] < 0 || labels.i32()[i] >= logits.dim(1)) probe.problem = "bad label";
    for (int64_t i = 0; i < var.numel(); ++i)
      if (!(var.f32()[i] > 0)) probe.problem = "non-positive buffer";
    if (!ctx.workspace || ctx.workspace_bytes != 96) probe.problem = "no workspace";
    ctx.output.f32()[0] = 1;
  };
  ops.add(loss);
  OpDef grad = loss;
  grad.name = "probe_grad";
  grad.kind = NodeKind::Backward;
  grad.cpu = [](const ExecContext& ctx) { ctx.output.f32()[0] = 2; };
  ops.add(grad);
  OpDef update = grad;
  update.name = "probe_update";
  update.kind = NodeKind::Update;
  update.cpu = [](const ExecContext&) { REMAT_FAIL("update nodes must not be profiled"); };
  ops.add(update);

  Graph g;
  g.name = "probe";
  g.batch = 5;
  auto value = [&](const char* name, Shape s, DType t, ValueKind k) {
    Value v;
    v.name = name;
    v.desc = TensorDesc{std::move(s), t};
    v.kind = k;
    return g.add_value(v);
  };
  g.input = value("logits", {5, 3}, DType::F32, ValueKind::Input);
  g.label = value("labels", {5}, DType::I32, ValueKind::Label);
  const ValueId var = value("bn.running_var", {64}, DType::F32, ValueKind::Buffer);
  const ValueId w = value("w", {3}, DType::F32, ValueKind::Param);
  const ValueId wg = value("w.grad", {3}, DType::F32, ValueKind::ParamGrad);
  Node n;
  n.name = "loss";
  n.op = "probe_loss";
  n.kind = NodeKind::Loss;
  n.typed = typed;
  n.inputs = {g.input, g.label, var};
  g.loss = g.node(g.add_node(n, TensorDesc{{1}, DType::F32})).output;
  n.name = "loss.grad";
  n.op = "probe_grad";
  n.kind = NodeKind::Backward;
  n.inputs = {g.loss, w};
  g.add_node_writing(n, wg);
  n.name = "w.update";
  n.op = "probe_update";
  n.kind = NodeKind::Update;
  n.inputs = {w, wg};
  g.add_node_writing(n, w);

  auto be = make_cpu_backend();
  ProfileOptions po;
  po.warmup = 2;
  po.repeats = 5;
  po.link_bytes = int64_t(1) << 20;
  const CostTable t = profile_graph(g, ops, *be, po);
  EXPECT_EQ(probe.problem, "");
  EXPECT_EQ(probe.calls, 7);
  ASSERT_EQ(t.nodes.size(), 2u);
  EXPECT_EQ(t.nodes[0].name, "loss");
  EXPECT_EQ(t.nodes[0].bytes, 4);
  EXPECT_EQ(t.nodes[0].workspace_bytes, 96);
  EXPECT_EQ(t.nodes[1].name, "loss.grad");
  EXPECT_EQ(t.nodes[1].bytes, 0);

  // An error inside a node names the node; bad options are refused.
  OpRegistry failing;
  OpDef boom = loss;
  boom.cpu = [](const ExecContext&) { REMAT_FAIL("boom"); };
  failing.add(boom);
  failing.add(grad);
  failing.add(update);
  try {
    profile_graph(g, failing, *be, po);
    FAIL() << "a failing kernel was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node 'loss'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("boom"), std::string::npos) << e.what();
  }
  ProfileOptions none;
  none.repeats = 0;
  EXPECT_THROW(profile_graph(g, ops, *be, none), Error);
}

TEST(Profiler, CachePathFollowsEnvironmentAndSanitises) {
  {
    ScopedEnv a("REMAT_CACHE_DIR", "/tmp/rc/");
    ScopedEnv b("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(profile_cache_path("small_cnn", 4, "cpu"), "/tmp/rc/small_cnn-b4-cpu.json");
    EXPECT_EQ(profile_cache_path("vgg/19", 32, "cuda:0 NVIDIA H100 (sm_90, 80 GiB)"),
              "/tmp/rc/vgg_19-b32-cuda_0_NVIDIA_H100__sm_90__80_GiB_.json");
  }
  {
    ScopedEnv a("REMAT_CACHE_DIR", nullptr);
    ScopedEnv b("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(profile_cache_path("m", 1, "cpu"), "/xdg/remat/m-b1-cpu.json");
  }
  {
    ScopedEnv a("REMAT_CACHE_DIR", nullptr);
    ScopedEnv b("XDG_CACHE_HOME", nullptr);
    ScopedEnv c("HOME", "/home/someone");
    EXPECT_EQ(profile_cache_path("m", 1, "cpu"), "/home/someone/.cache/remat/m-b1-cpu.json");
  }
}

// A bf16 and a channels-last graph have other nodes and kernels: their cost tables are cached
// apart from the fp32 channels-first one's and from each other's.
TEST(Profiler, CacheKeySeparatesPrecisionAndLayout) {
  const OpRegistry ops = make_builtin_registry();
  auto key = [&](const std::vector<std::string>& overrides) {
    ModelConfig cfg = load_model_config(test_source_dir() + "/configs/small_cnn.yaml", overrides);
    return profile_cache_key(build_forward_graph(cfg, ops));
  };
  EXPECT_EQ(key({}), "small_cnn-3x32x32");
  EXPECT_EQ(key({"precision=bf16"}), "small_cnn-3x32x32-bf16");
  EXPECT_EQ(key({"layout=channels_last"}), "small_cnn-3x32x32-channels-last");
  EXPECT_EQ(key({"layout=channels_last", "precision=bf16"}),
            "small_cnn-3x32x32-channels-last-bf16");
}

TEST(ProfilerGpu, SmallCnnOnCuda) {
  std::string why;
  if (!cuda_device_available(&why)) GTEST_SKIP() << why;
  auto be = make_cuda_backend(0, &why);
  ASSERT_TRUE(be) << why;
  const OpRegistry ops = make_builtin_registry();
  const Graph g = small_cnn_training_graph(ops, 4);
  ProfileOptions po;
  po.warmup = 2;
  po.repeats = 5;
  const CostTable t = profile_graph(g, ops, *be, po);
  expect_table_describes(t, g, po.link_bytes);
  EXPECT_NE(t.device.find("cuda"), std::string::npos) << t.device;
  const auto nodes = non_update_nodes(g);
  for (size_t i = 0; i < nodes.size(); ++i)
    EXPECT_EQ(t.nodes[i].workspace_bytes, backend_workspace(*be, g, ops, *nodes[i]))
        << t.nodes[i].name;
}

}  // namespace
}  // namespace remat
