// The layer lists of a model config: names checked in a first pass (duplicates, reserved names,
// forward references), each layer's inputs resolved to full names through the scopes of the
// enclosing repeat blocks, `share` targets, and repeat blocks expanded iteration by iteration.
#include <cctype>
#include <climits>

#include "models/config_parser.h"

namespace remat {
namespace config_detail {

namespace {
const std::vector<std::string> kBlockKeys = {"inputs", "layers", "name", "repeat"};
const std::vector<std::string> kReserved = {"input", "labels", "loss", "previous"};
}  // namespace

void ConfigParser::define(std::vector<Scope>& scopes, const std::string& local,
                          const std::string& full, const std::string& output) {
  scopes.back().defined[local] = output;
  scopes.back().last = output;
  full_defined_[full] = output;
}

std::string ConfigParser::resolve(const std::string& name, const std::vector<Scope>& scopes,
                                  const YAML::Node& at, const std::string& ctx) const {
  if (name == kModelInputName) return scopes.back().input;
  if (name == kPreviousInputName) {
    if (scopes.back().previous.empty())
      fail(at, ctx, "input 'previous' names the previous iteration's input of a repeat block with "
                    "two inputs (inputs: [x, p], p the first iteration's); this layer is not in "
                    "one");
    return scopes.back().previous;
  }
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
  l.attrs = to_attr_map(m, ctx, {"name", "op", "inputs", "share", "precision", "size_of"});
  for (auto it = m.begin(); it != m.end(); ++it) {  // Note [size-relative attributes]
    if (it->first.Scalar() != "size_of") continue;
    const std::string field = ctx + ": field 'size_of'";
    if (l.op != "upsample")
      fail(it->first, field, "only upsample takes it (op here: '" + l.op + "')");
    l.size_of = resolve(scalar_string(it->second, ctx, "size_of"), scopes, it->first, field);
    l.size_of_where = pos(it->first);
  }
  if (const YAML::Node p = m["precision"]) {
    const std::string v = scalar_string(p, ctx, "precision");
    if (v != "fp32" && v != "bf16")
      fail(p, ctx + ": field 'precision'", "'" + v + "' is not one of: fp32, bf16");
    l.precision = precision_from_name(v);
    l.precision_where = pos(p);
  }
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
  // `inputs`: the first iteration's input, and optionally what `previous` names in it (Note
  // [two-input blocks] in config.h): iteration i + 1 then gets iteration i's output as `input`
  // and iteration i's input as `previous`.
  std::string input = scopes.back().last.empty() ? scopes.back().input : scopes.back().last;
  std::string previous;
  if (const YAML::Node in = m["inputs"]) {
    std::vector<YAML::Node> names;
    if (in.IsSequence())
      for (const auto& e : in) names.push_back(e);
    else
      names.push_back(in);
    if (names.empty() || names.size() > 2)
      fail(in, ctx + ": field 'inputs'",
           "a repeat block takes one input name, or two: [x, p] (p is what 'previous' names in "
           "the first iteration)");
    for (const YAML::Node& n : names)
      if (!n.IsScalar()) fail(n, ctx + ": field 'inputs'", "expected a layer name");
    input = resolve(scalar_string(names[0], ctx, "inputs"), scopes, names[0], ctx);
    if (names.size() == 2)
      previous = resolve(scalar_string(names[1], ctx, "inputs"), scopes, names[1], ctx);
  }
  blocks_.emplace_back(full, m["repeat"] ? m["repeat"] : m);
  for (int64_t i = 0; i < repeat; ++i) {
    Scope s;
    s.prefix = full + "." + std::to_string(i) + ".";
    s.input = input;
    s.previous = previous;
    scopes.push_back(std::move(s));
    parse_list(m["layers"], scopes);
    if (!previous.empty()) previous = input;
    input = scopes.back().last;
    scopes.pop_back();
  }
  blocks_.pop_back();
  define(scopes, local, full, input);
}

}  // namespace config_detail
}  // namespace remat
