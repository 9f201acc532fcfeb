// One child process started the way kvidx's tools and tests need it: stdin
// from /dev/null, stdout and stderr into files, no signals blocked or
// ignored (the parent's test runner may have blocked some), the parent's
// environment. The caller owns the pid: it must reap (waitpid) it.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/types.h>

#include <cstring>
#include <string>
#include <vector>

#include "base/status.h"

extern char** environ;

namespace kvidx {

// Errors: posix_spawn failed (e.g. argv[0] does not exist), named with it.
inline Result<pid_t> SpawnProcess(const std::vector<std::string>& argv, const std::string& out_path,
                                  const std::string& err_path) {
  if (argv.empty()) return Status::InvalidArgument("spawn: no program");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGHUP, SIGINT, SIGTERM, SIGPIPE}) sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Status::Unavailable("posix_spawn " + argv[0] + ": " + std::strerror(rc));
  return pid;
}

}  // namespace kvidx
