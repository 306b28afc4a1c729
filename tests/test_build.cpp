// models/build: forward graph from a ModelConfig (values, params, nodes, loss, overrides) and
// the op-level errors reported at the layer's position; fake ops so ops/ is not under test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/source_dir.h"
#include "models/build.h"
#include "ops/registry.h"
#include "tests/model_test_util.h"

namespace remat {
namespace {

using ::testing::HasSubstr;
using test::user_error;
using test::YamlText;

YamlText cnn_yaml() {
  return YamlText{{
      "name: t",
      "input: [3, 8, 8]",
      "classes: 4",
      "batch: 2",
      "seed: 5",
      "layers:",
      "  - {name: conv1, op: conv2d, filters: 6, kernel: 3, padding: 1, activation: relu}",
      "  - {name: bn1, op: batchnorm}",
      "  - {name: gap, op: global_avgpool}",
      "  - {name: fc, op: dense, units: 4}",
  }};
}

Graph build(const YamlText& y, const BuildOptions& opt = {}) {
  OpRegistry ops = test::make_fake_registry();
  return build_forward_graph(parse_model_config(y.text(), y.source), ops, opt);
}
std::string build_error(const YamlText& y) { return user_error([&] { build(y); }); }

TEST(Build, ValuesNodesAndParams) {
  Graph g = build(cnn_yaml());
  EXPECT_EQ(g.name, "t");
  EXPECT_EQ(g.batch, 2);
  ASSERT_NE(g.input, kNoValue);
  EXPECT_EQ(g.value(g.input).name, "input");
  EXPECT_EQ(g.value(g.input).kind, ValueKind::Input);
  EXPECT_EQ(g.value(g.input).desc, (TensorDesc{{2, 3, 8, 8}, DType::F32}));
  EXPECT_EQ(g.value(g.label).name, "labels");
  EXPECT_EQ(g.value(g.label).kind, ValueKind::Label);
  EXPECT_EQ(g.value(g.label).desc, (TensorDesc{{2}, DType::I32}));

  ASSERT_EQ(g.nodes.size(), 5u);  // 4 layers + loss
  const char* names[] = {"conv1", "bn1", "gap", "fc", "loss"};
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(g.nodes[i].name, names[i]);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(g.nodes[i].kind, NodeKind::Forward);
    EXPECT_NE(g.nodes[i].typed, nullptr);
  }
  const Node& conv = g.nodes[0];
  ASSERT_EQ(conv.inputs.size(), 3u);  // data, weight, bias
  EXPECT_EQ(conv.inputs[0], g.input);
  const Value& w = g.value(conv.inputs[1]);
  EXPECT_EQ(w.name, "conv1.weight");
  EXPECT_EQ(w.kind, ValueKind::Param);
  EXPECT_EQ(w.init, InitKind::HeNormal);
  EXPECT_EQ(w.fan_in, 27);
  EXPECT_EQ(w.desc.shape, (Shape{6, 3, 3, 3}));
  EXPECT_EQ(g.value(conv.inputs[2]).name, "conv1.bias");
  EXPECT_EQ(g.value(conv.output).desc.shape, (Shape{2, 6, 8, 8}));
  EXPECT_EQ(g.value(conv.output).kind, ValueKind::Activation);
  EXPECT_EQ(std::get<std::string>(conv.attrs.values.at("activation")), "relu");

  const Node& bn = g.nodes[1];
  ASSERT_EQ(bn.inputs.size(), 5u);
  EXPECT_EQ(bn.inputs[0], conv.output);
  EXPECT_EQ(g.value(bn.inputs[3]).name, "bn1.running_mean");
  EXPECT_EQ(g.value(bn.inputs[3]).kind, ValueKind::Buffer);

  EXPECT_EQ(g.value(g.nodes[3].inputs[1]).desc.shape, (Shape{4, 6}));  // fc.weight [out, in]
  const Node& loss = g.nodes[4];
  EXPECT_EQ(loss.kind, NodeKind::Loss);
  EXPECT_EQ(loss.op, "softmax_xent");
  EXPECT_EQ(loss.inputs, (std::vector<ValueId>{g.nodes[3].output, g.label}));
  EXPECT_EQ(g.loss, loss.output);
  EXPECT_EQ(g.value(g.loss).desc.shape, (Shape{1}));

  // Hand count: conv 6*3*3*3 + 6, bn 4*6 (2 params + 2 buffers), fc 4*6 + 4; input 2*3*8*8
  // floats and 2 labels.
  // Each tensor takes whole 256-byte allocation units (Note [allocation size]).
  int64_t persistent = 0;
  for (int64_t floats : {162, 6, 6, 6, 6, 6, 24, 4, 384, 2}) persistent += alloc_bytes(floats * 4);
  EXPECT_EQ(g.persistent_bytes(), persistent);
}

TEST(Build, SeedsDependOnModelSeedAndName) {
  Graph a = build(cnn_yaml());
  Graph b = build(cnn_yaml());
  YamlText y = cnn_yaml();
  y.lines[4] = "seed: 6";
  Graph c = build(y);
  EXPECT_EQ(a.nodes[0].seed, b.nodes[0].seed);
  EXPECT_NE(a.nodes[0].seed, a.nodes[1].seed);
  EXPECT_NE(a.nodes[0].seed, c.nodes[0].seed);
  EXPECT_EQ(a.nodes[0].seed, node_seed(5, "conv1"));
}

TEST(Build, BatchAndInputOverrides) {
  BuildOptions opt;
  opt.batch = 7;
  opt.input = Shape{3, 12, 10};
  Graph g = build(cnn_yaml(), opt);
  EXPECT_EQ(g.batch, 7);
  EXPECT_EQ(g.value(g.input).desc.shape, (Shape{7, 3, 12, 10}));
  EXPECT_EQ(g.value(g.nodes[0].output).desc.shape, (Shape{7, 6, 12, 10}));
  EXPECT_EQ(g.value(g.label).desc.shape, (Shape{7}));
  opt.batch = 0;
  EXPECT_THAT(user_error([&] { build(cnn_yaml(), opt); }), HasSubstr("batch size must be"));
}

TEST(Build, ParseInputSize) {
  EXPECT_EQ(parse_input_size("3x32x32"), (Shape{3, 32, 32}));
  EXPECT_EQ(parse_input_size("1,8,16"), (Shape{1, 8, 16}));
  EXPECT_EQ(parse_input_size("20"), (Shape{20}));     // features
  EXPECT_EQ(parse_input_size("16x6"), (Shape{16, 6}));  // a sequence, a signal
  for (const char* bad : {"3x0x4", "axbxc", "3x32x32x1", "", "3x-1x2", "3x"})
    EXPECT_THAT(user_error([&] { parse_input_size(bad); }), HasSubstr("--input")) << bad;
}

TEST(Build, PixelLossLabels) {
  YamlText y = cnn_yaml();
  y.lines[4] = "loss: softmax_xent_pixel";
  y.lines.resize(7);
  y.lines[6] = "  - {name: conv1, op: conv2d, filters: 4, kernel: 3}";
  Graph g = build(y);
  EXPECT_EQ(g.value(g.label).desc, (TensorDesc{{2, 6, 6}, DType::I32}));
  EXPECT_EQ(g.nodes.back().op, "softmax_xent_pixel");
}

TEST(Build, RepeatBlockGraph) {
  YamlText y{{
      "name: t", "input: [3, 8, 8]", "classes: 4", "batch: 2", "layers:",
      "  - {name: stem, op: conv2d, filters: 4, kernel: 1}",
      "  - name: stage",
      "    repeat: 2",
      "    layers:",
      "      - {name: a, op: conv2d, filters: 4, kernel: 3, padding: 1}",
      "      - {name: sum, op: add, inputs: [input, a]}",
      "  - {name: cat, op: concat, inputs: [stage, stem]}",
      "  - {name: gap, op: global_avgpool}",
      "  - {name: fc, op: dense, units: 4}",
  }};
  Graph g = build(y);
  EXPECT_NE(g.find_value("stage.1.a.weight"), kNoValue);
  const Node& sum1 = g.node(g.find_node("stage.1.sum"));
  EXPECT_EQ(sum1.inputs, (std::vector<ValueId>{g.find_value("stage.0.sum"),
                                               g.find_value("stage.1.a")}));
  EXPECT_EQ(g.value(g.find_value("cat")).desc.shape, (Shape{2, 8, 8, 8}));
}

TEST(BuildErrors, OpLevelErrorsAtLayerPosition) {
  struct Case {
    std::string line, needle, want;
  };
  const std::vector<Case> cases = {
      {"  - {name: c, op: conv2d, filters: 4, kernel: 3, filtres: 2}", "filtres",
       "layer 'c': field 'filtres': unknown field for op 'conv2d'"},
      {"  - {name: c, op: conv2d, filters: x, kernel: 3}", "filters: x",
       "layer 'c': field 'filters': expected an integer, got 'x'"},
      {"  - {name: c, op: conv2d, kernel: 3}", "{name: c,",
       "layer 'c': field 'filters': is required"},
      // A required field missing because it was misspelled names the misspelling.
      {"  - {name: c, op: conv2d, filtrs: 4, kernel: 3}", "filtrs",
       "layer 'c': field 'filtrs': unknown field (did you mean 'filters'?)"},
      {"  - {name: c, op: conv2d, filters: 4, kernel: 3, paddin: 2}", "paddin: 2",
       "layer 'c': field 'paddin': unknown field for op 'conv2d' (did you mean 'padding'?)"},
      {"  - {name: c, op: conv2}", "conv2}",
       "layer 'c': unknown op 'conv2' (known: add, batchnorm, concat, conv2d, dense, "
       "global_avgpool, relu, sgd, softmax_xent, softmax_xent_pixel)"},
      {"  - {name: c, op: conv2d_grad_input, inputs: [bn1, bn1]}", "conv2d_grad_input",
       "layer 'c': op 'conv2d_grad_input' is internal"},
      {"  - {name: c, op: softmax_xent, inputs: [bn1, bn1]}", "softmax_xent",
       "layer 'c': op 'softmax_xent' is a loss"},
      {"  - {name: c, op: sgd, inputs: [bn1, bn1]}", "sgd", "layer 'c': op 'sgd' is an optimizer"},
      {"  - {name: c, op: relu, inputs: [bn1, conv1]}", "[bn1",
       "layer 'c': field 'inputs': op 'relu' takes 1 input, got 2"},
      {"  - {name: c, op: add}", "{name: c,", "layer 'c': field 'inputs': op 'add' takes at least "
                                             "2 inputs, got 1"},
      {"  - {name: c, op: conv2d, filters: 4, kernel: 30}", "{name: c,",
       "layer 'c': conv2d kernel larger than input [2, 6, 8, 8] (inputs: bn1 [2, 6, 8, 8])"},
      {"  - {name: c, op: add, inputs: [bn1, input]}", "{name: c,",
       "layer 'c': add: input shapes differ: [2, 6, 8, 8] vs [2, 3, 8, 8]"},
  };
  for (const auto& c : cases) {
    YamlText y = cnn_yaml();
    y.lines.insert(y.lines.begin() + 8, c.line);
    y.lines[9] = "  - {name: gap, op: global_avgpool, inputs: [c]}";
    std::string e = build_error(y);
    EXPECT_THAT(e, HasSubstr(y.at(c.needle) + ": ")) << e;
    EXPECT_THAT(e, HasSubstr(c.want)) << c.line;
  }
}

TEST(BuildErrors, LossShape) {
  YamlText y = cnn_yaml();
  y.lines[9] = "  - {name: fc, op: dense, units: 5}";
  EXPECT_THAT(build_error(y), HasSubstr(y.at("{name: fc") + ": layer 'fc': output [2, 5] does "
                                        "not fit loss 'softmax_xent' with classes 4 (t.yaml:3:1)"
                                        ": the last layer must output [2, 4]"));
  y = cnn_yaml();
  y.lines[4] = "loss: softmax_xent_pixel";
  EXPECT_THAT(build_error(y), HasSubstr(y.at("{name: fc") + ": layer 'fc': output [2, 4] does "
                                        "not fit loss 'softmax_xent_pixel'"));
  EXPECT_THAT(build_error(y), HasSubstr("must output [2, 4, H, W]"));
}

TEST(BuildErrors, UnusedLayer) {
  YamlText y = cnn_yaml();
  y.lines[9] = "  - {name: fc, op: dense, units: 4, inputs: gap}";
  y.lines.insert(y.lines.begin() + 9, "  - {name: dead, op: relu}");
  EXPECT_THAT(build_error(y), HasSubstr(y.at("{name: dead") + ": layer 'dead': output is never "
                                                               "used"));
}

TEST(BuildErrors, Optimizer) {
  YamlText y = cnn_yaml();
  y.lines.insert(y.lines.begin() + 5, "optimizer: {op: sgd, lr: -1}");
  EXPECT_THAT(build_error(y), HasSubstr(y.at("lr") + ": optimizer: field 'lr': value -1 out of"));
  y.lines[5] = "optimizer: {op: sgd, momentun: 0.9}";
  EXPECT_THAT(build_error(y), HasSubstr(y.at("momentun") + ": optimizer: field 'momentun': "
                                                           "unknown field for op 'sgd'"));
  // The optimizer's op is named among the optimizers, with the nearest one (a layer op is not
  // offered: "sgdd" listed every op of the model before).
  y.lines[5] = "optimizer: {op: relu}";
  EXPECT_THAT(build_error(y), HasSubstr(y.at("relu") + ": optimizer: field 'op': 'relu' is a "
                                                       "layer op, not an optimizer (known: sgd)"));
  y.lines[5] = "optimizer: {op: lbfgs}";
  EXPECT_THAT(build_error(y), HasSubstr(y.at("lbfgs") + ": optimizer: field 'op': unknown "
                                                        "optimizer 'lbfgs' (known: sgd)"));
  y.lines[5] = "optimizer: {op: sgdd}";
  EXPECT_THAT(build_error(y), HasSubstr(y.at("sgdd") + ": optimizer: field 'op': unknown "
                                                       "optimizer 'sgdd' (did you mean 'sgd'?) "
                                                       "(known: sgd)"));
}

// --- The real registry and the shipped configs ------------------------------------------

std::string config_path(const std::string& name) {
  return test_source_dir() + "/configs/" + name;
}

int64_t count_numel(const Graph& g, ValueKind kind) {
  int64_t n = 0;
  for (const auto& v : g.values)
    if (v.kind == kind) n += v.desc.numel();
  return n;
}

TEST(BuildConfigs, SmallCnnMatchesHandCount) {
  OpRegistry ops = make_builtin_registry();
  ModelConfig cfg = load_model_config(config_path("small_cnn.yaml"));
  EXPECT_EQ(cfg.dir, test_source_dir() + "/configs");
  Graph g = build_forward_graph(cfg, ops);
  EXPECT_EQ(g.batch, 32);
  EXPECT_EQ(g.nodes.size(), 12u);  // 11 layers + loss
  // conv1 16*3*3*3 + 16; bn1 2*16; conv2 32*16*3*3 + 32; bn2 2*32; fc1 64*2048 + 64;
  // fc2 10*64 + 10.
  const int64_t params = (432 + 16) + 32 + (4608 + 32) + 64 + (131072 + 64) + (640 + 10);
  EXPECT_EQ(count_numel(g, ValueKind::Param), params);
  EXPECT_EQ(count_numel(g, ValueKind::Buffer), 2 * 16 + 2 * 32);  // running mean / var
  EXPECT_EQ(g.value(g.find_value("pool2")).desc.shape, (Shape{32, 32, 8, 8}));
  EXPECT_EQ(g.value(g.find_value("flat")).desc.shape, (Shape{32, 2048}));
  EXPECT_EQ(g.value(g.find_value("fc1.weight")).desc.shape, (Shape{64, 2048}));
  EXPECT_EQ(g.value(g.find_value("fc2")).desc.shape, (Shape{32, 10}));
  EXPECT_EQ(g.value(g.label).desc, (TensorDesc{{32}, DType::I32}));
  EXPECT_EQ(g.nodes.back().kind, NodeKind::Loss);
}

TEST(BuildConfigs, SmallCnnAtAnotherSize) {
  OpRegistry ops = make_builtin_registry();
  BuildOptions opt;
  opt.batch = 4;
  opt.input = parse_input_size("3x16x16");
  Graph g = build_forward_graph(load_model_config(config_path("small_cnn.yaml")), ops, opt);
  EXPECT_EQ(g.value(g.input).desc.shape, (Shape{4, 3, 16, 16}));
  EXPECT_EQ(g.value(g.find_value("flat")).desc.shape, (Shape{4, 512}));  // 32 * 4 * 4
  EXPECT_EQ(g.value(g.find_value("fc1.weight")).desc.shape, (Shape{64, 512}));
}

TEST(BuildConfigs, SmallDagHasResidualAndConcat) {
  OpRegistry ops = make_builtin_registry();
  ModelConfig cfg = load_model_config(config_path("small_dag.yaml"));
  EXPECT_EQ(cfg.optimizer.op, "adam");
  Graph g = build_forward_graph(cfg, ops);
  const Node& sum1 = g.node(g.find_node("res.1.sum"));
  EXPECT_EQ(sum1.inputs[0], g.find_value("res.0.out"));  // skip from the iteration input
  EXPECT_EQ(sum1.inputs[1], g.find_value("res.1.bn"));
  const Node& cat = g.node(g.find_node("cat"));
  EXPECT_EQ(cat.inputs[0], g.find_value("res.1.out"));
  EXPECT_EQ(cat.inputs[1], g.find_value("side"));
  EXPECT_EQ(g.value(cat.output).desc.shape, (Shape{16, 24, 16, 16}));
  // stem 16*27+16; per block a, b 16*144+16 each, bn 32; side 8*16+8; fc 10*24+10.
  const int64_t params = 448 + 2 * (2 * 2320 + 32) + 136 + 250;
  EXPECT_EQ(count_numel(g, ValueKind::Param), params);
  // stem is read by res.0.a, res.0.sum and side: a real DAG.
  EXPECT_EQ(g.users()[static_cast<size_t>(g.find_value("stem"))].size(), 3u);
}

TEST(BuildConfigs, RealOpErrorsAtLayerPosition) {
  OpRegistry ops = make_builtin_registry();
  YamlText y = cnn_yaml();
  y.lines[6] = "  - {name: conv1, op: conv2d, filters: 6, kernel: 3, paddding: 1}";
  std::string e = user_error([&] {
    build_forward_graph(parse_model_config(y.text(), y.source), ops);
  });
  EXPECT_THAT(e, HasSubstr(y.at("paddding") + ": layer 'conv1': field 'paddding': unknown field "
                                              "for op 'conv2d'"));
  y = cnn_yaml();
  y.lines[6] = "  - {name: conv1, op: conv3d, filters: 6}";
  e = user_error([&] { build_forward_graph(parse_model_config(y.text(), y.source), ops); });
  EXPECT_THAT(e, HasSubstr(y.at("conv3d") + ": layer 'conv1': unknown op 'conv3d' (known: "));
  EXPECT_THAT(e, HasSubstr("conv2d"));
  EXPECT_THAT(e, ::testing::Not(HasSubstr("conv2d_grad")));  // internal ops are not listed
  y = cnn_yaml();
  y.lines.insert(y.lines.begin() + 5, "optimizer: {op: sgdd, lr: 0.1}");
  e = user_error([&] { build_forward_graph(parse_model_config(y.text(), y.source), ops); });
  EXPECT_THAT(e, HasSubstr(y.at("sgdd") + ": optimizer: field 'op': unknown optimizer 'sgdd' "
                                          "(did you mean 'sgd'?) (known: adam, adamw, sgd)"));
}

}  // namespace
}  // namespace remat
