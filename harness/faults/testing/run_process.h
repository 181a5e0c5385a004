#pragma once
// Test helper: runs a program with extra environment, captures stdout and stderr, and reports how it ended.

#include <chrono>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "harness/testing/cli.h"

namespace peerlab::faults::testing {

/// How a program ended and what it printed.
struct ProcessResult : ::peerlab::testing::CliRun {
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

/// Runs argv with the parent's environment changed by `env` (KEY=VALUE sets, a bare KEY removes the variable), with
/// stdout and stderr captured. Stops it after `timeout`.
inline ProcessResult runProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  return {::peerlab::testing::runCommand(argv, env, timeout, std::chrono::milliseconds(200))};
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
