// Op attributes as written by the user (YAML) or stored in a graph file (JSON): a generic map
// with source positions, read once per node into the op's typed struct through AttrReader,
// which reports wrong types, bad values and unknown keys at file:line:col.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <variant>
#include <vector>

namespace remat {

using AttrValue = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>>;

struct AttrMap {
  std::map<std::string, AttrValue> values;
  std::map<std::string, std::string> where;  // key -> "file:line:col" (empty if unknown)
  std::string origin;                        // "configs/x.yaml:14:5: layer 'conv3'"

  bool has(const std::string& k) const { return values.count(k) > 0; }
  void set(const std::string& k, AttrValue v) { values[k] = std::move(v); }
};

// Base of every op's typed attribute struct; ops static_cast to their own type.
struct OpAttrs {
  virtual ~OpAttrs() = default;
};
using OpAttrsPtr = std::shared_ptr<const OpAttrs>;

// Reads typed values out of an AttrMap, remembering which keys were read so finish() can
// reject unknown keys. Every error is a UserError that starts with the key's position.
class AttrReader {
 public:
  explicit AttrReader(const AttrMap& m) : m_(m) {}

  bool has(const std::string& k) const { return m_.has(k); }
  int64_t get_int(const std::string& k, int64_t def, int64_t min_v, int64_t max_v);
  int64_t require_int(const std::string& k, int64_t min_v, int64_t max_v);
  double get_double(const std::string& k, double def, double min_v, double max_v);
  bool get_bool(const std::string& k, bool def);
  std::string get_string(const std::string& k, const std::string& def);
  // Must be one of `choices`; the error lists them.
  std::string get_choice(const std::string& k, const std::string& def,
                         const std::vector<std::string>& choices);
  // An int or a list of `n` ints (an int x means [x, x, ...]); each in [min_v, max_v].
  std::vector<int64_t> get_ints(const std::string& k, size_t n, std::vector<int64_t> def,
                                int64_t min_v, int64_t max_v);
  // An int (returned as a list of one) or a list whose length is one of `sizes`; each value in
  // [min_v, max_v]. The error names the accepted lengths.
  std::vector<int64_t> get_int_list(const std::string& k, const std::vector<size_t>& sizes,
                                    std::vector<int64_t> def, int64_t min_v, int64_t max_v);
  // True when key k is present and holds a string (for attributes that take a word or numbers,
  // like padding: same | [1, 1]).
  bool is_string(const std::string& k) const;

  // Throws naming the first key that was never read (with the list of keys this op knows).
  void finish(const std::string& op_name);

  // A UserError at key k's position (or the map's origin). When k is absent and the map holds
  // an unread key that looks like a misspelling of it, the error names that key instead
  // ("unknown field 'filtrs' (did you mean 'filters'?)"): a required field reported missing
  // was most likely mistyped.
  [[noreturn]] void fail(const std::string& k, const std::string& message) const;

 private:
  [[noreturn]] void fail_at(const std::string& k, const std::string& message) const;
  const AttrValue* find(const std::string& k);
  const AttrMap& m_;
  std::set<std::string> read_;
};

std::string attr_value_str(const AttrValue& v);

// " (did you mean 'filters'?)" when one of `known` is a likely misspelling of `word` (an edit
// distance, transpositions counted once, of at most a third of its length, at least 1);
// "" otherwise.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& known);

}  // namespace remat
