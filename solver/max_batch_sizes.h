// The pieces the max-batch search (solver/max_batch.cpp) shares with its offload search
// (solver/max_batch_offload.cpp): the problems at each size, the cost cap, the deadline.
// Internal to the solver: the tools call max_batch / max_size (solver/strategies.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>

#include "solver/problem.h"
#include "solver/schedule.h"
#include "solver/strategies.h"

namespace remat {

using Clock = std::chrono::steady_clock;

// All-keep cost plus one forward pass, at the problem's own batch: no answer costs more.
double cost_cap(const Problem& p);

// Note [max-batch problems]
// The problem at batch b comes from one place (the caller's ProblemAtBatch, or scaling), cached
// per batch, and every answer about b is checked on that problem: a schedule fits at b when it
// simulates within the budget and the cost cap on it. A model config rebuilds the graph at b,
// so per-image workspace (the CPU's im2col buffer) stays per image instead of being scaled with
// the batch as problem_at_batch must assume.
// A SizeFamily (a sequence length) works the same way, with sizes above max_size absent.
struct Batches {
  ProblemAtBatch make;
  int64_t max_size = int64_t{1} << 40;
  std::map<int64_t, Problem> cache;
  const Problem& at(int64_t b) {
    auto it = cache.find(b);
    if (it == cache.end()) it = cache.emplace(b, make(b)).first;
    return it->second;
  }
  bool fits(const Schedule& s, int64_t b, int64_t budget);
};

struct Deadline {
  Clock::time_point t0 = Clock::now();
  double seconds;
  double elapsed() const { return std::chrono::duration<double>(Clock::now() - t0).count(); }
  double left() const { return seconds - elapsed(); }
};

// checkmate-offload's first probes above `floor`, the best batch without copies, whose schedule
// is *schedule (Note [offload above the floor]): the largest batch found, its schedule in
// *schedule. Takes at most half of opt.time_limit_seconds from d's start.
int64_t offload_above_floor(Batches& batches, int64_t budget, const SolveOptions& opt,
                            const Deadline& d, int64_t floor,
                            std::shared_ptr<const Schedule>* schedule);

}  // namespace remat
