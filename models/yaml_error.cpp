// yaml_error_at: a scan of the document up to yaml-cpp's mark for what is still open there.
#include "models/yaml_error.h"

#include <algorithm>
#include <cstddef>
#include <vector>

namespace remat {

// Note [YAML error positions]
// yaml-cpp reports some syntax errors where it noticed them, which can be lines after the
// fault: a `{` or `[` left open (`- {name: bn1, op: batchnorm` on line 14) is reported at the
// first token the collection can not take (16:3, "illegal block entry"), an unclosed quote at
// the end of the document, and a key line without its ':' (`batch 32` on line 7) at the ':' of
// the next line (8:5, "illegal map value"), which yaml-cpp read as the same plain scalar going
// on. The line numbers themselves are right (its marks count from 0; we add 1): the mark is
// simply past the fault. So the document is scanned up to the mark, outside comments and
// quoted scalars, for a quote or a flow bracket still open there; an error on a later line than
// the one that opened it is reported where it was opened. An "illegal map value" at the ':' of a
// line holding only a key, after a line with no ':' of its own, is reported on that line.
// Every other error keeps yaml-cpp's mark, and the message keeps yaml-cpp's words and mark.

namespace {

struct Opener {
  char c;
  int line, column;  // 0-based
};

bool token_start(const std::string& l, size_t i) {
  if (i == 0) return true;
  const char p = l[i - 1];
  return p == ' ' || p == '\t' || p == '[' || p == '{' || p == ',';
}

// The quote (as an Opener) or the flow brackets still open at (line, column).
struct OpenAtMark {
  std::vector<Opener> flows;
  bool quoted = false;
  Opener quote{0, 0, 0};
};

OpenAtMark open_at(const std::vector<std::string>& lines, int line, int column) {
  OpenAtMark o;
  for (int li = 0; li <= line && li < static_cast<int>(lines.size()); ++li) {
    const std::string& l = lines[static_cast<size_t>(li)];
    const size_t end = li == line ? std::min(l.size(), static_cast<size_t>(column)) : l.size();
    for (size_t i = 0; i < end; ++i) {
      const char c = l[i];
      if (o.quoted) {
        if (o.quote.c == '"' && c == '\\') ++i;  // an escape
        else if (c == o.quote.c && o.quote.c == '\'' && i + 1 < l.size() && l[i + 1] == '\'') ++i;
        else if (c == o.quote.c) o.quoted = false;
        continue;
      }
      if (c == '#' && token_start(l, i)) break;  // a comment: the rest of the line
      if ((c == '\'' || c == '"') && token_start(l, i)) {
        o.quoted = true;
        o.quote = {c, li, static_cast<int>(i)};
      } else if ((c == '{' || c == '[') && (token_start(l, i) || !o.flows.empty())) {
        o.flows.push_back({c, li, static_cast<int>(i)});
      } else if ((c == '}' || c == ']') && !o.flows.empty()) {
        o.flows.pop_back();
      }
    }
  }
  return o;
}

bool blank_or_comment(const std::string& l) {
  const size_t i = l.find_first_not_of(" \t");
  return i == std::string::npos || l[i] == '#';
}

// A line that holds a key but no ':' (the text before a comment, outside quotes, without a
// sequence entry's "- ").
bool key_without_colon(const std::string& l) {
  size_t i = l.find_first_not_of(" \t");
  if (i == std::string::npos || l[i] == '-' || l[i] == '#' || l[i] == '\'' || l[i] == '"' ||
      l[i] == '{' || l[i] == '[')
    return false;
  for (; i < l.size(); ++i) {
    if (l[i] == ':' || (l[i] == '#' && token_start(l, i))) return l[i] == '#';
  }
  return true;
}

}  // namespace

YamlErrorAt yaml_error_at(const std::string& text, int line, int column,
                          const std::string& message) {
  std::vector<std::string> lines(1);
  for (char c : text) {
    if (c == '\n') lines.emplace_back();
    else lines.back() += c;
  }
  const std::string noticed =
      " (yaml-cpp: " + message + " at " + std::to_string(line + 1) + ":" +
      std::to_string(column + 1) + ")";
  const OpenAtMark open = open_at(lines, line, column);
  if (open.quoted && open.quote.line < line)
    return {open.quote.line + 1, open.quote.column + 1,
            std::string("this quoted value is not closed (no ") + open.quote.c + " ends it)" +
                noticed};
  if (!open.flows.empty() && open.flows.back().line < line) {
    const Opener& b = open.flows.back();
    return {b.line + 1, b.column + 1,
            std::string("this '") + b.c + "' is not closed (no '" + (b.c == '{' ? '}' : ']') +
                "' before the next line)" + noticed};
  }
  if (message == "illegal map value" && line > 0 && line < static_cast<int>(lines.size())) {
    const std::string& at = lines[static_cast<size_t>(line)];
    const std::string before = at.substr(0, std::min(at.size(), static_cast<size_t>(column)));
    const size_t key = before.find_first_not_of(" \t");
    const bool only_a_key = key != std::string::npos &&
                            before.find_first_of(" \t:", key) == std::string::npos;
    int prev = line - 1;
    while (prev >= 0 && blank_or_comment(lines[static_cast<size_t>(prev)])) --prev;
    if (only_a_key && prev >= 0 && key_without_colon(lines[static_cast<size_t>(prev)])) {
      const std::string& p = lines[static_cast<size_t>(prev)];
      return {prev + 1, static_cast<int>(p.find_first_not_of(" \t")) + 1,
              "this line has no ':' (a setting is `key: value`; YAML reads it and the next line "
              "as one text)" + noticed};
    }
  }
  return {line + 1, column + 1, message};
}

}  // namespace remat
