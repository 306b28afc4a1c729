// models/config: every structural error names its file:line:col and the field (duplicate keys,
// missing or mistyped fields, layer and repeat-block structure, data and optimizer sections,
// empty documents, limits, missing files).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "models/config.h"
#include "tests/config_yaml.h"
#include "tests/model_test_util.h"

namespace remat::test {
namespace {

using ::testing::HasSubstr;

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
      {1, "input: [3, 8, 8, 1]", "input", "field 'input': expected 1 to 3 sizes ([C, H, W], [F] or [T, F]), got 4 values"},
      {1, "input: []", "input", "field 'input': expected 1 to 3 sizes"},
      {1, "input: 3x8x8", "input", "field 'input': expected a list [C, H, W] (an image), [F] (features) or [T, F]"},
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
}  // namespace remat::test
