// The `data` and `val` sections of a model YAML: the source, its files, and for image sources
// the transforms (Note on ImageTransformConfig in models/config.h).
#include <filesystem>
#include <string>
#include <vector>

#include "models/config_parser.h"

namespace remat {
namespace config_detail {

namespace {
// Keys of an image source's transforms (read from the YAML node, not the AttrMap: lists of reals).
const std::vector<std::string> kTransformKeys = {"augment", "mean", "std", "scale",
                                                 "ratio",   "flip", "crop_pct"};
}  // namespace

void ConfigParser::real_list(const YAML::Node& n, const std::string& ctx, size_t count, double lo,
                             double hi, double* out) const {
  if (!n.IsSequence() || n.size() != count)
    fail(n, ctx, "expected a list of " + std::to_string(count) + " numbers");
  for (size_t i = 0; i < count; ++i) {
    double v = 0;
    if (!n[i].IsScalar() || !parse_double(n[i].Scalar(), &v) || !(v >= lo && v <= hi))
      fail(n[i], ctx, "element " + std::to_string(i) + " must be a number in [" +
                          std::to_string(lo) + ", " + std::to_string(hi) + "]");
    out[i] = v;
  }
}

void ConfigParser::parse_transform(const YAML::Node& n, const std::string& section, AttrReader& r,
                                   ImageTransformConfig* t) {
  if (section == "val") {
    if (r.has("augment") && r.get_bool("augment", false))
      r.fail("augment", "validation data is never augmented (its crops are the evaluation's)");
    t->augment = false;
  } else {
    t->augment = r.get_bool("augment", true);
  }
  t->flip = r.get_bool("flip", true);
  t->crop_pct = r.get_double("crop_pct", 0.875, 0.05, 1.0);
  const std::string ctx = section + ": field ";
  if (n["mean"]) real_list(n["mean"], ctx + "'mean'", 3, -10, 10, t->mean);
  if (n["std"]) real_list(n["std"], ctx + "'std'", 3, 1e-6, 1e6, t->std);
  if (n["scale"]) real_list(n["scale"], ctx + "'scale'", 2, 1e-6, 1.0, t->scale);
  if (n["ratio"]) real_list(n["ratio"], ctx + "'ratio'", 2, 1e-3, 1e3, t->ratio);
  if (t->scale[0] > t->scale[1]) fail(n["scale"], ctx + "'scale'", "expects [min, max], min <= max");
  if (t->ratio[0] > t->ratio[1]) fail(n["ratio"], ctx + "'ratio'", "expects [min, max], min <= max");
}

void ConfigParser::parse_data(const YAML::Node& n, const std::string& section, DataConfig* d) {
  if (!n.IsMap()) fail(n, section, "expected a map such as {source: synthetic, seed: 1}");
  check_unique_keys(n, section);
  d->where = pos(n);
  d->section = section;
  AttrMap m = to_attr_map(n, section, {"mean", "std", "scale", "ratio"});
  AttrReader r(m);
  const std::vector<std::string> sources =
      cfg_.tokens() ? std::vector<std::string>{"synthetic", "text", "tokens"}
                    : std::vector<std::string>{"synthetic", "cifar10", "folder", "segmentation",
                                               "npy"};
  if (r.has("source") && std::holds_alternative<std::string>(m.values.at("source")) &&
      !contains(sources, std::get<std::string>(m.values.at("source"))))
    r.fail("source", "'" + std::get<std::string>(m.values.at("source")) + "' is not one of: " +
                         join(sources) + " (the sources of " +
                         (cfg_.tokens() ? "a token" : "a float-input") + " model)");
  d->source = r.get_choice("source", "synthetic", sources);
  std::vector<std::string> known = {"source"};
  // Note [paths in overrides]: a path in the file is relative to the file's folder (where the
  // config and its data live together); a path given on the command line is relative to the
  // working directory, as every other path on a command line is. It is made absolute here, so
  // that joining it to the config's folder later leaves it as it is.
  auto path = [&](const char* key, std::string* value, std::string* where) {
    *value = r.get_string(key, "");
    if (value->empty()) r.fail(key, "must not be empty");
    *where = m.where.at(key);
    if (where->rfind("override '", 0) == 0 && std::filesystem::path(*value).is_relative())
      *value = (std::filesystem::current_path() / *value).lexically_normal().string();
    known.push_back(key);
  };
  if (d->source == "synthetic" || d->source == "npy") {
    d->seed = static_cast<uint64_t>(r.get_int("seed", 0, 0, INT64_MAX));
    known.push_back("seed");
  }
  if (d->source == "npy") {  // Note [npy data]
    if (!r.has("inputs") || !r.has("labels"))
      r.fail(r.has("inputs") ? "labels" : "inputs",
             "is required for source npy ({source: npy, inputs: x.npy, labels: y.npy})");
    path("inputs", &d->inputs, &d->inputs_where);
    path("labels", &d->labels, &d->labels_where);
  } else if (d->source == "segmentation") {
    const bool folders = r.has("images") || r.has("labels");
    if (folders == r.has("list") || (folders && !(r.has("images") && r.has("labels"))))
      r.fail(r.has("list") ? "list" : "images",
             "segmentation data needs either `images` and `labels` (parallel folders) or "
             "`list` (a file of image and label paths), not both");
    if (folders) {
      path("images", &d->images, &d->images_where);
      path("labels", &d->labels, &d->labels_where);
    } else {
      path("list", &d->list, &d->list_where);
    }
  } else if (d->source != "synthetic") {
    if (!r.has("path")) r.fail("path", "is required for source " + d->source);
    path("path", &d->path, &d->path_where);
    if (d->source == "cifar10") {
      d->split = r.get_choice("split", "train", {"train", "test"});
      known.push_back("split");
    }
  }
  if (d->source == "folder" || d->source == "segmentation") {
    d->seed = static_cast<uint64_t>(r.get_int("seed", 0, 0, INT64_MAX));
    known.push_back("seed");
    parse_transform(n, section, r, &d->transform);
    known.insert(known.end(), kTransformKeys.begin(), kTransformKeys.end());
  }
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string k = it->first.Scalar();
    if (contains(known, k)) continue;
    const std::string why = "unknown field for data source '" + d->source + "'" +
                            did_you_mean(k, known) + " (known: " + join(known) + ")";
    if (m.has(k)) r.fail(k, why);
    fail(it->first, section + ": field '" + k + "'", why);
  }
}

}  // namespace config_detail
}  // namespace remat
