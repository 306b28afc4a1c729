// Griewank & Walther's binomial checkpointing (revolve) for chains, exposed for tests.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "solver/problem.h"
#include "solver/schedule.h"

namespace remat {

// True when nodes are f_0..f_{l-1} (f_k depends only on f_{k-1}), a loss depending on
// f_{l-1}, and backward b_{l-1}..b_0 where b_k depends on the previous gradient (loss or
// b_{k+1}) and otherwise only on f_{k-1} and/or f_k. Sets *steps = l.
bool problem_is_chain(const Problem& p, int* steps = nullptr);

// Revolve's DP: fewest forward-step evaluations (excluding the reversal's own re-evaluation
// of the step being reversed) to reverse `steps` steps with `slots` checkpoint slots, the
// initial state occupying one. table[c][l] for c = 0..slots, l = 0..steps; split[c][l] is
// the optimal number of steps to advance before the first new checkpoint (0 if none).
struct RevolveTable {
  std::vector<std::vector<int64_t>> cost;
  std::vector<std::vector<int>> split;
};
RevolveTable revolve_table(int steps, int slots);

// The revolve schedule for a chain with `slots` slots, as R, S (R derived from S); nullopt if
// `p` is not a chain. Reversing step i (b_i) needs x_i and, in these graphs, f_i's output
// x_{i+1}: plain revolve re-evaluates step i for it (T(l, c) recomputes in all);
// `keep_outputs` instead holds x_{i+1} one stage longer from b_{i+1}, which needed it too
// (T(l, c) - (l - 1) recomputes, one more value resident). solve_griewank tries both.
std::optional<Schedule> griewank_schedule(const Problem& p, int slots, bool keep_outputs = false);

}  // namespace remat
