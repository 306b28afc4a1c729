// The README's commands run as written (issue 26): every command line of its code blocks — the
// quick start, data parallel on CPU ranks — is run from a scratch directory that looks like the
// repository root (configs/ and build/tools/ linked in), and must exit 0. Only these are not
// run, each class named: commands for a GPU (`--device cuda`), `mpirun -H` across other hosts,
// and the setup scripts (the two commands themselves, which CI runs, and the portable build and
// GPU verification, which run on a GPU machine); and runs of minutes, which the README puts in
// ```sh fenced blocks and says so beside them (the tests of those paths run them small). As root, OpenMPI needs `--allow-run-as-root`
// and more ranks than cores `--oversubscribe` (the README says so): they are added after
// `mpirun` then.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/source_dir.h"
#include "tests/tool_runner.h"

namespace remat {
namespace {

struct Command {
  int line;
  std::string text;
};

// Lines of 4-space-indented code blocks that start with a command of ours.
std::vector<Command> readme_commands() {
  std::ifstream f(test_source_dir() + "/README.md");
  std::vector<Command> out;
  std::string l;
  int n = 0;
  bool fence = false;
  while (std::getline(f, l)) {
    ++n;
    if (l.rfind("```", 0) == 0) fence = !fence;
    if (fence || l.rfind("    ", 0) != 0) continue;
    const std::string c = l.substr(4);
    for (const char* start : {"build/tools/", "mpirun ", "bash tools/", "tools/"})
      if (c.rfind(start, 0) == 0) out.push_back({n, c});
  }
  return out;
}

// Why a command is not run here, or "" when it is.
std::string not_run(const std::string& c) {
  if (c.find("--device cuda") != std::string::npos) return "a GPU command";
  if (c.rfind("mpirun -H", 0) == 0) return "ranks on other hosts";
  if (c.rfind("bash tools/run_", 0) == 0) return "the two commands (CI runs them)";
  if (c.rfind("tools/scripts/", 0) == 0) return "a script for the GPU machine";
  return "";
}

class Readme : public ToolRunTest {};

TEST_F(Readme, EveryCommandRunsAsWritten) {
  const std::vector<Command> commands = readme_commands();
  ASSERT_GE(commands.size(), 8u) << "the README's code blocks lost their commands";
  ASSERT_EQ(::symlink((test_source_dir() + "/configs").c_str(), path("configs").c_str()), 0);
  ASSERT_EQ(::mkdir(path("build").c_str(), 0755), 0);
  ASSERT_EQ(::symlink(TOOLS_DIR, path("build/tools").c_str()), 0);
  const bool root = ::geteuid() == 0;
  int ran = 0;
  for (const Command& c : commands) {
    SCOPED_TRACE("README.md:" + std::to_string(c.line) + ": " + c.text);
    if (!not_run(c.text).empty()) continue;
    std::string cmd = c.text;
    if (cmd.rfind("mpirun ", 0) == 0) {
      if (std::string(MPIEXEC).empty()) continue;  // a build without MPI
      cmd = std::string("'") + MPIEXEC + "' " + (root ? "--allow-run-as-root --oversubscribe " : "") +
            cmd.substr(7);
    }
    {
      std::ofstream script(path("command.sh"));
      script << "cd '" << dir_ << "' && " << cmd << "\n";
    }
    const RunResult r = run("/bin/sh", "'" + path("command.sh") + "'");
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    ++ran;
  }
  EXPECT_GE(ran, 7) << "the quick start's commands are not all run";
}

}  // namespace
}  // namespace remat
