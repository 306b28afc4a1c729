// Command-line helpers shared by the tools: a small flag parser with usage errors, and byte
// sizes as users write them ("15GB" = 15e9 bytes, "15GiB" = 15 * 2^30, "512MB", "1000000").
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace remat {

// Parses a byte size: a number (integer or decimal) with an optional unit B, KB, MB, GB, TB
// (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), case-insensitive for the letters
// before "B"; at most 2^62 bytes (kMaxCount). Throws UserError naming `what` on anything else.
int64_t parse_bytes(const std::string& text, const std::string& what = "size");

// "15.00 GB" style rendering (powers of 1000, two decimals).
std::string format_bytes(int64_t bytes);

// Declarative flags: each tool lists its flags, then parse() fills values or throws UserError
// with the usage line. Flags are `--name value` or `--name=value`; booleans take no value.
class FlagParser {
 public:
  FlagParser(std::string program, std::string summary);

  // `value_name` empty means a boolean flag. `help` is one line. Returns *this for chaining.
  FlagParser& add(const std::string& name, const std::string& value_name, const std::string& help,
                  const std::string& default_value = "");
  // A short alias such as "-o" for "--output".
  FlagParser& alias(const std::string& short_name, const std::string& name);

  // Returns false if --help was given (usage already printed to stdout).
  bool parse(int argc, char** argv);

  bool has(const std::string& name) const;  // given on the command line (or boolean set)
  std::string get(const std::string& name) const;  // value or default
  int64_t get_int(const std::string& name, int64_t min_value, int64_t max_value) const;
  double get_double(const std::string& name, double min_value, double max_value) const;
  int64_t get_bytes(const std::string& name) const;
  // Value must be one of `choices`; otherwise a UserError listing them.
  std::string get_choice(const std::string& name, const std::vector<std::string>& choices) const;

  std::string usage() const;

 private:
  struct Flag {
    std::string value_name, help, default_value;
  };
  std::string program_, summary_;
  std::vector<std::string> order_;
  std::map<std::string, Flag> flags_;
  std::map<std::string, std::string> aliases_;
  std::map<std::string, std::string> given_;
};

// Runs `body` and turns any exception into one clear line on stderr and exit code 1 (2 for
// usage errors, 3 when training stopped at a non-finite loss or gradient). Every tool's main() is `return run_main([&] { ... });`.
template <typename F>
int run_main(F&& body);

// Used by run_main: prints the current exception on stderr ("error: <who>: message" when `who`
// is not empty, e.g. a data-parallel rank), returns the exit code.
int report_exception(const std::string& who = "");

template <typename F>
int run_main(F&& body) {
  try {
    return body();
  } catch (...) {
    return report_exception();
  }
}

}  // namespace remat
