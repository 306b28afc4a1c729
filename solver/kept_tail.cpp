// Chen's segment schedule on a prefix of the forward pass, everything kept after it (Note [kept
// tail]).
#include "solver/kept_tail.h"

#include <algorithm>
#include <chrono>

#include "solver/baselines.h"

namespace remat {

// Note [kept tail]
// Chen's greedy rule cuts the whole forward pass at one threshold, so every segment is
// recomputed once: where the budget holds most but not all of the activations, the baselines
// and their segment schedules cost a full forward pass again (the unrolled LSTM of the tests,
// 1.35x at 170-200 KB), while keeping the last part of the forward pass and checkpointing only
// the first costs a fraction of that. The last part is the one to keep: the backward pass reads
// it first, so its values are freed before the segments of the first part are recomputed, and
// the recomputations then run beside less. So the search tries, for tails starting at forward
// nodes spread over the forward pass, the greedy rule's segmentations of the nodes before the
// tail with every node of the tail a checkpoint (each with and without its cut sets, Note [cut
// sets]), and keeps the cheapest schedule that fits. Measured on that LSTM (Adam, batch 16,
// FLOPs): 1.22x at 200 KB and 1.29x at 170 KB, where checkmate had stopped at 1.35x.

namespace {

// The grid: tails and thresholds, each spread over its range.
constexpr size_t kTails = 33;
constexpr size_t kThresholds = 48;

// Up to `count` of `values`, spread over the whole range in an order that covers it early
// (the last and first, then halves, quarters, ...), without repeats.
template <typename T>
std::vector<T> spread(const std::vector<T>& values, size_t count) {
  std::vector<T> out;
  const size_t m = values.size();
  count = std::min(count, m);
  if (count == 0) return out;
  std::vector<uint8_t> taken(m, 0);
  auto take = [&](size_t i) {
    if (out.size() < count && !taken[i]) out.push_back(values[i]);
    taken[i] = 1;
  };
  take(m - 1);
  take(0);
  for (size_t parts = 2; out.size() < count; parts *= 2)
    for (size_t j = 1; j < parts; j += 2) take(j * (m - 1) / parts);
  return out;
}

}  // namespace

std::optional<Schedule> solve_kept_tail(const Problem& p, int64_t budget, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  auto late = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds;
  };
  const std::vector<int> fwd = forward_nodes(p);
  if (fwd.size() < 2) return std::nullopt;
  // Tails start at a forward node after the first (from the first: keep everything).
  const std::vector<size_t> starts = [&] {
    std::vector<size_t> all;
    for (size_t k = 1; k < fwd.size(); ++k) all.push_back(k);
    return spread(all, kTails);
  }();
  CheapestSchedule best;
  for (size_t start : starts) {
    const std::vector<int> prefix(fwd.begin(), fwd.begin() + static_cast<std::ptrdiff_t>(start));
    for (int64_t b : spread(greedy_thresholds(p, prefix, kGreedyThresholdCap), kThresholds)) {
      if (late()) return best.schedule;
      std::vector<int> checkpoints = greedy_checkpoints(p, prefix, b);
      checkpoints.insert(checkpoints.end(), fwd.begin() + static_cast<std::ptrdiff_t>(start),
                         fwd.end());
      SimResult sim;
      auto s = cheaper_segment_schedule(p, checkpoints, "kept-tail", budget, &sim);
      if (s) best.offer(std::move(*s), sim);
    }
  }
  return best.schedule;
}

}  // namespace remat
