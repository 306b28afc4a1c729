// The CPU backend's copy streams (Note [copy orders]): a queue of copies each way, run at once
// or as late as Note [copy streams] in backend.h allows.
#pragma once

#include <array>
#include <cstdint>
#include <deque>

namespace remat {

// Note [copy orders]
// The CPU has no copy streams: a backend call runs before it returns. What a copy stream may do
// is run a copy at any time between its queueing and the first wait that covers it, so a caller
// that forgot a wait (Note [copy streams]) reads bytes a copy has not yet written, or reuses
// memory a copy has not yet read or written, only some of the time on a GPU. The CPU backend
// can run each direction's copies at either end of that window: at once (the copy is done when
// queued) or latest (when a wait or synchronize() needs it, in queue order; until then its
// destination holds 0xFF bytes, a NaN in every float, as bytes not yet written are undefined
// on a GPU). A missing wait before a read shows under "latest" of the direction that writes; a
// missing wait before reuse shows under "latest" of the direction whose copy reads or writes
// the reused memory, while the one that reuses it runs at once. Tests run plans under every
// pair of ends and compare the results bit for bit.
class CopyQueues {
 public:
  // `latest[d]`: direction d (0 to host, 1 to the device) runs its copies latest.
  explicit CopyQueues(std::array<bool, 2> latest) : latest_(latest) {}

  // Queues a copy of direction `dir`; returns its ticket (> 0).
  int64_t queue(int dir, void* dst, const void* src, int64_t bytes);
  // Runs copy `ticket` and the copies queued before it in its direction.
  void run_through(int64_t ticket);
  void run_all();

 private:
  struct Copy {
    int64_t ticket;
    void* dst;
    const void* src;
    int64_t bytes;
  };
  void run_front(int dir);

  std::array<bool, 2> latest_;
  std::array<std::deque<Copy>, 2> pending_;  // each in ticket order
  int64_t next_ = 1;
};

}  // namespace remat
