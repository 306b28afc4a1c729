// Helpers the planning-tool suites (test_tools_*.cpp) share: the small configs' paths, a minimal
// XML well-formedness checker for the SVG figures, line and field splitting, and the small CNN's
// problem with its keep-everything peak and cost.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/tensor.h"
#include "solver/problem.h"
#include "tests/tool_runner.h"

namespace remat {

extern const std::string kSmallCnn;  // configs/small_cnn.yaml
extern const std::string kSmallDag;  // configs/small_dag.yaml

// ---- a minimal XML well-formedness checker --------------------------------------------------
// Accepts: an optional <?xml ...?> declaration, comments, one root element, nested elements
// with quoted attributes (unique names), self-closing tags, text whose '&' start one of the
// five predefined entities or a numeric reference. Returns "" if well formed, else why not.
std::string xml_check(const std::string& s);

using ToolsTest = ToolRunTest;

// `s` split at every `sep` (a trailing separator gives a last empty field).
std::vector<std::string> split(const std::string& s, char sep);
// The non-empty lines of `s`.
std::vector<std::string> lines_of(const std::string& s);

// The problem of a model config (problem_from_config) with these overrides.
Problem config_problem(const std::string& config, std::optional<int64_t> batch = std::nullopt,
                       const std::string& cost_model = "flops",
                       std::optional<int64_t> sequence = std::nullopt,
                       std::optional<DType> precision = std::nullopt);
Problem small_cnn_problem();  // configs/small_cnn.yaml, FLOPs cost model, its own batch
int64_t all_keep_peak(const Problem& p);
double all_keep_cost(const Problem& p);

}  // namespace remat
