// Where plan/maxbatch get their Problem: the flags that name it, and the one function that
// loads it (today --problem FILE; a model config path slots in beside it).
#pragma once

#include "solver/problem.h"
#include "solver/strategies.h"
#include "tools/cli.h"

namespace remat {

// Declares --problem (and any other problem source flags) on `flags`.
void add_problem_flags(FlagParser& flags);

// Builds the Problem from whichever source flag was given; a UserError if none.
Problem problem_from_flags(const FlagParser& flags);

// Declares --time-limit, --threads, --gap, --log-level; reads them back into SolveOptions.
void add_solve_flags(FlagParser& flags);
SolveOptions solve_options_from_flags(const FlagParser& flags);

// Strategy names selected by --strategy (one name, or "all").
std::vector<std::string> strategies_from_flags(const FlagParser& flags);

}  // namespace remat
