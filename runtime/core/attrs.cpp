// AttrReader: typed reads from an AttrMap with errors at the key's file:line:col.
#include "runtime/core/attrs.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "runtime/core/check.h"

namespace remat {

std::string attr_value_str(const AttrValue& v) {
  std::ostringstream os;
  if (auto b = std::get_if<bool>(&v)) os << (*b ? "true" : "false");
  else if (auto i = std::get_if<int64_t>(&v)) os << *i;
  else if (auto d = std::get_if<double>(&v)) os << *d;
  else if (auto s = std::get_if<std::string>(&v)) os << "'" << *s << "'";
  else {
    const auto& l = std::get<std::vector<int64_t>>(v);
    os << "[";
    for (size_t k = 0; k < l.size(); ++k) os << (k ? ", " : "") << l[k];
    os << "]";
  }
  return os.str();
}

namespace {

// Optimal string alignment distance: insertions, deletions, substitutions, adjacent swaps.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

}  // namespace

std::string did_you_mean(const std::string& word, const std::vector<std::string>& known) {
  const size_t limit = std::max<size_t>(1, word.size() / 3);
  std::string best;
  size_t best_d = limit + 1;
  for (const auto& k : known) {
    if (k == word) continue;
    const size_t d = edit_distance(word, k);
    if (d < best_d) best_d = d, best = k;
  }
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

void AttrReader::fail(const std::string& k, const std::string& message) const {
  if (!m_.has(k)) {  // a missing field: was it misspelled?
    for (const auto& kv : m_.values) {
      if (read_.count(kv.first) || did_you_mean(kv.first, {k}).empty()) continue;
      fail_at(kv.first, "field '" + kv.first + "': unknown field" + did_you_mean(kv.first, {k}));
    }
  }
  fail_at(k, "field '" + k + "': " + message);
}

void AttrReader::fail_at(const std::string& k, const std::string& message) const {
  auto it = m_.where.find(k);
  std::string pos = (it != m_.where.end() && !it->second.empty()) ? it->second : "";
  std::ostringstream os;
  if (!pos.empty()) {
    os << pos << ": ";
    // origin is "<file:line:col>: layer 'x'"; keep only the layer part after the position
    auto cut = m_.origin.find(": ");
    if (cut != std::string::npos) os << m_.origin.substr(cut + 2) << ": ";
  } else if (!m_.origin.empty()) {
    os << m_.origin << ": ";
  }
  os << message;
  throw UserError(os.str());
}

const AttrValue* AttrReader::find(const std::string& k) {
  read_.insert(k);
  auto it = m_.values.find(k);
  return it == m_.values.end() ? nullptr : &it->second;
}

int64_t AttrReader::get_int(const std::string& k, int64_t def, int64_t min_v, int64_t max_v) {
  const AttrValue* v = find(k);
  if (!v) return def;
  int64_t x = 0;
  if (auto i = std::get_if<int64_t>(v)) x = *i;
  else fail(k, "expected an integer, got " + attr_value_str(*v));
  if (x < min_v || x > max_v)
    fail(k, "value " + std::to_string(x) + " out of range [" + std::to_string(min_v) + ", " +
                std::to_string(max_v) + "]");
  return x;
}

int64_t AttrReader::require_int(const std::string& k, int64_t min_v, int64_t max_v) {
  if (!has(k)) fail(k, "is required");
  return get_int(k, 0, min_v, max_v);
}

double AttrReader::get_double(const std::string& k, double def, double min_v, double max_v) {
  const AttrValue* v = find(k);
  if (!v) return def;
  double x = 0;
  if (auto d = std::get_if<double>(v)) x = *d;
  else if (auto i = std::get_if<int64_t>(v)) x = static_cast<double>(*i);
  else fail(k, "expected a number, got " + attr_value_str(*v));
  if (!std::isfinite(x) || x < min_v || x > max_v) {
    std::ostringstream os;
    os << "value " << x << " out of range [" << min_v << ", " << max_v << "]";
    fail(k, os.str());
  }
  return x;
}

bool AttrReader::get_bool(const std::string& k, bool def) {
  const AttrValue* v = find(k);
  if (!v) return def;
  if (auto b = std::get_if<bool>(v)) return *b;
  fail(k, "expected true or false, got " + attr_value_str(*v));
}

std::string AttrReader::get_string(const std::string& k, const std::string& def) {
  const AttrValue* v = find(k);
  if (!v) return def;
  if (auto s = std::get_if<std::string>(v)) return *s;
  fail(k, "expected a string, got " + attr_value_str(*v));
}

std::string AttrReader::get_choice(const std::string& k, const std::string& def,
                                   const std::vector<std::string>& choices) {
  std::string s = get_string(k, def);
  std::string list;
  for (const auto& c : choices) {
    if (c == s) return s;
    list += (list.empty() ? "" : ", ") + c;
  }
  fail(k, "'" + s + "' is not one of: " + list);
}

std::vector<int64_t> AttrReader::get_ints(const std::string& k, size_t n, std::vector<int64_t> def,
                                          int64_t min_v, int64_t max_v) {
  const AttrValue* v = find(k);
  std::vector<int64_t> out;
  if (!v) return def;
  if (auto i = std::get_if<int64_t>(v)) out.assign(n, *i);
  else if (auto l = std::get_if<std::vector<int64_t>>(v)) out = *l;
  else fail(k, "expected an integer or a list of " + std::to_string(n) + " integers, got " +
                   attr_value_str(*v));
  if (out.size() != n)
    fail(k, "expected " + std::to_string(n) + " values, got " + std::to_string(out.size()));
  for (int64_t x : out)
    if (x < min_v || x > max_v)
      fail(k, "value " + std::to_string(x) + " out of range [" + std::to_string(min_v) + ", " +
                  std::to_string(max_v) + "]");
  return out;
}

std::vector<int64_t> AttrReader::get_int_list(const std::string& k,
                                              const std::vector<size_t>& sizes,
                                              std::vector<int64_t> def, int64_t min_v,
                                              int64_t max_v) {
  const AttrValue* v = find(k);
  if (!v) return def;
  std::string lengths;
  for (size_t n : sizes) lengths += (lengths.empty() ? "" : " or ") + std::to_string(n);
  std::vector<int64_t> out;
  if (auto i = std::get_if<int64_t>(v)) out.assign(1, *i);
  else if (auto l = std::get_if<std::vector<int64_t>>(v)) out = *l;
  else fail(k, "expected an integer or a list of " + lengths + " integers, got " +
                   attr_value_str(*v));
  if (out.size() != 1 && std::find(sizes.begin(), sizes.end(), out.size()) == sizes.end())
    fail(k, "expected an integer or a list of " + lengths + " integers, got " +
                std::to_string(out.size()) + " values");
  for (int64_t x : out)
    if (x < min_v || x > max_v)
      fail(k, "value " + std::to_string(x) + " out of range [" + std::to_string(min_v) + ", " +
                  std::to_string(max_v) + "]");
  return out;
}

bool AttrReader::is_string(const std::string& k) const {
  auto it = m_.values.find(k);
  return it != m_.values.end() && std::holds_alternative<std::string>(it->second);
}

void AttrReader::finish(const std::string& op_name) {
  for (const auto& kv : m_.values) {
    if (read_.count(kv.first)) continue;
    std::string known;
    for (const auto& r : read_) known += (known.empty() ? "" : ", ") + r;
    fail(kv.first, "unknown field for op '" + op_name + "'" +
                       did_you_mean(kv.first, {read_.begin(), read_.end()}) + " (known: " +
                       (known.empty() ? std::string("none") : known) + ")");
  }
}

}  // namespace remat
