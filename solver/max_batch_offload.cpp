// checkmate-offload's max-batch search above the best answer without copies (Note [offload
// above the floor]): schedules already found, replayed at larger batches with values moved.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <vector>

#include "solver/max_batch_sizes.h"
#include "solver/offload.h"

namespace remat {
namespace {

// Note [offload above the floor]
// Above the best batch without copies (the floor), checkmate-offload's first probes move values
// instead of solving again: the schedules that fit so far (a schedule's structure is
// batch-independent) are replayed at the probed batch, and offload_to_fit moves the values
// waiting at the peak to host memory, largest first, until one fits within the budget, the host
// budget and the cost cap. Such a probe takes milliseconds to a second where solve() takes its
// whole share, so the search gallops up from the floor (the step doubling while probes fit,
// in at most half the limit) and bisects to one batch. Besides the floor's schedule, checkmate's
// at the floor batch under larger budgets are replayed: they recompute less, and moving their
// waiting values instead is what copies are for; solve("checkmate-offload") probes above
// that answer in the time left. linear16 (batch 32's graph scaled, 2 GB, 25 GB/s, 5 TFLOP/s):
// checkmate 30; these probes reach 38, the solves after them 39.
struct OffloadGallop {
  Batches& batches;
  int64_t budget;
  int64_t host_budget;
  int log_level;
  std::vector<Schedule> known;  // newest last

  std::optional<Schedule> at(int64_t b) {
    if (b > batches.max_size) return std::nullopt;
    const Problem& pb = batches.at(b);
    if (problem_min_budget(pb) > budget) return std::nullopt;
    for (auto it = known.rbegin(); it != known.rend(); ++it) {
      if (it->R.rows() != pb.size()) continue;
      std::optional<Schedule> s = offload_to_fit(pb, *it, budget, host_budget);
      if (s && batches.fits(*s, b, budget)) return s;
    }
    return std::nullopt;
  }

  // The schedules to replay: checkmate's at the floor batch with budgets 1.25, 1.5 and 2 times
  // larger (they recompute less, so moving their waiting values leaves room under the cost
  // cap), each in a third of `seconds`, then the floor's own schedule (tried first).
  void seed(int64_t floor, const Schedule& floor_schedule, SolveOptions opt, const Deadline& d,
            double seconds) {
    opt.progress = nullptr;
    opt.phase = nullptr;
    opt.batch_progress = nullptr;
    const Problem& pb = batches.at(floor);
    for (double f : {2.0, 1.5, 1.25}) {
      opt.time_limit_seconds = std::min(seconds / 3, seconds - d.elapsed());
      if (opt.time_limit_seconds <= 0) break;
      SolveResult r = solve(pb, "checkmate", static_cast<int64_t>(double(budget) * f), opt);
      if (r.feasible) known.push_back(std::move(r.schedule));
    }
    known.push_back(floor_schedule);
  }

  // The largest batch above `floor` found by replaying with copies, and its schedule in `best`.
  int64_t search(int64_t floor, const Deadline& d, double seconds,
                 std::shared_ptr<const Schedule>* best) {
    int64_t lo = floor, hi = -1;  // hi: the first batch found not to fit (-1: none yet)
    auto probe = [&](int64_t b) {
      std::optional<Schedule> s = at(b);
      if (log_level >= 2)
        std::fprintf(stderr, "max batch probe %lld: %s (known schedules with values moved)\n",
                     static_cast<long long>(b), s ? "fits" : "unknown");
      if (!s) return false;
      *best = std::make_shared<const Schedule>(*s);
      known.push_back(std::move(*s));
      return true;
    };
    for (int64_t step = std::max<int64_t>(1, floor / 32); d.elapsed() < seconds; step *= 2) {
      if (!probe(lo + step)) {
        hi = lo + step;
        break;
      }
      lo += step;
    }
    while (hi > lo + 1 && d.elapsed() < seconds) {
      const int64_t mid = lo + (hi - lo) / 2;
      (probe(mid) ? lo : hi) = mid;
    }
    return lo;
  }
};

}  // namespace

int64_t offload_above_floor(Batches& batches, int64_t budget, const SolveOptions& opt,
                            const Deadline& d, int64_t floor,
                            std::shared_ptr<const Schedule>* schedule) {
  OffloadGallop gallop{batches, budget, opt.host_budget, opt.log_level, {}};
  gallop.seed(floor, **schedule, opt, d, opt.time_limit_seconds / 4);
  return gallop.search(floor, d, opt.time_limit_seconds / 2, schedule);
}

}  // namespace remat
