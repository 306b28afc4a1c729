// Building blocks of the checkpointing baselines (solver/baselines.cpp), exposed for tests:
// candidate checkpoints and the segment schedule shared by Chen's sqrt(n) and greedy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "solver/problem.h"
#include "solver/schedule.h"

namespace remat {

// Forward nodes, ascending.
std::vector<int> forward_nodes(const Problem& p);

// Forward nodes whose removal disconnects the undirected graph of forward and loss nodes.
std::vector<int> forward_articulation_points(const Problem& p);

// Note [segment schedule]
// The forward pass computes every node once and holds checkpoints plus values that later
// forward/loss nodes still need. Non-checkpoint forward nodes between consecutive checkpoints
// (in index order) form a segment. In the backward pass, the first stage that needs a dropped
// value recomputes that value's whole segment once (and whatever it transitively needs that is
// not held); recomputed values stay held while later stages still use them.
Schedule segment_schedule(const Problem& p, const std::vector<int>& checkpoints,
                          const std::string& strategy);

// Note [cut sets]
// A checkpoint c cuts the forward order in two. A forward value computed before c and
// read by a forward or loss node after c crosses the cut: the segment after c cannot be
// recomputed without it. With c alone held, the backward pass recomputes the segment before c to
// get it, and that segment's own crossing values drag in the one before, back to the start (an
// unrolled recurrent layer's state of the step before is read one step on; a linearised ResNet
// block's skip input crosses every cut inside the block). `with_cut_sets` adds to the checkpoints
// every forward value crossing one of their cuts, so each segment can be recomputed from what is
// held. Holding more costs memory in the forward pass and may cost it where the drag did not, so
// the baselines try both and keep the cheaper schedule that fits (the greedy search simulates up
// to two schedules per threshold). The articulation-point variants do the same: removing such a
// point disconnects the forward graph, but the node order may still interleave the parts it
// separates (30 values cross the 37 articulation points of the unrolled two-layer LSTM of the
// tests; none on the nine zoo networks of docs/zoo.md). Where nothing crosses, the one schedule
// is simulated once.
// Returns the checkpoints and those values, ascending.
std::vector<int> with_cut_sets(const Problem& p, const std::vector<int>& checkpoints);

// Chen et al.'s greedy rule (Note [greedy thresholds] in baselines.cpp): the checkpoints it picks
// among `candidates` at `threshold` bytes, and in *next (when given) the smallest threshold above
// it at which they change (INT64_MAX when none does).
std::vector<int> greedy_checkpoints(const Problem& p, const std::vector<int>& candidates,
                                    int64_t threshold, int64_t* next = nullptr);
// The searches' bound on greedy_thresholds' walk, far above what the zoo needs (4,390 thresholds
// on NASNet-Large's linearised candidates); past it the largest thresholds (the fewest
// checkpoints) go untried.
constexpr size_t kGreedyThresholdCap = size_t{1} << 20;
// The thresholds at which the rule's checkpoints change, ascending from 0 (at most `cap`): one
// per segmentation the rule can give.
std::vector<int64_t> greedy_thresholds(const Problem& p, const std::vector<int>& candidates,
                                       size_t cap);

// Every threshold of the greedy rule over `candidates` (Note [greedy thresholds]), in the order
// the greedy search tries them: a grid over the whole range first, then the rest, each coarse to
// fine, so that a search cut short has covered the range.
std::vector<int64_t> greedy_search_order(const Problem& p, const std::vector<int>& candidates);

// The cheaper of the segment schedules of `checkpoints` alone and with their cut sets (Note [cut
// sets]) that fits `budget`, its simulation in *sim; nullopt when neither fits.
std::optional<Schedule> cheaper_segment_schedule(const Problem& p,
                                                 const std::vector<int>& checkpoints,
                                                 const std::string& strategy, int64_t budget,
                                                 SimResult* sim);

// The cheapest of the schedules a search offers, a tie going to the lower peak.
struct CheapestSchedule {
  std::optional<Schedule> schedule;
  SimResult sim;  // schedule's simulation
  void offer(Schedule s, const SimResult& r) {
    if (schedule && !(r.total_cost < sim.total_cost ||
                      (r.total_cost == sim.total_cost && r.peak_bytes < sim.peak_bytes)))
      return;
    schedule = std::move(s);
    sim = r;
  }
};

// The all-keep schedule: R = identity, S holds every earlier value (liveness frees them).
Schedule all_keep_schedule(const Problem& p);

}  // namespace remat
