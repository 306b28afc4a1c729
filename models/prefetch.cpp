// PrefetchSource: one producer thread filling a fixed ring of host slots, restarts on an
// out-of-order step.
#include "models/prefetch.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

namespace remat {

HostMemory heap_memory() {
  return HostMemory{[](int64_t bytes) {
                      void* p = std::malloc(static_cast<size_t>(std::max<int64_t>(bytes, 1)));
                      if (!p) throw std::bad_alloc();
                      return p;
                    },
                    [](void* p) { std::free(p); }};
}

PrefetchSource::PrefetchSource(std::unique_ptr<DataSource> inner, int64_t input_bytes,
                               int64_t label_bytes, int depth, HostMemory memory)
    : inner_(std::move(inner)), input_bytes_(input_bytes), label_bytes_(label_bytes),
      depth_(std::max(depth, 1)), memory_(std::move(memory)) {
  // depth slots being filled or ready, and one the caller holds.
  slots_.resize(static_cast<size_t>(depth_ + 1));
  try {
    for (Slot& s : slots_) {
      s.input = memory_.alloc(input_bytes_);
      s.labels = memory_.alloc(label_bytes_);
    }
  } catch (...) {
    for (Slot& s : slots_) {
      if (s.input) memory_.free(s.input);
      if (s.labels) memory_.free(s.labels);
    }
    throw;
  }
  thread_ = std::thread([this] { produce(); });
}

PrefetchSource::~PrefetchSource() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (Slot& s : slots_) memory_.free(s.input), memory_.free(s.labels);
}

void PrefetchSource::produce() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    Slot* slot = nullptr;
    cv_.wait(lock, [&] {
      if (stop_) return true;
      if (next_ < 0) return false;
      int pending = 0;  // filling or ready: at most depth ahead
      for (Slot& s : slots_) {
        pending += s.state == SlotState::Filling || s.state == SlotState::Ready;
        if (s.state == SlotState::Free && !slot) slot = &s;
      }
      if (pending >= depth_) slot = nullptr;
      return slot != nullptr;
    });
    if (stop_) return;
    slot->state = SlotState::Filling;
    slot->step = next_;
    slot->error = nullptr;
    const uint64_t generation = generation_;
    lock.unlock();
    // The inner source is this thread's alone: its count grows only inside this batch.
    const int64_t skipped_before = inner_->skipped_samples();
    try {
      inner_->next_batch(slot->step, slot->input, static_cast<int32_t*>(slot->labels));
    } catch (...) {
      slot->error = std::current_exception();
    }
    slot->skipped = inner_->skipped_samples() - skipped_before;
    lock.lock();
    if (generation != generation_) {  // restarted meanwhile: not wanted
      slot->state = SlotState::Free;
    } else {
      slot->state = SlotState::Ready;
      ++next_;
    }
    cv_.notify_all();
  }
}

PrefetchSource::Slot* PrefetchSource::ready_slot(int64_t step) {
  for (Slot& s : slots_)
    if (s.state == SlotState::Ready && s.step == step) return &s;
  return nullptr;
}

PrefetchSource::Batch PrefetchSource::acquire(int64_t step) {
  std::unique_lock<std::mutex> lock(mu_);
  for (Slot& s : slots_) {  // the caller is done with its slot; skipped steps are dropped
    if (s.state == SlotState::Held || (s.state == SlotState::Ready && s.step < step))
      s.state = SlotState::Free;
  }
  bool coming = ready_slot(step) != nullptr || next_ == step;
  for (const Slot& s : slots_) coming = coming || (s.state == SlotState::Filling && s.step == step);
  if (!coming) {  // out of order: start over at `step`
    for (Slot& s : slots_)
      if (s.state == SlotState::Ready) s.state = SlotState::Free;
    next_ = step;
    ++generation_;
  }
  cv_.notify_all();
  const auto t0 = std::chrono::steady_clock::now();
  Slot* slot = nullptr;
  cv_.wait(lock, [&] { return (slot = ready_slot(step)) != nullptr; });
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  slot->state = SlotState::Held;
  skipped_ += slot->skipped;
  cv_.notify_all();
  if (slot->error) {
    std::exception_ptr e = slot->error;
    slot->state = SlotState::Free;
    std::rethrow_exception(e);
  }
  return Batch{slot->input, static_cast<const int32_t*>(slot->labels)};
}

void PrefetchSource::next_batch(int64_t step, void* input, int32_t* labels) {
  const Batch b = acquire(step);
  std::memcpy(input, b.input, static_cast<size_t>(input_bytes_));
  std::memcpy(labels, b.labels, static_cast<size_t>(label_bytes_));
}

std::string PrefetchSource::describe() const {
  return inner_->describe() + ", " + std::to_string(depth_) + " batches prefetched";
}

}  // namespace remat
