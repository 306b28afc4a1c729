// A DataSource run ahead of the training loop: while step s trains, a background thread fills
// the batches of the next steps (up to `depth`) into its own host buffers; next_batch(s) copies
// the one ready for s, or waits for it. A request out of order (the first one, a resume) starts
// the thread at that step. A batch that failed to load fails when its step is asked for, never
// earlier; batches past the last step are made and dropped. Batches are the inner source's, so
// prefetching changes no sample.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "models/data.h"

namespace remat {

class PrefetchSource : public DataSource {
 public:
  PrefetchSource(std::unique_ptr<DataSource> inner, int64_t input_bytes, int64_t label_bytes,
                 int depth = 2);
  ~PrefetchSource() override;
  PrefetchSource(const PrefetchSource&) = delete;
  PrefetchSource& operator=(const PrefetchSource&) = delete;

  void next_batch(int64_t step, void* input, int32_t* labels) override;
  std::string describe() const override;
  int64_t size() const override { return inner_->size(); }
  int64_t skipped_samples() const override { return inner_->skipped_samples(); }

  // Seconds next_batch spent waiting for a batch that was not ready (the step waited on data).
  double wait_seconds() const { return wait_seconds_; }

 private:
  struct Ready {
    int64_t step = 0;
    std::vector<char> input, labels;
    std::exception_ptr error;
  };
  void produce();

  std::unique_ptr<DataSource> inner_;
  const int64_t input_bytes_, label_bytes_;
  const int depth_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Ready> ready_;
  int64_t next_ = -1;  // the step the thread makes next (-1: not started)
  uint64_t generation_ = 0;  // bumped by a restart: a batch in the making is dropped
  bool stop_ = false;
  double wait_seconds_ = 0;
  std::thread thread_;
};

}  // namespace remat
