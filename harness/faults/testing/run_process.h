#pragma once
// Test helper: runs a program with extra environment, captures stdout and stderr, and reports how it ended.

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

extern char** environ;

namespace peerlab::faults::testing {

struct ProcessResult {
  int exit_code = -1;  ///< when it exited
  int signal = 0;      ///< when a signal ended it
  bool timed_out = false;
  std::string out;
  std::string err;
  /// key=value lines of stdout.
  std::map<std::string, std::string> values() const {
    std::map<std::string, std::string> kv;
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line)) {
      auto eq = line.find('=');
      if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return kv;
  }
};

/// Runs argv with the parent's environment plus `env` (KEY=VALUE; an empty VALUE after '=' removes nothing, a
/// bare KEY removes the variable). Kills it after `timeout`.
inline ProcessResult runProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  std::map<std::string, std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& kv : env) {
    auto eq = kv.find('=');
    if (eq == std::string::npos) {
      vars.erase(kv);
    } else {
      vars[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : vars)
    env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings)
    envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy)
    args.push_back(s.data());
  args.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  ProcessResult result;
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) return result;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    result.err = std::string("spawn failed: ") + std::strerror(rc);
    return result;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[4096];
  while (open_fds > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      kill(pid, SIGKILL);
      result.timed_out = true;
      break;
    }
    if (poll(fds, 2, static_cast<int>(left.count())) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP)) == 0) continue;
      const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? result.out : result.err).append(buf, static_cast<size_t>(n));
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

/// LD_PRELOAD with `lib` appended to what is there (a sanitizer's own preload stays).
inline std::string preloadWith(const std::string& lib) {
  const char* cur = std::getenv("LD_PRELOAD");
  return "LD_PRELOAD=" + (cur != nullptr && *cur != '\0' ? std::string(cur) + ":" : std::string()) + lib;
}

/// Runs `program args...` with the interposer `faults_lib` preloaded and PEERLAB_FAULT=`fault` (none when empty),
/// inherited PEERLAB_RANK / PEERLAB_FAULTS_VERBOSE / PEERLAB_FAULTS_STATS removed, then `env` applied last.
inline ProcessResult runUnderFault(const std::string& program, const std::string& faults_lib,
                                   const std::vector<std::string>& args, const std::string& fault,
                                   const std::vector<std::string>& env = {},
                                   std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  std::vector<std::string> argv = {program};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> all = {"PEERLAB_RANK", "PEERLAB_FAULTS_VERBOSE", "PEERLAB_FAULTS_STATS",
                                  preloadWith(faults_lib)};
  if (!fault.empty()) all.push_back("PEERLAB_FAULT=" + fault);
  all.insert(all.end(), env.begin(), env.end());
  return runProcess(argv, all, timeout);
}

}  // namespace peerlab::faults::testing

/// Expects the key=value line `key` of a ProcessResult's stdout to read `expected`; shows both streams otherwise.
#define EXPECT_VALUE(result, key, expected)                                                                           \
  do {                                                                                                                \
    auto peerlab_values_ = (result).values();                                                                         \
    EXPECT_EQ(peerlab_values_[key], expected) << key << "\nstdout:\n" << (result).out << "stderr:\n" << (result).err; \
  } while (0)
