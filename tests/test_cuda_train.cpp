// GPU end to end (skipped without a device): the small CNN trains on the GPU under a budget;
// its loss curve matches the CPU run within tolerance, the measured peak equals the plan's
// prediction and the memory held stays within the budget.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/source_dir.h"
#include "runtime/core/check.h"
#include "runtime/backends/cuda_backend.h"
#include "tools/training/training.h"

namespace remat {
namespace {

TrainOptions small_cnn(const std::string& device) {
  TrainOptions o;
  o.config = test_source_dir() + "/configs/small_cnn.yaml";
  o.device = device;
  o.batch = 16;
  o.steps = 12;
  o.log_every = 100;
  o.plan.budget = 6000000;
  o.plan.strategy = "chen-greedy";  // deterministic, recomputes
  return o;
}

TEST(CudaTrain, SmallCnnMatchesCpuWithinBudget) {
  std::string why;
  if (!cuda_device_available(&why)) GTEST_SKIP() << why;
  TrainSummary cpu = run_training(small_cnn("cpu"));
  TrainSummary gpu = run_training(small_cnn("cuda"));
  ASSERT_EQ(cpu.losses.size(), gpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i)
    EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 1e-3 + 1e-2 * std::fabs(cpu.losses[i])) << "step " << i;
  EXPECT_EQ(gpu.peak_bytes, gpu.predicted_peak);
  EXPECT_LE(gpu.reserved_peak_bytes, 6000000);
  EXPECT_GT(gpu.recomputes_per_step, 0);
}

TEST(CudaTrain, NoDeviceIsAClearError) {
  std::string why;
  if (cuda_device_available(&why)) GTEST_SKIP() << "a device is present";
  try {
    run_training(small_cnn("cuda"));
    FAIL() << "trained on a GPU that is not there";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--device cuda"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace remat
