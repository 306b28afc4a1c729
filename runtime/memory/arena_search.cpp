// Backtracking search for arena offsets under a fixed height (Note [arena search]).
#include "runtime/memory/arena_search.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <utility>
#include <vector>

namespace remat {

// Note [arena search]
// The greedy packings (Note [arena packing] in arena.cpp) each commit to one offset per buffer
// and never revisit it; on some plans every one of them ends a unit above the lower bound while
// a packing at the bound exists (gpt2_tiny's checkmate plans, tests/test_arena_search.cpp). This search
// places buffers in order of first step, so a buffer can only collide with already-placed
// buffers still live at its first step, and backtracks:
//   - candidates: the bottom and the top edge of every free run (among the placed buffers live
//     at its first step) it fits in, the edge whose neighbour dies closest to the buffer's own
//     last step first, so space freed together coalesces;
//   - pruning: after a placement, at every allocation step in the buffer's lifetime, the
//     unplaced buffers live there must fit, largest first, into the free runs the placed ones
//     leave (exact when sizes divide each other, as the plans' power-of-two sizes mostly do;
//     otherwise a heuristic that may cut off a solution, never admits a wrong one);
//   - memo: a state that failed is remembered as the free-at map (per byte range, the next
//     allocation step at which it is free again) of the buffers live at the next buffer's
//     first step, up to mirror image, and not searched again.
// The work limit counts buffers looked at, not time, so every machine gets the same offsets.
namespace {

struct Item {
  int64_t size;
  int first, last;
  size_t request;
};

struct Span {  // a placed buffer's bytes [begin, end) and the last event it is live at
  int64_t begin, end;
  int last;
  bool operator<(const Span& o) const { return begin < o.begin; }  // live together: disjoint
};

class Search {
 public:
  Search(std::vector<Item> items, int64_t height, int64_t work_limit)
      : items_(std::move(items)), height_(height), limit_(work_limit) {
    for (const Item& it : items_) steps_.push_back(it.first);
    steps_.erase(std::unique(steps_.begin(), steps_.end()), steps_.end());
    for (size_t k = 0; k < items_.size(); ++k) {
      first_event_.push_back(event_at_or_before(items_[k].first));
      last_event_.push_back(event_at_or_before(items_[k].last));
      work_ += last_event_[k] - first_event_[k] + 1;  // the live lists below
    }
    if (work_ > limit_) return;
    live_.resize(steps_.size());
    for (size_t k = 0; k < items_.size(); ++k)
      for (int e = first_event_[k]; e <= last_event_[k]; ++e) live_[static_cast<size_t>(e)].push_back(k);
    offset_.assign(items_.size(), 0);
  }

  bool run();
  int64_t offset(size_t k) const { return offset_[k]; }
  int64_t work() const { return work_; }

 private:
  // Index of the last allocation step at or before `step`.
  int event_at_or_before(int step) const {
    return static_cast<int>(std::upper_bound(steps_.begin(), steps_.end(), step) - steps_.begin()) - 1;
  }
  // Placed buffers (index < k) live at event e, by offset (into a reused vector).
  const std::vector<Span>& placed_at(int e, size_t k);
  std::vector<int64_t> state_key(size_t k);
  std::vector<int64_t> candidates(size_t k);
  bool fits_later(size_t k);

  std::vector<Item> items_;  // by first step, then larger first
  int64_t height_, limit_, work_ = 0;
  std::vector<int> steps_;                 // distinct first steps, ascending: the events
  std::vector<std::vector<size_t>> live_;  // per event: items live there, ascending
  std::vector<int> first_event_, last_event_;
  std::vector<int64_t> offset_;
  std::set<std::vector<int64_t>> dead_;
  std::vector<Span> placed_;          // placed_at()'s result
  std::vector<int64_t> runs_, need_;  // fits_later()'s scratch
};

const std::vector<Span>& Search::placed_at(int e, size_t k) {
  placed_.clear();
  for (size_t j : live_[static_cast<size_t>(e)]) {
    ++work_;
    if (j >= k) break;
    placed_.push_back({offset_[j], offset_[j] + items_[j].size, last_event_[j]});
  }
  std::sort(placed_.begin(), placed_.end());
  for (size_t m = placed_.size(); m > 1; m /= 2) work_ += static_cast<int64_t>(placed_.size());
  return placed_;
}

std::vector<int64_t> Search::state_key(size_t k) {
  const std::vector<Span>& placed = placed_at(first_event_[k], k);
  auto encode = [&](bool mirror) {
    std::vector<int64_t> key = {static_cast<int64_t>(k)};
    for (size_t x = 0; x < placed.size(); ++x) {
      const Span& p = placed[mirror ? placed.size() - 1 - x : x];
      const int64_t b = mirror ? height_ - p.end : p.begin, en = mirror ? height_ - p.begin : p.end;
      const size_t n = key.size();
      if (n > 1 && key[n - 2] == b && key[n - 1] == p.last) key[n - 2] = en;  // merge equal neighbours
      else key.insert(key.end(), {b, en, p.last});
    }
    return key;
  };
  work_ += static_cast<int64_t>(placed.size());  // the keys, and looking one up
  return std::min(encode(false), encode(true));
}

std::vector<int64_t> Search::candidates(size_t k) {
  const Item& it = items_[k];
  // (score, offset): a free run's edge, scored by how far apart the neighbour at that edge and
  // this buffer die (the arena's floor and ceiling count as dying after the last step, so
  // long-lived buffers gather at the edges).
  std::vector<std::pair<int64_t, int64_t>> scored;
  int64_t cursor = 0;
  int below = static_cast<int>(steps_.size());
  auto run = [&](int64_t begin, int64_t end, int below_last, int above_last) {
    if (end - begin < it.size) return;
    auto score = [&](int neighbour) {
      return std::abs(static_cast<int64_t>(neighbour) - static_cast<int64_t>(last_event_[k]));
    };
    scored.push_back({score(below_last), begin});
    if (end - it.size != begin) scored.push_back({score(above_last), end - it.size});
  };
  for (const Span& p : placed_at(first_event_[k], k)) {
    if (p.begin > cursor) run(cursor, p.begin, below, p.last);
    cursor = p.end, below = p.last;
  }
  run(cursor, height_, below, static_cast<int>(steps_.size()));
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<int64_t> out;
  for (const auto& s : scored) out.push_back(s.second);
  return out;
}

bool Search::fits_later(size_t k) {
  std::vector<int64_t>& runs = runs_;
  std::vector<int64_t>& need = need_;
  for (int e = first_event_[k]; e <= last_event_[k] && work_ <= limit_; ++e) {
    runs.clear(), need.clear();
    int64_t cursor = 0;
    for (const Span& p : placed_at(e, k + 1)) {
      if (p.begin > cursor) runs.push_back(p.begin - cursor);
      cursor = p.end;
    }
    if (height_ > cursor) runs.push_back(height_ - cursor);
    for (size_t j : live_[static_cast<size_t>(e)]) {
      ++work_;
      if (j > k) need.push_back(items_[j].size);
    }
    std::sort(need.rbegin(), need.rend());
    for (int64_t s : need) {
      auto r = std::find_if(runs.begin(), runs.end(), [&](int64_t len) { return len >= s; });
      work_ += r - runs.begin();
      if (r == runs.end()) return false;
      *r -= s;
    }
  }
  return true;
}

bool Search::run() {
  if (work_ > limit_) return false;  // the live lists alone would pass the limit
  const size_t n = items_.size();
  std::vector<std::vector<int64_t>> cands(n), keys(n);
  std::vector<size_t> next(n, 0);
  size_t k = 0;
  bool fresh = true;  // entering depth k from above (not backtracking into it)
  while (k < n) {
    if (work_ > limit_) return false;
    if (fresh) {
      keys[k] = state_key(k);
      if (dead_.count(keys[k])) {
        if (k == 0) return false;
        --k, fresh = false;
        continue;
      }
      cands[k] = candidates(k);
      next[k] = 0;
    }
    fresh = false;
    while (next[k] < cands[k].size() && work_ <= limit_) {
      offset_[k] = cands[k][next[k]++];
      if (fits_later(k)) {
        fresh = true;
        break;
      }
    }
    if (fresh && work_ <= limit_) {
      ++k;
      continue;
    }
    if (work_ > limit_) return false;
    dead_.insert(std::move(keys[k]));
    if (k == 0) return false;
    --k;
  }
  return true;
}

}  // namespace

ArenaSearchResult arena_search(const std::vector<ArenaRequest>& requests,
                               const std::vector<int64_t>& size, int64_t height,
                               int64_t work_limit) {
  std::vector<Item> items;
  for (size_t i = 0; i < requests.size(); ++i)
    if (size[i] > 0) items.push_back({size[i], requests[i].first, requests[i].last, i});
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.first != b.first ? a.first < b.first : a.size > b.size;
  });
  ArenaSearchResult result;
  for (const Item& it : items)
    if (it.size > height) return result;
  Search search(items, height, work_limit);
  result.found = search.run();
  result.work = search.work();
  if (result.found) {
    result.offsets.assign(requests.size(), 0);
    for (size_t k = 0; k < items.size(); ++k) result.offsets[items[k].request] = search.offset(k);
  }
  return result;
}

}  // namespace remat
