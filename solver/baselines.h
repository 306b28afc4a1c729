// Building blocks of the checkpointing baselines (solver/baselines.cpp), exposed for tests:
// candidate checkpoints and the segment schedule shared by Chen's sqrt(n) and greedy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
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

// Chen et al.'s greedy rule (Note [greedy thresholds] in baselines.cpp): the checkpoints it picks
// among `candidates` at `threshold` bytes, and in *next (when given) the smallest threshold above
// it at which they change (INT64_MAX when none does).
std::vector<int> greedy_checkpoints(const Problem& p, const std::vector<int>& candidates,
                                    int64_t threshold, int64_t* next = nullptr);
// The thresholds at which the rule's checkpoints change, ascending from 0 (at most `cap`): one
// per segmentation the rule can give.
std::vector<int64_t> greedy_thresholds(const Problem& p, const std::vector<int>& candidates,
                                       size_t cap);

// The all-keep schedule: R = identity, S holds every earlier value (liveness frees them).
Schedule all_keep_schedule(const Problem& p);

}  // namespace remat
