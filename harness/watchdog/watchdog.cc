#include "harness/watchdog/watchdog.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace peerlab::watchdog {

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

StatusOr<Child> Child::spawn(const SpawnOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) return PEERLAB_INVALID_ARGUMENT("spawn: empty argv");
  Child child;
  Fd child_end;
  process::SpawnOptions so = options;
  if (options.channel) {
    PEERLAB_ASSIGN_OR_RETURN(auto ends, Channel::pair());
    child.channel_ = std::move(ends.first);
    // Keep the child's end off descriptor 3: dup2 onto the same number would keep close-on-exec set.
    const int moved = ::fcntl(ends.second.fd(), F_DUPFD_CLOEXEC, kChildChannelFd + 1);
    if (moved < 0) return PEERLAB_INTERNAL(std::string("fcntl: ") + std::strerror(errno));
    child_end = Fd(moved);
    so.inherit_fds.emplace_back(child_end.get(), kChildChannelFd);
    so.env.push_back(std::string(kEnvChannelFd) + "=" + std::to_string(kChildChannelFd));
    so.env.push_back(std::string(kEnvParentPid) + "=" + std::to_string(::getpid()));
  }
  PEERLAB_ASSIGN_OR_RETURN(child.process_, process::Child::spawn(so));
  return child;
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
  Fd owned(fd);
  (void)::fcntl(fd, F_SETFD, FD_CLOEXEC);
  (void)::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The parent may have died before the line above: then nobody would ever send the signal.
  if (parent > 0 && ::getppid() != parent) return PEERLAB_UNAVAILABLE("the parent process is gone");
  return Channel(std::move(owned));
}

}  // namespace peerlab::watchdog
