#pragma once
/// Running programs from tests: a command with its output captured (no shell), the built `peerlab` binary, and small
/// checks on what it printed.

#include <chrono>
#include <string>
#include <vector>

#include "reference/testing/temp_dir.h"  // readFile, TempDir: what a test reads back from a run

namespace peerlab::testing {

/// What a program did: its exit code (-1 when it did not exit on its own or could not start), stdout and stderr.
struct CliRun {
  int exit_code = -1;
  int signal = 0;          ///< the signal that ended it, when one did
  bool timed_out = false;  ///< stopped at the deadline
  std::string out;
  std::string err;
};

/// Runs `argv` (argv[0] a path or a name in PATH) with `env` ("KEY=VALUE" added, a bare "KEY" removed) in its own
/// process group under a deadline. A program that cannot start gives exit_code -1 and the reason in `err`.
CliRun runCommand(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
                  std::chrono::milliseconds timeout = std::chrono::seconds(120),
                  std::chrono::milliseconds kill_grace = std::chrono::seconds(3));

/// Runs the built `peerlab` binary with `args`: the test target defines PEERLAB_BINARY (its path).
#ifdef PEERLAB_BINARY
inline CliRun runPeerlab(std::vector<std::string> args, const std::vector<std::string>& env = {}) {
  args.insert(args.begin(), PEERLAB_BINARY);
  return runCommand(args, env);
}
#endif

/// A fresh, empty directory under the temp dir named after `name` and this process; left in place after the test so
/// its files can be looked at.
std::string scratchDir(const std::string& name);

/// Number of lines in `text` (a trailing newline ends the last line).
int lineCount(const std::string& text);

}  // namespace peerlab::testing
