// Helpers of the planning-tool suites (tests/tools_test_util.h).
#include "tests/tools_test_util.h"

#include <optional>
#include <sstream>

#include "solver/baselines.h"
#include "solver/schedule.h"
#include "tests/source_dir.h"
#include "tools/planning/problem_flags.h"

namespace remat {

const std::string kSmallCnn = test_source_dir() + "/configs/small_cnn.yaml";
const std::string kSmallDag = test_source_dir() + "/configs/small_dag.yaml";

std::string xml_check(const std::string& s) {
  size_t i = 0;
  std::vector<std::string> stack;
  int roots = 0;
  auto is_name = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == ':' ||
           c == '.';
  };
  auto check_text = [&](size_t a, size_t b) -> std::string {
    for (size_t k = a; k < b; ++k) {
      if (s[k] == '<') return "'<' in text at " + std::to_string(k);
      if (s[k] != '&') continue;
      size_t semi = s.find(';', k);
      if (semi == std::string::npos || semi > b) return "unterminated entity at " + std::to_string(k);
      std::string ent = s.substr(k + 1, semi - k - 1);
      static const std::set<std::string> kEnt = {"amp", "lt", "gt", "quot", "apos"};
      if (!kEnt.count(ent) && !(ent.size() > 1 && ent[0] == '#'))
        return "unknown entity &" + ent + "; at " + std::to_string(k);
    }
    return "";
  };
  while (i < s.size()) {
    size_t lt = s.find('<', i);
    if (lt == std::string::npos) lt = s.size();
    std::string err = check_text(i, lt);
    if (!err.empty()) return err;
    if (stack.empty()) {
      for (size_t k = i; k < lt; ++k)
        if (!std::isspace(static_cast<unsigned char>(s[k]))) return "text outside the root";
    }
    if (lt == s.size()) break;
    if (s.compare(lt, 5, "<?xml") == 0) {
      if (lt != 0) return "declaration not at the start";
      size_t e = s.find("?>", lt);
      if (e == std::string::npos) return "unterminated declaration";
      i = e + 2;
      continue;
    }
    if (s.compare(lt, 4, "<!--") == 0) {
      size_t e = s.find("-->", lt);
      if (e == std::string::npos) return "unterminated comment";
      i = e + 3;
      continue;
    }
    size_t k = lt + 1;
    const bool closing = k < s.size() && s[k] == '/';
    if (closing) ++k;
    size_t n0 = k;
    while (k < s.size() && is_name(s[k])) ++k;
    std::string name = s.substr(n0, k - n0);
    if (name.empty()) return "empty tag name at " + std::to_string(lt);
    if (closing) {
      while (k < s.size() && std::isspace(static_cast<unsigned char>(s[k]))) ++k;
      if (k >= s.size() || s[k] != '>') return "bad closing tag </" + name;
      if (stack.empty() || stack.back() != name)
        return "</" + name + "> does not match <" + (stack.empty() ? "" : stack.back()) + ">";
      stack.pop_back();
      i = k + 1;
      continue;
    }
    std::set<std::string> attrs;
    bool self_close = false;
    for (;;) {
      while (k < s.size() && std::isspace(static_cast<unsigned char>(s[k]))) ++k;
      if (k >= s.size()) return "unterminated tag <" + name;
      if (s[k] == '>') break;
      if (s[k] == '/') {
        if (k + 1 >= s.size() || s[k + 1] != '>') return "stray '/' in <" + name;
        self_close = true;
        ++k;
        break;
      }
      size_t a0 = k;
      while (k < s.size() && is_name(s[k])) ++k;
      std::string attr = s.substr(a0, k - a0);
      if (attr.empty()) return "bad attribute in <" + name + "> at " + std::to_string(k);
      if (!attrs.insert(attr).second) return "duplicate attribute " + attr;
      if (k >= s.size() || s[k] != '=') return "attribute " + attr + " without value";
      ++k;
      if (k >= s.size() || (s[k] != '"' && s[k] != '\'')) return "unquoted attribute " + attr;
      const char q = s[k];
      size_t e = s.find(q, k + 1);
      if (e == std::string::npos) return "unterminated attribute " + attr;
      err = check_text(k + 1, e);
      if (!err.empty()) return "attribute " + attr + ": " + err;
      k = e + 1;
    }
    if (stack.empty() && ++roots > 1) return "more than one root element";
    if (!self_close) stack.push_back(name);
    i = k + 1;
  }
  if (!stack.empty()) return "unclosed <" + stack.back() + ">";
  if (roots != 1) return "no root element";
  return "";
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string cur;
  std::stringstream ss(s);
  while (std::getline(ss, cur, sep)) parts.push_back(cur);
  if (!s.empty() && s.back() == sep) parts.push_back("");
  return parts;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  for (const std::string& l : split(s, '\n'))
    if (!l.empty()) out.push_back(l);
  return out;
}

Problem config_problem(const std::string& config, std::optional<int64_t> batch,
                       const std::string& cost_model, std::optional<int64_t> sequence,
                       std::optional<DType> precision) {
  ConfigProblem c;
  c.config = config;
  c.batch = batch;
  c.cost_model = cost_model;
  c.sequence = sequence;
  c.precision = precision;
  return problem_from_config(c);
}

Problem small_cnn_problem() { return config_problem(kSmallCnn); }

int64_t all_keep_peak(const Problem& p) { return simulate(p, all_keep_schedule(p)).peak_bytes; }
double all_keep_cost(const Problem& p) { return simulate(p, all_keep_schedule(p)).total_cost; }

}  // namespace remat
