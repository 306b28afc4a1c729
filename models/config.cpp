// YAML -> ModelConfig: the schema walk of the top level (model settings, loss, optimizer, data);
// layer lists and repeat blocks are config_layers.cpp's, YAML values config_values.cpp's.
// Op-specific checks (attribute types and values, shapes) happen in the builder through the op.
#include "models/config.h"

#include <climits>
#include <filesystem>

#include "models/config_parser.h"
#include "models/onnx/onnx_config.h"
#include "models/yaml_error.h"
#include "runtime/graph/graph.h"
#include "runtime/io/input_file.h"

namespace remat {

const LayerConfig* ModelConfig::find_layer(const std::string& full_name) const {
  for (const auto& l : layers)
    if (l.name == full_name) return &l;
  return nullptr;
}

const char* precision_name(DType t) { return t == DType::BF16 ? "bf16" : "fp32"; }

DType precision_from_name(const std::string& name) {
  if (name == "fp32") return DType::F32;
  if (name == "bf16") return DType::BF16;
  REMAT_USER_ERROR("unknown precision '" << name << "' (known: fp32, bf16)");
}

namespace config_detail {

namespace {
const std::vector<std::string> kTopKeys = {
    "name", "input",     "classes",   "sequence", "vocab", "batch",  "accumulate", "loss",
    "seed", "precision", "optimizer", "data",     "val",   "layers", "layout",     "fuse",
    "model"};

// ModelConfig::settings: "key.path: value" lines of a YAML tree.
void flatten_settings(const YAML::Node& n, const std::string& key, std::vector<std::string>* out) {
  constexpr size_t kMaxSettings = 1'000'000;  // a bound on any tree, validated or not
  if (out->size() >= kMaxSettings) return;
  const std::string prefix = key.empty() ? "" : key + ".";
  if (n.IsMap()) {
    if (n.size() == 0) out->push_back(key + ": {}");
    for (auto it = n.begin(); it != n.end(); ++it)
      flatten_settings(it->second, prefix + it->first.Scalar(), out);
  } else if (n.IsSequence()) {
    bool scalars = true;
    for (const auto& e : n) scalars = scalars && e.IsScalar();
    if (scalars) {
      std::string line = key + ": [";
      for (size_t k = 0; k < n.size(); ++k) line += (k ? ", " : "") + n[k].Scalar();
      out->push_back(line + "]");
      return;
    }
    for (size_t k = 0; k < n.size(); ++k) {
      const YAML::Node e = n[k];
      const bool named = e.IsMap() && e["name"] && e["name"].IsScalar();
      flatten_settings(e, prefix + (named ? e["name"].Scalar() : std::to_string(k)), out);
    }
  } else {
    out->push_back(key + ": " + (n.IsScalar() ? n.Scalar() : std::string("~")));
  }
}

// `input`: the per-sample float input, 1 to 3 sizes: an image [C, H, W], a feature vector [F]
// (also written `input: F`), a sequence or signal [T, F] / [C, L].
Shape read_input_size(AttrReader& r, const AttrMap& top) {
  const AttrValue& v = top.values.at("input");
  const auto* list = std::get_if<std::vector<int64_t>>(&v);
  if (!list && !std::holds_alternative<int64_t>(v))
    r.fail("input", "expected a list [C, H, W] (an image), [F] (features) or [T, F] (a "
                    "sequence), got " + attr_value_str(v));
  if (list && (list->empty() || list->size() > 3))
    r.fail("input", "expected 1 to 3 sizes ([C, H, W], [F] or [T, F]), got " +
                        std::to_string(list->size()) + " values");
  return r.get_int_list("input", {1, 2, 3}, {}, 1, 1 << 24);
}
}  // namespace

ModelConfig ConfigParser::parse(const std::string& text,
                                const std::vector<std::string>& overrides) {
  YAML::Node loaded;
  try {
    loaded = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    // Note [YAML error positions]
    const YamlErrorAt at = yaml_error_at(text, e.mark.line, e.mark.column, e.msg);
    REMAT_USER_ERROR(src_ << ":" << at.line << ":" << at.column << ": YAML syntax error: "
                          << at.what);
  }
  if (loaded.IsMap())
    for (const auto& o : overrides)
      config_apply_override(loaded, o, &override_nodes_, &cfg_.overrides.emplace_back());
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
  AttrMap top = to_attr_map(root, "model", {"optimizer", "data", "val", "layers", "loss", "model"});
  AttrReader r(top);
  if (!r.has("name")) r.fail("name", "is required");
  cfg_.name = r.get_string("name", "");
  if (cfg_.name.empty()) r.fail("name", "must not be empty");
  auto where_of = [&](const char* k) {
    auto w = top.where.find(k);
    return w == top.where.end() ? pos(root) : w->second;
  };
  const bool imported = static_cast<bool>(root["model"]);  // Note [ONNX import]
  if (imported) {
    for (const char* k : {"classes", "vocab"})
      if (r.has(k)) r.fail(k, "comes from the ONNX model's output (`model: {onnx: ...}`)");
    if (r.has("input") && r.has("sequence"))
      r.fail("sequence", "an ONNX model takes `input` (images) or `sequence` (tokens), not both");
    if (r.has("input")) cfg_.input = read_input_size(r, top);
    if (r.has("sequence")) cfg_.sequence = r.require_int("sequence", 1, 1 << 24);
  } else if (r.has("sequence")) {  // a token model
    for (const char* k : {"input", "classes"})
      if (r.has(k))
        r.fail(k, "does not apply to a token model (`sequence` is set: the input is token ids "
                  "[N, T] and `vocab` the classes)");
    cfg_.sequence = r.require_int("sequence", 1, 1 << 24);
    if (!r.has("vocab")) r.fail("sequence", "a token model also needs `vocab` (V)");
    cfg_.vocab = r.require_int("vocab", 1, int64_t{1} << 31);
  } else {
    if (r.has("vocab")) r.fail("vocab", "needs `sequence` (T): vocab applies to token models");
    if (!r.has("input")) r.fail("input", "is required (per-sample [C, H, W], [F] or [T, F]; or "
                                         "`sequence` and `vocab` for a token model)");
    cfg_.input = read_input_size(r, top);
    if (!r.has("classes")) r.fail("classes", "is required");
    cfg_.classes = r.require_int("classes", 1, 1 << 24);
  }
  if (!r.has("batch") && !imported) r.fail("batch", "is required");
  if (r.has("batch")) cfg_.batch = r.require_int("batch", 1, 1 << 24);
  cfg_.accumulate = static_cast<int>(r.get_int("accumulate", 1, 1, kMaxMicroBatches));
  cfg_.seed = static_cast<uint64_t>(r.get_int("seed", 0, 0, INT64_MAX));
  cfg_.precision = precision_from_name(r.get_choice("precision", "fp32", {"fp32", "bf16"}));
  cfg_.channels_last =
      r.get_choice("layout", "channels_first", {"channels_first", "channels_last"}) ==
      "channels_last";
  cfg_.fuse_batchnorm_relu =
      r.get_choice("fuse", "none", {"none", "batchnorm_relu"}) == "batchnorm_relu";
  r.finish("model");
  cfg_.where_input = where_of("input");
  cfg_.where_classes = where_of("classes");
  cfg_.where_batch = where_of("batch");
  cfg_.where_accumulate = where_of("accumulate");
  cfg_.where_sequence = where_of("sequence");
  cfg_.where_vocab = where_of("vocab");
  cfg_.where_precision = where_of("precision");
  cfg_.where_loss = pos(root);
  cfg_.loss = cfg_.tokens() ? "token_xent" : "softmax_xent";
  if (imported) parse_model_file(root["model"]);
  cfg_.loss_attrs.origin = pos(root) + ": loss";
  for (auto it = root.begin(); it != root.end(); ++it)
    if (it->first.Scalar() == "loss") parse_loss(it->first, it->second);
  if (imported && cfg_.loss.empty())  // [T, K] of a float sequence: classes first or last?
    REMAT_USER_ERROR((cfg_.where_onnx.empty() ? "" : cfg_.where_onnx + ": ")
                     << cfg_.onnx->path << ": the output is " << shape_str(onnx_output_)
                     << " per sample of a float input " << shape_str(cfg_.input)
                     << ": give `loss: token_xent` (a config's key, or loss=token_xent) to read "
                        "it as [T, K], a class at each of T positions; remat's other losses "
                        "read logits [N, K] (per sample) or [N, K, H, W] (per pixel)");

  cfg_.optimizer.where = cfg_.optimizer.op_where = cfg_.data.where = pos(root);
  cfg_.optimizer.attrs.origin = pos(root) + ": optimizer";
  cfg_.optimizer.attrs.set("lr", 0.01);
  if (root["optimizer"]) parse_optimizer(root["optimizer"]);
  if (root["data"]) parse_data(root["data"], "data", &cfg_.data);
  if (root["val"]) parse_data(root["val"], "val", &cfg_.val.emplace());

  const YAML::Node layers = root["layers"];
  if (imported) {
    if (layers) fail(layers, "model", "give `layers` or `model: {onnx: FILE}`, not both");
    flatten_settings(root, "", &cfg_.settings);  // validated: no alias can make it large
    return std::move(cfg_);
  }
  if (!layers) fail(root, "model", "field 'layers' is required (or `model: {onnx: FILE}`)");
  std::vector<Scope> scopes(1);
  scopes[0].input = kModelInputName;
  parse_list(layers, scopes);
  flatten_settings(root, "", &cfg_.settings);  // validated: no alias can make it large
  return std::move(cfg_);
}

// `loss: NAME` or `loss: {op: NAME, <attrs>}`; the loss op checks its attrs in the builder.
void ConfigParser::parse_loss(const YAML::Node& key, const YAML::Node& n) {
  // A float sequence [T, F] may take token_xent: a class at every position (Note [per-position
  // labels] in models/synthetic.cpp).
  const bool sequence = !cfg_.tokens() && cfg_.input.size() == 2;
  std::vector<std::string> known =
      cfg_.tokens() ? std::vector<std::string>{"token_xent"}
                    : std::vector<std::string>{"softmax_xent", "softmax_xent_pixel"};
  if (sequence) known.push_back("token_xent");
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
             (cfg_.tokens()  ? " (a token model)"
              : !sequence ? " (token_xent: a token model, or a float sequence, input [T, F])"
                          : ""));
}

// `model: {onnx: FILE}`: the file read, checked and translated at the config's size (Note
// [ONNX import]); its errors are reported at the `onnx` value.
void ConfigParser::parse_model_file(const YAML::Node& n) {
  if (!n.IsMap() || !n["onnx"])
    fail(n, "model", "expected a map {onnx: FILE} (an ONNX file exported from PyTorch)");
  check_unique_keys(n, "model");
  for (auto it = n.begin(); it != n.end(); ++it)
    if (it->first.Scalar() != "onnx" && it->first.Scalar() != "buffers")
      fail(it->first, "model", "unknown key '" + it->first.Scalar() + "' (known: onnx, buffers)");
  if (const YAML::Node b = n["buffers"]) {  // Note [module buffers]
    if (!b.IsSequence())
      fail(b, "model", "buffers: expected a list of initializer names, such as [pe]");
    for (const YAML::Node& name : b) {
      if (!name.IsScalar() || name.Scalar().empty())
        fail(name, "model", "buffers: expected an initializer's name");
      cfg_.onnx_buffers.insert(name.Scalar());
    }
  }
  std::string path = scalar_string(n["onnx"], "model", "onnx");
  const std::filesystem::path dir = std::filesystem::path(src_).parent_path();
  if (std::filesystem::path(path).is_relative() && !dir.empty()) path = (dir / path).string();
  // A default config (Note [ONNX default config]) has no position worth naming: the errors
  // name the file.
  const bool generated = src_.size() > 17 && src_.compare(src_.size() - 17, 17, " (default config)") == 0;
  cfg_.where_onnx = generated ? "" : pos(n["onnx"]) + ": model: onnx";
  OnnxApplied im;
  try {
    cfg_.onnx = onnx_read(path);
  } catch (const UserError& e) {
    if (generated) throw;
    REMAT_USER_ERROR(cfg_.where_onnx << ": " << e.what());
  }
  im = onnx_apply(cfg_, {});
  onnx_output_ = im.output;
  cfg_.loss = onnx_default_loss(im.output, cfg_.tokens());  // "" for [T, K]: `loss` must say
  if (cfg_.batch == 0) {  // no `batch`: the export's own, unless it left the axis open
    if (!im.static_batch)
      REMAT_USER_ERROR((cfg_.where_onnx.empty() ? "" : cfg_.where_onnx + ": ")
                       << path << ": the batch is a dynamic axis of the export: give --batch N "
                       << "(or `batch: N` in the config)");
    cfg_.batch = *im.static_batch;
  }
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

}  // namespace config_detail

ModelConfig parse_model_config(const std::string& yaml_text, const std::string& source_name,
                               const std::vector<std::string>& overrides) {
  return config_detail::ConfigParser(source_name).parse(yaml_text, overrides);
}

int64_t loss_ignore_index(const ModelConfig& cfg) {
  auto it = cfg.loss_attrs.values.find("ignore_index");
  if (it != cfg.loss_attrs.values.end() && std::holds_alternative<int64_t>(it->second))
    return std::get<int64_t>(it->second);
  return cfg.loss == "token_xent" ? -100 : kNoIgnoreIndex;  // token_xent's default
}

ModelConfig load_model_config(const std::string& path, const std::vector<std::string>& overrides) {
  const bool onnx = std::filesystem::path(path).extension() == ".onnx";  // Note [ONNX default config]
  ModelConfig cfg = onnx ? parse_model_config(onnx_default_config(path), path + " (default config)",
                                              overrides)
                         : parse_model_config(read_file(path, "model config"), path, overrides);
  cfg.dir = std::filesystem::path(path).parent_path().string();
  return cfg;
}

}  // namespace remat
