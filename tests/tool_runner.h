// Test fixtures with a scratch directory removed at the end, and running the command-line tools
// as processes in it (each run's exit code, stdout and stderr).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace remat {

struct RunResult {
  int code = -1;  // the exit status, -1 when killed by a signal
  std::string out, err;
};

inline std::string read_whole_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A test fixture owning a fresh directory under /tmp, removed with its contents at the end.
class ScratchDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/remat_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // Each test's own OpenMPI session directory: two mpiruns started at once (ctest -j) race to
    // create the shared /tmp/ompi.HOST.UID, and one failed with "File exists" (2026-11-30).
    ::setenv("OMPI_MCA_orte_tmpdir_base", dir_.c_str(), 1);
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  std::string dir_;
};

// ScratchDirTest that runs the tools.
class ToolRunTest : public ScratchDirTest {
 protected:
  // Runs `exe args` through the shell (args are shell words: quote paths) with `prefix` before
  // it (e.g. "ulimit -f 1;"), capturing its output in the scratch directory.
  RunResult run(const std::string& exe, const std::string& args, const std::string& prefix = "") {
    RunResult r;
    const std::string out = dir_ + "/stdout.txt", err = dir_ + "/stderr.txt";
    const std::string cmd =
        "(" + prefix + " '" + exe + "' " + args + ") >'" + out + "' 2>'" + err + "'";
    int status = std::system(cmd.c_str());
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read_whole_file(out);
    r.err = read_whole_file(err);
    return r;
  }
};

}  // namespace remat
