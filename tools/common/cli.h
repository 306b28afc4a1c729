// Command-line helpers shared by the tools: a small flag parser with usage errors, and byte
// sizes as users write them ("15GB" = 15e9 bytes, "15GiB" = 15 * 2^30, "512MB", "1000000").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/core/tensor.h"

namespace remat {

// Note [exit codes]: every tool exits 0 on success, 2 for a usage error (a flag that is unknown,
// missing, malformed or conflicting: the command line itself is wrong), 1 for every other failure
// (a bad file, a budget that does not fit, a failed write), 3 when `train` stopped at a non-finite
// loss or gradient, 4 when `train` finished but a side output (metrics, a periodic checkpoint,
// the trace, the summary) could not be written (Note [side outputs]), and 128 + N when `train`
// was stopped by signal N (Note [graceful stop]).
class UsageError : public UserError {
 public:
  explicit UsageError(const std::string& what) : UserError(what) {}
};

// Runs `parse` (a parser of a flag's value that throws UserError) and turns its error into a
// UsageError: a malformed flag value is a usage error (exit code 2).
template <typename F>
auto parse_flag_value(F&& parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const UsageError&) {
    throw;
  } catch (const UserError& e) {
    throw UsageError(e.what());
  }
}

// --precision as the tools spell it: fp32 (FP32, no TF32), tf32 (FP32 activations; TF32 tensor
// cores in cuDNN convolutions: PyTorch's defaults), tf32-all (TF32 in GEMMs too), bf16
// (activations in bfloat16, Note [bf16 autocast] in models/build.cpp).
extern const std::vector<std::string> kPrecisionChoices;
// The precision a run uses: `flag` when given (not empty), else the config's: BF16 -> "bf16",
// F32 -> "tf32".
std::string resolve_precision(const std::string& flag, DType config_precision);
// The activations' dtype of a precision name: BF16 for "bf16", F32 for the others.
DType precision_storage(const std::string& precision);

// "1 recompute", "3 recomputes" (the plural adds "s").
std::string plural(int64_t n, const std::string& noun);

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

  // Words without a leading "--" (such as `key=value` overrides) are collected, not refused;
  // `help` describes them in the usage text.
  FlagParser& allow_positional(const std::string& value_name, const std::string& help);

  // Returns false if --help or --version was given (the text already printed to stdout).
  bool parse(int argc, char** argv);
  const std::vector<std::string>& positional() const { return positional_; }

  bool has(const std::string& name) const;  // given on the command line (or boolean set)
  bool declared(const std::string& name) const { return flags_.count(name) > 0; }
  const std::string& program() const { return program_; }
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
  std::string positional_name_, positional_help_;
  std::vector<std::string> positional_;
};

// Note [--onnx]: the tools that read a model take `--config FILE` or `--onnx FILE`, an ONNX file
// read with its default config (Note [ONNX default config] in models/onnx/onnx_config.h; a
// --config naming a .onnx file is the same). model_file_flag returns the one given (UsageError
// for both; "" for neither). model_overrides returns the KEY=VALUE words for load_model_config:
// the command line's, and for an ONNX file also batch, input and sequence from --batch,
// --input and --seq, which its default config is made from.
std::string model_file_flag(const FlagParser& f, const std::string& tool);
std::vector<std::string> model_overrides(const FlagParser& f, const std::string& model_file);
// The help line of --onnx.
extern const char* const kOnnxFlagHelp;

// Runs `body` and turns any exception into one clear line on stderr and its exit code (Note
// [exit codes]). Every tool's main() is `return run_main([&] { ... });`.
template <typename F>
int run_main(F&& body);

// Used by run_main: prints the current exception on stderr ("error: <who>: message" when `who`
// is not empty, e.g. a data-parallel rank), returns the exit code.
int report_exception(const std::string& who = "");

// Note [flags that need --budget]: --strategy (and train's --plan) say how a plan fits a
// budget; without --budget there is no plan to make, and every tool that takes them calls that
// a usage error (exit 2) instead of ignoring them. UsageError "<tool>: --strategy needs
// --budget" for the first of `flags` given without it.
void require_budget_for(const FlagParser& f, const std::string& tool,
                        const std::vector<std::string>& flags);

// --workspace-limit SIZE (train, profile): the most workspace one convolution's algorithm may use
// on the GPU, or nullopt when not given. UsageError "<tool>: --workspace-limit needs --device
// cuda" on another device, or for a value that is not a byte size.
std::optional<int64_t> workspace_limit_flag(const FlagParser& f, const std::string& tool,
                                            const std::string& device);

// Every tool ignores SIGXFSZ, so a write past `ulimit -f` fails as on a full disk (Note
// [file-size limit]); run_main calls it.
void ignore_file_size_signal();

template <typename F>
int run_main(F&& body) {
  ignore_file_size_signal();
  try {
    return body();
  } catch (...) {
    return report_exception();
  }
}

}  // namespace remat
