// Where a YAML syntax error is (Note [YAML error positions]): yaml-cpp's mark, moved back to the
// bracket, quote or line at fault when the mark is where yaml-cpp noticed the error, past it.
// Internal to models/: config.cpp reports syntax errors with it.
#pragma once

#include <string>

namespace remat {

struct YamlErrorAt {
  int line = 0, column = 0;  // 1-based
  std::string what;          // the message: yaml-cpp's, or what is at fault with yaml-cpp's
                             // message and mark after it
};

// `text` is the whole document; `line`, `column` and `message` yaml-cpp's (0-based mark).
YamlErrorAt yaml_error_at(const std::string& text, int line, int column,
                          const std::string& message);

}  // namespace remat
