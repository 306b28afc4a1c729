// YAML scalars, lists and maps as attribute values (AttrValue / AttrMap with positions), and the
// small string helpers the config parser shares.
#include <cerrno>
#include <cstdlib>
#include <set>

#include "models/config_parser.h"

namespace remat {
namespace config_detail {

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

}  // namespace config_detail
}  // namespace remat
