// The YAML texts and parse helpers test_config.cpp and test_config_errors.cpp share.
#pragma once

#include <string>

#include "models/config.h"
#include "tests/model_test_util.h"

namespace remat::test {

inline YamlText base_yaml() {
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

inline YamlText repeat_yaml() {
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

inline ModelConfig parse(const YamlText& y) { return parse_model_config(y.text(), y.source); }
inline std::string parse_error(const YamlText& y) { return user_error([&] { parse(y); }); }

}  // namespace remat::test
