#include "harness/watchdog/watchdog.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <thread>

extern char** environ;

namespace peerlab::watchdog {

namespace {

// Live children, for the interrupt handlers: plain atomics, so the handlers stay async-signal-safe.
constexpr int kRegistrySlots = 512;
std::atomic<pid_t> g_children[kRegistrySlots];

void registerChild(pid_t pid) {
  for (auto& slot : g_children) {
    pid_t expected = 0;
    if (slot.compare_exchange_strong(expected, pid)) return;
  }
}

void unregisterChild(pid_t pid) {
  for (auto& slot : g_children) {
    pid_t expected = pid;
    if (slot.compare_exchange_strong(expected, 0)) return;
  }
}

void signalChild(pid_t pid, int sig) {
  // A child leading its own group takes its descendants with it; for any other child the group kill finds nothing.
  (void)::kill(-pid, sig);
  (void)::kill(pid, sig);
}

// Reaps `pid` if it has exited: the raw wait status, or nullopt while it runs. A child that is not ours any more
// (ECHILD: already reaped elsewhere) counts as gone, with status 0.
std::optional<int> tryReap(pid_t pid) {
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r == 0) return std::nullopt;
    if (errno == EINTR) continue;
    return 0;
  }
}

// Polls until the child is reaped or `deadline` passes; sleeps 0.2 ms, growing to 5 ms.
std::optional<int> reapUntil(pid_t pid, Deadline deadline) {
  auto nap = std::chrono::microseconds(200);
  for (;;) {
    if (auto st = tryReap(pid)) return st;
    if (deadline.expired()) return std::nullopt;
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(nap, deadline.remaining()));
    nap = std::min(nap * 2, std::chrono::microseconds(5000));
  }
}

constexpr auto kStuckLimit = std::chrono::seconds(30);

void interruptHandler(int sig) {
  for (auto& slot : g_children) {
    const pid_t pid = slot.load();
    if (pid > 0) signalChild(pid, SIGKILL);
  }
  for (auto& slot : g_children) {
    const pid_t pid = slot.exchange(0);
    if (pid <= 0) continue;
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

std::string signalText(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  const char* desc = sigdescr_np(sig);
  std::string out = abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
  if (desc) out += std::string(" (") + desc + ")";
  return out;
}

}  // namespace

void ProcessTraits::destroy(pid_t pid) noexcept {
  if (!tryReap(pid)) {
    signalChild(pid, SIGKILL);
    (void)reapUntil(pid, Deadline::after(kStuckLimit));
  }
  unregisterChild(pid);
}

StatusOr<std::pair<Channel, Channel>> Channel::pair() {
  int sv[2] = {-1, -1};
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return PEERLAB_INTERNAL(std::string("socketpair: ") + std::strerror(errno));
  }
  return std::make_pair(Channel(Fd(sv[0])), Channel(Fd(sv[1])));
}

Status Channel::send(std::span<const uint8_t> bytes, Deadline deadline, std::span<const int> fds) {
  if (!fd_) return PEERLAB_UNAVAILABLE("channel closed");
  // A zero-length datagram reads as end-of-file on the other side.
  if (bytes.empty()) return PEERLAB_INVALID_ARGUMENT("channel: empty message");
  if (bytes.size() > kMaxMessageBytes) {
    return PEERLAB_INVALID_ARGUMENT("channel: message of " + std::to_string(bytes.size()) + " bytes exceeds " +
                                    std::to_string(kMaxMessageBytes));
  }
  if (fds.size() > kMaxMessageFds) return PEERLAB_INVALID_ARGUMENT("channel: too many descriptors");
  iovec iov{const_cast<uint8_t*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control;
  if (!fds.empty()) {
    control.assign(CMSG_SPACE(sizeof(int) * fds.size()), 0);
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    const ssize_t n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return Status::ok();
    if (errno == EINTR) continue;
    if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN) {
      return PEERLAB_UNAVAILABLE("channel closed by the peer");
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return PEERLAB_INTERNAL(std::string("sendmsg: ") + std::strerror(errno));
    }
    pollfd p{fd_.get(), POLLOUT, 0};
    const int r = ::poll(&p, 1, deadline.remainingMsForPoll());
    if (r < 0 && errno != EINTR) return PEERLAB_INTERNAL(std::string("poll: ") + std::strerror(errno));
    if (r == 0 && deadline.expired()) return PEERLAB_TIMEOUT("channel: send did not complete before the deadline");
  }
}

StatusOr<Message> Channel::receive(Deadline deadline) {
  if (!fd_) return PEERLAB_UNAVAILABLE("channel closed");
  for (;;) {
    pollfd p{fd_.get(), POLLIN, 0};
    const int r = ::poll(&p, 1, deadline.remainingMsForPoll());
    if (r < 0) {
      if (errno == EINTR) continue;
      return PEERLAB_INTERNAL(std::string("poll: ") + std::strerror(errno));
    }
    if (r == 0) {
      if (deadline.expired()) return PEERLAB_TIMEOUT("no message before the deadline");
      continue;
    }
    Message out;
    out.bytes.resize(kMaxMessageBytes);
    iovec iov{out.bytes.data(), out.bytes.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxMessageFds)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(fd_.get(), &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      if (errno == ECONNRESET) return PEERLAB_UNAVAILABLE("channel closed by the peer");
      return PEERLAB_INTERNAL(std::string("recvmsg: ") + std::strerror(errno));
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd = -1;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        out.fds.emplace_back(fd);
      }
    }
    if (n == 0 && out.fds.empty()) return PEERLAB_UNAVAILABLE("channel closed by the peer");
    if (msg.msg_flags & MSG_TRUNC)
      return PEERLAB_INTERNAL("channel: message larger than " + std::to_string(kMaxMessageBytes) + " bytes");
    if (msg.msg_flags & MSG_CTRUNC) return PEERLAB_INTERNAL("channel: descriptors truncated");
    out.bytes.resize(static_cast<size_t>(n));
    return out;
  }
}

std::string ExitStatus::describe() const {
  if (exited) return "exited with code " + std::to_string(code);
  if (signal != 0) return "killed by " + signalText(signal) + (core ? ", core dumped" : "");
  return "ended";
}

ExitStatus decodeWaitStatus(int status) {
  ExitStatus e;
  if (WIFEXITED(status)) {
    e.exited = true;
    e.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    e.signal = WTERMSIG(status);
    e.core = WCOREDUMP(status);
  }
  return e;
}

StatusOr<Child> Child::spawn(const SpawnOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) return PEERLAB_INVALID_ARGUMENT("spawn: empty argv");
  Child child;
  Fd child_end;
  if (options.channel) {
    PEERLAB_ASSIGN_OR_RETURN(auto ends, Channel::pair());
    child.channel_ = std::move(ends.first);
    // Keep the child's end off descriptor 3: dup2 onto the same number would keep close-on-exec set.
    const int moved = ::fcntl(ends.second.fd(), F_DUPFD_CLOEXEC, kChildChannelFd + 1);
    if (moved < 0) return PEERLAB_INTERNAL(std::string("fcntl: ") + std::strerror(errno));
    child_end = Fd(moved);
  }

  // Environment: ours, with the given entries added or replaced.
  std::map<std::string, std::string> env;
  std::vector<std::string> order;
  auto put = [&](const std::string& kv) {
    const auto eq = kv.find('=');
    const std::string key = kv.substr(0, eq);
    if (!env.count(key)) order.push_back(key);
    env[key] = kv;
  };
  for (char** e = environ; e && *e; ++e)
    put(*e);
  for (const auto& kv : options.env)
    put(kv);
  if (options.channel) {
    put(std::string(kEnvChannelFd) + "=" + std::to_string(kChildChannelFd));
    put(std::string(kEnvParentPid) + "=" + std::to_string(::getpid()));
  }
  std::vector<std::string> env_strings;
  for (const auto& k : order)
    env_strings.push_back(env[k]);
  std::vector<char*> envp;
  for (auto& s : env_strings)
    envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = options.argv;
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  if (options.channel) posix_spawn_file_actions_adddup2(&actions, child_end.get(), kChildChannelFd);
  if (options.null_stdin) posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  if (options.null_stdout) posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  if (options.null_stderr) posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (options.own_process_group) {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&attr, 0);
  }
  sigset_t empty, defaults;
  sigemptyset(&empty);
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD, SIGQUIT, SIGUSR1, SIGUSR2})
    sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, flags);

  pid_t pid = -1;
  const bool search = options.argv[0].find('/') == std::string::npos;
  const int rc = search ? ::posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), envp.data())
                        : ::posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return PEERLAB_UNAVAILABLE("cannot run " + options.argv[0] + ": " + std::strerror(rc));
  }
  registerChild(pid);
  child.pid_.reset(pid);
  child.own_group_ = options.own_process_group;
  return child;
}

void Child::signal(int sig) {
  if (!pid_) return;
  if (own_group_) (void)::kill(-pid_.get(), sig);
  (void)::kill(pid_.get(), sig);
}

void Child::reaped(int status) {
  exit_ = decodeWaitStatus(status);
  exited_pid_ = pid_.get();
  unregisterChild(pid_.get());
  (void)pid_.release();
}

bool Child::isAlive() {
  if (!pid_) return false;
  if (auto st = tryReap(pid_.get())) {
    reaped(*st);
    return false;
  }
  return true;
}

StatusOr<ExitStatus> Child::wait(Deadline deadline) {
  if (!pid_) {
    if (exit_) return *exit_;
    return PEERLAB_INVALID_ARGUMENT("wait: no child");
  }
  if (auto st = reapUntil(pid_.get(), deadline)) {
    reaped(*st);
    return *exit_;
  }
  return PEERLAB_TIMEOUT("child " + std::to_string(pid_.get()) + " still running");
}

ExitStatus Child::kill(std::chrono::milliseconds grace) {
  if (!pid_) return exit_.value_or(ExitStatus{});
  if (auto st = tryReap(pid_.get())) {
    reaped(*st);
    return *exit_;
  }
  signal(SIGTERM);
  if (auto st = reapUntil(pid_.get(), Deadline::after(grace))) {
    reaped(*st);
    return *exit_;
  }
  signal(SIGKILL);
  if (auto st = reapUntil(pid_.get(), Deadline::after(kStuckLimit))) {
    reaped(*st);
    return *exit_;
  }
  // Stuck in the kernel past SIGKILL: nothing more can be done from here; init reaps it once it dies.
  ExitStatus stuck;
  stuck.signal = SIGKILL;
  exit_ = stuck;
  exited_pid_ = pid_.get();
  unregisterChild(pid_.get());
  (void)pid_.release();
  return stuck;
}

StatusOr<Channel> attachToParent() {
  const char* fd_text = std::getenv(kEnvChannelFd);
  const char* parent_text = std::getenv(kEnvParentPid);
  if (fd_text == nullptr)
    return PEERLAB_INVALID_ARGUMENT(std::string(kEnvChannelFd) + " is not set: not started by a watchdog");
  const int fd = std::atoi(fd_text);
  const pid_t parent = parent_text ? static_cast<pid_t>(std::atoll(parent_text)) : 0;
  ::unsetenv(kEnvChannelFd);
  ::unsetenv(kEnvParentPid);
  if (fd < 0 || ::fcntl(fd, F_GETFD) < 0) {
    return PEERLAB_INVALID_ARGUMENT(std::string(kEnvChannelFd) + "=" + fd_text + " is not an open descriptor");
  }
  (void)::fcntl(fd, F_SETFD, FD_CLOEXEC);
  (void)::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The parent may have died before the line above: then nobody would ever send the signal.
  if (parent > 0 && ::getppid() != parent) {
    (void)::close(fd);
    return PEERLAB_UNAVAILABLE("the parent process is gone");
  }
  return Channel(Fd(fd));
}

void installInterruptHandlers() {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  struct sigaction sa {};
  sa.sa_handler = interruptHandler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    (void)::sigaction(sig, &sa, nullptr);
}

int liveChildren() {
  int n = 0;
  for (auto& slot : g_children)
    n += slot.load() > 0 ? 1 : 0;
  return n;
}

}  // namespace peerlab::watchdog
