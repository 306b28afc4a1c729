// models/config: YAML parsing, repeat expansion, input resolution and every structural error
// with its file:line:col.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "models/config.h"
#include "tests/model_test_util.h"

namespace remat {
namespace {

using ::testing::HasSubstr;
using test::user_error;
using test::YamlText;

YamlText base_yaml() {
  return YamlText{{
      "name: t",
      "input: [3, 8, 8]",
      "classes: 4",
      "batch: 2",
      "layers:",
      "  - {name: conv1, op: conv2d, filters: 4, kernel: 3, padding: 1}",
      "  - {name: gap, op: global_avgpool}",
      "  - {name: fc, op: dense, units: 4}",
  }};
}

ModelConfig parse(const YamlText& y) { return parse_model_config(y.text(), y.source); }
std::string parse_error(const YamlText& y) { return user_error([&] { parse(y); }); }

TEST(Config, TopLevelDefaultsAndAttributes) {
  YamlText y = base_yaml();
  y.lines[5] = "  - {name: conv1, op: conv2d, filters: 4, kernel: [3, 3], scale: 0.5, "
               "flag: true, mode: fast, quoted: '12'}";
  ModelConfig c = parse(y);
  EXPECT_EQ(c.name, "t");
  EXPECT_EQ(c.input, (Shape{3, 8, 8}));
  EXPECT_EQ(c.classes, 4);
  EXPECT_EQ(c.batch, 2);
  EXPECT_EQ(c.loss, "softmax_xent");
  EXPECT_EQ(c.seed, 0u);
  EXPECT_EQ(c.optimizer.op, "sgd");
  EXPECT_EQ(c.data.source, "synthetic");
  ASSERT_EQ(c.layers.size(), 3u);

  const LayerConfig& l = c.layers[0];
  EXPECT_EQ(l.name, "conv1");
  EXPECT_EQ(l.op, "conv2d");
  EXPECT_EQ(l.inputs, (std::vector<std::string>{"input"}));
  EXPECT_EQ(l.where, y.at("{name: conv1"));
  EXPECT_EQ(l.op_where, y.at("conv2d"));
  EXPECT_EQ(l.attrs.origin, y.at("{name: conv1") + ": layer 'conv1'");
  EXPECT_EQ(l.attrs.values.size(), 6u);  // name, op, inputs are not attributes
  EXPECT_EQ(std::get<int64_t>(l.attrs.values.at("filters")), 4);
  EXPECT_EQ(std::get<std::vector<int64_t>>(l.attrs.values.at("kernel")),
            (std::vector<int64_t>{3, 3}));
  EXPECT_DOUBLE_EQ(std::get<double>(l.attrs.values.at("scale")), 0.5);
  EXPECT_EQ(std::get<bool>(l.attrs.values.at("flag")), true);
  EXPECT_EQ(std::get<std::string>(l.attrs.values.at("mode")), "fast");
  EXPECT_EQ(std::get<std::string>(l.attrs.values.at("quoted")), "12");
  EXPECT_EQ(l.attrs.where.at("scale"), y.at("scale"));
  EXPECT_EQ(c.layers[1].inputs, (std::vector<std::string>{"conv1"}));
  EXPECT_EQ(c.layers[2].inputs, (std::vector<std::string>{"gap"}));
}

TEST(Config, OptimizerAndDataSections) {
  YamlText y = base_yaml();
  y.lines.insert(y.lines.begin() + 4, {"loss: softmax_xent_pixel", "seed: 9",
                                       "optimizer: {op: adam, lr: 0.001}",
                                       "data: {source: cifar10, path: d, split: test}"});
  ModelConfig c = parse(y);
  EXPECT_EQ(c.loss, "softmax_xent_pixel");
  EXPECT_EQ(c.seed, 9u);
  EXPECT_EQ(c.optimizer.op, "adam");
  EXPECT_EQ(c.optimizer.attrs.values.size(), 1u);
  EXPECT_DOUBLE_EQ(std::get<double>(c.optimizer.attrs.values.at("lr")), 0.001);
  EXPECT_EQ(c.data.source, "cifar10");
  EXPECT_EQ(c.data.path, "d");
  EXPECT_EQ(c.data.split, "test");
  EXPECT_EQ(c.data.where, y.at("{source"));
}

YamlText repeat_yaml() {
  return YamlText{{
      "name: t",
      "input: [3, 8, 8]",
      "classes: 4",
      "batch: 2",
      "layers:",
      "  - {name: stem, op: conv2d, filters: 4, kernel: 1}",
      "  - name: stage",
      "    repeat: 2",
      "    layers:",
      "      - {name: a, op: conv2d, filters: 4, kernel: 1}",
      "      - {name: b, op: conv2d, filters: 4, kernel: 1}",
      "      - {name: sum, op: add, inputs: [input, b, stem]}",
      "  - {name: side, op: relu, inputs: stage.0.b}",
      "  - {name: cat, op: concat, inputs: [stage, side]}",
  }};
}

TEST(Config, RepeatExpansionNamesAndInputs) {
  ModelConfig c = parse(repeat_yaml());
  std::vector<std::string> names;
  for (const auto& l : c.layers) names.push_back(l.name);
  EXPECT_EQ(names, (std::vector<std::string>{"stem", "stage.0.a", "stage.0.b", "stage.0.sum",
                                             "stage.1.a", "stage.1.b", "stage.1.sum", "side",
                                             "cat"}));
  using V = std::vector<std::string>;
  EXPECT_EQ(c.find_layer("stage.0.a")->inputs, V{"stem"});
  EXPECT_EQ(c.find_layer("stage.0.b")->inputs, V{"stage.0.a"});
  EXPECT_EQ(c.find_layer("stage.0.sum")->inputs, (V{"stem", "stage.0.b", "stem"}));
  EXPECT_EQ(c.find_layer("stage.1.a")->inputs, V{"stage.0.sum"});
  EXPECT_EQ(c.find_layer("stage.1.sum")->inputs, (V{"stage.0.sum", "stage.1.b", "stem"}));
  EXPECT_EQ(c.find_layer("side")->inputs, V{"stage.0.b"});
  EXPECT_EQ(c.find_layer("cat")->inputs, (V{"stage.1.sum", "side"}));
  // Each iteration's layer carries the block layer's position and its own full name.
  const YamlText y = repeat_yaml();
  EXPECT_EQ(c.find_layer("stage.1.a")->where, y.at("{name: a"));
  EXPECT_EQ(c.find_layer("stage.1.a")->attrs.origin, y.at("{name: a") + ": layer 'stage.1.a'");
}

TEST(Config, NestedBlocksAndBlockInput) {
  YamlText y{{
      "name: t", "input: [3, 8, 8]", "classes: 4", "batch: 2", "layers:",
      "  - {name: x, op: relu}",
      "  - {name: y, op: relu}",
      "  - name: outer",
      "    repeat: 2",
      "    inputs: x",
      "    layers:",
      "      - name: inner",
      "        repeat: 2",
      "        layers:",
      "          - {name: r, op: add, inputs: [input, y]}",
      "      - {name: s, op: relu}",
  }};
  ModelConfig c = parse(y);
  std::vector<std::string> names;
  for (const auto& l : c.layers) names.push_back(l.name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "x", "y", "outer.0.inner.0.r", "outer.0.inner.1.r", "outer.0.s",
                       "outer.1.inner.0.r", "outer.1.inner.1.r", "outer.1.s"}));
  using V = std::vector<std::string>;
  EXPECT_EQ(c.find_layer("outer.0.inner.0.r")->inputs, (V{"x", "y"}));
  EXPECT_EQ(c.find_layer("outer.0.inner.1.r")->inputs, (V{"outer.0.inner.0.r", "y"}));
  EXPECT_EQ(c.find_layer("outer.0.s")->inputs, V{"outer.0.inner.1.r"});
  EXPECT_EQ(c.find_layer("outer.1.inner.0.r")->inputs, (V{"outer.0.s", "y"}));
}

// Note [two-input blocks]: NASNet's cells read the previous cell's output and the one before.
TEST(Config, TwoInputBlocksCarryThePreviousIterationsInput) {
  YamlText y{{
      "name: t", "input: [3, 8, 8]", "classes: 4", "batch: 2", "layers:",
      "  - {name: p0, op: relu}",
      "  - {name: x0, op: relu}",
      "  - name: cell",
      "    repeat: 3",
      "    inputs: [x0, p0]",
      "    layers:",
      "      - {name: sum, op: add, inputs: [input, previous]}",
      "  - {name: out, op: add, inputs: [cell, cell.1.sum]}",
  }};
  ModelConfig c = parse(y);
  using V = std::vector<std::string>;
  EXPECT_EQ(c.find_layer("cell.0.sum")->inputs, (V{"x0", "p0"}));
  EXPECT_EQ(c.find_layer("cell.1.sum")->inputs, (V{"cell.0.sum", "x0"}));
  EXPECT_EQ(c.find_layer("cell.2.sum")->inputs, (V{"cell.1.sum", "cell.0.sum"}));
  EXPECT_EQ(c.find_layer("out")->inputs, (V{"cell.2.sum", "cell.1.sum"}));
  // `previous` belongs to the innermost block, which must have two inputs.
  y.lines[9] = "    inputs: x0";
  EXPECT_THAT(parse_error(y), HasSubstr(y.at("previous]") + ": layer 'cell.0.sum': input "
                                                            "'previous' names the previous "
                                                            "iteration's input"));
  YamlText top = base_yaml();
  top.lines[6] = "  - {name: gap, op: global_avgpool, inputs: previous}";
  EXPECT_THAT(parse_error(top), HasSubstr(top.at("previous}") + ": layer 'gap': input "
                                                                "'previous'"));
  top = base_yaml();
  top.lines[6] = "  - {name: previous, op: global_avgpool}";
  EXPECT_THAT(parse_error(top), HasSubstr("'previous' is reserved"));
}

TEST(Config, LocalNameShadowsOuterName) {
  YamlText y{{
      "name: t", "input: [3, 8, 8]", "classes: 4", "batch: 2", "layers:",
      "  - {name: a, op: relu}",
      "  - name: blk",
      "    layers:",
      "      - {name: a, op: relu}",
      "      - {name: b, op: add, inputs: [a, input]}",
      "  - {name: c, op: add, inputs: [a, blk]}",
  }};
  ModelConfig c = parse(y);
  EXPECT_EQ(c.find_layer("blk.0.b")->inputs, (std::vector<std::string>{"blk.0.a", "a"}));
  EXPECT_EQ(c.find_layer("c")->inputs, (std::vector<std::string>{"a", "blk.0.b"}));
}

TEST(ConfigErrors, YamlSyntax) {
  YamlText y = base_yaml();
  y.lines[6] = "  - {name: gap, op: global_avgpool";
  std::string e = parse_error(y);
  EXPECT_THAT(e, HasSubstr("t.yaml:"));
  EXPECT_THAT(e, HasSubstr("YAML syntax error"));
}

TEST(ConfigErrors, YamlSyntaxPosition) {
  YamlText y = base_yaml();
  // A more-indented "key: value" under a scalar: the parser stops at that ':' (line 5, col 8).
  y.lines.insert(y.lines.begin() + 4, "  extra: 3");
  EXPECT_THAT(parse_error(y), HasSubstr("t.yaml:5:8: YAML syntax error: illegal map value"));
}

TEST(ConfigErrors, UnknownTopLevelKey) {
  YamlText y = base_yaml();
  y.lines.push_back("optimiser: {op: sgd}");
  std::string e = parse_error(y);
  EXPECT_THAT(e, HasSubstr(y.at("optimiser") + ": unknown top-level key 'optimiser'"));
  EXPECT_THAT(e, HasSubstr("known: name, input"));
}

TEST(ConfigErrors, UnknownKeysAreNamedWithADidYouMean) {
  YamlText y = base_yaml();
  y.lines[3] = "bacth: 2";  // the required `batch` is missing because it was misspelled
  EXPECT_THAT(parse_error(y), HasSubstr("unknown top-level key 'bacth' (did you mean 'batch'?)"));
  y = base_yaml();
  y.lines.insert(y.lines.begin() + 4, "data: {source: synthetic, sed: 3}");
  EXPECT_THAT(parse_error(y), HasSubstr("field 'sed': unknown field for data source 'synthetic' "
                                        "(did you mean 'seed'?)"));
}

// Note [config overrides]: KEY=VALUE edits the tree before validation.
TEST(ConfigOverrides, SetFieldsAnywhereInTheTree) {
  const YamlText y = base_yaml();
  const ModelConfig c = parse_model_config(
      y.text(), y.source,
      {"optimizer.lr=0.5", "batch=64", "layers.conv1.filters=32", "layers.fc.units=4",
       "input=[3, 16, 16]", "layers.2.units=4", "data.seed=9", "optimizer.op=adam"});
  EXPECT_EQ(c.batch, 64);
  EXPECT_EQ(c.input, (Shape{3, 16, 16}));
  EXPECT_DOUBLE_EQ(std::get<double>(c.optimizer.attrs.values.at("lr")), 0.5);
  EXPECT_EQ(c.optimizer.op, "adam");
  EXPECT_EQ(c.data.seed, 9u);
  EXPECT_EQ(std::get<int64_t>(c.layers[0].attrs.values.at("filters")), 32);
  EXPECT_EQ(std::get<int64_t>(c.layers[0].attrs.values.at("kernel")), 3);  // the rest kept
}

TEST(ConfigOverrides, ReachIntoRepeatBlocks) {
  const YamlText y = repeat_yaml();
  const ModelConfig c = parse_model_config(y.text(), y.source,
                                           {"layers.stage.repeat=3", "layers.stage.layers.b.filters=8"});
  ASSERT_NE(c.find_layer("stage.2.b"), nullptr);  // three iterations now
  EXPECT_EQ(std::get<int64_t>(c.find_layer("stage.2.b")->attrs.values.at("filters")), 8);
  EXPECT_EQ(std::get<int64_t>(c.find_layer("stage.2.a")->attrs.values.at("filters")), 4);
}

TEST(ConfigOverrides, ABadOverrideNamesItself) {
  const YamlText y = base_yaml();
  auto err = [&](const std::string& o) {
    return user_error([&] { parse_model_config(y.text(), y.source, {o}); });
  };
  EXPECT_THAT(err("batch=lots"), HasSubstr("override 'batch=lots': model: field 'batch': "
                                           "expected an integer, got 'lots'"));
  EXPECT_THAT(err("bacth=4"), HasSubstr("override 'bacth=4': unknown top-level key 'bacth' "
                                        "(did you mean 'batch'?)"));
  EXPECT_THAT(err("layers.conv9.filters=4"),
              HasSubstr("override 'layers.conv9.filters=4': 'layers' has no layer 'conv9' "
                        "(did you mean 'conv1'?)"));
  EXPECT_THAT(err("layers.conv1=4"), HasSubstr("is a whole layer"));
  EXPECT_THAT(err("lr"), HasSubstr("override 'lr': expected KEY=VALUE"));
  EXPECT_THAT(err("batch.size=4"), HasSubstr("'batch' is a value, not a section"));
  EXPECT_THAT(err("layers.conv1.filters=[1"), HasSubstr("the value is not valid YAML"));
}

TEST(ConfigErrors, DuplicateKey) {
  YamlText y = base_yaml();
  y.lines[5] = "  - {name: conv1, op: conv2d, filters: 4, kernel: 3, filters: 5}";
  EXPECT_THAT(parse_error(y), HasSubstr("t.yaml:6:54: layer #1: duplicate key 'filters'"));
}

TEST(ConfigErrors, MissingRequiredTopLevel) {
  for (const char* key : {"name", "input", "classes", "batch", "layers"}) {
    YamlText y = base_yaml();
    std::vector<std::string> kept;
    for (const auto& l : y.lines)
      if (l.rfind(std::string(key) + ":", 0) != 0 &&
          !(std::string(key) == "layers" && l.rfind("  -", 0) == 0))
        kept.push_back(l);
    y.lines = kept;
    std::string e = parse_error(y);
    EXPECT_THAT(e, HasSubstr("t.yaml:1:1: model: field '" + std::string(key) + "'")) << key;
    EXPECT_THAT(e, HasSubstr("required")) << key;
  }
}

TEST(ConfigErrors, WrongTypesAndBadNumbers) {
  struct Case {
    int line;
    std::string text, needle, want;
  };
  const std::vector<Case> cases = {
      {3, "batch: abc", "batch", "field 'batch': expected an integer, got 'abc'"},
      {3, "batch: 0", "batch", "field 'batch': value 0 out of range [1, "},
      {3, "batch: -4", "batch", "field 'batch': value -4 out of range"},
      {2, "classes: 0", "classes", "field 'classes': value 0 out of range"},
      {2, "classes: 2.5", "classes", "field 'classes': expected an integer"},
      {1, "input: [3, 0, 8]", "input", "field 'input': value 0 out of range"},
      {1, "input: [3, 8]", "input", "field 'input': expected 3 values, got 2"},
      {1, "input: 3x8x8", "input", "field 'input': expected a list [C, H, W]"},
      {1, "input: [3, a, 8]", "a,", "field 'input': expected a list of integers"},
      {0, "name: {a: 1}", "{a", "field 'name': expected a number, string"},
  };
  for (const auto& c : cases) {
    YamlText y = base_yaml();
    y.lines[static_cast<size_t>(c.line)] = c.text;
    std::string e = parse_error(y);
    EXPECT_THAT(e, HasSubstr(y.at(c.needle) + ": ")) << c.text;
    EXPECT_THAT(e, HasSubstr(c.want)) << c.text;
  }
}

TEST(ConfigErrors, UnknownLoss) {
  YamlText y = base_yaml();
  y.lines.push_back("loss: mse");
  EXPECT_THAT(parse_error(y), HasSubstr(y.at("loss") + ": model: field 'loss': 'mse' is not "
                                                       "one of: softmax_xent, softmax_xent_pixel"));
}

TEST(ConfigErrors, LayerStructure) {
  struct Case {
    std::string text, needle, want;
  };
  const std::vector<Case> cases = {
      {"  - {op: relu}", "{op", "layer #2: field 'name' is required"},
      {"  - {name: r}", "{name: r", "layer 'r': field 'op' is required"},
      {"  - {name: r, op: [1]}", "[1]", "layer 'r': field 'op': expected a name"},
      {"  - {name: a.b, op: relu}", "a.b", "field 'name': use letters, digits"},
      {"  - {name: input, op: relu}", "input,", "field 'name': 'input' is reserved"},
      {"  - {name: conv1, op: relu}", "conv1, op: relu",
       "layer 'conv1': duplicate layer name (first defined at t.yaml:6:5)"},
      {"  - {name: r, op: relu, inputs: nothere}", "nothere",
       "layer 'r': input 'nothere' names no layer defined before this one"},
      {"  - {name: r, op: relu, inputs: fc}", "fc}",
       "layer 'r': input 'fc' is defined later (cycles and forward references are not allowed)"},
      {"  - {name: r, op: relu, inputs: r}", "r}",
       "layer 'r': input 'r' is defined later (cycles"},
      {"  - {name: r, op: relu, inputs: {a: 1}}", "{a", "field 'inputs': expected a layer name"},
      {"  - {name: r, op: relu, pad: {a: 1}}", "{a",
       "layer 'r': field 'pad': expected a number, string, true/false or a list of integers"},
      {"  - {name: r, op: relu, pad: [1, x]}", "x]", "field 'pad': expected a list of integers"},
      {"  - {name: r, op: relu, pad: }", "pad", "field 'pad': has no value"},
      {"  - relu", "relu", "layer #2: expected a map"},
  };
  for (const auto& c : cases) {
    YamlText y = base_yaml();
    y.lines.insert(y.lines.begin() + 6, c.text);
    std::string e = parse_error(y);
    // The needle is searched from line 7 on, where the inserted layer is.
    std::string pos;
    for (size_t i = 6; i < y.lines.size() && pos.empty(); ++i) {
      auto col = y.lines[i].find(c.needle);
      if (col != std::string::npos)
        pos = "t.yaml:" + std::to_string(i + 1) + ":" + std::to_string(col + 1);
    }
    EXPECT_THAT(e, HasSubstr(pos + ": ")) << c.text << " -> " << e;
    EXPECT_THAT(e, HasSubstr(c.want)) << c.text;
  }
}

TEST(ConfigErrors, RepeatBlocks) {
  struct Case {
    std::string line, needle, want;
  };
  const std::vector<Case> cases = {
      {"    repeat: 0", "0", "block 'stage': field 'repeat': value 0 out of range [1, 100000]"},
      {"    repeat: two", "two", "block 'stage': field 'repeat': expected an integer"},
      {"    op: relu", "op", "block 'stage': unknown key 'op' for a repeat block (known: "
                             "inputs, layers, name, repeat)"},
      {"    inputs: [stem, stem, stem]", "[stem",
       "a repeat block takes one input name, or two: [x, p]"},
      {"    inputs: [stem, [stem]]", "[stem]", "field 'inputs': expected a layer name"},
  };
  for (const auto& c : cases) {
    YamlText y = repeat_yaml();
    y.lines[7] = c.line;
    std::string e = parse_error(y);
    EXPECT_THAT(e, HasSubstr(YamlText{{"", "", "", "", "", "", "", c.line}}.at(c.needle) + ": "))
        << e;
    EXPECT_THAT(e, HasSubstr(c.want)) << c.line;
  }
  YamlText y = repeat_yaml();
  y.lines.erase(y.lines.begin() + 8, y.lines.begin() + 12);  // drop `layers:` and its items
  EXPECT_THAT(parse_error(y),
              HasSubstr("t.yaml:7:5: block 'stage': field 'layers' is required for a repeat "
                        "block"));
}

TEST(ConfigErrors, ForwardReferenceInsideBlock) {
  YamlText y = repeat_yaml();
  y.lines[9] = "      - {name: a, op: add, inputs: [input, sum]}";
  EXPECT_THAT(parse_error(y), HasSubstr(y.at("sum]") + ": layer 'stage.0.a': input 'sum' is "
                                                       "defined later (cycles and forward"));
}

TEST(ConfigErrors, DataAndOptimizerSections) {
  struct Case {
    std::string line, needle, want;
  };
  const std::vector<Case> cases = {
      {"data: {source: imagenet}", "source", "data: field 'source': 'imagenet' is not one of: "
                                             "synthetic, cifar10"},
      {"data: {source: cifar10}", "{source", "data: field 'path': is required for source cifar10"},
      {"data: {source: synthetic, path: x}", "path",
       "data: field 'path': unknown field for data source 'synthetic' (known: source, seed)"},
      {"data: {source: cifar10, path: x, split: val}", "split", "'val' is not one of: train, test"},
      {"data: nope", "nope", "data: expected a map"},
      {"optimizer: sgd", "sgd", "optimizer: expected a map"},
      {"optimizer: {op: [1]}", "[1]", "optimizer: field 'op': expected a name"},
  };
  for (const auto& c : cases) {
    YamlText y = base_yaml();
    y.lines.insert(y.lines.begin() + 4, c.line);
    std::string e = parse_error(y);
    EXPECT_THAT(e, HasSubstr(y.at(c.needle) + ": ")) << e;
    EXPECT_THAT(e, HasSubstr(c.want)) << c.line;
  }
}

TEST(ConfigErrors, EmptyAndNonMapDocuments) {
  EXPECT_THAT(user_error([] { parse_model_config("", "e.yaml"); }),
              HasSubstr("e.yaml: expected a map"));
  EXPECT_THAT(user_error([] { parse_model_config("- 1\n- 2\n", "e.yaml"); }),
              HasSubstr("e.yaml:1:1: expected a map"));
  YamlText y = base_yaml();
  y.lines.resize(5);
  y.lines.push_back("  []");
  EXPECT_THAT(parse_error(y), HasSubstr("t.yaml:6:3: model: field 'layers': expected a non-empty"));
}

// Nested repeats multiply: the total after expansion is bounded, and the error comes at once
// (after at most kMaxModelLayers layers), at the outermost block, stating the limit.
YamlText repeat_yaml(int64_t outer, int64_t inner, int extra_layers) {
  YamlText y{{"name: t", "input: [3, 8, 8]", "classes: 4", "batch: 2", "layers:",
              "  - name: outer", "    repeat: " + std::to_string(outer), "    layers:",
              "      - name: inner", "        repeat: " + std::to_string(inner),
              "        layers:", "          - {name: r, op: relu}"}};
  for (int i = 0; i < extra_layers; ++i)
    y.lines.push_back("  - {name: x" + std::to_string(i) + ", op: relu}");
  return y;
}

TEST(ConfigErrors, RepeatBlocksBeyondTheLayerLimit) {
  ASSERT_EQ(kMaxModelLayers, 10000);
  EXPECT_EQ(parse(repeat_yaml(100, 99, 100)).layers.size(), 10000u);  // exactly the limit
  EXPECT_THAT(parse_error(repeat_yaml(102, 99, 0)),
              HasSubstr("t.yaml:7:13: block 'outer': field 'repeat': expanding this block gives "
                        "more than 10000 layers (the limit"));
  EXPECT_THAT(parse_error(repeat_yaml(100, 99, 101)),
              HasSubstr("layer 'x100': the model has more than 10000 layers"));
  EXPECT_THAT(parse_error(repeat_yaml(1000, 1000, 0)),
              HasSubstr("t.yaml:7:13: block 'outer': field 'repeat'"));
  YamlText flat = base_yaml();
  flat.lines.resize(5);
  for (int i = 0; i <= kMaxModelLayers; ++i)
    flat.lines.push_back("  - {name: r" + std::to_string(i) + ", op: relu}");
  EXPECT_THAT(parse_error(flat), HasSubstr("layer 'r10000': the model has more than 10000 layers"));
}

TEST(ConfigErrors, MissingFile) {
  EXPECT_THAT(user_error([] { load_model_config("/nonexistent/m.yaml"); }),
              HasSubstr("/nonexistent/m.yaml: cannot open model config"));
}

}  // namespace
}  // namespace remat
