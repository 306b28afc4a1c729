// PrefetchSource: one producer thread, a queue of ready batches, restarts on an out-of-order step.
#include "models/prefetch.h"

#include <chrono>
#include <cstring>

namespace remat {

PrefetchSource::PrefetchSource(std::unique_ptr<DataSource> inner, int64_t input_bytes,
                               int64_t label_bytes, int depth)
    : inner_(std::move(inner)), input_bytes_(input_bytes), label_bytes_(label_bytes),
      depth_(std::max(depth, 1)), thread_([this] { produce(); }) {}

PrefetchSource::~PrefetchSource() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void PrefetchSource::produce() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] {
      return stop_ || (next_ >= 0 && static_cast<int>(ready_.size()) < depth_);
    });
    if (stop_) return;
    Ready r;
    r.step = next_;
    const uint64_t generation = generation_;
    lock.unlock();
    r.input.resize(static_cast<size_t>(input_bytes_));
    r.labels.resize(static_cast<size_t>(label_bytes_));
    try {
      inner_->next_batch(r.step, r.input.data(), reinterpret_cast<int32_t*>(r.labels.data()));
    } catch (...) {
      r.error = std::current_exception();
    }
    lock.lock();
    if (generation != generation_) continue;  // restarted meanwhile: not wanted
    ready_.push_back(std::move(r));
    ++next_;
    cv_.notify_all();
  }
}

void PrefetchSource::next_batch(int64_t step, void* input, int32_t* labels) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!ready_.empty() && ready_.front().step < step) ready_.pop_front();  // skipped steps
  const bool coming = (!ready_.empty() && ready_.front().step == step) ||
                      (ready_.empty() && next_ == step);
  if (!coming) {  // out of order: start over at `step`
    ready_.clear();
    next_ = step;
    ++generation_;
    cv_.notify_all();
  }
  const auto t0 = std::chrono::steady_clock::now();
  cv_.wait(lock, [&] { return !ready_.empty() && ready_.front().step == step; });
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Ready r = std::move(ready_.front());
  ready_.pop_front();
  cv_.notify_all();  // room for the next batch
  lock.unlock();
  if (r.error) std::rethrow_exception(r.error);
  std::memcpy(input, r.input.data(), r.input.size());
  std::memcpy(labels, r.labels.data(), r.labels.size());
}

std::string PrefetchSource::describe() const {
  return inner_->describe() + ", " + std::to_string(depth_) + " batches prefetched";
}

}  // namespace remat
