#pragma once
/// Watched child processes: spawn a child with argv and environment, talk to it over a message channel
/// (SOCK_SEQPACKET socketpair: message boundaries kept, file descriptors passed with SCM_RIGHTS), receive with a
/// deadline, check whether it is alive, kill it (SIGTERM, then SIGKILL after a grace period), reap it and describe
/// how it ended. Every child is reaped on every path: by its owner, and by the interrupt handlers when this process
/// is interrupted.
///
/// The child end of the channel is descriptor 3 in the child, named in PEERLAB_WATCHDOG_FD; the child calls
/// attachToParent(), which also arranges for it to die with its parent.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "reference/core/deadline.h"
#include "reference/core/fd.h"
#include "reference/core/owned.h"
#include "reference/core/status.h"

namespace peerlab::watchdog {

inline constexpr size_t kMaxMessageBytes = 128 * 1024;
inline constexpr size_t kMaxMessageFds = 64;
inline constexpr int kChildChannelFd = 3;
inline constexpr const char* kEnvChannelFd = "PEERLAB_WATCHDOG_FD";
inline constexpr const char* kEnvParentPid = "PEERLAB_WATCHDOG_PARENT";

/// A received message: its bytes and the descriptors that came with it (owned by the receiver).
struct Message {
  std::vector<uint8_t> bytes;
  std::vector<Fd> fds;
};

/// One end of a message channel. receive() fails with `timeout` when the deadline passes, with `unavailable` when
/// the peer closed its end (or died), and with `internal` for a malformed transfer (message too large, descriptors
/// truncated) or a system error.
class Channel {
 public:
  Channel() = default;
  explicit Channel(Fd fd) : fd_(std::move(fd)) {}

  /// A connected pair of channel ends (close-on-exec).
  static StatusOr<std::pair<Channel, Channel>> pair();

  /// Sends one message (1 to kMaxMessageBytes bytes) with `fds` (duplicated into the receiver).
  Status send(std::span<const uint8_t> bytes, Deadline deadline, std::span<const int> fds = {});
  /// Waits for one message until `deadline`.
  StatusOr<Message> receive(Deadline deadline);

  bool valid() const { return static_cast<bool>(fd_); }
  int fd() const { return fd_.get(); }
  void close() { fd_.reset(); }

 private:
  Fd fd_;
};

/// How a child ended.
struct ExitStatus {
  bool exited = false;  ///< exited on its own, with `code`
  int code = 0;
  int signal = 0;  ///< killed by this signal
  bool core = false;

  bool success() const { return exited && code == 0; }
  /// "exited with code 7", "killed by SIGSEGV (Segmentation fault)", "killed by SIGKILL (Killed)".
  std::string describe() const;
};
/// Decodes a waitpid(2) status.
ExitStatus decodeWaitStatus(int status);

struct SpawnOptions {
  std::vector<std::string> argv;  ///< argv[0] is the program: a path, or a name looked up in PATH
  std::vector<std::string> env;   ///< KEY=VALUE entries added to (or replacing in) this process's environment
  bool channel = true;            ///< give the child a channel end at descriptor kChildChannelFd
  bool null_stdin = true;
  bool null_stdout = false;
  bool null_stderr = false;
  bool own_process_group = true;  ///< the child leads a new process group (terminal signals go to the parent only)
};

/// Owner of a child process id: destroying it kills the child (SIGKILL) and reaps it.
struct ProcessTraits {
  using Handle = pid_t;
  static Handle null() noexcept { return -1; }
  static bool isNull(Handle h) noexcept { return h <= 0; }
  static void destroy(Handle h) noexcept;
};

/// A child process under watch.
class Child {
 public:
  Child() = default;
  Child(Child&&) noexcept = default;
  Child& operator=(Child&&) noexcept = default;

  /// Starts the child. Fails with `invalid_argument` when argv is empty and `unavailable` when it cannot be run.
  static StatusOr<Child> spawn(const SpawnOptions& options);

  pid_t pid() const { return pid_ ? pid_.get() : exited_pid_; }
  Channel& channel() { return channel_; }
  Status send(std::span<const uint8_t> bytes, Deadline deadline, std::span<const int> fds = {}) {
    return channel_.send(bytes, deadline, fds);
  }
  StatusOr<Message> receive(Deadline deadline) { return channel_.receive(deadline); }

  /// True while the child runs; reaps it (and remembers how it ended) once it has exited.
  bool isAlive();
  /// How the child ended, once reaped.
  const std::optional<ExitStatus>& exitStatus() const { return exit_; }
  /// Waits for the child to exit on its own until `deadline` (`timeout` if it is still running then).
  StatusOr<ExitStatus> wait(Deadline deadline);
  /// SIGTERM, then SIGKILL when it has not exited after `grace`; reaps it. Returns how it ended (an already reaped
  /// child returns its recorded status). Waits at most `grace` + 30 s for a child stuck in the kernel.
  ExitStatus kill(std::chrono::milliseconds grace = std::chrono::milliseconds(200));

 private:
  Owned<ProcessTraits> pid_;
  pid_t exited_pid_ = -1;
  bool own_group_ = false;
  Channel channel_;
  std::optional<ExitStatus> exit_;
  void signal(int sig);
  void reaped(int status);
};

/// Child side: the channel the parent handed over (PEERLAB_WATCHDOG_FD). Also makes this process die with its
/// parent (PR_SET_PDEATHSIG) and fails when the parent is already gone. Removes both variables from the environment.
StatusOr<Channel> attachToParent();

/// Installs SIGINT, SIGTERM and SIGHUP handlers that kill and reap every live child of this process, then end it
/// with the same signal. Idempotent.
void installInterruptHandlers();
/// Children spawned by this process and not reaped yet.
int liveChildren();

}  // namespace peerlab::watchdog
