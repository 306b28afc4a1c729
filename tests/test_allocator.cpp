// PoolAllocator tests: randomized alloc/free against a simple model (no overlap, alignment,
// exact statistics, best fit, coalescing), the out-of-pool report, misuse errors; the CPU
// backend's block alignment.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>

#include "runtime/memory/allocator.h"

namespace remat {
namespace {

// Delegates to the CPU backend and counts raw_alloc/raw_free calls.
class CountingBackend : public Backend {
 public:
  DeviceKind kind() const override { return inner_->kind(); }
  std::string name() const override { return "counting"; }
  void* raw_alloc(int64_t bytes) override {
    ++allocs;
    last_alloc_bytes = bytes;
    return inner_->raw_alloc(bytes);
  }
  void raw_free(void* p) override {
    ++frees;
    inner_->raw_free(p);
  }
  void* host_alloc(int64_t b) override { return inner_->host_alloc(b); }
  void host_free(void* p) override { inner_->host_free(p); }
  void copy_from_host(void* d, const void* s, int64_t b) override { inner_->copy_from_host(d, s, b); }
  void copy_to_host(void* d, const void* s, int64_t b) override { inner_->copy_to_host(d, s, b); }
  void copy(void* d, const void* s, int64_t b) override { inner_->copy(d, s, b); }
  void fill_zero(void* d, int64_t b) override { inner_->fill_zero(d, b); }
  void synchronize() override {}
  int64_t workspace_bytes(const OpDef& op, const ExecContext& c) override { return inner_->workspace_bytes(op, c); }
  void run(const OpDef& op, ExecContext& c) override { inner_->run(op, c); }
  std::vector<double> time_run(const OpDef& op, ExecContext& c, int w, int r) override {
    return inner_->time_run(op, c, w, r);
  }
  int allocs = 0, frees = 0;
  int64_t last_alloc_bytes = -1;

 private:
  std::unique_ptr<Backend> inner_ = make_cpu_backend();
};

int64_t offset_of(const PoolAllocator& a, const void* p) {
  return static_cast<const char*>(p) - static_cast<const char*>(a.base());
}

// The block best fit must choose, computed from the block list: the smallest free block that
// holds `rounded`, the lowest offset among equal sizes; -1 if none.
int64_t expected_best_fit(const PoolAllocator& a, int64_t rounded) {
  int64_t best_off = -1, best_size = INT64_MAX;
  for (const auto& b : a.blocks())
    if (b.free && b.size >= rounded && b.size < best_size) best_off = b.offset, best_size = b.size;
  return best_off;
}

TEST(PoolAllocator, ReservesExactlyOnePoolAndReleasesIt) {
  CountingBackend be;
  {
    PoolAllocator a(be, 1 << 20);
    void* p = a.allocate(1000, "x");
    void* q = a.allocate(5000, "y");
    a.free(p);
    (void)q;
    EXPECT_EQ(be.allocs, 1);
    EXPECT_EQ(be.last_alloc_bytes, 1 << 20);
    EXPECT_EQ(a.stats().reserved, 1 << 20);
  }
  EXPECT_EQ(be.frees, 1);
}

TEST(PoolAllocator, RandomSequenceMatchesModel) {
  auto be = make_cpu_backend();
  const int64_t pool = 8 << 20;  // 8 MiB
  PoolAllocator a(*be, pool);
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> log_size(0.0, std::log(pool / 6.0));
  std::map<void*, int64_t> live;      // pointer -> rounded size
  std::map<int64_t, int64_t> ranges;  // offset -> end, of live blocks
  int64_t in_use = 0, peak = 0, allocations = 0, failures = 0, frees = 0;
  const char* base = static_cast<const char*>(a.base());

  for (int op = 0; op < 6000; ++op) {
    // Phases bias towards allocation then towards freeing, so the pool fills and drains.
    const bool filling = (op / 500) % 2 == 0;
    const bool do_alloc = live.empty() || std::bernoulli_distribution(filling ? 0.7 : 0.3)(rng);
    if (do_alloc) {
      int64_t bytes = static_cast<int64_t>(std::exp(log_size(rng)));  // 1 B .. pool/6
      int64_t rounded = (bytes + 255) / 256 * 256;
      int64_t want = expected_best_fit(a, rounded);
      void* p = nullptr;
      try {
        p = a.allocate(bytes, "op" + std::to_string(op));
      } catch (const OutOfPoolError& e) {
        ++failures;
        EXPECT_EQ(want, -1) << "failed although a free block fits: " << e.what();
        EXPECT_EQ(e.requested, rounded);
        continue;
      }
      ASSERT_NE(want, -1) << "allocation succeeded although no free block fits";
      ++allocations;
      const int64_t off = offset_of(a, p);
      EXPECT_EQ(off, want) << "not the best-fit block";
      EXPECT_EQ(off % kPoolAlignment, 0);
      EXPECT_GE(static_cast<const char*>(p), base);
      const int64_t size = a.block_size(p);
      // A block is the rounded size, or (only at the pool's end) up to 255 bytes more.
      EXPECT_GE(size, rounded);
      EXPECT_LT(size - rounded, kPoolAlignment);
      EXPECT_LE(off + size, pool);
      // No overlap with the neighbouring live blocks.
      auto next = ranges.lower_bound(off);
      if (next != ranges.end()) {
        EXPECT_LE(off + size, next->first);
      }
      if (next != ranges.begin()) {
        EXPECT_LE(std::prev(next)->second, off);
      }
      ranges[off] = off + size;
      live[p] = size;
      in_use += size;
      peak = std::max(peak, in_use);
    } else {
      auto it = live.begin();
      std::advance(it, std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng));
      a.free(it->first);
      ++frees;
      in_use -= it->second;
      ranges.erase(offset_of(a, it->first));
      live.erase(it);
    }
    const PoolStats& s = a.stats();
    ASSERT_EQ(s.in_use, in_use);
    ASSERT_EQ(s.peak_in_use, peak);
    ASSERT_EQ(s.live_blocks, static_cast<int64_t>(live.size()));
    ASSERT_EQ(s.free_bytes, pool - in_use);
    ASSERT_EQ(s.num_allocations, allocations);
    ASSERT_EQ(s.num_frees, frees);
    ASSERT_EQ(s.num_failures, failures);
    a.check_invariants();
  }
  EXPECT_GT(failures, 0) << "the sequence never filled the pool; the test is too weak";
  EXPECT_GT(peak, pool / 2);
  EXPECT_GT(a.stats().fragmentation_at_peak, 0.0);
  EXPECT_LT(a.stats().fragmentation_at_peak, 1.0);

  for (auto& [p, size] : live) a.free(p);
  EXPECT_EQ(a.stats().in_use, 0);
  EXPECT_EQ(a.stats().largest_free, pool);
  EXPECT_EQ(a.stats().free_blocks, 1);
  auto blocks = a.blocks();
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_TRUE(blocks[0].free);
  EXPECT_EQ(blocks[0].size, pool);
  a.check_invariants();
}

TEST(PoolAllocator, BestFitChoosesSmallestFittingBlock) {
  auto be = make_cpu_backend();
  PoolAllocator a(*be, 64 * 1024);
  void* big_hole = a.allocate(4096, "a");
  void* sep1 = a.allocate(256, "sep1");
  void* mid_hole = a.allocate(2048, "b");
  void* sep2 = a.allocate(256, "sep2");
  void* small_hole = a.allocate(1024, "c");
  void* sep3 = a.allocate(256, "sep3");
  const int64_t mid_off = offset_of(a, mid_hole);
  a.free(big_hole);
  a.free(mid_hole);
  a.free(small_hole);
  // First fit would take the 4 KB hole at offset 0; best fit takes the 2 KB one.
  void* p = a.allocate(1500, "d");
  EXPECT_EQ(offset_of(a, p), mid_off);
  EXPECT_EQ(a.block_size(p), 1536);
  // The 512-byte remainder was split off as a free block right after it.
  bool found = false;
  for (const auto& b : a.blocks())
    if (b.offset == mid_off + 1536) found = b.free && b.size == 512;
  EXPECT_TRUE(found);
  // An exact fit for the 1 KB hole takes it.
  void* q = a.allocate(1024, "e");
  EXPECT_EQ(offset_of(a, q), 4096 + 256 + 2048 + 256);
  (void)sep1, (void)sep2, (void)sep3;
  a.check_invariants();
}

TEST(PoolAllocator, FreeCoalescesWithBothNeighbours) {
  auto be = make_cpu_backend();
  PoolAllocator a(*be, 4096);
  void* x = a.allocate(1024, "x");
  void* y = a.allocate(1024, "y");
  void* z = a.allocate(1024, "z");
  void* w = a.allocate(1024, "w");
  EXPECT_EQ(a.stats().free_bytes, 0);
  EXPECT_EQ(a.stats().largest_free, 0);
  a.free(x);
  a.free(z);
  EXPECT_EQ(a.stats().free_blocks, 2);
  a.free(y);  // merges with x and z
  EXPECT_EQ(a.stats().free_blocks, 1);
  EXPECT_EQ(a.stats().largest_free, 3072);
  a.free(w);
  EXPECT_EQ(a.blocks().size(), 1u);
  EXPECT_EQ(a.stats().largest_free, 4096);
  a.check_invariants();
}

TEST(PoolAllocator, OutOfPoolReportNamesEverything) {
  auto be = make_cpu_backend();
  const int64_t pool = 1 << 20;
  PoolAllocator a(*be, pool);
  a.allocate(900000, "node 'conv1'");
  try {
    a.allocate(200000, "node 'conv3'");
    FAIL() << "expected OutOfPoolError";
  } catch (const OutOfPoolError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("node 'conv3'"), std::string::npos) << m;
    EXPECT_NE(m.find("200192 bytes"), std::string::npos) << m;  // 200000 rounded up to 256
    EXPECT_NE(m.find("in use"), std::string::npos) << m;
    EXPECT_NE(m.find("largest free block"), std::string::npos) << m;
    EXPECT_NE(m.find("reserved"), std::string::npos) << m;
    EXPECT_NE(m.find("1.05 MB reserved"), std::string::npos) << m;  // 1048576 B
    EXPECT_EQ(e.who, "node 'conv3'");
    EXPECT_EQ(e.requested, 200192);
    EXPECT_EQ(e.in_use, 900096);
    EXPECT_EQ(e.free_bytes, pool - 900096);
    EXPECT_EQ(e.largest_free, pool - 900096);
    EXPECT_EQ(e.reserved, pool);
  }
  EXPECT_EQ(a.stats().num_failures, 1);
  EXPECT_EQ(a.stats().in_use, 900096);
  a.check_invariants();
}

TEST(PoolAllocator, OutOfPoolWhenFragmentedSaysSo) {
  auto be = make_cpu_backend();
  PoolAllocator a(*be, 4096);
  std::vector<void*> p;
  for (int i = 0; i < 8; ++i) p.push_back(a.allocate(512, "t" + std::to_string(i)));
  for (int i = 0; i < 8; i += 2) a.free(p[static_cast<size_t>(i)]);  // 2 KB free, 4 blocks of 512
  try {
    a.allocate(1024, "node 'big'");
    FAIL() << "expected OutOfPoolError";
  } catch (const OutOfPoolError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("fragmented into 4 free blocks"), std::string::npos) << m;
    EXPECT_NE(m.find("no single block is large enough"), std::string::npos) << m;
    EXPECT_EQ(e.free_bytes, 2048);
    EXPECT_EQ(e.largest_free, 512);
  }
}

TEST(PoolAllocator, FragmentationAtPeak) {
  auto be = make_cpu_backend();
  PoolAllocator a(*be, 4096);
  void* p0 = a.allocate(1024, "a");
  a.allocate(1024, "b");
  void* p2 = a.allocate(1024, "c");
  a.allocate(1024, "d");
  EXPECT_EQ(a.stats().peak_in_use, 4096);
  EXPECT_DOUBLE_EQ(a.stats().fragmentation_at_peak, 0.0);  // nothing free
  a.free(p0);
  a.free(p2);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_in_use, 2048);
  EXPECT_DOUBLE_EQ(a.stats().fragmentation_at_peak, 0.5);  // two 1 KB holes
  a.allocate(256, "e");  // takes the start of the first hole: free 768 + 1024
  EXPECT_EQ(a.stats().peak_in_use, 2304);
  EXPECT_DOUBLE_EQ(a.stats().fragmentation_at_peak, 1.0 - 1024.0 / 1792.0);
}

TEST(PoolAllocator, PoolSizeNotAMultipleOfAlignment) {
  auto be = make_cpu_backend();
  PoolAllocator a(*be, 1000);
  EXPECT_THROW(a.allocate(900, "too big after rounding"), OutOfPoolError);  // 1024 > 1000
  void* p = a.allocate(700, "x");  // 768; the 232-byte tail stays with the block
  EXPECT_EQ(a.block_size(p), 1000);
  EXPECT_EQ(a.stats().in_use, 1000);
  a.check_invariants();
  a.free(p);
  EXPECT_EQ(a.stats().largest_free, 1000);
  a.check_invariants();
}

TEST(PoolAllocator, ZeroBytesAndMisuse) {
  auto be = make_cpu_backend();
  PoolAllocator a(*be, 4096);
  EXPECT_EQ(a.allocate(0, "empty"), nullptr);
  EXPECT_EQ(a.stats().num_allocations, 0);
  EXPECT_EQ(a.stats().in_use, 0);
  a.free(nullptr);  // no-op
  EXPECT_THROW(a.allocate(-1, "neg"), Error);

  void* p = a.allocate(300, "x");  // 512 bytes
  EXPECT_THROW(a.free(static_cast<char*>(p) + 256), Error);  // inside a block, not its start
  int outside = 0;
  EXPECT_THROW(a.free(&outside), Error);
  a.free(p);
  EXPECT_THROW(a.free(p), Error);  // double free
  a.check_invariants();
  EXPECT_EQ(a.stats().in_use, 0);
}

TEST(PoolAllocator, EmptyPool) {
  auto be = make_cpu_backend();
  PoolAllocator a(*be, 0);
  EXPECT_EQ(a.allocate(0, "empty"), nullptr);
  EXPECT_THROW(a.allocate(1, "x"), OutOfPoolError);
  a.check_invariants();
}

// The CPU backend's blocks: 64-byte aligned; from 4 MB, 2 MB aligned for huge pages (Note
// [huge pages] in cpu_backend.cpp), every byte writable; never null, even for 0 bytes.
TEST(CpuBackendMemory, LargeBlocksAreAlignedForHugePages) {
  auto be = make_cpu_backend();
  const int64_t mb = int64_t{1} << 20;
  for (int64_t bytes : {int64_t{0}, int64_t{100}, 4 * mb - 1, 4 * mb, 5 * mb + 3}) {
    for (bool host : {false, true}) {
      void* p = host ? be->host_alloc(bytes) : be->raw_alloc(bytes);
      ASSERT_NE(p, nullptr) << bytes;
      const auto at = reinterpret_cast<uintptr_t>(p);
      EXPECT_EQ(at % 64, 0u) << bytes;
      if (bytes >= 4 * mb) {
        EXPECT_EQ(at % (2 * mb), 0u) << bytes;
      }
      std::fill_n(static_cast<char*>(p), bytes, char{1});
      host ? be->host_free(p) : be->raw_free(p);
    }
  }
}

}  // namespace
}  // namespace remat
