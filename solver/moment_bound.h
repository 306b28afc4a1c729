// A lower bound on every schedule's cost from one moment of the step: the first run of a node
// (Note [moment bounds]). Cheap where the stage relaxation proves nothing beyond running every
// node once.
#pragma once

#include <cstdint>
#include <string>

#include "solver/problem.h"
#include "solver/strategies.h"

namespace remat {

struct MomentBound {
  double bound = 0;   // a lower bound on the total cost (Problem units); 0: none found
  int node = -1;      // the moment that proves it: node's first run
  std::string source; // the proof, in words (names the node)
  int lps = 0;        // LPs solved
};

// The strongest moment bound over the `max_moments` moments with the largest excess of
// needed bytes over the budget, each an LP (Clp) within `seconds` in all. Never above the cost
// of any schedule that fits `budget` (tests/test_moment_bound.cpp checks it against exact
// optima).
MomentBound moment_lower_bound(const Problem& p, int64_t budget, double seconds,
                               int max_moments = 8);

// The binary problem of one moment (Note [moment bounds]) with Cbc within opt's time limit:
// every node's cost once plus Cbc's proven bound (stronger than the LP's where it branches).
MomentBound moment_milp_bound(const Problem& p, int64_t budget, int node,
                              const SolveOptions& opt);

}  // namespace remat
