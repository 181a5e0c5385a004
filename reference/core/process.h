#pragma once
/// Child processes: spawn (argv, environment changes, working directory, output to files or /dev/null, own process
/// group, inherited descriptors), wait with a deadline, kill (SIGTERM, then SIGKILL after a grace period, the whole
/// group), and reap on every path: by the owner, and by the interrupt handlers when this process is interrupted.
/// runProcess runs one program to completion under a deadline; ExitStatus and signalName describe how a child ended.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reference/core/deadline.h"
#include "reference/core/owned.h"
#include "reference/core/status.h"

namespace peerlab::process {

/// "SIGSEGV" ("signal 70" for an unnamed number).
std::string signalName(int sig);
/// "SIGSEGV (Segmentation fault)".
std::string signalText(int sig);

/// How a child ended.
struct ExitStatus {
  bool exited = false;  ///< exited on its own, with `code`
  int code = 0;
  int signal = 0;  ///< killed by this signal
  bool core = false;
  bool lost = false;  ///< reaped elsewhere (SIGCHLD ignored or another waitpid): how it ended is unknown

  bool success() const { return exited && code == 0; }
  /// "exited with code 7", "killed by SIGSEGV (Segmentation fault)", "killed by SIGKILL (Killed)", "was reaped
  /// elsewhere (how it ended is unknown)".
  std::string describe() const;
};
/// Decodes a waitpid(2) status.
ExitStatus decodeWaitStatus(int status);

struct SpawnOptions {
  std::vector<std::string> argv;  ///< argv[0] is the program: a path, or a name looked up in PATH
  /// Changes to this process's environment: "KEY=VALUE" adds or replaces, a bare "KEY" removes.
  std::vector<std::string> env;
  /// The child starts from an empty environment: only the "KEY=VALUE" entries of `env`, nothing of this process's.
  bool clear_env = false;
  std::string cwd;          ///< "" keeps this process's
  std::string stdout_path;  ///< "" inherits stdout; the file is created or truncated
  std::string stderr_path;  ///< "" inherits stderr; equal to stdout_path: both into one file
  bool null_stdin = false;
  bool null_stdout = false;       ///< ignored when stdout_path is set
  bool null_stderr = false;       ///< ignored when stderr_path is set
  bool own_process_group = true;  ///< the child leads a new process group (terminal signals go to the parent only)
  /// Descriptors of this process handed to the child: {descriptor here, number in the child}.
  std::vector<std::pair<int, int>> inherit_fds;
};

/// Owner of a child process id: destroying it kills the child (SIGKILL) and reaps it.
struct ProcessTraits {
  using Handle = pid_t;
  static Handle null() noexcept { return -1; }
  static bool isNull(Handle h) noexcept { return h <= 0; }
  static void destroy(Handle h) noexcept;
};

/// A child process, reaped on every path.
class Child {
 public:
  Child() = default;
  Child(Child&&) noexcept = default;
  Child& operator=(Child&&) noexcept = default;

  /// Starts the child. Fails with `invalid_argument` when argv is empty or an output file cannot be written, and
  /// with `unavailable` when the program cannot be run (the message names it).
  static StatusOr<Child> spawn(const SpawnOptions& options);
  /// Takes charge of a child this process forked itself (registered for the interrupt handlers from now on).
  static Child adopt(pid_t pid, bool own_process_group);

  pid_t pid() const { return pid_ ? pid_.get() : exited_pid_; }
  /// True while the child runs; reaps it (and remembers how it ended) once it has exited.
  bool isAlive();
  /// How the child ended, once reaped.
  const std::optional<ExitStatus>& exitStatus() const { return exit_; }
  /// Waits for the child to exit on its own until `deadline` (`timeout` if it is still running then).
  StatusOr<ExitStatus> wait(Deadline deadline);
  /// SIGTERM, then SIGKILL when it has not exited after `grace`; reaps it. Returns how it ended (an already reaped
  /// child returns its recorded status). Waits at most `grace` + 30 s for a child stuck in the kernel.
  ExitStatus kill(std::chrono::milliseconds grace = std::chrono::milliseconds(200));
  /// Sends `sig` to the running child (and its group when it leads one).
  void signal(int sig);
  /// SIGKILL to what is left of the child's process group once the child itself is reaped (descendants it left).
  void killGroupRemnants();

 private:
  Owned<ProcessTraits> pid_;
  pid_t exited_pid_ = -1;
  bool own_group_ = false;
  std::optional<ExitStatus> exit_;
  void reaped(int status);
};

/// Installs SIGINT, SIGTERM and SIGHUP handlers that kill and reap every live child of this process, then end it
/// with the same signal. Idempotent.
void installInterruptHandlers();
/// Children spawned (or adopted) by this process and not reaped yet.
int liveChildren();

/// While one exists, SIGINT and SIGTERM of this process are recorded instead of ending it, so that the code running
/// children can stop them first; the previous handlers come back when the last scope ends.
class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

  /// The last SIGINT or SIGTERM received while a scope was open (0 for none), cleared when the first scope opens.
  static int pendingSignal();
};
/// True once this process received SIGINT or SIGTERM inside an InterruptScope (runProcess opens one).
bool interruptRequested();

struct ProcessOptions {
  std::vector<std::string> argv;  ///< argv[0] is a path, or a name looked up in PATH
  std::vector<std::string> env;   ///< as SpawnOptions::env
  bool clear_env = false;         ///< as SpawnOptions::clear_env
  std::string stdout_path;        ///< "" inherits stdout
  std::string stderr_path;        ///< "" inherits stderr; may equal stdout_path (both into one file)
  std::string cwd;                ///< "" keeps this process's
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds kill_grace{std::chrono::seconds(3)};  ///< SIGTERM to SIGKILL
  std::function<void()> tick;  ///< called about 5 times a second while the child runs (progress display)
};

struct ProcessResult {
  int exit_code = -1;  ///< valid when the child exited
  int signal = 0;      ///< the signal that ended it, when one did
  bool timed_out = false;
  bool interrupted = false;  ///< this process got SIGINT/SIGTERM and stopped the child
  double wall_s = 0;
  bool ok() const { return !timed_out && !interrupted && signal == 0 && exit_code == 0; }
};

/// Runs the child in its own process group to completion or the deadline (or an interrupt), then kills what is left
/// of the group. `unavailable` when the program cannot be started (not found, not executable): the message names it.
StatusOr<ProcessResult> runProcess(const ProcessOptions& options);

/// "exit code 3", "killed by signal 9 (Killed)", "exceeded its deadline of 120 s and was killed", "interrupted".
std::string describeExit(const ProcessResult& result, std::chrono::milliseconds timeout);

}  // namespace peerlab::process
