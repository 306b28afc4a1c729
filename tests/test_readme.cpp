// The documentation's commands run as written: every command line of the code blocks of README.md
// and of every .md under docs/ (the quick start, the guides' examples, data parallel on CPU ranks)
// is run from a scratch directory that looks like the repository root (configs/, tools/ and
// build/tools/ linked in; a fresh one per file, so each page's commands need only the page's
// earlier ones), and must exit 0. Only these are not run, each class named: commands for a GPU
// (`--device cuda`), `mpirun -H` across other hosts, and the setup scripts (the two commands
// themselves, which CI runs, and the portable build and GPU verification, which run on a GPU
// machine); and runs of minutes, which the pages put in ```sh fenced blocks and say so beside
// them (the tests of those paths run them small). As root, OpenMPI needs `--allow-run-as-root`
// and more ranks than cores `--oversubscribe` (the data-parallel guide says so): they are added
// after `mpirun` then.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
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

// Lines of 4-space-indented code blocks of `file` that start with a command of ours.
std::vector<Command> page_commands(const std::string& file) {
  std::ifstream f(file);
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

// README.md, then every .md under docs/ in path order (relative to the repository root).
std::vector<std::string> pages() {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(test_source_dir() + "/docs"))
    if (e.is_regular_file() && e.path().extension() == ".md")
      out.push_back(fs::relative(e.path(), test_source_dir()).string());
  std::sort(out.begin(), out.end());
  out.insert(out.begin(), "README.md");
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

// The pages' commands run in kShards tests, page k in shard k % kShards (README.md in shard 0),
// so that ctest runs them side by side; each shard reads the pages when it runs, so a new page is
// covered without a new test.
constexpr int kShards = 4;

bool runnable(const Command& c) { return not_run(c.text).empty(); }

TEST(ReadmePages, CommandsAreThere) {
  const std::vector<std::string> files = pages();
  ASSERT_GE(files.size(), 10u) << "docs/ lost its pages";
  const std::vector<Command> readme = page_commands(test_source_dir() + "/README.md");
  ASSERT_GE(readme.size(), 8u) << "the README's code blocks lost their commands";
  EXPECT_GE(std::count_if(readme.begin(), readme.end(), runnable), 7)
      << "the quick start's commands are not all run";
  int commands = 0;
  for (const std::string& f : files) {
    const std::vector<Command> cs = page_commands(test_source_dir() + "/" + f);
    commands += static_cast<int>(std::count_if(cs.begin(), cs.end(), runnable));
  }
  EXPECT_GE(commands, 20) << "the guides' commands are not all run";
}

class Readme : public ToolRunTest, public ::testing::WithParamInterface<int> {};

TEST_P(Readme, EveryCommandRunsAsWritten) {
  const std::vector<std::string> files = pages();
  const bool root = ::geteuid() == 0;
  for (size_t p = static_cast<size_t>(GetParam()); p < files.size(); p += kShards) {
    // A directory per page that looks like the repository root.
    const std::string page = path("page" + std::to_string(p));
    ASSERT_EQ(::mkdir(page.c_str(), 0755), 0);
    for (const char* link : {"configs", "tools"})
      ASSERT_EQ(::symlink((test_source_dir() + "/" + link).c_str(), (page + "/" + link).c_str()), 0);
    ASSERT_EQ(::mkdir((page + "/build").c_str(), 0755), 0);
    ASSERT_EQ(::symlink(TOOLS_DIR, (page + "/build/tools").c_str()), 0);
    for (const Command& c : page_commands(test_source_dir() + "/" + files[p])) {
      SCOPED_TRACE(files[p] + ":" + std::to_string(c.line) + ": " + c.text);
      if (!runnable(c)) continue;
      std::string cmd = c.text;
      if (cmd.rfind("mpirun ", 0) == 0) {
        if (std::string(MPIEXEC).empty()) continue;  // a build without MPI
        cmd = std::string("'") + MPIEXEC + "' " +
              (root ? "--allow-run-as-root --oversubscribe " : "") + cmd.substr(7);
      }
      {
        std::ofstream script(path("command.sh"));
        script << "cd '" << page << "' && " << cmd << "\n";
      }
      const RunResult r = run("/bin/sh", "'" + path("command.sh") + "'");
      EXPECT_EQ(r.code, 0) << r.out << r.err;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shards, Readme, ::testing::Range(0, kShards));

}  // namespace
}  // namespace remat
