// Bounded backtracking search for arena offsets under a given height, for the plans that the
// greedy packings in arena.cpp leave above the lower bound (Note [arena search]).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/memory/arena.h"

namespace remat {

struct ArenaSearchResult {
  bool found = false;
  std::vector<int64_t> offsets;  // per request, bytes from the arena base, when found
  int64_t work = 0;              // work units spent (one unit: one buffer looked at)
};

// Offsets for `requests` (lifetimes [first, last]) with byte sizes `size` (already rounded to
// `alignment`, zero for buffers that need no memory) such that buffers live at a common step
// do not overlap and every buffer ends at or below `height` bytes. Gives up (found = false)
// after `work_limit` units, so the outcome is the same on every machine; found = false also
// when the search ran out of candidates, which is no proof that none exists.
ArenaSearchResult arena_search(const std::vector<ArenaRequest>& requests,
                               const std::vector<int64_t>& size, int64_t height,
                               int64_t work_limit);

}  // namespace remat
