// models/config: YAML parsing, repeat expansion, input resolution, overrides, and the first
// structural errors with their file:line:col (the rest: test_config_errors.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "models/config.h"
#include "tests/config_yaml.h"
#include "tests/model_test_util.h"

namespace remat::test {
namespace {

using ::testing::HasSubstr;

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

// Note [YAML error positions]: yaml-cpp notices some faults lines later; the error names the
// line at fault (on small_cnn, a fault on line 7 reads "8:5" in yaml-cpp's mark, one on 14 "16:3").
TEST(ConfigErrors, YamlSyntaxNamesTheLineAtFault) {
  struct Case {
    int line;  // 0-based, in base_yaml()
    std::string text, want;
  };
  const std::vector<Case> cases = {
      {3, "batch 2", "t.yaml:4:1: YAML syntax error: this line has no ':'"},
      {5, "  - {name: conv1, op: conv2d, filters: 4, kernel: 3, padding: 1",
       "t.yaml:6:5: YAML syntax error: this '{' is not closed"},
      {1, "input: [3, 8, 8", "t.yaml:2:8: YAML syntax error: this '[' is not closed"},
      {5, "  - {name: 'conv1, op: conv2d, filters: 4, kernel: 3, padding: 1}",
       "t.yaml:6:12: YAML syntax error: this quoted value is not closed"},
  };
  for (const Case& c : cases) {
    YamlText y = base_yaml();
    y.lines[static_cast<size_t>(c.line)] = c.text;
    const std::string e = parse_error(y);
    EXPECT_THAT(e, HasSubstr(c.want)) << c.text;
    EXPECT_THAT(e, HasSubstr("(yaml-cpp: ")) << "yaml-cpp's own words stay: " << e;
  }
  // Where yaml-cpp's mark is on the line at fault, it stays.
  YamlText y = base_yaml();
  y.lines[5] = "  - {name: conv1 op: conv2d}";
  EXPECT_THAT(parse_error(y), HasSubstr("t.yaml:6:20: YAML syntax error: end of map flow not found"));
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

// What each override did, for the run's "overrides:" line: a change, the config's own value
// (0.02 written 2e-2 is the same number), a key the config did not set.
TEST(ConfigOverrides, SayWhatTheyChanged) {
  YamlText y = base_yaml();
  y.lines.push_back("optimizer: {op: sgd, lr: 0.02}");
  const ModelConfig c = parse_model_config(
      y.text(), y.source, {"optimizer.lr=2e-2", "batch=4", "optimizer.momentum=0.9", "input=[3,4,4]"});
  ASSERT_EQ(c.overrides.size(), 4u);
  EXPECT_TRUE(c.overrides[0].same);
  EXPECT_EQ(describe_overrides(c),
            "overrides: optimizer.lr 2e-2 (the config's value: no change), batch 2 -> 4, "
            "optimizer.momentum 0.9 (not in the config), input [3, 8, 8] -> [3, 4, 4]");
  EXPECT_EQ(describe_overrides(parse_model_config(y.text(), y.source)), "");
}

// Note [paths in overrides]: a path in an override is relative to the working directory; one
// in the file to the file's folder.
TEST(ConfigOverrides, APathIsRelativeToTheWorkingDirectory) {
  YamlText y = base_yaml();
  y.lines.push_back("data: {source: cifar10, path: in_file}");
  const ModelConfig c = parse_model_config(y.text(), y.source, {"val={source: cifar10, path: here}"});
  EXPECT_EQ(c.data.path, "in_file");  // joined to the config's folder when read
  EXPECT_EQ(c.val->path, (std::filesystem::current_path() / "here").string());
  const ModelConfig d = parse_model_config(y.text(), y.source, {"data.path=../up/there"});
  EXPECT_EQ(d.data.path,
            (std::filesystem::current_path() / "../up/there").lexically_normal().string());
  const ModelConfig a = parse_model_config(y.text(), y.source, {"data.path=/abs/x"});
  EXPECT_EQ(a.data.path, "/abs/x");
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

// Note [aliases in overrides]: nested aliases in an override's value (here 9^6 nodes once
// expanded) are refused before the tree is walked, at once; an anchor alone is harmless.
TEST(ConfigOverrides, AliasesInAValueAreRefusedAtOnce) {
  const YamlText y = base_yaml();
  std::string bomb = "input=[&a0 [1,1,1,1,1,1,1,1,1]";
  for (int i = 1; i <= 6; ++i) {
    bomb += ", &a" + std::to_string(i) + " [";
    for (int k = 0; k < 9; ++k) bomb += (k ? ",*a" : "*a") + std::to_string(i - 1);
    bomb += "]";
  }
  bomb += "]";
  const std::string e = user_error([&] { parse_model_config(y.text(), y.source, {bomb}); });
  EXPECT_THAT(e, HasSubstr("YAML aliases (*name) are not allowed in an override's value"));
  EXPECT_THAT(e, HasSubstr("override 'input=[&a0"));
  const ModelConfig c = parse_model_config(y.text(), y.source, {"input=&a [3, 4, 4]"});
  EXPECT_EQ(c.input, (Shape{3, 4, 4}));
  // A value yaml-cpp's event parser never finishes reading documents of (found by fuzzing: the
  // alias check read documents until there were none, forever); the first is the value.
  EXPECT_THAT(user_error([&] { parse_model_config(y.text(), y.source, {"input=,464"}); }),
              HasSubstr("override 'input=,464': model: field 'input'"));
}

}  // namespace
}  // namespace remat::test
