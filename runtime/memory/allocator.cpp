// PoolAllocator: best-fit allocation with splitting and coalescing inside one fixed pool.
//
// Design (after PyTorch's CUDACachingAllocator, reduced to one pool and one stream):
// - The budget is a hard cap. The constructor makes the only backend.raw_alloc call, for
//   exactly the pool size; no request ever falls back to the backend, so a plan that does not
//   fit fails here with a report instead of silently using more memory than the budget.
// - The pool is tiled by blocks, kept in an address-ordered map (offset -> block). Free
//   blocks are also indexed by (size, offset) in a std::set, so best-fit is one lower_bound:
//   the smallest block that fits, the lowest address among equal sizes (deterministic, and
//   it keeps allocations packed towards the start of the pool).
// - Sizes are rounded up to kPoolAlignment (256 bytes, cuDNN/cuBLAS-friendly). A block larger
//   than the request is split when the remainder is at least kPoolAlignment; a smaller
//   remainder (only possible at the pool's end when its size is not a multiple of the
//   alignment) stays with the block, so blocks always tile the pool exactly.
// - free() merges the block with its free neighbours at once (no deferred coalescing), so two
//   free blocks are never adjacent, and freeing everything leaves one block of the whole pool.
// - Statistics are updated on every call; the peak records the fragmentation of the free
//   memory at that moment, which is what explains an OOM below the predicted peak.
#include "runtime/memory/allocator.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <sstream>

namespace remat {

std::string pool_format_bytes(int64_t bytes) {
  char buf[64];
  double b = static_cast<double>(bytes);
  if (b >= 1e9 || b <= -1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6 || b <= -1e6) std::snprintf(buf, sizeof buf, "%.2f MB", b / 1e6);
  else if (b >= 1e3 || b <= -1e3) std::snprintf(buf, sizeof buf, "%.2f KB", b / 1e3);
  else std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  return buf;
}

PoolAllocator::PoolAllocator(Backend& backend, int64_t pool_bytes)
    : backend_(backend), pool_bytes_(pool_bytes) {
  REMAT_CHECK(pool_bytes >= 0, "negative pool size " << pool_bytes);
  base_ = backend_alloc(backend_, pool_bytes, "the memory pool of the budget");
  if (pool_bytes > 0) {
    blocks_[0] = Block{pool_bytes, true, ""};
    free_index_.insert({pool_bytes, 0});
  }
  stats_.reserved = pool_bytes;
  on_change();
  stats_.fragmentation_at_peak = stats_.fragmentation();
}

PoolAllocator::~PoolAllocator() { backend_.raw_free(base_); }

void* PoolAllocator::allocate(int64_t bytes, const std::string& who) {
  REMAT_CHECK(bytes >= 0, who << " asked for a negative size " << bytes);
  if (bytes == 0) return nullptr;
  REMAT_CHECK(bytes <= INT64_MAX - kPoolAlignment, who << " asked for " << bytes << " bytes");
  const int64_t rounded = pool_round_up(bytes);
  auto fit = free_index_.lower_bound({rounded, INT64_MIN});
  if (fit == free_index_.end()) throw_oom(who, bytes, rounded);

  const int64_t offset = fit->second;
  free_index_.erase(fit);
  Block& b = blocks_.at(offset);
  const int64_t rest = b.size - rounded;
  if (rest >= kPoolAlignment) {
    b.size = rounded;
    blocks_[offset + rounded] = Block{rest, true, ""};
    free_index_.insert({rest, offset + rounded});
  }
  b.free = false;
  b.who = who;
  stats_.in_use += b.size;
  stats_.live_blocks += 1;
  stats_.num_allocations += 1;
  on_change();
  return static_cast<char*>(base_) + offset;
}

void PoolAllocator::free(void* p) {
  if (!p) return;
  const char* cp = static_cast<const char*>(p);
  const char* base = static_cast<const char*>(base_);
  REMAT_CHECK(cp >= base && cp < base + pool_bytes_,
              "free of pointer " << p << " that is not inside the pool");
  const int64_t offset = cp - base;
  auto it = blocks_.find(offset);
  REMAT_CHECK(it != blocks_.end(),
              "free of pointer " << p << " (pool offset " << offset << ") that no block starts at");
  REMAT_CHECK(!it->second.free, "double free of pointer " << p << " (pool offset " << offset
                                                          << ", " << it->second.size << " bytes)");
  stats_.in_use -= it->second.size;
  stats_.live_blocks -= 1;
  stats_.num_frees += 1;
  it->second.free = true;
  it->second.who.clear();

  // Merge with the next block, then the previous one.
  auto next = std::next(it);
  if (next != blocks_.end() && next->second.free) {
    free_index_.erase({next->second.size, next->first});
    it->second.size += next->second.size;
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.free) {
      free_index_.erase({prev->second.size, prev->first});
      prev->second.size += it->second.size;
      blocks_.erase(it);
      it = prev;
    }
  }
  free_index_.insert({it->second.size, it->first});
  on_change();
}

void PoolAllocator::on_change() {
  stats_.free_bytes = stats_.reserved - stats_.in_use;
  stats_.largest_free = free_index_.empty() ? 0 : free_index_.rbegin()->first;
  stats_.free_blocks = static_cast<int64_t>(free_index_.size());
  if (stats_.in_use > stats_.peak_in_use) {
    stats_.peak_in_use = stats_.in_use;
    stats_.fragmentation_at_peak = stats_.fragmentation();
  }
}

void PoolAllocator::reset_peak() {
  stats_.peak_in_use = stats_.in_use;
  stats_.fragmentation_at_peak = stats_.fragmentation();
}

void PoolAllocator::throw_oom(const std::string& who, int64_t bytes, int64_t rounded) {
  stats_.num_failures += 1;
  std::ostringstream os;
  os << "out of memory in pool: " << who << " asked for " << pool_format_bytes(rounded) << " ("
     << rounded << " bytes";
  if (rounded != bytes) os << ", " << bytes << " before rounding to " << kPoolAlignment;
  os << "); pool " << pool_format_bytes(stats_.reserved) << " reserved, "
     << pool_format_bytes(stats_.in_use) << " in use (" << stats_.live_blocks << " blocks), "
     << pool_format_bytes(stats_.free_bytes) << " free, largest free block "
     << pool_format_bytes(stats_.largest_free) << " (fragmented into " << stats_.free_blocks
     << " free blocks)";
  if (stats_.free_bytes >= rounded)
    os << "; enough bytes are free in total but no single block is large enough";
  throw OutOfPoolError(os.str(), who, rounded, stats_.in_use, stats_.free_bytes,
                       stats_.largest_free, stats_.reserved);
}

int64_t PoolAllocator::block_size(const void* p) const {
  const char* cp = static_cast<const char*>(p);
  const char* base = static_cast<const char*>(base_);
  REMAT_CHECK(p && cp >= base && cp < base + pool_bytes_, "pointer " << p << " is not in the pool");
  auto it = blocks_.find(cp - base);
  REMAT_CHECK(it != blocks_.end() && !it->second.free, "no live block starts at " << p);
  return it->second.size;
}

std::vector<PoolBlock> PoolAllocator::blocks() const {
  std::vector<PoolBlock> out;
  out.reserve(blocks_.size());
  for (const auto& [offset, b] : blocks_) out.push_back(PoolBlock{offset, b.size, b.free, b.who});
  return out;
}

std::string PoolAllocator::describe() const {
  std::ostringstream os;
  os << "pool " << pool_format_bytes(pool_bytes_) << ", " << blocks_.size() << " blocks:\n";
  for (const auto& [offset, b] : blocks_) {
    os << "  [" << offset << ", " << offset + b.size << ") " << pool_format_bytes(b.size) << " "
       << (b.free ? std::string("free") : b.who) << "\n";
  }
  return os.str();
}

void PoolAllocator::check_invariants() const {
  int64_t expect = 0, in_use = 0, live = 0, nfree = 0, largest = 0;
  bool prev_free = false;
  for (const auto& [offset, b] : blocks_) {
    REMAT_CHECK(offset == expect, "block at " << offset << " but the previous ended at " << expect);
    REMAT_CHECK(offset % kPoolAlignment == 0, "block at unaligned offset " << offset);
    REMAT_CHECK(b.size > 0, "empty block at " << offset);
    if (b.free) {
      REMAT_CHECK(!prev_free, "two adjacent free blocks at " << offset);
      REMAT_CHECK(free_index_.count({b.size, offset}), "free block at " << offset << " not indexed");
      ++nfree;
      largest = std::max(largest, b.size);
    } else {
      in_use += b.size;
      ++live;
    }
    prev_free = b.free;
    expect = offset + b.size;
  }
  REMAT_CHECK(expect == pool_bytes_, "blocks end at " << expect << ", pool is " << pool_bytes_);
  REMAT_CHECK(nfree == static_cast<int64_t>(free_index_.size()), "free index has stale entries");
  REMAT_CHECK(in_use == stats_.in_use && live == stats_.live_blocks && nfree == stats_.free_blocks &&
                  largest == stats_.largest_free && stats_.free_bytes == pool_bytes_ - in_use,
              "statistics disagree with the blocks");
  REMAT_CHECK(stats_.peak_in_use >= stats_.in_use, "peak below current use");
}

}  // namespace remat
