// YAML -> ModelConfig: structural validation, repeat-block expansion and input-name resolution.
// Op-specific checks (attribute types and values, shapes) happen in the builder through the op.
#include "models/config.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "models/config_overrides.h"
#include "runtime/core/check.h"
#include "runtime/io/input_file.h"

namespace remat {

const LayerConfig* ModelConfig::find_layer(const std::string& full_name) const {
  for (const auto& l : layers)
    if (l.name == full_name) return &l;
  return nullptr;
}

namespace {

const std::vector<std::string> kTopKeys = {"name",  "input",     "classes", "sequence", "vocab",
                                           "batch", "loss",      "seed",    "optimizer", "data",
                                           "layers"};
const std::vector<std::string> kBlockKeys = {"inputs", "layers", "name", "repeat"};
const std::vector<std::string> kReserved = {"input", "labels", "loss"};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  for (const auto& e : v)
    if (e == x) return true;
  return false;
}

bool parse_int64(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  size_t k = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (k == s.size()) return false;
  for (size_t i = k; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  errno = 0;
  long long v = std::strtoll(s.c_str(), nullptr, 10);
  if (errno == ERANGE) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

bool parse_double(const std::string& s, double* out) {
  bool digit = false;
  for (char c : s) {
    if (c >= '0' && c <= '9') digit = true;
    else if (c != '.' && c != 'e' && c != 'E' && c != '+' && c != '-') return false;
  }
  if (!digit) return false;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (errno == ERANGE || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

// One level of name resolution: the model (top level) or one iteration of a repeat block.
struct Scope {
  std::string prefix;                          // "" or "stage.0."
  std::string input;                           // full name of this scope's input
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
  void parse_data(const YAML::Node& n);
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
  std::map<std::string, std::string> full_defined_;  // full name -> output full name
  // Repeat blocks being expanded, outermost first: full name and the `repeat` value's node.
  std::vector<std::pair<std::string, YAML::Node>> blocks_;
  // Nodes set by overrides and the position their errors quote: "override 'batch=64'".
  OverrideMarks override_nodes_;
};

AttrValue ConfigParser::to_attr(const YAML::Node& key, const YAML::Node& v,
                                const std::string& ctx) const {
  const std::string fctx = ctx + (ctx.empty() ? "" : ": ") + "field '" + key.Scalar() + "'";
  if (v.IsNull()) fail(key, fctx, "has no value");
  if (v.IsScalar()) {
    const std::string& s = v.Scalar();
    if (v.Tag() == "!") return s;  // quoted: always a string
    if (s == "true" || s == "True" || s == "TRUE") return true;
    if (s == "false" || s == "False" || s == "FALSE") return false;
    int64_t i = 0;
    if (parse_int64(s, &i)) return i;
    double d = 0;
    if (parse_double(s, &d)) return d;
    return s;
  }
  if (v.IsSequence()) {
    std::vector<int64_t> out;
    for (const auto& e : v) {
      int64_t i = 0;
      if (!e.IsScalar() || e.Tag() == "!" || !parse_int64(e.Scalar(), &i))
        fail(e, fctx, "expected a list of integers");
      out.push_back(i);
    }
    return out;
  }
  fail(v, fctx, "expected a number, string, true/false or a list of integers, got a map");
}

void ConfigParser::check_unique_keys(const YAML::Node& m, const std::string& ctx) const {
  std::set<std::string> seen;
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (!it->first.IsScalar()) fail(it->first, ctx, "keys must be plain names");
    const std::string k = it->first.Scalar();
    if (!seen.insert(k).second) fail(it->first, ctx, "duplicate key '" + k + "'");
  }
}

AttrMap ConfigParser::to_attr_map(const YAML::Node& m, const std::string& ctx,
                                  const std::vector<std::string>& skip) const {
  AttrMap a;
  a.origin = pos(m) + ": " + ctx;
  for (auto it = m.begin(); it != m.end(); ++it) {
    const std::string k = it->first.Scalar();
    if (contains(skip, k)) continue;
    a.set(k, to_attr(it->first, it->second, ctx));
    a.where[k] = pos(it->first);
  }
  return a;
}

std::string ConfigParser::scalar_string(const YAML::Node& v, const std::string& ctx,
                                        const std::string& key) const {
  if (!v.IsScalar() || v.Scalar().empty())
    fail(v, ctx + (ctx.empty() ? "" : ": ") + "field '" + key + "'", "expected a name");
  return v.Scalar();
}

ModelConfig ConfigParser::parse(const std::string& text,
                                const std::vector<std::string>& overrides) {
  YAML::Node loaded;
  try {
    loaded = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    REMAT_USER_ERROR(src_ << ":" << e.mark.line + 1 << ":" << e.mark.column + 1
                          << ": YAML syntax error: " << e.msg);
  }
  if (loaded.IsMap())
    for (const auto& o : overrides) config_apply_override(loaded, o, &override_nodes_);
  const YAML::Node& root = loaded;  // const: lookups of absent keys must not insert them
  if (!root.IsMap()) fail(root, "", "expected a map of model settings (name, input, layers, ...)");
  check_unique_keys(root, "");
  cfg_.source = src_;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string k = it->first.Scalar();
    if (!contains(kTopKeys, k))
      fail(it->first, "", "unknown top-level key '" + k + "'" + did_you_mean(k, kTopKeys) +
                              " (known: " + join(kTopKeys) + ")");
  }

  // Scalar settings go through AttrReader, so types and ranges are reported uniformly.
  AttrMap top = to_attr_map(root, "model", {"optimizer", "data", "layers", "loss"});
  AttrReader r(top);
  if (!r.has("name")) r.fail("name", "is required");
  cfg_.name = r.get_string("name", "");
  if (cfg_.name.empty()) r.fail("name", "must not be empty");
  auto where_of = [&](const char* k) {
    auto w = top.where.find(k);
    return w == top.where.end() ? pos(root) : w->second;
  };
  if (r.has("sequence")) {  // a token model
    for (const char* k : {"input", "classes"})
      if (r.has(k))
        r.fail(k, "does not apply to a token model (`sequence` is set: the input is token ids "
                  "[N, T] and `vocab` the classes)");
    cfg_.sequence = r.require_int("sequence", 1, 1 << 24);
    if (!r.has("vocab")) r.fail("sequence", "a token model also needs `vocab` (V)");
    cfg_.vocab = r.require_int("vocab", 1, int64_t{1} << 31);
  } else {
    if (r.has("vocab")) r.fail("vocab", "needs `sequence` (T): vocab applies to token models");
    if (!r.has("input")) r.fail("input", "is required (per-sample [C, H, W]; or `sequence` and "
                                         "`vocab` for a token model)");
    if (!std::holds_alternative<std::vector<int64_t>>(top.values.at("input")))
      r.fail("input", "expected a list [C, H, W], got " + attr_value_str(top.values.at("input")));
    cfg_.input = r.get_ints("input", 3, {}, 1, 1 << 24);
    if (!r.has("classes")) r.fail("classes", "is required");
    cfg_.classes = r.require_int("classes", 1, 1 << 24);
  }
  if (!r.has("batch")) r.fail("batch", "is required");
  cfg_.batch = r.require_int("batch", 1, 1 << 24);
  cfg_.seed = static_cast<uint64_t>(r.get_int("seed", 0, 0, INT64_MAX));
  r.finish("model");
  cfg_.where_input = where_of("input");
  cfg_.where_classes = where_of("classes");
  cfg_.where_batch = where_of("batch");
  cfg_.where_sequence = where_of("sequence");
  cfg_.where_vocab = where_of("vocab");
  cfg_.where_loss = pos(root);
  cfg_.loss = cfg_.tokens() ? "token_xent" : "softmax_xent";
  cfg_.loss_attrs.origin = pos(root) + ": loss";
  for (auto it = root.begin(); it != root.end(); ++it)
    if (it->first.Scalar() == "loss") parse_loss(it->first, it->second);

  cfg_.optimizer.where = cfg_.optimizer.op_where = cfg_.data.where = pos(root);
  cfg_.optimizer.attrs.origin = pos(root) + ": optimizer";
  cfg_.optimizer.attrs.set("lr", 0.01);
  if (root["optimizer"]) parse_optimizer(root["optimizer"]);
  if (root["data"]) parse_data(root["data"]);

  const YAML::Node layers = root["layers"];
  if (!layers) fail(root, "model", "field 'layers' is required");
  std::vector<Scope> scopes(1);
  scopes[0].input = kModelInputName;
  parse_list(layers, scopes);
  return std::move(cfg_);
}

// `loss: NAME` or `loss: {op: NAME, <attrs>}`; the loss op checks its attrs in the builder.
void ConfigParser::parse_loss(const YAML::Node& key, const YAML::Node& n) {
  const std::vector<std::string> known =
      cfg_.tokens() ? std::vector<std::string>{"token_xent"}
                    : std::vector<std::string>{"softmax_xent", "softmax_xent_pixel"};
  cfg_.where_loss = pos(key);
  cfg_.loss_attrs.origin = pos(key) + ": loss";
  if (n.IsMap()) {
    check_unique_keys(n, "loss");
    if (!n["op"]) fail(n, "loss", "field 'op' is required (e.g. {op: " + known[0] + "})");
    cfg_.loss_attrs = to_attr_map(n, "loss", {"op"});
  }
  // Constructed, never assigned: assigning a YAML::Node writes through to the node it refers to.
  const YAML::Node op = n.IsMap() ? n["op"] : n;
  cfg_.loss = scalar_string(op, "model", "loss");
  if (!contains(known, cfg_.loss))
    fail(key, "model: field 'loss'",
         "'" + cfg_.loss + "' is not one of: " + join(known) +
             (cfg_.tokens() ? " (a token model)" : ""));
}

void ConfigParser::parse_optimizer(const YAML::Node& n) {
  if (!n.IsMap()) fail(n, "optimizer", "expected a map such as {op: sgd, lr: 0.1}");
  check_unique_keys(n, "optimizer");
  cfg_.optimizer.where = cfg_.optimizer.op_where = pos(n);
  if (n["op"]) {
    cfg_.optimizer.op = scalar_string(n["op"], "optimizer", "op");
    cfg_.optimizer.op_where = pos(n["op"]);
  }
  cfg_.optimizer.attrs = to_attr_map(n, "optimizer", {"op"});
}

void ConfigParser::parse_data(const YAML::Node& n) {
  if (!n.IsMap()) fail(n, "data", "expected a map such as {source: synthetic, seed: 1}");
  check_unique_keys(n, "data");
  DataConfig& d = cfg_.data;
  d.where = pos(n);
  AttrMap m = to_attr_map(n, "data", {});
  AttrReader r(m);
  const std::vector<std::string> sources =
      cfg_.tokens() ? std::vector<std::string>{"synthetic", "text", "tokens"}
                    : std::vector<std::string>{"synthetic", "cifar10"};
  if (r.has("source") && std::holds_alternative<std::string>(m.values.at("source")) &&
      !contains(sources, std::get<std::string>(m.values.at("source"))))
    r.fail("source", "'" + std::get<std::string>(m.values.at("source")) + "' is not one of: " +
                         join(sources) + " (the sources of " +
                         (cfg_.tokens() ? "a token" : "an image") + " model)");
  d.source = r.get_choice("source", "synthetic", sources);
  std::vector<std::string> known = {"source"};
  if (d.source == "synthetic") {
    d.seed = static_cast<uint64_t>(r.get_int("seed", 0, 0, INT64_MAX));
    known.push_back("seed");
  } else {
    if (!r.has("path")) r.fail("path", "is required for source " + d.source);
    d.path = r.get_string("path", "");
    d.path_where = m.where.at("path");
    known.push_back("path");
    if (d.source == "cifar10") {
      d.split = r.get_choice("split", "train", {"train", "test"});
      known.push_back("split");
    }
  }
  for (const auto& kv : m.values)
    if (!contains(known, kv.first))
      r.fail(kv.first, "unknown field for data source '" + d.source + "'" +
                           did_you_mean(kv.first, known) + " (known: " + join(known) + ")");
}

void ConfigParser::define(std::vector<Scope>& scopes, const std::string& local,
                          const std::string& full, const std::string& output) {
  scopes.back().defined[local] = output;
  scopes.back().last = output;
  full_defined_[full] = output;
}

std::string ConfigParser::resolve(const std::string& name, const std::vector<Scope>& scopes,
                                  const YAML::Node& at, const std::string& ctx) const {
  if (name == kModelInputName) return scopes.back().input;
  for (auto s = scopes.rbegin(); s != scopes.rend(); ++s) {
    auto it = s->defined.find(name);
    if (it != s->defined.end()) return it->second;
  }
  auto it = full_defined_.find(name);
  if (it != full_defined_.end()) return it->second;
  for (const auto& s : scopes)
    if (s.all_local.count(name))
      fail(at, ctx, "input '" + name + "' is defined later (cycles and forward references are "
                    "not allowed)");
  fail(at, ctx, "input '" + name + "' names no layer defined before this one");
}

void ConfigParser::parse_list(const YAML::Node& seq, std::vector<Scope>& scopes) {
  const std::string where_ctx =
      scopes.size() == 1 ? "model: field 'layers'" : "block: field 'layers'";
  if (!seq.IsSequence() || seq.size() == 0)
    fail(seq, where_ctx, "expected a non-empty list of layers");
  // First pass: names, so that forward references get a precise message and duplicates a
  // position.
  std::vector<std::string> names;
  std::map<std::string, YAML::Node> first_at;
  size_t index = 0;
  for (const auto& m : seq) {
    ++index;
    const std::string ctx = "layer #" + std::to_string(index);
    if (!m.IsMap()) fail(m, ctx, "expected a map such as {name: conv1, op: conv2d, ...}");
    check_unique_keys(m, ctx);
    if (!m["name"]) fail(m, ctx, "field 'name' is required");
    std::string name = scalar_string(m["name"], ctx, "name");
    for (char c : name)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'))
        fail(m["name"], "layer '" + name + "'",
             "field 'name': use letters, digits, '_' and '-' only (full names such as "
             "'stage.0.a' are made by repeat blocks)");
    if (contains(kReserved, name))
      fail(m["name"], "layer '" + name + "'",
           "field 'name': '" + name + "' is reserved (" + join(kReserved) + ")");
    auto prev = first_at.find(name);
    if (prev != first_at.end())
      fail(m["name"], "layer '" + name + "'",
           "duplicate layer name (first defined at " + pos(prev->second) + ")");
    first_at.emplace(name, m);
    names.push_back(name);
    scopes.back().all_local.insert(name);
  }
  index = 0;
  for (const auto& m : seq) {
    const std::string& local = names[index++];
    if (m["layers"] || m["repeat"]) parse_block(m, local, scopes);
    else parse_layer(m, local, scopes);
  }
}

void ConfigParser::parse_layer(const YAML::Node& m, const std::string& local,
                               std::vector<Scope>& scopes) {
  LayerConfig l;
  l.name = scopes.back().prefix + local;
  const std::string ctx = "layer '" + l.name + "'";
  l.where = pos(m);
  if (!m["op"]) fail(m, ctx, "field 'op' is required");
  l.op = scalar_string(m["op"], ctx, "op");
  l.op_where = pos(m["op"]);
  l.inputs_where = l.where;
  const YAML::Node in = m["inputs"];
  if (in) {
    l.inputs_where = pos(in);
    std::vector<YAML::Node> items;
    if (in.IsScalar()) items.push_back(in);
    else if (in.IsSequence() && in.size() > 0)
      for (const auto& e : in) items.push_back(e);
    else fail(in, ctx + ": field 'inputs'", "expected a layer name or a non-empty list of names");
    for (const auto& e : items) {
      std::string nm = scalar_string(e, ctx, "inputs");
      l.inputs.push_back(resolve(nm, scopes, e, ctx));
      l.input_where.push_back(pos(e));
    }
  } else {
    const Scope& s = scopes.back();
    l.inputs.push_back(s.last.empty() ? s.input : s.last);
    l.input_where.push_back(l.where);
  }
  l.attrs = to_attr_map(m, ctx, {"name", "op", "inputs", "share"});
  if (m["share"]) parse_share(m["share"], l, scopes);
  define(scopes, local, l.name, l.name);
  cfg_.layers.push_back(std::move(l));
  if (static_cast<int64_t>(cfg_.layers.size()) > kMaxModelLayers) {
    const std::string limit = "more than " + std::to_string(kMaxModelLayers) +
                              " layers (the limit on a model's layers, counted after repeat "
                              "blocks are expanded)";
    if (blocks_.empty()) fail(m, ctx, "the model has " + limit);
    fail(blocks_.front().second, "block '" + blocks_.front().first + "': field 'repeat'",
         "expanding this block gives " + limit);
  }
}

// `share: {suffix: layer.suffix, ...}`: the layer part resolves like an input.
void ConfigParser::parse_share(const YAML::Node& m, LayerConfig& l,
                               const std::vector<Scope>& scopes) {
  const std::string ctx = "layer '" + l.name + "': field 'share'";
  if (!m.IsMap() || m.size() == 0)
    fail(m, ctx, "expected a map from parameter suffixes to earlier parameters, e.g. "
                 "{weight: wte.weight}");
  check_unique_keys(m, ctx);
  for (auto it = m.begin(); it != m.end(); ++it) {
    const std::string suffix = it->first.Scalar();
    const std::string target = scalar_string(it->second, ctx, suffix);
    const size_t dot = target.rfind('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == target.size())
      fail(it->second, ctx, "'" + target + "' is not a parameter name <layer>.<suffix> "
                            "(e.g. wte.weight)");
    const std::string layer = resolve(target.substr(0, dot), scopes, it->second, ctx);
    l.shared[suffix] = layer + target.substr(dot);
    l.shared_where[suffix] = pos(it->second);
  }
}

void ConfigParser::parse_block(const YAML::Node& m, const std::string& local,
                               std::vector<Scope>& scopes) {
  const std::string full = scopes.back().prefix + local;
  const std::string ctx = "block '" + full + "'";
  for (auto it = m.begin(); it != m.end(); ++it) {
    const std::string k = it->first.Scalar();
    if (!contains(kBlockKeys, k))
      fail(it->first, ctx,
           "unknown key '" + k + "' for a repeat block" + did_you_mean(k, kBlockKeys) +
               " (known: " + join(kBlockKeys) + ")");
  }
  if (!m["layers"]) fail(m, ctx, "field 'layers' is required for a repeat block");
  int64_t repeat = 1;
  if (m["repeat"]) {
    const YAML::Node r = m["repeat"];
    if (!r.IsScalar() || r.Tag() == "!" || !parse_int64(r.Scalar(), &repeat))
      fail(r, ctx + ": field 'repeat'", "expected an integer");
    if (repeat < 1 || repeat > 100000)
      fail(r, ctx + ": field 'repeat'",
           "value " + std::to_string(repeat) + " out of range [1, 100000]");
  }
  std::string input = scopes.back().last.empty() ? scopes.back().input : scopes.back().last;
  if (const YAML::Node in = m["inputs"]) {
    YAML::Node name_node = in;
    if (in.IsSequence() && in.size() == 1) name_node = in[0];
    if (!name_node.IsScalar())
      fail(in, ctx + ": field 'inputs'", "a repeat block takes exactly one input name");
    input = resolve(scalar_string(name_node, ctx, "inputs"), scopes, name_node, ctx);
  }
  blocks_.emplace_back(full, m["repeat"] ? m["repeat"] : m);
  for (int64_t i = 0; i < repeat; ++i) {
    Scope s;
    s.prefix = full + "." + std::to_string(i) + ".";
    s.input = input;
    scopes.push_back(std::move(s));
    parse_list(m["layers"], scopes);
    input = scopes.back().last;
    scopes.pop_back();
  }
  blocks_.pop_back();
  define(scopes, local, full, input);
}

}  // namespace

ModelConfig parse_model_config(const std::string& yaml_text, const std::string& source_name,
                               const std::vector<std::string>& overrides) {
  return ConfigParser(source_name).parse(yaml_text, overrides);
}

ModelConfig load_model_config(const std::string& path, const std::vector<std::string>& overrides) {
  ModelConfig cfg = parse_model_config(read_file(path, "model config"), path, overrides);
  cfg.dir = std::filesystem::path(path).parent_path().string();
  return cfg;
}

}  // namespace remat
