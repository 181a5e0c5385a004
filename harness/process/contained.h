#pragma once
/// Runs a function in a disposable child process (fork, no exec) so that a crash or a hang inside a library that
/// trusts its input (hwloc's XML importer) ends the child, not the caller. Only for code paths that have not
/// initialized CUDA.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>

#include "reference/core/deadline.h"
#include "reference/core/status.h"

namespace peerlab::process {

/// How the child ended; it is always reaped before runContained returns.
struct ContainedEnd {
  enum class Kind { kExited, kSignaled, kTimedOut };
  Kind kind = Kind::kExited;
  int exit_code = -1;  ///< kExited: the function's return value (0-255)
  int signal = 0;      ///< kSignaled: the signal that ended the child
  pid_t pid = -1;      ///< the child (already reaped)
  int64_t elapsed_ms = 0;

  bool exitedWith(int code) const { return kind == Kind::kExited && exit_code == code; }
  /// "exited with status 3", "crashed with SIGSEGV", "did not finish within 5000 ms (stopped)"
  std::string describe() const;
};

/// Calls `body` in a forked child and returns how the child ended. The child gets default handlers for the crash
/// signals, no core file, stderr on /dev/null, and dies with the caller; past `deadline` it is killed (SIGKILL).
/// `body` must not start threads or touch CUDA; its return value is the child's exit status.
StatusOr<ContainedEnd> runContained(const std::function<int()>& body, Deadline deadline);

}  // namespace peerlab::process
