// One probe of the max-batch search (Note [max-batch bisection] in solver/max_batch.cpp):
// whether a schedule within the budget and the cost cap exists at one batch, from the cheapest
// answers (schedules found before, cheap drops) to Cbc. Internal to the solver.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "solver/max_batch_sizes.h"

namespace remat {

enum class Probe { Feasible, Infeasible, Unknown };

struct Prober {
  Batches& batches;
  int64_t budget;
  SolveOptions opt;
  std::vector<Schedule> known;  // schedules that fit at some batch, in the order found
  std::string answer;           // what answered the last probe, in words
  double lp_fit_seconds = 0;    // the longest a probe's LP search took to find a fit

  // Batch b in at most `seconds` (the MILP steps only with use_milp); with log_level >= 2, one
  // line on stderr: the batch, its time, the answer and what gave it (a bound's proof can be
  // traced to the probe that made it).
  Probe probe(int64_t b, double seconds, bool use_milp);

  Probe answer_probe(int64_t b, double seconds, bool use_milp);
  bool known_fit(int64_t b);
  // Keeps s (in `known`) when it fits at b within the cost cap.
  bool accept(int64_t b, const std::optional<Schedule>& s);
  // accept, or s held toward the cost cap in at most `secs` and then accepted (Note [held to the
  // cost cap]).
  bool accept_held(int64_t b, const std::optional<Schedule>& s, double secs);
  // The full Checkmate MILP with the cost cap, stopped at its first incumbent.
  Probe full_milp_probe(int64_t b, const SolveOptions& mopt);
};

}  // namespace remat
