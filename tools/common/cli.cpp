// Flag parsing, byte sizes and the one-line error reporting every tool's main() uses.
#include "tools/common/cli.h"

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "runtime/core/attrs.h"
#include "runtime/core/check.h"
#include "runtime/core/checked.h"
#include "tools/common/version.h"

namespace remat {

const std::vector<std::string> kPrecisionChoices = {"fp32", "tf32", "tf32-all", "bf16"};

std::string resolve_precision(const std::string& flag, DType config_precision) {
  if (!flag.empty()) return flag;
  return config_precision == DType::BF16 ? "bf16" : "tf32";
}

DType precision_storage(const std::string& precision) {
  return precision == "bf16" ? DType::BF16 : DType::F32;
}

std::string plural(int64_t n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

int64_t parse_bytes(const std::string& text, const std::string& what) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.' ||
                             text[i] == 'e' || text[i] == 'E' || text[i] == '+')) {
    // stop at 'E' only when it begins a unit like "EB" (unsupported anyway)
    ++i;
  }
  std::string number = text.substr(0, i), unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(number, &used);
    if (used != number.size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    REMAT_USER_ERROR(what << ": '" << text << "' is not a byte size (e.g. 15GB, 12GiB, 512MB)");
  }
  std::string u;
  for (char c : unit) u += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 0;
  if (u == "" || u == "B") scale = 1;
  else if (u == "KB") scale = 1e3;
  else if (u == "MB") scale = 1e6;
  else if (u == "GB") scale = 1e9;
  else if (u == "TB") scale = 1e12;
  else if (u == "KIB") scale = 1024.0;
  else if (u == "MIB") scale = 1024.0 * 1024;
  else if (u == "GIB") scale = 1024.0 * 1024 * 1024;
  else if (u == "TIB") scale = 1024.0 * 1024 * 1024 * 1024;
  else
    REMAT_USER_ERROR(what << ": unknown unit '" << unit << "' in '" << text
                          << "' (known: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)");
  double bytes = value * scale;
  if (!std::isfinite(bytes) || bytes < 0 || bytes > static_cast<double>(kMaxCount))
    REMAT_USER_ERROR(what << ": '" << text << "' is out of range (at most 2^62 bytes)");
  return static_cast<int64_t>(std::llround(bytes));
}

std::string format_bytes(int64_t bytes) {
  char buf[64];
  double b = static_cast<double>(bytes);
  if (std::fabs(b) >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (std::fabs(b) >= 1e6) std::snprintf(buf, sizeof buf, "%.2f MB", b / 1e6);
  else if (std::fabs(b) >= 1e3) std::snprintf(buf, sizeof buf, "%.2f KB", b / 1e3);
  else std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  return buf;
}

FlagParser::FlagParser(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

FlagParser& FlagParser::add(const std::string& name, const std::string& value_name,
                            const std::string& help, const std::string& default_value) {
  REMAT_CHECK(!flags_.count(name), "duplicate flag --" << name);
  flags_[name] = Flag{value_name, help, default_value};
  order_.push_back(name);
  return *this;
}

FlagParser& FlagParser::allow_positional(const std::string& value_name,
                                         const std::string& help) {
  positional_name_ = value_name;
  positional_help_ = help;
  return *this;
}

FlagParser& FlagParser::alias(const std::string& short_name, const std::string& name) {
  aliases_[short_name] = name;
  return *this;
}

std::string FlagParser::usage() const {
  std::ostringstream os;
  // The synopsis wrapped at 100 columns, continuation lines indented under the first flag.
  const std::string head = "usage: " + program_;
  std::string line = head;
  auto word = [&](const std::string& w) {
    if (line.size() + 1 + w.size() > 100 && line.size() > head.size()) {
      os << line << "\n";
      line = std::string(head.size(), ' ');
    }
    line += " " + w;
  };
  for (const auto& n : order_) {
    const Flag& f = flags_.at(n);
    word("[--" + n + (f.value_name.empty() ? "" : " " + f.value_name) + "]");
  }
  if (!positional_name_.empty()) word("[" + positional_name_ + " ...]");
  os << line << "\n" << summary_ << "\n";
  for (const auto& n : order_) {
    const Flag& f = flags_.at(n);
    std::string left = "  --" + n + (f.value_name.empty() ? "" : " " + f.value_name);
    for (const auto& a : aliases_)
      if (a.second == n) left += ", " + a.first;
    os << left << std::string(left.size() < 28 ? 28 - left.size() : 1, ' ') << f.help;
    if (!f.default_value.empty()) os << " (default " << f.default_value << ")";
    os << "\n";
  }
  if (!positional_name_.empty()) {
    std::string left = "  " + positional_name_;
    os << left << std::string(left.size() < 28 ? 28 - left.size() : 1, ' ') << positional_help_
       << "\n";
  }
  os << "  --version                 the version and the libraries it was built with\n";
  os << "  --help                    this text\n";
  return os.str();
}

bool FlagParser::parse(int argc, char** argv) {
  auto short_usage = [&] { return "\nrun '" + program_ + " --help' for the list of flags"; };
  // A word that is neither a flag nor a positional this tool takes: after a flag's value given
  // as the next word, most likely the rest of that value (`--budget 9 MB`).
  std::string last_flag, last_value;  // the flag whose value was the previous word
  auto stray = [&](const std::string& arg) {
    const std::string what = positional_name_.empty()
                                 ? "unexpected argument '" + arg + "'"
                                 : "'" + arg + "' is neither a flag nor " + positional_name_;
    if (last_flag.empty()) return UsageError(program_ + ": " + what + short_usage());
    // The two words as one only where they read as a number and its unit (`9` `MB`).
    const bool number = !last_value.empty() &&
                        last_value.find_first_not_of("0123456789.") == std::string::npos;
    const bool unit = !arg.empty() && arg.size() <= 3 &&
                      std::all_of(arg.begin(), arg.end(),
                                  [](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
    const std::string joined = " (did you mean --" + last_flag + " " + last_value + arg + "?)";
    return UsageError(program_ + ": --" + last_flag + " " + last_value + ": " + what +
                      (number && unit ? joined : "") + short_usage());
  };
  for (int i = 1; i < argc; ++i) {
    const std::string value_flag = last_flag;
    last_flag.clear();
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << usage();
      return false;
    }
    std::string name, value;
    bool has_value = false;
    if (arg == "--version") {
      std::cout << version_text(program_);
      return false;
    }
    if (aliases_.count(arg)) {
      name = aliases_.at(arg);
    } else if (arg.rfind("--", 0) == 0) {
      name = arg.substr(2);
      size_t eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
    } else {
      // KEY=VALUE positionals need their '='.
      const bool takes = !positional_name_.empty() &&
                         (positional_name_.find('=') == std::string::npos ||
                          arg.find('=') != std::string::npos);
      if (!takes) {
        last_flag = value_flag;
        throw stray(arg);
      }
      positional_.push_back(arg);
      continue;
    }
    auto it = flags_.find(name);
    if (it == flags_.end()) {
      std::vector<std::string> known;
      for (const auto& n : order_) known.push_back("--" + n);
      throw UsageError(program_ + ": unknown flag '" + arg + "'" +
                       did_you_mean("--" + name, known) + short_usage());
    }
    if (it->second.value_name.empty()) {
      if (has_value) throw UsageError(program_ + ": flag --" + name + " takes no value");
      given_[name] = "true";
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc)
        throw UsageError(program_ + ": flag --" + name + " needs a value (" +
                         it->second.value_name + ")" + short_usage());
      value = argv[++i];
      last_flag = name, last_value = value;
    }
    if (given_.count(name)) throw UsageError(program_ + ": flag --" + name + " given twice");
    given_[name] = value;
  }
  return true;
}

bool FlagParser::has(const std::string& name) const {
  REMAT_CHECK(flags_.count(name), "undeclared flag --" << name);
  return given_.count(name) > 0;
}

std::string FlagParser::get(const std::string& name) const {
  REMAT_CHECK(flags_.count(name), "undeclared flag --" << name);
  auto it = given_.find(name);
  return it != given_.end() ? it->second : flags_.at(name).default_value;
}

int64_t FlagParser::get_int(const std::string& name, int64_t min_value, int64_t max_value) const {
  std::string v = get(name);
  try {
    size_t used = 0;
    long long x = std::stoll(v, &used);
    if (used == v.size() && x >= min_value && x <= max_value) return x;
  } catch (const std::exception&) {
  }
  throw UsageError(program_ + ": --" + name + " '" + v + "' must be an integer in [" +
                   std::to_string(min_value) + ", " + std::to_string(max_value) + "]");
}

double FlagParser::get_double(const std::string& name, double min_value, double max_value) const {
  std::string v = get(name);
  try {
    size_t used = 0;
    double x = std::stod(v, &used);
    if (used == v.size() && x >= min_value && x <= max_value) return x;
  } catch (const std::exception&) {
  }
  std::ostringstream os;
  os << program_ << ": --" << name << " '" << v << "' must be a number in [" << min_value << ", "
     << max_value << "]";
  throw UsageError(os.str());
}

int64_t FlagParser::get_bytes(const std::string& name) const {
  try {
    return parse_bytes(get(name), program_ + ": --" + name);
  } catch (const UsageError&) {
    throw;
  } catch (const UserError& e) {  // a malformed flag value is a usage error
    throw UsageError(e.what());
  }
}

std::string FlagParser::get_choice(const std::string& name,
                                   const std::vector<std::string>& choices) const {
  std::string v = get(name);
  for (const auto& c : choices)
    if (c == v) return v;
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
  throw UsageError(program_ + ": --" + name + " '" + v + "' is not one of: " + list);
}

void require_budget_for(const FlagParser& f, const std::string& tool,
                        const std::vector<std::string>& flags) {
  if (f.has("budget")) return;
  for (const std::string& flag : flags)
    if (f.has(flag))
      throw UsageError(tool + ": --" + flag + " needs --budget (it says how a plan fits a budget; "
                       "without one everything is kept)");
}

std::optional<int64_t> workspace_limit_flag(const FlagParser& f, const std::string& tool,
                                            const std::string& device) {
  if (!f.has("workspace-limit")) return std::nullopt;
  if (device != "cuda")
    throw UsageError(tool + ": --workspace-limit needs --device cuda (the CPU's ops have one "
                     "algorithm each, with a fixed workspace)");
  return f.get_bytes("workspace-limit");
}

// Note [file-size limit]: a write past the shell's file-size limit (`ulimit -f`, RLIMIT_FSIZE)
// raises SIGXFSZ, whose default action kills the process: a run would end with no checkpoint
// and a metrics file cut mid-line. Ignored, the write fails with EFBIG instead and takes the
// path of a full disk: the file being written is removed (atomic writes), a side output's
// failure is reported (Note [side outputs]) and the checkpoint is written where it fits.
void ignore_file_size_signal() { std::signal(SIGXFSZ, SIG_IGN); }

int report_exception(const std::string& who) {
  std::fflush(stdout);  // progress printed so far comes before the error line
  const std::string prefix = "error: " + (who.empty() ? "" : who + ": ");
  // One write per line: the lines of several failing ranks do not interleave on a shared stderr.
  auto say = [&](const char* what) { std::cerr << (prefix + what + "\n") << std::flush; };
  try {
    throw;
  } catch (const UsageError& e) {
    say(e.what());
    return 2;
  } catch (const NonFiniteError& e) {
    say(e.what());
    return 3;
  } catch (const std::exception& e) {
    say(e.what());
    return 1;
  }
}

const char* const kOnnxFlagHelp =
    "an ONNX model (torch.onnx.export) with the default config: softmax cross-entropy on its "
    "output, sgd, synthetic data; sizes from --batch / --input / --seq";

std::string model_file_flag(const FlagParser& f, const std::string& tool) {
  if (f.has("config") && f.has("onnx"))
    throw UsageError((tool.empty() ? "" : tool + ": ") + "give --config or --onnx, not both");
  if (f.has("onnx")) {
    const std::string p = f.get("onnx");
    if (p.size() < 5 || p.compare(p.size() - 5, 5, ".onnx") != 0)
      throw UsageError((tool.empty() ? "" : tool + ": ") + "--onnx " + p + ": expected a .onnx file");
    return p;
  }
  return f.has("config") ? f.get("config") : "";
}

std::vector<std::string> model_overrides(const FlagParser& f, const std::string& model_file) {
  std::vector<std::string> out = f.positional();
  const bool onnx = model_file.size() >= 5 && model_file.compare(model_file.size() - 5, 5, ".onnx") == 0;
  if (!onnx) return out;
  auto given = [&](const char* flag) { return f.declared(flag) && f.has(flag); };
  if (given("batch")) out.insert(out.begin(), "batch=" + f.get("batch"));
  // maxbatch searches the batch (the config's is where the search starts) and export's weights
  // do not depend on it: a dynamic batch needs no --batch there.
  else if (f.program() == "maxbatch" || f.program() == "export") out.insert(out.begin(), "batch=1");
  if (given("input")) {
    std::string list = f.get("input");
    for (char& c : list)
      if (c == 'x' || c == 'X') c = ',';
    out.insert(out.begin(), "input=[" + list + "]");
  }
  if (given("seq")) out.insert(out.begin(), "sequence=" + f.get("seq"));
  return out;
}

}  // namespace remat
