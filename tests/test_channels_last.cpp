// Channels-last models (Note [channels-last layout] in models/channels_last.cpp): where the
// builder puts `layout` nodes and which nodes run channels-last; that training a channels-last
// model on the CPU gives bit for bit the weights, gradients and optimizer state of the
// channels-first model (fp32 and bf16: CNNs, a DAG, a U-Net, MobileNetV2, and a model whose
// layout changes in the middle; averages over a window's real elements, InceptionV3's, are
// tests/test_ops_channels_last.cpp's); that under budgets every strategy recomputes it
// bit-identically with the measured peak equal to the plan's; and that a layer may not set
// data_format itself.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "models/build.h"
#include "models/config.h"
#include "models/data.h"
#include "ops/registry.h"
#include "runtime/executor.h"
#include "runtime/graph/autodiff.h"
#include "solver/from_graph.h"
#include "solver/strategies.h"
#include "tests/source_dir.h"

namespace remat {
namespace {

const OpRegistry& registry() {
  static const OpRegistry r = make_builtin_registry();
  return r;
}

struct Built {
  ModelConfig cfg;
  Graph g;
};

Built build(const std::string& name, bool channels_last, DType precision, int64_t batch,
            std::optional<Shape> input = std::nullopt) {
  Built b;
  b.cfg = load_model_config(test_source_dir() + "/configs/" + name + ".yaml",
                            {std::string("layout=") +
                             (channels_last ? "channels_last" : "channels_first")});
  BuildOptions bo;
  bo.batch = batch;
  bo.precision = precision;
  bo.input = input;
  b.g = make_training_graph(build_forward_graph(b.cfg, registry(), bo), registry(),
                            b.cfg.optimizer.op, b.cfg.optimizer.attrs);
  return b;
}

std::vector<std::string> layout_nodes(const Graph& g) {
  std::vector<std::string> out;
  for (const Node& n : g.nodes)
    if (n.op == "layout" && n.kind == NodeKind::Forward) out.push_back(n.name);
  return out;
}

bool runs_channels_last(const Graph& g, const std::string& node) {
  const NodeId n = g.find_node(node);
  EXPECT_GE(n, 0) << node;
  return n >= 0 && g.node(n).attrs.has("data_format");
}

TEST(ChannelsLastBuild, SmallCnnConvertsTheInputAndBeforeFlatten) {
  const Built b = build("small_cnn", true, DType::F32, 4);
  EXPECT_EQ(layout_nodes(b.g), (std::vector<std::string>{"input.to_nhwc", "pool2.to_nchw"}));
  for (const char* n : {"conv1", "bn1", "pool1", "conv2", "bn2", "pool2"})
    EXPECT_TRUE(runs_channels_last(b.g, n)) << n;
  EXPECT_FALSE(runs_channels_last(b.g, "flat"));
  EXPECT_FALSE(runs_channels_last(b.g, "relu1"));  // elementwise: no attribute, NHWC input
  EXPECT_EQ(b.g.value(b.g.node(b.g.find_node("conv1")).output).desc.shape,
            (Shape{4, 32, 32, 16}));
  EXPECT_EQ(b.g.value(b.g.node(b.g.find_node("relu1")).output).desc.shape,
            (Shape{4, 32, 32, 16}));
  // The backward nodes share the forward node's attributes, so they run channels-last too.
  EXPECT_TRUE(runs_channels_last(b.g, "conv2.grad_weight"));
  EXPECT_TRUE(runs_channels_last(b.g, "bn1.grad_input"));
  // Parameters keep their layouts: the convolution weight is KCRS.
  EXPECT_EQ(b.g.value(b.g.find_value("conv2.weight")).desc.shape, (Shape{32, 16, 3, 3}));
}

TEST(ChannelsLastBuild, EveryImageOpOfTheZooRunsChannelsLast) {
  const Built dag = build("small_dag", true, DType::F32, 2);
  // concat joins channels-last inputs along their last axis: no conversion around it.
  EXPECT_EQ(layout_nodes(dag.g), (std::vector<std::string>{"input.to_nhwc"}));
  for (const char* n : {"cat", "pool", "gap", "cat.grad_0", "cat.grad_1"})
    EXPECT_TRUE(runs_channels_last(dag.g, n)) << n;
  // A U-Net's upsample, concat and per-pixel logits run channels-last; the per-pixel loss reads
  // NCHW logits.
  const Built unet = build("unet", true, DType::F32, 1, Shape{3, 32, 32});
  EXPECT_EQ(layout_nodes(unet.g), (std::vector<std::string>{"input.to_nhwc", "logits.to_nchw"}));
  for (const Node& n : unet.g.nodes)
    if (n.op == "upsample" || n.op == "concat") {
      EXPECT_TRUE(n.attrs.has("data_format")) << n.name;
    }
}

// A dense layer over the last axis of a 4-D tensor (W for NCHW) has no channels-last form: its
// input converts back and the next convolution converts again, and the model still trains as
// the channels-first one does (TrainsBitIdenticallyToTheChannelsFirstModel).
const char* kMixedYaml =
    "name: mixed\ninput: [3, 8, 8]\nclasses: 4\nbatch: 2\nseed: 3\nlayers:\n"
    "  - {name: c1, op: conv2d, filters: 4, kernel: 3, padding: 1}\n"
    "  - {name: d, op: dense, units: 8}\n"
    "  - {name: r, op: relu}\n"
    "  - {name: c2, op: conv2d, filters: 4, kernel: 3, padding: 1, activation: relu}\n"
    "  - {name: f, op: flatten}\n"
    "  - {name: out, op: dense, units: 4}\n";

Built build_yaml(const char* yaml, bool channels_last) {
  Built b;
  b.cfg = parse_model_config(yaml, "mixed.yaml",
                             {channels_last ? "layout=channels_last" : "layout=channels_first"});
  b.g = make_training_graph(build_forward_graph(b.cfg, registry()), registry(),
                            b.cfg.optimizer.op, b.cfg.optimizer.attrs);
  return b;
}

TEST(ChannelsLastBuild, AnOpWithoutAChannelsLastFormGetsChannelsFirstInputs) {
  const Built b = build_yaml(kMixedYaml, true);
  EXPECT_EQ(layout_nodes(b.g), (std::vector<std::string>{"input.to_nhwc", "c1.to_nchw",
                                                          "r.to_nhwc", "c2.to_nchw"}));
  EXPECT_FALSE(runs_channels_last(b.g, "d"));
  EXPECT_EQ(b.g.value(b.g.find_value("d")).desc.shape, (Shape{2, 4, 8, 8}));  // over W
}

// A channel_slice of the channels runs channels-last; one along another axis (Swin's qkv[i])
// reads its input channels-first.
TEST(ChannelsLastBuild, ASliceAlongAnotherAxisThanTheChannelsStaysChannelsFirst) {
  const char* yaml =
      "name: slices\ninput: [3, 8, 8]\nclasses: 4\nbatch: 2\nseed: 3\nlayers:\n"
      "  - {name: c1, op: conv2d, filters: 4, kernel: 3, padding: 1}\n"
      "  - {name: s1, op: channel_slice, offset: 1, channels: 2}\n"
      "  - {name: s2, op: channel_slice, axis: 2, offset: 2, channels: 4}\n"
      "  - {name: f, op: flatten}\n"
      "  - {name: out, op: dense, units: 4}\n";
  const Built b = build_yaml(yaml, true);
  EXPECT_TRUE(runs_channels_last(b.g, "s1"));
  EXPECT_FALSE(runs_channels_last(b.g, "s2"));
  EXPECT_EQ(b.g.value(b.g.find_value("s2")).desc.shape, (Shape{2, 2, 4, 8}));
}

// In bf16 the batch itself is bf16 (Note [bf16 input batch]), and its conversion to NHWC too.
TEST(ChannelsLastBuild, Bf16BatchConvertsOnce) {
  const Built b = build("small_cnn", true, DType::BF16, 4);
  EXPECT_EQ(layout_nodes(b.g), (std::vector<std::string>{"input.to_nhwc", "pool2.to_nchw"}));
  EXPECT_EQ(b.g.value(b.g.input).desc.dtype, DType::BF16);
  const Value& v = b.g.value(b.g.find_value("input.to_nhwc"));
  EXPECT_EQ(v.desc.dtype, DType::BF16);
  EXPECT_EQ(v.desc.shape, (Shape{4, 32, 32, 3}));
}

TEST(ChannelsLastBuild, ResNet50IsChannelsLastFromTheInputToTheGlobalPool) {
  const Built b = build("resnet50", true, DType::F32, 2, Shape{3, 32, 32});
  EXPECT_EQ(layout_nodes(b.g), (std::vector<std::string>{"input.to_nhwc"}));
}

TEST(ChannelsLastBuild, ALayerMayNotSetDataFormat) {
  const std::string yaml =
      "name: m\ninput: [3, 8, 8]\nclasses: 2\nbatch: 2\nlayout: channels_last\nlayers:\n"
      "  - {name: c, op: conv2d, filters: 2, kernel: 3, data_format: channels_last}\n"
      "  - {name: f, op: flatten}\n  - {name: d, op: dense, units: 2}\n";
  const ModelConfig cfg = parse_model_config(yaml, "t.yaml");
  try {
    build_forward_graph(cfg, registry());
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("t.yaml:7:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("layer 'c'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("data_format"), std::string::npos) << msg;
    EXPECT_NE(msg.find("`layout:`"), std::string::npos) << msg;
  }
  // The layout op is the builder's: a layer of it would store NHWC what the builder takes for
  // NCHW.
  const std::string with_layout_layer =
      "name: m\ninput: [3, 8, 8]\nclasses: 2\nbatch: 2\nlayers:\n"
      "  - {name: t, op: layout, to: channels_last}\n"
      "  - {name: f, op: flatten}\n  - {name: d, op: dense, units: 2}\n";
  try {
    build_forward_graph(parse_model_config(with_layout_layer, "v.yaml"), registry());
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("v.yaml:6:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("op 'layout' is internal"), std::string::npos) << msg;
  }
  try {
    parse_model_config("name: m\ninput: [3, 8, 8]\nclasses: 2\nbatch: 2\nlayout: nhwc\nlayers:\n"
                       "  - {name: d, op: dense, units: 2}\n",
                       "u.yaml");
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("u.yaml:5:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("channels_last"), std::string::npos) << msg;
  }
}

// Every persistent value (parameters, gradients, buffers, optimizer state) after `steps` steps
// of `plan`, checking the measured peak against the plan's.
std::vector<std::vector<float>> train_state(Built& b, const ExecutionPlan& plan,
                                            ExecutorOptions eo, int steps,
                                            int64_t* recomputes = nullptr) {
  std::unique_ptr<Backend> be = make_cpu_backend();
  Executor ex(b.g, registry(), *be, eo);
  ex.init_parameters(b.cfg.seed);
  const TensorDesc& in = b.g.value(b.g.input).desc;
  const TensorDesc& lab = b.g.value(b.g.label).desc;
  auto data = make_data_source(b.cfg, in, lab, "");
  std::vector<uint32_t> x(static_cast<size_t>(in.numel()));
  std::vector<int32_t> y(static_cast<size_t>(lab.numel()));
  for (int s = 0; s < steps; ++s) {
    data->next_batch(s, x.data(), y.data());
    const StepResult r = ex.run_step(plan, x.data(), y.data(), s);
    EXPECT_EQ(r.peak_bytes, plan.predicted_peak) << plan.strategy;
    if (recomputes) *recomputes += r.recomputes;
  }
  std::vector<std::vector<float>> state;
  for (size_t v = 0; v < b.g.values.size(); ++v) {
    const ValueKind k = b.g.values[v].kind;
    if (k == ValueKind::Param || k == ValueKind::ParamGrad || k == ValueKind::Buffer ||
        k == ValueKind::OptState)
      state.push_back(ex.read(static_cast<ValueId>(v)));
  }
  return state;
}

void expect_same_state(const std::vector<std::vector<float>>& a,
                       const std::vector<std::vector<float>>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << what << ": persistent value #" << i;
    EXPECT_EQ(std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)), 0)
        << what << ": persistent value #" << i << " differs";
  }
}

ExecutionPlan keep_all(const Built& b, Backend& be) {
  return plan_keep_all(b.g,
                       [&](NodeId n) { return node_workspace_bytes(b.g, registry(), be, n); });
}

struct TrainCase {
  std::string name;
  DType precision;
  int64_t batch;
  std::optional<Shape> input;
};

TEST(ChannelsLastTrain, TrainsBitIdenticallyToTheChannelsFirstModel) {
  const std::vector<TrainCase> cases = {{"small_cnn", DType::F32, 4, std::nullopt},
                                        {"small_cnn", DType::BF16, 4, std::nullopt},
                                        {"small_dag", DType::F32, 4, std::nullopt},
                                        {"unet", DType::BF16, 1, Shape{3, 32, 32}},
                                        {"resnet50", DType::BF16, 2, Shape{3, 32, 32}},
                                        // 'same' at stride 2 (pads 0, 1), relu6, depthwise
                                        {"mobilenet_v2", DType::F32, 2, Shape{3, 32, 32}}};
  std::unique_ptr<Backend> be = make_cpu_backend();
  {
    SCOPED_TRACE("mixed");
    Built first = build_yaml(kMixedYaml, false), last = build_yaml(kMixedYaml, true);
    expect_same_state(train_state(first, keep_all(first, *be), {}, 2),
                      train_state(last, keep_all(last, *be), {}, 2), "mixed");
  }
  for (const TrainCase& c : cases) {
    const std::string what = c.name + (c.precision == DType::BF16 ? " bf16" : " fp32");
    SCOPED_TRACE(what);
    Built first = build(c.name, false, c.precision, c.batch, c.input);
    Built last = build(c.name, true, c.precision, c.batch, c.input);
    const auto a = train_state(first, keep_all(first, *be), {}, 2);
    const auto b = train_state(last, keep_all(last, *be), {}, 2);
    expect_same_state(a, b, what);
  }
}

TEST(ChannelsLastTrain, EveryStrategyRecomputesBitIdenticallyWithThePlannedPeak) {
  std::unique_ptr<Backend> be = make_cpu_backend();
  for (DType precision : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(precision == DType::BF16 ? "bf16" : "fp32");
    Built m = build("small_cnn", true, precision, 4);
    auto ws = [&](NodeId n) { return node_workspace_bytes(m.g, registry(), *be, n); };
    GraphProblem gp = problem_from_graph(m.g, flops_costs(m.g, registry(), ws));
    const ExecutionPlan keep = plan_keep_all(m.g, ws);
    const auto reference = train_state(m, keep, {}, 2);
    const int64_t lo = problem_min_budget(gp.problem), hi = keep.predicted_peak;
    int64_t recomputes = 0;
    for (int k = 1; k <= 2; ++k) {
      const int64_t budget = hi - (hi - lo) * 8 * k / 100;
      for (const std::string& strategy : strategy_names()) {
        SolveOptions so;
        so.time_limit_seconds = 10;
        const SolveResult r = solve(gp.problem, strategy, budget, so);
        if (!r.feasible) continue;
        const ExecutionPlan plan = lower_schedule(m.g, gp, r.schedule, budget);
        for (MemoryMode mode : {MemoryMode::Arena, MemoryMode::Pool}) {
          const auto state =
              train_state(m, plan, ExecutorOptions{mode, budget + budget / 4}, 2, &recomputes);
          expect_same_state(state, reference, strategy + " at " + std::to_string(budget));
        }
      }
    }
    EXPECT_GT(recomputes, 0) << "no plan recomputed anything";
  }
}

}  // namespace
}  // namespace remat
