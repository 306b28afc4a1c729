// The MPI communicator, run under mpirun (ctest starts it with 3 ranks): every collective, in
// place, blocking and overlapped, on floats and doubles; the host helpers. Collectives are
// called unconditionally and checks are EXPECTs, so a failing rank never leaves the others
// waiting (ctest's timeout catches a hang). Without mpirun it is a job of one rank.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/mpi_session.h"

namespace remat {
namespace {

MpiSession* g_session = nullptr;  // owned by main(); the suite needs the process's one session

std::unique_ptr<Communicator> comm() {
  if (!g_session->active()) return nullptr;
  return g_session->make_communicator();
}

#define NEED_MPI(c)                                          \
  if (!(c)) GTEST_SKIP() << "not started by mpirun";         \
  static_assert(true, "")

TEST(MpiCommunicator, AllReduceSumAndAverage) {
  auto c = comm();
  NEED_MPI(c);
  const int n = c->size(), r = c->rank();
  // 3 x 2^30 / 4 would test the chunking; 1000 elements keep it fast.
  std::vector<float> f(1000);
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(r + 1) * static_cast<float>(i);
  c->all_reduce_now(f.data(), 1000, CommType::F32, CommOp::Sum);
  const float tri = static_cast<float>(n * (n + 1) / 2);
  for (size_t i = 0; i < f.size(); ++i) EXPECT_EQ(f[i], tri * static_cast<float>(i)) << i;
  std::vector<double> d = {static_cast<double>(r), 1.0};
  c->all_reduce_now(d.data(), 2, CommType::F64, CommOp::Avg);
  EXPECT_DOUBLE_EQ(d[0], (n - 1) / 2.0);
  EXPECT_DOUBLE_EQ(d[1], 1.0);
  EXPECT_EQ(c->memory(), DeviceKind::Cpu);
}

TEST(MpiCommunicator, ReduceScatterLeavesEachRankItsAveragedBlock) {
  auto c = comm();
  NEED_MPI(c);
  const int n = c->size(), r = c->rank();
  const int count = 5;
  std::vector<float> buf(static_cast<size_t>(count * n));
  for (int b = 0; b < n; ++b)
    for (int i = 0; i < count; ++i) buf[b * count + i] = static_cast<float>(100 * b + i + r);
  c->wait(c->reduce_scatter(buf.data(), count, CommType::F32, CommOp::Avg));
  for (int i = 0; i < count; ++i)  // mean over ranks of (100 r_block + i + rank)
    EXPECT_FLOAT_EQ(buf[r * count + i], 100.0f * r + i + (n - 1) / 2.0f) << i;
}

TEST(MpiCommunicator, AllGatherAndBroadcastInPlace) {
  auto c = comm();
  NEED_MPI(c);
  const int n = c->size(), r = c->rank();
  std::vector<int> blocks(static_cast<size_t>(3 * n), -1);
  for (int i = 0; i < 3; ++i) blocks[r * 3 + i] = 10 * r + i;
  c->all_gather_now(blocks.data(), 3 * sizeof(int));
  for (int b = 0; b < n; ++b)
    for (int i = 0; i < 3; ++i) EXPECT_EQ(blocks[b * 3 + i], 10 * b + i);
  std::vector<char> msg(6, 0);
  if (r == n - 1) msg = {'h', 'e', 'l', 'l', 'o', 0};
  c->broadcast_now(msg.data(), 6, n - 1);
  EXPECT_STREQ(msg.data(), "hello");
  EXPECT_EQ(broadcast_string(*c, r == 0 ? std::string(100000, 'x') : "", 0),
            std::string(100000, 'x'));
  const std::vector<uint64_t> all = all_gather_u64(*c, 1000u + static_cast<uint64_t>(r));
  ASSERT_EQ(all.size(), static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) EXPECT_EQ(all[i], 1000u + static_cast<uint64_t>(i));
  c->barrier();
}

// Several operations in flight at once, progressed while the host "computes", waited for in
// another order than they were started.
TEST(MpiCommunicator, OverlappedOperationsCompleteInAnyWaitOrder) {
  auto c = comm();
  NEED_MPI(c);
  const int n = c->size(), r = c->rank();
  std::vector<std::vector<float>> bufs(4, std::vector<float>(4096));
  std::vector<CommHandle> hs;
  for (size_t k = 0; k < bufs.size(); ++k) {
    std::iota(bufs[k].begin(), bufs[k].end(), static_cast<float>(k + r));
    hs.push_back(c->all_reduce(bufs[k].data(), 4096, CommType::F32, CommOp::Sum));
    c->progress();
  }
  for (size_t k = bufs.size(); k-- > 0;) c->wait(hs[k]);
  for (size_t k = 0; k < bufs.size(); ++k)
    for (int i = 0; i < 4096; i += 1023)
      EXPECT_EQ(bufs[k][i], static_cast<float>(n * (k + i) + n * (n - 1) / 2)) << k << " " << i;
  EXPECT_THROW(c->wait(hs[0]), Error);  // waited for already
}

// Separate communicators do not mix their messages.
TEST(MpiCommunicator, TwoCommunicatorsAreIndependent) {
  auto a = comm();
  NEED_MPI(a);
  auto b = comm();
  float x = 1, y = 2;
  const CommHandle ha = a->all_reduce(&x, 1, CommType::F32, CommOp::Sum);
  b->all_reduce_now(&y, 1, CommType::F32, CommOp::Sum);
  a->wait(ha);
  EXPECT_EQ(x, static_cast<float>(a->size()));
  EXPECT_EQ(y, 2.0f * b->size());
}

}  // namespace
}  // namespace remat

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  remat::MpiSession session;
  remat::g_session = &session;
  // Only rank 0 prints gtest's report; every rank's failures still fail its exit code.
  if (session.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  return rc;
}
