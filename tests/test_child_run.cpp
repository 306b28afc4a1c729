// child_run: records relayed in order, the hard deadline, stop requests, and errors and
// crashes in the child reported to the caller.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <thread>
#include <vector>

#include "runtime/core/check.h"
#include "solver/child_run.h"

namespace remat {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

TEST(ChildRun, RecordsArriveInOrderAndWhole) {
  std::vector<std::pair<int, std::vector<double>>> got;
  std::vector<double> big(300000);  // larger than a pipe buffer: many reads
  for (size_t i = 0; i < big.size(); ++i) big[i] = double(i) * 0.5;
  ChildEnd end = child_run(
      [&](ChildChannel& ch) {
        ch.send(1, {1.0, 2.0});
        ch.send(2, big);
        ch.send(3, {});
      },
      30, [&](int tag, const std::vector<double>& d) {
        got.push_back({tag, d});
        return false;
      });
  EXPECT_EQ(end, ChildEnd::Finished);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].first, 1);
  EXPECT_EQ(got[0].second, (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(got[1].first, 2);
  EXPECT_EQ(got[1].second, big);
  EXPECT_EQ(got[2].first, 3);
  EXPECT_TRUE(got[2].second.empty());
}

TEST(ChildRun, ChildStateDoesNotLeakIntoTheCaller) {
  int value = 1;
  child_run([&](ChildChannel&) { value = 2; }, 30,
            [](int, const std::vector<double>&) { return false; });
  EXPECT_EQ(value, 1);  // the work ran in another address space
}

TEST(ChildRun, DeadlineKillsWorkThatIgnoresIt) {
  std::vector<int> tags;
  const auto t0 = Clock::now();
  ChildEnd end = child_run(
      [&](ChildChannel& ch) {
        ch.send(7, {1.0});
        const auto start = Clock::now();  // ignores the deadline (bounded, so a broken kill fails)
        while (seconds_since(start) < 10) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        ch.send(8, {});
      },
      0.5, [&](int tag, const std::vector<double>&) {
        tags.push_back(tag);
        return false;
      });
  const double took = seconds_since(t0);
  EXPECT_EQ(end, ChildEnd::Killed);
  EXPECT_EQ(tags, std::vector<int>{7});  // sent before the kill: still delivered
  EXPECT_GE(took, 0.45);
  EXPECT_LT(took, 3.0);
}

TEST(ChildRun, HandlerCanAskTheWorkToStop) {
  std::vector<int> tags;
  ChildEnd end = child_run(
      [&](ChildChannel& ch) {
        ch.send(1, {});
        const auto t0 = Clock::now();
        while (!ch.stop_requested() && seconds_since(t0) < 20)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ch.send(ch.stop_requested() ? 2 : 3, {});
      },
      30, [&](int tag, const std::vector<double>&) {
        tags.push_back(tag);
        return tag == 1;
      });
  EXPECT_EQ(end, ChildEnd::Finished);
  EXPECT_EQ(tags, (std::vector<int>{1, 2}));
}

TEST(ChildRun, ExceptionInTheWorkIsRethrownWithItsMessage) {
  try {
    child_run([](ChildChannel&) { REMAT_FAIL("node 'conv3': 42 bytes"); }, 30,
              [](int, const std::vector<double>&) { return false; });
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node 'conv3': 42 bytes"), std::string::npos)
        << e.what();
  }
}

TEST(ChildRun, CrashIsReportedNotPropagated) {
  std::string why;
  ChildEnd end = child_run([](ChildChannel&) { std::raise(SIGKILL); }, 30,
                           [](int, const std::vector<double>&) { return false; }, &why);
  EXPECT_EQ(end, ChildEnd::Crashed);
  EXPECT_NE(why.find("signal"), std::string::npos) << why;
}

}  // namespace
}  // namespace remat
