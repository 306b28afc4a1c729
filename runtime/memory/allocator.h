// PoolAllocator: the caching allocator that enforces the memory budget. One pool of exactly
// `pool_bytes` is reserved from the backend up front; every tensor is carved out of it best-fit,
// with splitting and coalescing. Design notes are at the top of allocator.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/backends/backend.h"
#include "runtime/core/check.h"

namespace remat {

// Every block's offset inside the pool is a multiple of this (bytes); requests are rounded up
// to it. A pointer's absolute alignment is the smaller of this and the backend's base
// alignment (cudaMalloc: 256; CPU raw_alloc: 64).
constexpr int64_t kPoolAlignment = kAllocAlignment;  // Note [allocation size]

// Rounds `bytes` up to a multiple of kPoolAlignment.
inline int64_t pool_round_up(int64_t bytes) { return alloc_bytes(bytes); }

// "12.85 MB" (decimal units, as tools/cli.h's format_bytes).
std::string pool_format_bytes(int64_t bytes);

// A request the pool cannot serve. what() reads e.g.
//   out of memory in pool: node 'conv3' asked for 12.85 MB (12845056 bytes); pool 1.00 GB
//   reserved, 990.10 MB in use, 9.90 MB free, largest free block 4.20 MB (fragmented into 5
//   free blocks)
// and the numbers are also available as fields (all bytes).
class OutOfPoolError : public Error {
 public:
  OutOfPoolError(const std::string& what, std::string who, int64_t requested, int64_t in_use,
                 int64_t free_bytes, int64_t largest_free, int64_t reserved)
      : Error(what), who(std::move(who)), requested(requested), in_use(in_use),
        free_bytes(free_bytes), largest_free(largest_free), reserved(reserved) {}
  std::string who;
  int64_t requested;  // after rounding to kPoolAlignment
  int64_t in_use;
  int64_t free_bytes;
  int64_t largest_free;
  int64_t reserved;
};

// Statistics, kept up to date on every allocate/free (all sizes in bytes).
struct PoolStats {
  int64_t reserved = 0;        // the pool size, fixed at construction
  int64_t in_use = 0;          // sum of the sizes of live blocks
  int64_t peak_in_use = 0;     // max of in_use since construction or reset_peak()
  int64_t free_bytes = 0;      // reserved - in_use
  int64_t largest_free = 0;    // size of the largest free block
  int64_t free_blocks = 0;     // number of free blocks
  int64_t live_blocks = 0;     // number of blocks handed out and not yet freed
  int64_t num_allocations = 0; // allocate() calls that returned a block, since construction
  int64_t num_frees = 0;       // free() calls that released a block, since construction
  int64_t num_failures = 0;    // allocate() calls that threw OutOfPoolError
  // External fragmentation when the peak was reached: 1 - largest_free / free_bytes at that
  // moment (0 when no byte was free or the free bytes were one block). 0 = the free memory
  // was contiguous; close to 1 = it was scattered in small pieces.
  double fragmentation_at_peak = 0;
  // The same quantity now.
  double fragmentation() const {
    return free_bytes > 0 ? 1.0 - static_cast<double>(largest_free) / free_bytes : 0.0;
  }
};

// One block of the pool as seen by describe()/blocks().
struct PoolBlock {
  int64_t offset = 0;  // bytes from the pool base
  int64_t size = 0;    // bytes
  bool free = true;
  std::string who;     // the owner named at allocate(); empty for free blocks
};

class PoolAllocator {
 public:
  // Reserves exactly `pool_bytes` (>= 0) with one backend.raw_alloc; never allocates again.
  // The backend must outlive the allocator.
  PoolAllocator(Backend& backend, int64_t pool_bytes);
  ~PoolAllocator();  // raw_free of the pool; live blocks are simply dropped
  PoolAllocator(const PoolAllocator&) = delete;
  PoolAllocator& operator=(const PoolAllocator&) = delete;

  // A block of at least `bytes` (rounded up to kPoolAlignment), best-fit: the smallest free
  // block that fits, the lowest offset among equal sizes; the rest is split off as a free
  // block. `who` names the owner for error messages ("node 'conv3'"), printed verbatim.
  // bytes == 0 returns nullptr (uses no memory, is not counted); free(nullptr) is a no-op.
  // Throws OutOfPoolError when no free block is large enough; Error when bytes < 0.
  void* allocate(int64_t bytes, const std::string& who);
  // Releases a block and merges it with free neighbours. Throws Error for a pointer that is
  // not the start of a live block (unknown pointer, double free).
  void free(void* p);

  const PoolStats& stats() const { return stats_; }
  // Starts a new measurement window: peak_in_use = in_use, fragmentation_at_peak = now.
  void reset_peak();

  void* base() const { return base_; }
  int64_t pool_bytes() const { return pool_bytes_; }
  // The size of the live block starting at p (bytes, after rounding); throws if none.
  int64_t block_size(const void* p) const;
  // Every block in address order (for tests and diagnostics).
  std::vector<PoolBlock> blocks() const;
  // A multi-line map of the pool (one line per block), for error reports.
  std::string describe() const;
  // Verifies the internal invariants (blocks tile the pool, no two adjacent free blocks, the
  // free index matches, stats agree); throws Error on a violation. O(blocks); for tests.
  void check_invariants() const;

 private:
  struct Block {
    int64_t size = 0;
    bool free = true;
    std::string who;
  };
  void on_change();  // refreshes derived stats and the peak
  [[noreturn]] void throw_oom(const std::string& who, int64_t bytes, int64_t rounded);

  Backend& backend_;
  void* base_ = nullptr;
  int64_t pool_bytes_ = 0;
  std::map<int64_t, Block> blocks_;                  // offset -> block, address order
  std::set<std::pair<int64_t, int64_t>> free_index_; // (size, offset) of every free block
  PoolStats stats_;
};

}  // namespace remat
