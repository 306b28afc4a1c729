// Fills the samples of a batch on several threads (the image sources and the synthetic one):
// each sample on one thread, so a sample's values never depend on the thread count.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace remat {

// fill(i) for every i < n on min(threads, n) threads, the caller's among them; then rethrows the
// exception of the lowest-numbered sample that threw, whatever the threads.
template <typename Fill>
void fill_samples(int64_t n, int threads, Fill fill) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(std::max<int64_t>(n, 0)));
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i; (i = next++) < n;) {
      try {
        fill(i);
      } catch (...) {
        errors[static_cast<size_t>(i)] = std::current_exception();
      }
    }
  };
  const int count = static_cast<int>(std::min<int64_t>(std::max(threads, 1), std::max<int64_t>(n, 1)));
  std::vector<std::thread> pool;
  for (int t = 1; t < count; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace remat
