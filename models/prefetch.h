// A DataSource run ahead of the training loop: while step s trains, a background thread fills
// the batches of the next steps (up to `depth`) into a fixed set of host buffers — depth + 1
// slots, allocated once by the caller's allocator (pinned memory on a GPU, so the device reads
// them without staging). acquire(s) hands out the slot of step s, or waits for it; the slot stays
// the caller's until its next acquire (the step's upload has finished by then). A request out of
// order (the first one, a resume) starts the thread at that step. A batch that failed to load
// fails when its step is asked for, never earlier; batches past the last step are made and
// dropped. Batches are the inner source's, so prefetching changes no sample.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "models/data.h"

namespace remat {

// Where the slots live: plain heap memory by default; Backend::host_alloc on a device.
struct HostMemory {
  std::function<void*(int64_t)> alloc;  // never null; throws
  std::function<void(void*)> free;
};
HostMemory heap_memory();

class PrefetchSource : public DataSource {
 public:
  PrefetchSource(std::unique_ptr<DataSource> inner, int64_t input_bytes, int64_t label_bytes,
                 int depth = 2, HostMemory memory = heap_memory());
  ~PrefetchSource() override;
  PrefetchSource(const PrefetchSource&) = delete;
  PrefetchSource& operator=(const PrefetchSource&) = delete;

  struct Batch {
    const void* input = nullptr;
    const int32_t* labels = nullptr;
  };
  // Step `step`'s batch, valid until the next acquire (or next_batch).
  Batch acquire(int64_t step);
  // DataSource: acquire, then a copy into the caller's buffers.
  void next_batch(int64_t step, void* input, int32_t* labels) override;
  std::string describe() const override;
  int64_t size() const override { return inner_->size(); }
  // Unreadable samples replaced in the batches handed out (acquire): a batch made ahead that no
  // step took (past the last step, or dropped by a jump) does not count.
  int64_t skipped_samples() const override { return skipped_; }

  // Seconds acquire spent waiting for a batch that was not ready (the step waited on data).
  double wait_seconds() const { return wait_seconds_; }

 private:
  enum class SlotState { Free, Filling, Ready, Held };
  struct Slot {
    void* input = nullptr;
    void* labels = nullptr;
    SlotState state = SlotState::Free;
    int64_t step = -1;
    int64_t skipped = 0;  // unreadable samples the inner source replaced in this batch
    std::exception_ptr error;
  };
  void produce();
  Slot* ready_slot(int64_t step);  // under mu_

  std::unique_ptr<DataSource> inner_;
  const int64_t input_bytes_, label_bytes_;
  const int depth_;
  HostMemory memory_;
  std::vector<Slot> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t next_ = -1;        // the step the thread makes next (-1: not started)
  uint64_t generation_ = 0;  // bumped by a restart: a batch in the making is dropped
  bool stop_ = false;
  double wait_seconds_ = 0;
  int64_t skipped_ = 0;  // over the batches handed out
  std::thread thread_;  // last: starts after every member above exists
};

}  // namespace remat
