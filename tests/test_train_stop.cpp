// `train` stopped by a signal (Note [graceful stop]): during a step (the step ends, the
// checkpoint is written and resumes bit for bit; one key press delivered twice is one stop; a
// second signal stops at once) and during the solve (at once, nothing written).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "runtime/io/atomic_file.h"
#include "runtime/io/safetensors.h"
#include "tests/source_dir.h"
#include "tests/tool_runner.h"
#include "tools/training/stop_signal.h"

namespace remat {
namespace {

const std::string kSmallCnn = test_source_dir() + "/configs/small_cnn.yaml";

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

class TrainCli : public ToolRunTest {
 protected:
  std::string small(const std::string& more) {
    return "--config '" + kSmallCnn + "' --batch 4 " + more;
  }
};

// ---- stopping on a signal (Note [graceful stop]) --------------------------------------------
// SIGINT to a running `train --save`: it finishes the step, writes the checkpoint, prints the
// summary and exits 130; resuming from it equals an uninterrupted run bit for bit.
TEST_F(TrainCli, SigintSavesACheckpointThatResumesBitIdentically) {
  const std::string ck = path("stopped.safetensors"), out = path("run.out");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string cmd = "exec '" + std::string(TRAIN_EXE) + "' " +
                            small("--steps 1000000 --save '" + ck + "'") + " >'" + out + "' 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait for a few steps, then interrupt.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (read_whole_file(out).find(" 3/1000000 ") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const std::string log = read_whole_file(out);
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 130) << log;
  EXPECT_NE(log.find("stopped by SIGINT after step "), std::string::npos) << log;
  EXPECT_NE(log.find("stopped: "), std::string::npos) << "the summary is printed:\n" << log;
  EXPECT_NE(log.find("to continue: "), std::string::npos) << log;
  EXPECT_NE(log.find(" --resume " + ck), std::string::npos) << log;
  ASSERT_TRUE(exists(ck)) << log;
  const int64_t k = std::stoll(safetensors_load(ck).metadata.at("step"));
  ASSERT_GE(k, 3);
  ASSERT_LT(k, 1000000);
  const std::string steps = " --steps " + std::to_string(k + 2);
  ASSERT_EQ(run(TRAIN_EXE, small(steps + " --resume '" + ck + "' --save '" + path("a.safetensors") + "'")).code, 0);
  ASSERT_EQ(run(TRAIN_EXE, small(steps + " --save '" + path("b.safetensors") + "'")).code, 0);
  const SafeTensorFile a = safetensors_load(path("a.safetensors"));
  const SafeTensorFile b = safetensors_load(path("b.safetensors"));
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i)
    EXPECT_TRUE(a.tensors[i].data == b.tensors[i].data) << a.tensors[i].name;
}

// One key press delivered twice (two signals within kStopGraceSeconds) is one stop: the step
// ends, the checkpoint is written, exit 130.
TEST_F(TrainCli, TwoSignalsWithinTheGracePeriodAreOneStop) {
  const std::string ck = path("stopped.safetensors"), out = path("run.out");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string cmd = "exec '" + std::string(TRAIN_EXE) + "' " +
                            small("--steps 1000000 --save '" + ck + "'") + " >'" + out + "' 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (read_whole_file(out).find(" 2/1000000 ") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::kill(pid, SIGINT);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const std::string log = read_whole_file(out);
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 130) << log;
  EXPECT_EQ(log.find("stopped at once"), std::string::npos) << log;
  EXPECT_TRUE(exists(ck)) << "the checkpoint must survive a doubled key press:\n" << log;
}

// A signal while the solver works (before the first step: nothing to save) stops at once and
// says so, rather than letting the solve run on: here ResNet-50 with a two-minute limit, gone
// long before it, with 128 + SIGTERM and nothing written.
TEST_F(TrainCli, ASignalWhileSolvingStopsAtOnce) {
  const std::string out = path("run.out");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string cmd = "exec '" + std::string(TRAIN_EXE) + "' --config '" + test_source_dir() +
                            "/configs/resnet50.yaml' --batch 2 --budget 400MB --time-limit 120 "
                            "--steps 2 --save '" + path("ck.safetensors") + "' >'" + out + "' 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto start = std::chrono::steady_clock::now();
  while (read_whole_file(out).find("solving:") == std::string::npos &&
         std::chrono::steady_clock::now() < start + std::chrono::seconds(90))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto signalled = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  const std::string log = read_whole_file(out);
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << log;
  EXPECT_LT(waited, 10) << log;
  EXPECT_NE(log.find("stopped by SIGTERM before the first step (while setting up or solving): "
                     "nothing trained, nothing written"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("stopping after this step"), std::string::npos) << log;
  EXPECT_FALSE(exists(path("ck.safetensors"))) << "nothing trained, nothing written";
}

// From the first step on, a second signal (after the grace period) stops at once, without the
// checkpoint: here during a step of several seconds (small_cnn at batch 2048 on one thread).
TEST_F(TrainCli, ASecondSignalDuringAStepStopsAtOnce) {
  const std::string out = path("run.out");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string cmd = "OPENBLAS_NUM_THREADS=1 exec '" + std::string(TRAIN_EXE) +
                            "' --config '" + kSmallCnn + "' --batch 2048 --steps 1000 --save '" +
                            path("ck.safetensors") + "' >'" + out + "' 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto start = std::chrono::steady_clock::now();
  while (read_whole_file(out).find("step    1/1000 ") == std::string::npos &&
         std::chrono::steady_clock::now() < start + std::chrono::seconds(120))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // past kStopGraceSeconds
  ::kill(pid, SIGINT);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const std::string log = read_whole_file(out);
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 130) << log;
  if (log.find("stopped by SIGINT after step") != std::string::npos)
    GTEST_SKIP() << "the step ended within 1.2 s: the second signal came after the stop";
  EXPECT_NE(log.find("stopping after this step"), std::string::npos) << log;
  EXPECT_NE(log.find("stopped at once (second signal)"), std::string::npos) << log;
  EXPECT_FALSE(exists(path("ck.safetensors"))) << log;
}

// The second signal ends the process at once, and the temporary of a write in progress goes
// with it (Note [temporary files at exit]): here a forked child holds a registered PATH.tmp,
// as write_file_atomic does while it writes, when the second signal comes.
TEST(StopSignal, TheSecondSignalRemovesTheTemporaryBeingWritten) {
  char dir[] = "/tmp/remat_stop_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string tmp = std::string(dir) + "/ck.safetensors.tmp";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    StopSignals handlers(StopMessages::None);
    stop_signals_graceful();
    const TemporaryInProgress in_progress(tmp);
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f || std::fputs("half a checkpoint", f) < 0 || std::fflush(f) != 0) ::_exit(90);
    ::raise(SIGTERM);  // the first: a flag
    if (stop_signal_received() != SIGTERM) ::_exit(91);
    ::usleep(static_cast<useconds_t>((kStopGraceSeconds + 0.2) * 1e6));
    ::raise(SIGTERM);  // the second: at once
    ::_exit(92);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  EXPECT_FALSE(exists(tmp)) << tmp << " was left behind";
  std::system(("rm -rf '" + std::string(dir) + "'").c_str());
}

// A run that a signal stopped returns through the handlers' destructor to its exit with
// 128 + the signal; the same key press delivered again on that way (within kStopGraceSeconds)
// must not kill it: `train` once died of the second SIGINT after writing its checkpoint and
// printing its summary.
TEST(StopSignal, ASecondDeliveryAfterTheRunEndedIsStillOneStop) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    {
      StopSignals handlers(StopMessages::None);
      stop_signals_graceful();
      ::raise(SIGINT);  // the first: a flag
      if (stop_signal_received() != SIGINT) ::_exit(91);
    }  // the run ends
    ::raise(SIGINT);  // the same key press, again
    ::_exit(128 + SIGINT);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT);
}

}  // namespace
}  // namespace remat
