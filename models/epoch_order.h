// The order a data source serves a finite set of samples in: a permutation per epoch, drawn from
// a seed (training), or the samples in turn (evaluation); shared by the loader's threads.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "models/data_rng.h"

namespace remat {

class EpochOrder {
 public:
  EpochOrder(int64_t count, uint64_t seed, bool shuffle)
      : count_(count), seed_(seed), shuffle_(shuffle) {}

  // The sample at position p of the endless sequence of epochs (count > 0).
  int64_t at(int64_t p) {
    if (!shuffle_) return p % count_;
    const int64_t epoch = p / count_;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = perms_.find(epoch);
    if (it == perms_.end()) {
      if (perms_.size() > 2) perms_.erase(perms_.begin());  // the last few epochs in use
      std::vector<int64_t> perm(static_cast<size_t>(count_));
      for (int64_t i = 0; i < count_; ++i) perm[static_cast<size_t>(i)] = i;
      Rng rng(mix64(seed_ ^ mix64(static_cast<uint64_t>(epoch) + 0x5eed)));
      for (int64_t i = count_ - 1; i > 0; --i)
        std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(rng.below(i + 1))]);
      it = perms_.emplace(epoch, std::move(perm)).first;
    }
    return it->second[static_cast<size_t>(p % count_)];
  }

 private:
  int64_t count_;
  uint64_t seed_;
  bool shuffle_;
  std::mutex mu_;
  std::map<int64_t, std::vector<int64_t>> perms_;  // epoch -> its order
};

}  // namespace remat
