// CopyQueues: the CPU backend's copies run at once or latest (Note [copy orders]).
#include "runtime/backends/copy_queues.h"

#include <algorithm>
#include <cstring>

#include "runtime/core/check.h"

namespace remat {

int64_t CopyQueues::queue(int dir, void* dst, const void* src, int64_t bytes) {
  REMAT_CHECK(dir == 0 || dir == 1, "copy direction " << dir);
  REMAT_CHECK(bytes >= 0, "a copy of " << bytes << " bytes");
  const int64_t ticket = next_++;
  pending_[static_cast<size_t>(dir)].push_back(Copy{ticket, dst, src, bytes});
  if (!latest_[static_cast<size_t>(dir)])
    run_through(ticket);
  else if (bytes > 0)  // not yet written: bytes no float or index reads as a number
    std::memset(dst, 0xFF, static_cast<size_t>(bytes));
  return ticket;
}

void CopyQueues::run_front(int dir) {
  const Copy c = pending_[static_cast<size_t>(dir)].front();
  pending_[static_cast<size_t>(dir)].pop_front();
  if (c.bytes > 0) std::memcpy(c.dst, c.src, static_cast<size_t>(c.bytes));
}

void CopyQueues::run_through(int64_t ticket) {
  for (int dir = 0; dir < 2; ++dir) {
    const std::deque<Copy>& q = pending_[static_cast<size_t>(dir)];
    const auto at = std::lower_bound(q.begin(), q.end(), ticket,
                                     [](const Copy& c, int64_t t) { return c.ticket < t; });
    if (at == q.end() || at->ticket != ticket) continue;  // not in this direction's queue
    while (!q.empty() && q.front().ticket <= ticket) run_front(dir);
    return;
  }
  // Not queued: it ran already (or ticket 0, a copy done at once).
}

void CopyQueues::run_all() {
  for (int dir = 0; dir < 2; ++dir)
    while (!pending_[static_cast<size_t>(dir)].empty()) run_front(dir);
}

}  // namespace remat
