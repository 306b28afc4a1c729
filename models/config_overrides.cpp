// Hydra-style config overrides: KEY=VALUE edits of the YAML tree before validation.
#include "models/config_overrides.h"

#include <cstdint>
#include <cstdlib>
#include <sstream>

#include <yaml-cpp/eventhandler.h>

#include "runtime/core/attrs.h"
#include "runtime/core/check.h"

namespace remat {

// Note [config overrides]
// `train --config c.yaml optimizer.lr=0.01 layers.conv1.filters=32` edits the YAML tree before
// it is validated, so an override is checked exactly as the same text in the file would be.
// KEY is a dotted path: map keys, and inside a list of layers a layer's name (or a 0-based
// index); VALUE is YAML (`input=[3,64,64]`, `data={source: synthetic}`). A missing last key is
// added (and then refused by validation if the model does not know it, with a did-you-mean);
// a missing `optimizer` or `data` section is created. The nodes an override sets remember it,
// and errors about them are positioned at "override 'KEY=VALUE'" instead of a file line.
namespace {

// A 0-based list index such as "2".
bool parse_index(const std::string& s, int64_t* out) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  *out = std::strtoll(s.c_str(), nullptr, 10);
  return true;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

void mark_override(const YAML::Node& n, const std::string& label, OverrideMarks* marks) {
  marks->emplace_back(n, label);
  if (n.IsMap())
    for (auto it = n.begin(); it != n.end(); ++it)
      mark_override(it->first, label, marks), mark_override(it->second, label, marks);
  else if (n.IsSequence())
    for (const auto& e : n) mark_override(e, label, marks);
}

// A value as YAML text on one line: a scalar as written, a list or map in flow style.
std::string yaml_text(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  YAML::Emitter e;
  e.SetSeqFormat(YAML::Flow);
  e.SetMapFormat(YAML::Flow);
  e << n;
  return e.c_str();
}

// Two scalars are the same value when their text is, or when both are the same number
// (0.02 and 2e-2).
bool same_value(const std::string& a, const std::string& b) {
  if (a == b) return true;
  char* end_a = nullptr;
  char* end_b = nullptr;
  const double x = std::strtod(a.c_str(), &end_a), y = std::strtod(b.c_str(), &end_b);
  return !a.empty() && !b.empty() && *end_a == '\0' && *end_b == '\0' && x == y;
}

// Counts the aliases (*a) in a YAML text's events: what makes a short text a large tree.
class AliasCounter : public YAML::EventHandler {
 public:
  int aliases = 0;
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override { ++aliases; }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Note [aliases in overrides]: an override's value is one line of YAML, where an alias has no
// use; a few nested ones (`[&a [1,1,1], &b [*a,*a,*a], ...]`) make a tree of billions of nodes
// that marking and printing the override would walk. They are refused before anything is built,
// as fast as the same text in a config file is refused by its field's check.
void refuse_aliases(const std::string& value_text, const std::string& label) {
  std::istringstream in(value_text);
  YAML::Parser parser(in);
  AliasCounter counter;
  try {
    parser.HandleNextDocument(counter);  // the first document, the one YAML::Load reads
  } catch (const YAML::ParserException& e) {
    REMAT_USER_ERROR(label << ": the value is not valid YAML: " << e.msg);
  }
  if (counter.aliases > 0)
    REMAT_USER_ERROR(label << ": YAML aliases (*name) are not allowed in an override's value; "
                              "write the value out");
}

}  // namespace

std::string describe_overrides(const ModelConfig& cfg) {
  std::string s;
  for (const ConfigOverride& o : cfg.overrides) {
    s += s.empty() ? "overrides: " : ", ";
    if (o.before.empty()) s += o.key + " " + o.after + " (not in the config)";
    else if (o.same) s += o.key + " " + o.after + " (the config's value: no change)";
    else s += o.key + " " + o.before + " -> " + o.after;
  }
  return s;
}

void config_apply_override(YAML::Node root, const std::string& text, OverrideMarks* marks,
                           ConfigOverride* effect) {
  const std::string label = "override '" + text + "'";
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    REMAT_USER_ERROR(label << ": expected KEY=VALUE (e.g. optimizer.lr=0.01 or "
                              "layers.conv1.filters=32)");
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t dot = text.find('.', start);
    const size_t end = dot == std::string::npos || dot > eq ? eq : dot;
    parts.push_back(text.substr(start, end - start));
    if (parts.back().empty()) REMAT_USER_ERROR(label << ": empty name in the key path");
    if (end == eq) break;
    start = end + 1;
  }
  refuse_aliases(text.substr(eq + 1), label);  // Note [aliases in overrides]
  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::ParserException& e) {
    REMAT_USER_ERROR(label << ": the value is not valid YAML: " << e.msg);
  }
  std::string path;  // the key so far, for messages
  YAML::Node cur = root;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    const bool last = i + 1 == parts.size();
    const YAML::Node& ccur = cur;  // const: lookups must not insert
    if (ccur.IsMap()) {
      if (last) {
        if (effect) {
          effect->key = text.substr(0, eq);
          effect->before = ccur[part] ? yaml_text(ccur[part]) : "";
          effect->after = yaml_text(value);
          effect->same = ccur[part] && same_value(effect->before, effect->after);
        }
        cur.remove(part);
        cur[part] = value;
        for (auto it = cur.begin(); it != cur.end(); ++it)
          if (it->first.Scalar() == part) {
            mark_override(it->first, label, marks);
            mark_override(it->second, label, marks);
          }
        return;
      }
      if (!ccur[part]) {
        if (i == 0 && (part == "optimizer" || part == "data")) {
          cur[part] = YAML::Node(YAML::NodeType::Map);
        } else {
          std::vector<std::string> keys;
          for (auto it = ccur.begin(); it != ccur.end(); ++it) keys.push_back(it->first.Scalar());
          REMAT_USER_ERROR(label << ": " << (path.empty() ? "the config" : "'" + path + "'")
                                 << " has no field '" << part << "'" << did_you_mean(part, keys)
                                 << " to set a field inside");
        }
      }
      const YAML::Node next = ccur[part];
      cur.reset(next);
    } else if (ccur.IsSequence()) {
      YAML::Node found;
      bool have = false;
      std::vector<std::string> names;
      int64_t index = -1;
      const bool numeric = parse_index(part, &index);
      for (size_t k = 0; k < ccur.size(); ++k) {
        const YAML::Node e = ccur[k];
        const bool named = e.IsMap() && e["name"] && e["name"].IsScalar();
        const std::string name = named ? e["name"].Scalar() : "";
        names.push_back(name);
        if ((numeric && index == static_cast<int64_t>(k)) || (!name.empty() && name == part))
          found.reset(e), have = true;
      }
      if (!have)
        REMAT_USER_ERROR(label << ": '" << path << "' has no layer '" << part << "'"
                               << did_you_mean(part, names) << " (known: " << join(names) << ")");
      if (last)
        REMAT_USER_ERROR(label << ": '" << path << "." << part
                               << "' is a whole layer: set one of its fields, e.g. " << path
                               << "." << part << ".filters=32");
      cur.reset(found);
    } else {
      REMAT_USER_ERROR(label << ": '" << path << "' is a value, not a section: it has no field '"
                             << part << "'");
    }
    path += (path.empty() ? "" : ".") + part;
  }
}

}  // namespace remat
