// Problem-source and solver flags shared by plan and maxbatch.
#include "tools/problem_flags.h"

#include "runtime/check.h"

namespace remat {

void add_problem_flags(FlagParser& flags) {
  flags.add("problem", "FILE", "rematerialization problem (remat-problem/1 JSON)");
}

Problem problem_from_flags(const FlagParser& flags) {
  if (flags.has("problem")) return problem_load(flags.get("problem"));
  REMAT_USER_ERROR("no problem given: use --problem FILE");
}

void add_solve_flags(FlagParser& flags) {
  flags.add("strategy", "S", "strategy name or 'all'", "all")
      .add("time-limit", "SEC", "MILP / LP wall-clock limit in seconds", "60")
      .add("threads", "N", "solver threads", "1")
      .add("gap", "G", "MILP relative gap to stop at", "0.0001")
      .add("log-level", "N", "0 silent, 1 live progress line, 2 solver log", "1");
}

SolveOptions solve_options_from_flags(const FlagParser& flags) {
  SolveOptions opt;
  opt.time_limit_seconds = flags.get_double("time-limit", 0.001, 1e7);
  opt.threads = static_cast<int>(flags.get_int("threads", 1, 1024));
  opt.relative_gap = flags.get_double("gap", 0, 1);
  opt.log_level = static_cast<int>(flags.get_int("log-level", 0, 3));
  return opt;
}

std::vector<std::string> strategies_from_flags(const FlagParser& flags) {
  std::vector<std::string> choices = strategy_names();
  choices.push_back("all");
  std::string s = flags.get_choice("strategy", choices);
  if (s == "all") return strategy_names();
  return {s};
}

}  // namespace remat
