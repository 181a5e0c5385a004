#pragma once
/// Watched child processes: a child started by harness/process (spawn, wait, kill, reap) that the parent talks to
/// over a message channel (SOCK_SEQPACKET socketpair: message boundaries kept, file descriptors passed with
/// SCM_RIGHTS), with a deadline on every receive.
///
/// The child end of the channel is descriptor 3 in the child, named in PEERLAB_WATCHDOG_FD; the child calls
/// attachToParent(), which also arranges for it to die with its parent.

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "reference/core/deadline.h"
#include "reference/core/fd.h"
#include "reference/core/process.h"
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

using process::decodeWaitStatus;
using process::ExitStatus;
using process::installInterruptHandlers;
using process::liveChildren;

/// What to start: a process::SpawnOptions (stdin on /dev/null unless changed) and whether it gets a channel.
struct SpawnOptions : process::SpawnOptions {
  SpawnOptions() { null_stdin = true; }
  bool channel = true;  ///< give the child a channel end at descriptor kChildChannelFd
};

/// A child process under watch: a process::Child with the parent's end of its channel.
class Child {
 public:
  /// Starts the child. Fails with `invalid_argument` when argv is empty and `unavailable` when it cannot be run.
  static StatusOr<Child> spawn(const SpawnOptions& options);

  pid_t pid() const { return process_.pid(); }
  Channel& channel() { return channel_; }
  Status send(std::span<const uint8_t> bytes, Deadline deadline, std::span<const int> fds = {}) {
    return channel_.send(bytes, deadline, fds);
  }
  StatusOr<Message> receive(Deadline deadline) { return channel_.receive(deadline); }

  /// See process::Child.
  bool isAlive() { return process_.isAlive(); }
  const std::optional<ExitStatus>& exitStatus() const { return process_.exitStatus(); }
  StatusOr<ExitStatus> wait(Deadline deadline) { return process_.wait(deadline); }
  ExitStatus kill(std::chrono::milliseconds grace = std::chrono::milliseconds(200)) { return process_.kill(grace); }

 private:
  // The channel closes before the process is killed and reaped.
  process::Child process_;
  Channel channel_;
};

/// Child side: the channel the parent handed over (PEERLAB_WATCHDOG_FD). Also makes this process die with its
/// parent (PR_SET_PDEATHSIG) and fails when the parent is already gone. Removes both variables from the environment.
StatusOr<Channel> attachToParent();

}  // namespace peerlab::watchdog
