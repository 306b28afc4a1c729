// Token models end to end on the CPU: the YAML schema (sequence, vocab, the loss as a map,
// weight tying with `share`) and its errors, the graph a token model builds, a whole GPT block's
// parameter gradients against central differences, and the causal mask: no gradient reaches a
// position from a later one's loss.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>

#include "models/build.h"
#include "models/config.h"
#include "ops/registry.h"
#include "runtime/graph/autodiff.h"
#include "runtime/backends/backend.h"
#include "runtime/executor.h"
#include "runtime/graph/init.h"
#include "runtime/memory/plan.h"
#include "tests/model_test_util.h"

namespace remat {
namespace {

using ::testing::HasSubstr;
using test::user_error;

const OpRegistry& registry() {
  static const OpRegistry r = make_builtin_registry();
  return r;
}

// One GPT block (pre-norm attention and MLP with residuals) between tied embeddings.
std::string block_yaml(bool causal = true, const std::string& loss = "token_xent") {
  return std::string(R"(name: block
sequence: 4
vocab: 7
batch: 2
seed: 3
loss: )") + loss + R"(
optimizer: {op: sgd, lr: 0.0}
layers:
  - {name: wte, op: embedding, vocab: 7, dim: 8, init_std: 0.5}
  - {name: wpe, op: position_embedding, max_len: 6, init_std: 0.5}
  - {name: ln_1, op: layernorm}
  - {name: q, op: linear, units: 8, init_std: 0.5}
  - {name: k, op: linear, units: 8, init_std: 0.5, inputs: ln_1}
  - {name: v, op: linear, units: 8, init_std: 0.5, inputs: ln_1}
  - {name: qh, op: split_heads, heads: 2, inputs: q}
  - {name: kh, op: split_heads, heads: 2, inputs: k}
  - {name: vh, op: split_heads, heads: 2, inputs: v}
  - {name: scores, op: matmul, inputs: [qh, kh], transpose_b: true, scale: 0.5}
  - {name: probs, op: softmax, causal: )" + (causal ? "true" : "false") + R"(}
  - {name: att, op: matmul, inputs: [probs, vh]}
  - {name: merged, op: merge_heads}
  - {name: proj, op: linear, units: 8, init_std: 0.5}
  - {name: res_1, op: add, inputs: [wpe, proj]}
  - {name: ln_2, op: layernorm}
  - {name: fc, op: linear, units: 16, init_std: 0.5}
  - {name: act, op: gelu}
  - {name: fc_proj, op: linear, units: 8, init_std: 0.5}
  - {name: res_2, op: add, inputs: [res_1, fc_proj]}
  - {name: ln_f, op: layernorm}
  - {name: lm_head, op: linear, units: 7, bias: false, share: {weight: wte.weight}}
)";
}

// ---- schema and graph -----------------------------------------------------------------------

TEST(TokenConfig, SequenceVocabLossAndShare) {
  const ModelConfig cfg = parse_model_config(block_yaml(true, "{op: token_xent, ignore_index: -1}"), "b.yaml");
  EXPECT_TRUE(cfg.tokens());
  EXPECT_EQ(cfg.sequence, 4);
  EXPECT_EQ(cfg.vocab, 7);
  EXPECT_EQ(cfg.loss, "token_xent");
  EXPECT_EQ(std::get<int64_t>(cfg.loss_attrs.values.at("ignore_index")), -1);
  const LayerConfig* head = cfg.find_layer("lm_head");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->shared.at("weight"), "wte.weight");
  EXPECT_FALSE(head->attrs.has("share"));
  EXPECT_EQ(parse_model_config(block_yaml(), "b.yaml").loss, "token_xent");  // the default
}

TEST(TokenConfig, ErrorsNameFileLineAndField) {
  auto err = [](const std::string& yaml) {
    return user_error([&] { parse_model_config(yaml, "e.yaml"); });
  };
  const std::string layers = "layers:\n  - {name: e, op: embedding, vocab: 4, dim: 2}\n";
  EXPECT_THAT(err("name: m\nsequence: 4\nvocab: 4\ninput: [1, 2, 2]\nbatch: 1\n" + layers),
              HasSubstr("e.yaml:4:1: model: field 'input': does not apply to a token model"));
  EXPECT_THAT(err("name: m\nsequence: 4\nbatch: 1\n" + layers),
              HasSubstr("e.yaml:2:1: model: field 'sequence': a token model also needs `vocab`"));
  EXPECT_THAT(err("name: m\ninput: [1, 2, 2]\nclasses: 2\nvocab: 4\nbatch: 1\n" + layers),
              HasSubstr("e.yaml:4:1: model: field 'vocab': needs `sequence`"));
  EXPECT_THAT(err("name: m\nsequence: 4\nvocab: 4\nbatch: 1\nloss: softmax_xent\n" + layers),
              HasSubstr("e.yaml:5:1: model: field 'loss': 'softmax_xent' is not one of: token_xent"));
  EXPECT_THAT(err("name: m\nsequence: 4\nvocab: 4\nbatch: 1\nloss: {ignore_index: -1}\n" + layers),
              HasSubstr("e.yaml:5:7: loss: field 'op' is required"));
  EXPECT_THAT(err("name: m\nsequence: 4\nvocab: 4\nbatch: 1\ndata: {source: cifar10, path: x}\n" + layers),
              HasSubstr("e.yaml:5:8: data: field 'source': 'cifar10' is not one of: synthetic, text, tokens"));
  EXPECT_THAT(err("name: m\nsequence: 4\nvocab: 4\nbatch: 1\ndata: {source: text}\n" + layers),
              HasSubstr("e.yaml:5:7: data: field 'path': is required for source text"));
  EXPECT_THAT(err("name: m\nsequence: 4\nvocab: 4\nbatch: 1\n" + layers +
                  "  - {name: h, op: linear, units: 4, share: {weight: wte}}\n"),
              HasSubstr("e.yaml:7:53: layer 'h': field 'share': 'wte' is not a parameter name"));
  EXPECT_THAT(err("name: m\nsequence: 4\nvocab: 4\nbatch: 1\n" + layers +
                  "  - {name: h, op: linear, units: 4, share: {weight: later.weight}}\n"),
              HasSubstr("input 'later' names no layer defined before this one"));
}

TEST(TokenGraph, InputLabelsOverridesAndTiedWeights) {
  const ModelConfig cfg = parse_model_config(block_yaml(), "b.yaml");
  Graph fwd = build_forward_graph(cfg, registry());
  EXPECT_EQ(fwd.value(fwd.input).desc, (TensorDesc{{2, 4}, DType::I32}));
  EXPECT_EQ(fwd.value(fwd.label).desc, (TensorDesc{{2, 4}, DType::I32}));
  EXPECT_EQ(fwd.value(fwd.node(fwd.find_node("scores")).output).desc.shape, (Shape{2, 2, 4, 4}));
  // lm_head reads wte's table; there is no lm_head.weight.
  const ValueId wte = fwd.find_value("wte.weight");
  EXPECT_EQ(fwd.find_value("lm_head.weight"), kNoValue);
  EXPECT_EQ(fwd.node(fwd.find_node("lm_head")).inputs.at(1), wte);
  BuildOptions bo;
  bo.sequence = 6;
  bo.batch = 3;
  Graph longer = build_forward_graph(cfg, registry(), bo);
  EXPECT_EQ(longer.value(longer.input).desc.shape, (Shape{3, 6}));
  bo.sequence = 7;  // past the position table
  EXPECT_THAT(user_error([&] { build_forward_graph(cfg, registry(), bo); }),
              HasSubstr("sequence length T = 7 exceeds max_len 6"));
  BuildOptions image;
  image.input = Shape{3, 4, 4};
  EXPECT_THAT(user_error([&] { build_forward_graph(cfg, registry(), image); }),
              HasSubstr("is a token model"));
  // The two uses of the tied table sum into one gradient.
  Graph g = make_training_graph(fwd, registry(), cfg.optimizer.op, cfg.optimizer.attrs);
  const Value& grad = g.value(g.find_value("wte.weight.grad"));
  EXPECT_EQ(grad.kind, ValueKind::ParamGrad);
  const Node& sum = g.node(grad.producer);
  EXPECT_EQ(sum.op, "add");
  std::vector<std::string> parts;
  for (ValueId v : sum.inputs) parts.push_back(g.value(v).name);
  EXPECT_THAT(parts, ::testing::UnorderedElementsAre("lm_head.grad_weight", "wte.grad_weight"));
  // Graph files keep roles, normal-init widths and per-parameter optimizer attrs.
  Graph back = graph_from_json_text(graph_to_json_text(g), registry(), "g.json");
  for (size_t v = 0; v < g.values.size(); ++v) {
    EXPECT_EQ(back.values[v].role, g.values[v].role) << g.values[v].name;
    EXPECT_EQ(back.values[v].init_std, g.values[v].init_std) << g.values[v].name;
  }
}

TEST(TokenGraph, ShareErrors) {
  auto err = [](const std::string& head) {
    const std::string yaml = "name: m\nsequence: 2\nvocab: 4\nbatch: 1\nlayers:\n"
                             "  - {name: e, op: embedding, vocab: 4, dim: 3}\n" + head;
    ModelConfig cfg = parse_model_config(yaml, "s.yaml");
    return user_error([&] { build_forward_graph(cfg, registry()); });
  };
  EXPECT_THAT(err("  - {name: h, op: linear, units: 4, share: {bias: e.weight}}\n"),
              HasSubstr("s.yaml:7:51: layer 'h': field 'share': parameter 'bias': 'e.weight' is [4, 3], "
                        "this layer needs [4]"));
  EXPECT_THAT(err("  - {name: h, op: linear, units: 4, bias: false, share: {bias: e.weight}}\n"),
              HasSubstr("op 'linear' has no parameter 'bias' (its parameters: weight)"));
  EXPECT_THAT(err("  - {name: h, op: linear, units: 4, share: {weight: e.table}}\n"),
              HasSubstr("'e.table' is not a trainable parameter of an earlier layer"));
  EXPECT_THAT(err("  - {name: h, op: linear, units: 5, share: {weight: e.weight}}\n"),
              HasSubstr("'e.weight' is [4, 3], this layer needs [5, 3]"));
}

// ---- gradients through the executor ----------------------------------------------------------

// A training graph on the CPU with every parameter set from a seeded uniform draw (layer-norm
// scales around 1), keep-everything plan. lr 0: a step computes the loss and the gradients
// and leaves the parameters as they are.
struct BlockRun {
  ModelConfig cfg;
  Graph g;
  std::unique_ptr<Backend> be = make_cpu_backend();
  ExecutionPlan plan;
  std::unique_ptr<Executor> ex;
  std::vector<int32_t> ids, targets;

  explicit BlockRun(const std::string& yaml) : cfg(parse_model_config(yaml, "block.yaml")) {
    g = make_training_graph(build_forward_graph(cfg, registry()), registry(), cfg.optimizer.op,
                            cfg.optimizer.attrs);
    plan = plan_keep_all(g, [&](NodeId n) { return node_workspace_bytes(g, registry(), *be, n); });
    ex = std::make_unique<Executor>(g, registry(), *be);
    for (size_t v = 0; v < g.values.size(); ++v) {
      const Value& val = g.values[v];
      if (val.kind != ValueKind::Param) continue;
      std::vector<float> x(static_cast<size_t>(val.desc.numel()));
      for (size_t i = 0; i < x.size(); ++i) {
        const double u = static_cast<double>(mix64(hash_string(val.name, 5) + i) >> 11) * 0x1.0p-53;
        x[i] = static_cast<float>((val.role == ParamRole::Norm && val.name.find(".weight") != std::string::npos ? 1 : 0) +
                                  (u - 0.5));
      }
      ex->write(static_cast<ValueId>(v), x);
    }
    ids = {1, 5, 0, 3, 6, 2, 2, 4};
    targets = {5, 0, 3, 6, 2, 2, 4, 1};
  }
  float step() { return ex->run_step(plan, ids.data(), targets.data(), 0).loss; }
  std::vector<float> grad(const std::string& param) { return ex->read(g.find_value(param + ".grad")); }
};

TEST(GptBlock, GradientsMatchCentralDifferences) {
  BlockRun r(block_yaml());
  const float loss = r.step();
  EXPECT_GT(loss, 0.5f);
  std::map<std::string, std::vector<float>> grads;  // before any perturbation
  for (const Value& p : r.g.values)
    if (p.kind == ValueKind::Param) grads[p.name] = r.grad(p.name);
  int checked = 0;
  double worst = 0;
  for (size_t v = 0; v < r.g.values.size(); ++v) {
    const Value& p = r.g.values[v];
    if (p.kind != ValueKind::Param) continue;
    SCOPED_TRACE(p.name);
    const std::vector<float>& analytic = grads.at(p.name);
    std::vector<float> x = r.ex->read(static_cast<ValueId>(v));
    const size_t stride = std::max<size_t>(1, x.size() / 7);
    for (size_t i = 0; i < x.size(); i += stride) {
      const float x0 = x[i];
      const double eps = 1e-2;
      const float xp = static_cast<float>(x0 + eps), xm = static_cast<float>(x0 - eps);
      x[i] = xp;
      r.ex->write(static_cast<ValueId>(v), x);
      const double lp = r.step();
      x[i] = xm;
      r.ex->write(static_cast<ValueId>(v), x);
      const double lm = r.step();
      x[i] = x0;
      r.ex->write(static_cast<ValueId>(v), x);
      const double numeric = (lp - lm) / (static_cast<double>(xp) - xm);
      const double err = std::fabs(analytic[i] - numeric);
      worst = std::max(worst, err / (1e-3 + std::fabs(numeric)));
      EXPECT_LE(err, 2e-4 + 1e-2 * std::fabs(numeric))
          << "element " << i << ": analytic " << analytic[i] << ", numeric " << numeric;
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
  RecordProperty("worst_scaled_error", std::to_string(worst));
}

// Only position 1's target counts (the others are ignored): no gradient may reach the positions
// after it, so the position table's rows 2 and 3 get exactly zero — with the causal mask.
// Without it, later positions leak into position 1's output and those rows get a gradient.
TEST(GptBlock, CausalMaskStopsGradientsFromTheFuture) {
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    BlockRun r(block_yaml(causal, "{op: token_xent, ignore_index: -1}"));
    r.targets = {-1, 3, -1, -1, -1, 6, -1, -1};
    r.step();
    const std::vector<float> wpe = r.grad("wpe.weight");  // [6, 8]
    double before = 0, after = 0;
    for (size_t c = 0; c < 8; ++c) {
      before += std::fabs(wpe[0 * 8 + c]) + std::fabs(wpe[1 * 8 + c]);
      after += std::fabs(wpe[2 * 8 + c]) + std::fabs(wpe[3 * 8 + c]);
    }
    EXPECT_GT(before, 1e-4);
    if (causal) {
      EXPECT_EQ(after, 0.0);
    } else {
      EXPECT_GT(after, 1e-4);
    }
  }
}

}  // namespace
}  // namespace remat
