// Internal to models/: the YAML -> ModelConfig parser shared by config.cpp (the schema walk of the
// top level: model settings, loss, optimizer, data), config_values.cpp (YAML scalars and maps as
// attribute values) and config_layers.cpp (layer lists, repeat-block expansion, name resolution).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "models/config.h"
#include "models/config_overrides.h"
#include "runtime/core/check.h"

namespace remat {
namespace config_detail {

std::string join(const std::vector<std::string>& v);
bool contains(const std::vector<std::string>& v, const std::string& x);
// Whole-string integer / real parses (no trailing characters, range checked).
bool parse_int64(const std::string& s, int64_t* out);
bool parse_double(const std::string& s, double* out);

// One level of name resolution: the model (top level) or one iteration of a repeat block.
struct Scope {
  std::string prefix;                          // "" or "stage.0."
  std::string input;                           // full name of this scope's input
  // A repeat block with two inputs: the previous iteration's input (the block's second input
  // for the first iteration), named `previous`; "" elsewhere.
  std::string previous;
  std::map<std::string, std::string> defined;  // local name -> full name of its output
  std::set<std::string> all_local;             // every name in this list, for forward refs
  std::string last;                            // output of the latest layer ("" before any)
};

class ConfigParser {
 public:
  explicit ConfigParser(std::string src) : src_(std::move(src)) {}

  ModelConfig parse(const std::string& text, const std::vector<std::string>& overrides);

 private:
  std::string pos(const YAML::Node& n) const {
    for (const auto& o : override_nodes_)  // Note [config overrides]
      if (o.first.is(n)) return o.second;
    const YAML::Mark m = n.Mark();
    if (m.line < 0) return src_;
    return src_ + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
  }
  [[noreturn]] void fail(const YAML::Node& at, const std::string& ctx,
                         const std::string& msg) const {
    REMAT_USER_ERROR(pos(at) << ": " << (ctx.empty() ? "" : ctx + ": ") << msg);
  }
  // `key` is the key's node: a missing value is reported there.
  AttrValue to_attr(const YAML::Node& key, const YAML::Node& v, const std::string& ctx) const;
  // Every key of map `m` except those in `skip`, as an AttrMap with positions.
  AttrMap to_attr_map(const YAML::Node& m, const std::string& ctx,
                      const std::vector<std::string>& skip) const;
  void check_unique_keys(const YAML::Node& m, const std::string& ctx) const;
  std::string scalar_string(const YAML::Node& v, const std::string& ctx,
                            const std::string& key) const;
  void parse_loss(const YAML::Node& key, const YAML::Node& n);
  void parse_optimizer(const YAML::Node& n);
  void parse_model_file(const YAML::Node& n);
  // `data` or `val` (section) into *d (config_data.cpp).
  void parse_data(const YAML::Node& n, const std::string& section, DataConfig* d);
  void parse_transform(const YAML::Node& n, const std::string& section, AttrReader& r,
                       ImageTransformConfig* t);
  // A list of `count` reals, each in [lo, hi] (a position-naming UserError otherwise).
  void real_list(const YAML::Node& n, const std::string& ctx, size_t count, double lo, double hi,
                 double* out) const;
  void parse_share(const YAML::Node& m, LayerConfig& l, const std::vector<Scope>& scopes);
  void parse_list(const YAML::Node& seq, std::vector<Scope>& scopes);
  void parse_layer(const YAML::Node& m, const std::string& local, std::vector<Scope>& scopes);
  void parse_block(const YAML::Node& m, const std::string& local, std::vector<Scope>& scopes);
  std::string resolve(const std::string& name, const std::vector<Scope>& scopes,
                      const YAML::Node& at, const std::string& ctx) const;
  void define(std::vector<Scope>& scopes, const std::string& local, const std::string& full,
              const std::string& output);

  std::string src_;
  ModelConfig cfg_;
  Shape onnx_output_;  // an imported model's output per sample
  std::map<std::string, std::string> full_defined_;  // full name -> output full name
  // Repeat blocks being expanded, outermost first: full name and the `repeat` value's node.
  std::vector<std::pair<std::string, YAML::Node>> blocks_;
  // Nodes set by overrides and the position their errors quote: "override 'batch=64'".
  OverrideMarks override_nodes_;
};

}  // namespace config_detail
}  // namespace remat
