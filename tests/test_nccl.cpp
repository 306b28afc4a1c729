// The NCCL communicator on one GPU (a job of one rank, its unique id made locally): every
// collective on device memory, ordered with the CUDA backend's stream. Skips without a device
// or without NCCL in the build; a multi-rank NCCL job needs several GPUs (see README).
#include <gtest/gtest.h>

#include <vector>

#include "runtime/backends/backend.h"
#include "runtime/comm/communicator.h"
#include "runtime/backends/cuda_backend.h"

namespace remat {
namespace {

TEST(NcclCommunicator, DeclinesWithoutCudaBackend) {
  auto cpu = make_cpu_backend();
  std::string why;
  EXPECT_EQ(make_nccl_communicator(*cpu, nullptr, &why), nullptr);
  EXPECT_FALSE(why.empty());
}

TEST(NcclCommunicator, CollectivesOfOneRankOnTheDevice) {
  if (!nccl_built()) GTEST_SKIP() << "built without NCCL";
  std::string why;
  if (!cuda_device_available(&why)) GTEST_SKIP() << why;
  auto be = make_cuda_backend(0, &why);
  ASSERT_TRUE(be) << why;
  auto c = make_nccl_communicator(*be, nullptr, &why);
  ASSERT_TRUE(c) << why;
  EXPECT_EQ(c->size(), 1);
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->memory(), DeviceKind::Cuda);
  const int n = 1 << 20;
  std::vector<float> host(n), back(n);
  for (int i = 0; i < n; ++i) host[i] = 0.5f * static_cast<float>(i % 977);
  void* dev = be->raw_alloc(n * 4);
  be->copy_from_host(dev, host.data(), n * 4);
  // Each collective is queued after the upload on the backend's stream and the read-back after
  // the collective: the result is what a world of one gives (the input itself).
  c->wait(c->all_reduce(dev, n, CommType::F32, CommOp::Sum));
  c->wait(c->all_reduce(dev, n, CommType::F32, CommOp::Avg));
  c->wait(c->reduce_scatter(dev, n, CommType::F32, CommOp::Avg));
  c->wait(c->all_gather(dev, n * 4));
  c->wait(c->broadcast(dev, n * 4, 0));
  be->copy_to_host(back.data(), dev, n * 4);
  EXPECT_EQ(back, host);
  c->barrier();
  be->raw_free(dev);
}

}  // namespace
}  // namespace remat
