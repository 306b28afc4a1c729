// Runs a piece of work in a forked child process under a hard wall-clock deadline, relaying
// the records it sends back to the caller. Used for Cbc, whose preprocessing and root cuts do
// not check its own time limit (Note [hard solver deadline], milp.cpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace remat {

// The work's side of the channel. In the child process, send() writes to a pipe; without a
// child (fork failed) it calls the caller's handler directly.
class ChildChannel {
 public:
  virtual ~ChildChannel() = default;
  // One record: a small tag and a vector of doubles (whole, never split).
  virtual void send(int tag, const std::vector<double>& data) = 0;
  // True once the caller's handler has asked the work to stop.
  virtual bool stop_requested() const = 0;
};

enum class ChildEnd {
  Finished,   // the work returned
  Killed,     // the deadline passed and the child was killed
  Crashed,    // the child died (signal or non-zero exit) before finishing; `error` says how
  InProcess,  // fork failed: the work ran in this process (no hard deadline)
};

// Runs `work` in a child process. `on_record(tag, data)` is called in this process for each
// record, in order; returning true asks the work to stop (stop_requested() turns true). The
// child is killed (SIGKILL) when `deadline_seconds` of wall-clock time have passed since the
// call; records it sent before that are still delivered. `error` (optional) receives a
// description for Crashed/InProcess.
ChildEnd child_run(const std::function<void(ChildChannel&)>& work, double deadline_seconds,
                   const std::function<bool(int, const std::vector<double>&)>& on_record,
                   std::string* error = nullptr);

}  // namespace remat
