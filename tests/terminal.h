// What a person at a terminal sees: a command run on a pseudo-terminal, and the screen its
// output leaves (carriage returns, erases and overwrites applied), for the tests of live lines.
#pragma once

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/tool_runner.h"

namespace remat {

// The lines a terminal shows after `bytes`: '\r' returns to the line's start, '\n' goes to the
// next line, ESC[K erases to the end of the line, other ESC[...x sequences are ignored, and any
// other character overwrites the one under the cursor. A line longer than `columns` wraps.
inline std::vector<std::string> terminal_screen(const std::string& bytes, size_t columns = 1000) {
  std::vector<std::string> lines(1);
  size_t row = 0, col = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (c == '\r') {
      col = 0;
    } else if (c == '\n') {
      ++row, col = 0;
      if (row == lines.size()) lines.emplace_back();
    } else if (c == '\033' && i + 1 < bytes.size() && bytes[i + 1] == '[') {
      size_t j = i + 2;
      while (j < bytes.size() && !(bytes[j] >= '@' && bytes[j] <= '~')) ++j;
      if (j < bytes.size() && bytes[j] == 'K') lines[row].resize(std::min(lines[row].size(), col));
      i = j;
    } else {
      if (col == columns) {  // wrap
        ++row, col = 0;
        if (row == lines.size()) lines.emplace_back();
      }
      std::string& l = lines[row];
      if (l.size() <= col) l.resize(col + 1, ' ');
      l[col++] = c;
    }
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

// Runs `command` through /bin/sh with stdin, stdout and stderr on a pseudo-terminal `columns`
// wide; returns its exit status and everything it wrote (in `out`). Killed after
// `limit_seconds`.
inline RunResult run_in_terminal(const std::string& command, unsigned short columns = 200,
                                 int limit_seconds = 120) {
  RunResult r;
  struct winsize ws {};
  ws.ws_row = 50;
  ws.ws_col = columns;
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, &ws);
  if (pid < 0) return r;
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(limit_seconds);
  for (;;) {
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      char buf[4096];
      const ssize_t n = ::read(master, buf, sizeof buf);
      if (n <= 0) break;  // EIO: the command and its children have closed the terminal
      r.out.append(buf, static_cast<size_t>(n));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      break;
    }
  }
  ::close(master);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace remat
