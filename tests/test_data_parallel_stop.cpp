// How a data-parallel `train` ends when it does not run to the end: stopped by a signal (Note
// [stopping a data-parallel job]) — every rank after the same step, even when one rank alone is
// signalled, the checkpoint written, one message, the command that continues it with its
// launcher, no MPI_Abort — a usage error or ranks started differently, said once; a killed rank
// ends the job. Each fault ends the job within 30 s.
#include <gtest/gtest.h>

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/io/safetensors.h"
#include "tests/source_dir.h"
#include "tests/tool_runner.h"

namespace remat {
namespace {

int count_of(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// The processes whose parent is `parent` (mpirun's ranks).
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::string(e->d_name) + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');  // "pid (name) state ppid ..."
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == parent)
      out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

class DataParallelStop : public ScratchDirTest {
 protected:
  // mpirun -np 2 (as root, more ranks than cores) train on small_cnn at batch 4, until stopped,
  // printing steps 1, 100, 200, ... (`log_every`; 0: the default, every step, which fills
  // mpirun's buffers after Ctrl-C: Note [output of a stopping rank]).
  std::string job(int log_every = 100) const {
    return std::string("exec '") + MPIEXEC + "' --allow-run-as-root --oversubscribe -np 2 '" +
           TRAIN_EXE + "' --config '" + test_source_dir() +
           "/configs/small_cnn.yaml' --batch 4 --steps 1000000" +
           (log_every > 0 ? " --log-every " + std::to_string(log_every) : std::string()) +
           " --save '" + path("ck.safetensors") + "'";
  }
  // Starts `cmd` with its output in files; returns its pid.
  pid_t start(const std::string& cmd) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const std::string full = cmd + " >'" + path("out.txt") + "' 2>'" + path("err.txt") + "'";
      ::execl("/bin/sh", "sh", "-c", full.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    return pid;
  }
  // Waits for `part` in the job's stdout (false after two minutes).
  bool wait_for(const std::string& part) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (read_whole_file(path("out.txt")).find(part) == std::string::npos) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }
  // The job (job()) started and past its first step; its ranks' pids in `ranks`.
  pid_t start_training(std::vector<pid_t>* ranks) {
    const pid_t pid = start(job());
    if (!wait_for(" 1/1000000 ")) return pid;
    *ranks = children_of(pid);
    return pid;
  }
  // The job's exit code after it ends (a kill after two minutes: -1).
  int finish(pid_t pid) {
    int status = 0;
    for (int i = 0; i < 1200 && ::waitpid(pid, &status, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (::waitpid(pid, &status, WNOHANG) == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  // What every stop must show: one report on stdout after the same step on every rank (the
  // checkpoint's), the command that continues it under mpirun, no abort, no per-rank messages.
  void expect_a_clean_stop(const std::string& signal) {
    const std::string out = read_whole_file(path("out.txt")), err = read_whole_file(path("err.txt"));
    EXPECT_EQ(count_of(out, "stopped by " + signal + " after step "), 1) << out << err;
    EXPECT_NE(out.find("to continue: mpirun -np 2 " + std::string(TRAIN_EXE) + " "),
              std::string::npos)
        << out;
    EXPECT_EQ(err.find("MPI_ABORT"), std::string::npos) << err;
    EXPECT_EQ(err.find("ORTE_ERROR_LOG"), std::string::npos) << err;
    EXPECT_EQ(err.find("stopping after this step"), std::string::npos) << err;
    const size_t at = out.find("stopped by " + signal + " after step ");
    ASSERT_NE(at, std::string::npos);
    const long long step = std::atoll(out.c_str() + at + std::string("stopped by " + signal +
                                                                     " after step ").size());
    EXPECT_EQ(safetensors_load(path("ck.safetensors")).metadata.at("step"), std::to_string(step));
    // The bucket count is singular: "gradients in 1 bucket".
    EXPECT_NE(out.find("gradients in 1 bucket "), std::string::npos) << out;
  }
};

// Ctrl-C at mpirun: no MPI_ABORT, one "stopped" line, a `to continue:` line with mpirun's
// rank count. OpenMPI sends the ranks SIGTERM (and SIGKILL a
// second later; a step here takes milliseconds) and exits 1 whatever they do.
TEST_F(DataParallelStop, CtrlCAtMpirunStopsEveryRankAfterTheSameStep) {
  const pid_t pid = start(job());
  ASSERT_TRUE(wait_for(" 1/1000000 ")) << read_whole_file(path("err.txt"));
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  EXPECT_EQ(finish(pid), 1) << "mpirun's own code after Ctrl-C";
  expect_a_clean_stop("SIGTERM");
}

// With a line every step (hundreds a second), mpirun's buffers are full before its SIGTERM
// comes: the ranks drop what does not fit and still write the checkpoint of the step they
// stopped after (Note [output of a stopping rank]); before, they blocked in write(2) until
// mpirun's SIGKILL.
TEST_F(DataParallelStop, CtrlCAtMpirunWritesTheCheckpointWhateverTheOutput) {
  const pid_t pid = start(job(0));
  ASSERT_TRUE(wait_for(" 300/1000000 ")) << read_whole_file(path("err.txt"));
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  EXPECT_EQ(finish(pid), 1) << "mpirun's own code after Ctrl-C";
  ASSERT_TRUE(std::ifstream(path("ck.safetensors")).good()) << read_whole_file(path("err.txt"));
  EXPECT_GE(std::stoll(safetensors_load(path("ck.safetensors")).metadata.at("step")), 300);
}

// The ranks signalled themselves (a scheduler's stop, `kill`): the job ends with 143, as one
// process stopped by SIGTERM does.
TEST_F(DataParallelStop, ASignalToTheRanksEndsTheJobWithTheSingleProcessCode) {
  std::vector<pid_t> ranks;
  const pid_t pid = start_training(&ranks);
  ASSERT_EQ(ranks.size(), 2u) << read_whole_file(path("err.txt"));
  ::kill(ranks[0], SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // a rank a step later than the other
  ::kill(ranks[1], SIGTERM);
  EXPECT_EQ(finish(pid), 128 + SIGTERM);
  expect_a_clean_stop("SIGTERM");
}

// A usage error is the same on every rank: said once, no abort (no MPI_ABORT, no
// "ORTE_ERROR_LOG: Data unpack would read past end of buffer").
TEST_F(DataParallelStop, AUsageErrorIsSaidOnce) {
  const pid_t pid = start(std::string("exec '") + MPIEXEC +
                          "' --allow-run-as-root --oversubscribe -np 2 '" + TRAIN_EXE +
                          "' --config '" + test_source_dir() +
                          "/configs/small_cnn.yaml' --budget 9 MB");
  EXPECT_EQ(finish(pid), 2);
  const std::string err = read_whole_file(path("err.txt"));
  EXPECT_EQ(count_of(err, "error: train: --budget 9: 'MB' is neither a flag nor KEY=VALUE (did "
                          "you mean --budget 9MB?)"),
            1)
      << err;
  EXPECT_EQ(err.find("MPI_ABORT"), std::string::npos) << err;
  EXPECT_EQ(err.find("ORTE_ERROR_LOG"), std::string::npos) << err;
}

// ---- faults: each ends the job within 30 s -------------------------------------------------
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// A scheduler's preemption reaches one rank first, or only one: the stop still reaches every
// rank at the next step boundary, and they all stop after it and save.
TEST_F(DataParallelStop, ASignalToOneRankStopsEveryRank) {
  std::vector<pid_t> ranks;
  const pid_t pid = start_training(&ranks);
  ASSERT_EQ(ranks.size(), 2u) << read_whole_file(path("err.txt"));
  const auto at = std::chrono::steady_clock::now();
  ::kill(ranks[1], SIGTERM);
  EXPECT_EQ(finish(pid), 128 + SIGTERM);
  EXPECT_LT(seconds_since(at), 30);
  expect_a_clean_stop("SIGTERM");
}

// A rank killed outright (the OOM killer, a node lost): mpirun ends the others.
TEST_F(DataParallelStop, AKilledRankEndsTheJob) {
  std::vector<pid_t> ranks;
  const pid_t pid = start_training(&ranks);
  ASSERT_EQ(ranks.size(), 2u) << read_whole_file(path("err.txt"));
  const auto at = std::chrono::steady_clock::now();
  ::kill(ranks[1], SIGKILL);
  const int code = finish(pid);
  EXPECT_NE(code, 0);
  EXPECT_NE(code, -1) << "the job did not end within two minutes";
  EXPECT_LT(seconds_since(at), 30);
}

// Note [ranks agree on the run]: ranks started with different --steps, a --save on one rank
// only, or another data seed would hang or train silently apart; they refuse at start-up, said
// once, with the difference named.
TEST_F(DataParallelStop, RanksThatDisagreeOnTheRunRefuseToStart) {
  const std::string train = std::string("'") + TRAIN_EXE + "' --config '" + test_source_dir() +
                            "/configs/small_cnn.yaml' --batch 4 ";
  const std::string mpmd = std::string("exec '") + MPIEXEC + "' --allow-run-as-root --oversubscribe ";
  struct Case {
    std::string rank0, rank1, said;
  };
  const std::vector<Case> cases = {
      {"--steps 20", "--steps 30", "rank 1: --steps 30 (rank 0: 20)"},
      {"--steps 20 --save '" + path("s.st") + "'", "--steps 20",
       "rank 1: --save not given (rank 0: " + path("s.st") + ")"},
      {"--steps 20", "--steps 20 data.seed=3", "rank 1: data.seed 3 (rank 0: 7)"},
  };
  for (const Case& c : cases) {
    const auto at = std::chrono::steady_clock::now();
    const pid_t pid = start(mpmd + "-np 1 " + train + c.rank0 + " : -np 1 " + train + c.rank1);
    EXPECT_EQ(finish(pid), 2) << c.rank1;
    EXPECT_LT(seconds_since(at), 30) << c.rank1;
    const std::string err = read_whole_file(path("err.txt"));
    EXPECT_EQ(count_of(err, "error: ranks disagree on the run (every rank must be started with "
                            "the same config, overrides and flags): " + c.said),
              1)
        << err;
    EXPECT_EQ(err.find("MPI_ABORT"), std::string::npos) << err;
    EXPECT_EQ(read_whole_file(path("out.txt")).find("step 1/"), std::string::npos);
    EXPECT_FALSE(std::ifstream(path("s.st")).good());
  }
}

}  // namespace
}  // namespace remat
