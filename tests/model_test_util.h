// Helpers for the models/ suites: YAML written line by line with positions looked up in the
// text itself, an error catcher, and a small fake op registry that does not depend on ops/.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/graph/op.h"

namespace remat::test {

// YAML text as lines; at("needle") is "t.yaml:L:C" of the first occurrence of needle.
struct YamlText {
  std::vector<std::string> lines;
  std::string source = "t.yaml";

  std::string text() const {
    std::string s;
    for (const auto& l : lines) s += l + "\n";
    return s;
  }
  std::string at(const std::string& needle) const {
    for (size_t i = 0; i < lines.size(); ++i) {
      auto c = lines[i].find(needle);
      if (c != std::string::npos)
        return source + ":" + std::to_string(i + 1) + ":" + std::to_string(c + 1);
    }
    ADD_FAILURE() << "needle '" << needle << "' not in the YAML text";
    return "?";
  }
};

// The message of the E `f` throws ("" and a test failure if it throws none).
template <typename E>
std::string thrown_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

// The UserError message `f` throws ("" and a test failure if it throws none).
inline std::string user_error(const std::function<void()>& f) { return thrown_message<UserError>(f); }

// Fake ops with the real ops' names and attributes (conv2d, dense, relu, add, concat,
// batchnorm, global_avgpool, softmax_xent[_pixel], sgd, conv2d_grad_input).
OpRegistry make_fake_registry();

}  // namespace remat::test
