// RunCommand: runs a shell command line to completion and captures what it
// printed, for tests of the command-line programs (test-only).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace kvidx::testing {

struct CommandResult {
  int exit_code = -1;  // -1 if it could not run or did not exit normally
  std::string out;     // stdout (and stderr with Stderr::kMerge)
  std::string err;     // stderr with Stderr::kCapture
};

// Where the command's stderr goes.
enum class Stderr { kCapture, kMerge, kDiscard };

// Runs `command` through /bin/sh (it must quote its own arguments).
inline CommandResult RunCommand(const std::string& command, Stderr stderr_to = Stderr::kCapture) {
  const std::string err_path = ::testing::TempDir() + "/kvidx_test_stderr_" + std::to_string(getpid());
  std::string cmd = command;
  switch (stderr_to) {
    case Stderr::kCapture: cmd += " 2>" + err_path; break;
    case Stderr::kMerge: cmd += " 2>&1"; break;
    case Stderr::kDiscard: cmd += " 2>/dev/null"; break;
  }
  CommandResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (stderr_to == Stderr::kCapture) {
    std::ifstream in(err_path);
    std::stringstream ss;
    ss << in.rdbuf();
    r.err = ss.str();
    std::remove(err_path.c_str());
  }
  return r;
}

}  // namespace kvidx::testing
