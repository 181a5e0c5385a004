#include "reference/core/unix_mesh.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>
#include <utility>

namespace peerlab::detail {

namespace {

constexpr uint32_t kWireMagic = 0x4d4c5050u;   // "PPLM"
constexpr uint32_t kHelloMagic = 0x4f4c4548u;  // "HELO"
constexpr uint64_t kMaxFrameBytes = uint64_t{1} << 40;

// Frame types on the wire: the three channels, then control frames.
constexpr uint32_t kTypeAbort = 16;
constexpr uint32_t kTypeBye = 17;
constexpr uint32_t kTypeFailed = 18;  // goodbye of a rank that failed: carries its failure

struct WireHeader {
  uint32_t magic;
  uint32_t type;
  uint64_t tag;
  uint64_t bytes;
  uint32_t nfds;
  int32_t sender;
};
static_assert(sizeof(WireHeader) == 32);

struct Hello {
  uint32_t magic;
  int32_t rank;
  int32_t size;
  int32_t pid;
};

std::string errnoText(int err) {
  return std::string(strerror(err)) + " (errno " + std::to_string(err) + ")";
}

void sleepMs(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

StatusOr<sockaddr_un> socketAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return PEERLAB_INVALID_ARGUMENT("socket path '" + path + "' is empty or longer than " +
                                    std::to_string(sizeof(addr.sun_path) - 1) +
                                    " bytes (set TMPDIR to a shorter "
                                    "directory)");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

// Writes all of `bytes` to a non-blocking socket before the deadline.
Status writeAll(int fd, const void* data, size_t bytes, Deadline deadline, std::string_view what) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (deadline.expired()) return PEERLAB_TIMEOUT(std::string(what) + ": timed out writing");
      pollfd pfd{fd, POLLOUT, 0};
      ::poll(&pfd, 1, deadline.remainingMsForPoll());
      continue;
    }
    return PEERLAB_UNAVAILABLE(std::string(what) + ": " + errnoText(errno));
  }
  return Status::ok();
}

// Reads exactly `bytes` from a non-blocking socket before the deadline.
Status readAll(int fd, void* data, size_t bytes, Deadline deadline, std::string_view what) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return PEERLAB_UNAVAILABLE(std::string(what) + ": connection closed");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (deadline.expired()) return PEERLAB_TIMEOUT(std::string(what) + ": timed out reading");
      pollfd pfd{fd, POLLIN, 0};
      ::poll(&pfd, 1, deadline.remainingMsForPoll());
      continue;
    }
    return PEERLAB_UNAVAILABLE(std::string(what) + ": " + errnoText(errno));
  }
  return Status::ok();
}

std::string rankList(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks)
    s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

uint64_t fnv1a(uint64_t h, std::string_view s) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

struct UnixMesh::Peer {
  enum class State { kOpen, kClosed, kDead };
  Fd fd;                             // none for this rank itself; closed only by the destructor
  std::atomic<bool> rx_done{false};  // end of stream or error seen: no more reading
  State state = State::kOpen;
  std::string gone_why;  // why the peer is closed or dead
  std::deque<Frame> queues[kChannels];
  std::timed_mutex send_mu;  // one writer at a time: frames are never interleaved
  std::mutex rx_mu;          // one reader at a time, guards the parse state below
  WireHeader header{};
  size_t header_got = 0;
  Frame partial;
  size_t payload_got = 0;
};

UnixMesh::UnixMesh(int rank, int size) : rank_(rank), size_(size), peers_(static_cast<size_t>(size)) {}

StatusOr<std::unique_ptr<UnixMesh>> UnixMesh::connect(int rank, int size, const std::string& listen_path,
                                                      const std::vector<PeerAddress>& peers, Deadline deadline) {
  if (size < 1 || rank < 0 || rank >= size) {
    return PEERLAB_INVALID_ARGUMENT("mesh rank " + std::to_string(rank) + " of " + std::to_string(size));
  }
  std::unique_ptr<UnixMesh> mesh(new UnixMesh(rank, size));
  mesh->peers_[static_cast<size_t>(rank)] = std::make_unique<Peer>();
  std::vector<int> lower_missing;
  std::vector<int> higher;
  std::vector<const PeerAddress*> lower;
  for (const PeerAddress& p : peers) {
    if (p.rank < 0 || p.rank >= size || p.rank == rank || mesh->peers_[static_cast<size_t>(p.rank)]) {
      return PEERLAB_INVALID_ARGUMENT("mesh peer rank " + std::to_string(p.rank) + " is out of range or repeated");
    }
    mesh->peers_[static_cast<size_t>(p.rank)] = std::make_unique<Peer>();
    if (p.rank < rank) {
      lower.push_back(&p);
    } else {
      higher.push_back(p.rank);
    }
  }

  Fd listen_fd;
  auto close_listen = [&] {
    if (listen_fd) {
      listen_fd.reset();
      ::unlink(listen_path.c_str());
    }
  };
  if (!higher.empty()) {
    PEERLAB_ASSIGN_OR_RETURN(sockaddr_un addr, socketAddress(listen_path));
    listen_fd.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!listen_fd) return PEERLAB_INTERNAL("socket(AF_UNIX): " + errnoText(errno));
    ::unlink(listen_path.c_str());
    if (::bind(listen_fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listen_fd.get(), size + 8) != 0) {
      return PEERLAB_UNAVAILABLE("cannot listen on '" + listen_path + "': " + errnoText(errno));
    }
  }

  const Hello my_hello{kHelloMagic, rank, size, static_cast<int32_t>(getpid())};

  // Connect to the lower ranks; their listening sockets may not exist yet, so retry until the deadline.
  for (const PeerAddress* p : lower) {
    auto addr = socketAddress(p->path);
    if (!addr.isOk()) {
      close_listen();
      return addr.status();
    }
    int backoff_ms = 1;
    Fd fd;
    while (true) {
      fd.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (!fd) {
        close_listen();
        return PEERLAB_INTERNAL("socket(AF_UNIX): " + errnoText(errno));
      }
      if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof(sockaddr_un)) == 0) break;
      const int err = errno;
      fd.reset();
      if (err != ENOENT && err != ECONNREFUSED && err != EAGAIN && err != EINTR) {
        close_listen();
        return PEERLAB_UNAVAILABLE("connecting to rank " + std::to_string(p->rank) + " at '" + p->path +
                                   "': " + errnoText(err));
      }
      if (deadline.expired()) {
        for (const PeerAddress* q : lower) {
          if (q->rank >= p->rank) lower_missing.push_back(q->rank);
        }
        close_listen();
        return PEERLAB_TIMEOUT("rank " + std::to_string(rank) + ": rank(s) " + rankList(lower_missing) +
                               " did not arrive before the connect deadline");
      }
      sleepMs(std::min(backoff_ms, std::max(1, deadline.remainingMsForPoll())));
      backoff_ms = std::min(backoff_ms * 2, 20);
    }
    Status st =
        writeAll(fd.get(), &my_hello, sizeof(my_hello), deadline, "sending hello to rank " + std::to_string(p->rank));
    if (!st.isOk()) {
      close_listen();
      return st;
    }
    mesh->peers_[static_cast<size_t>(p->rank)]->fd = std::move(fd);
  }

  // Accept the higher ranks, which identify themselves with a hello.
  std::vector<int> waiting = higher;
  while (!waiting.empty()) {
    pollfd pfd{listen_fd.get(), POLLIN, 0};
    int pr = ::poll(&pfd, 1, deadline.remainingMsForPoll());
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0 || deadline.expired()) {
      close_listen();
      return PEERLAB_TIMEOUT("rank " + std::to_string(rank) + ": rank(s) " + rankList(waiting) +
                             " did not arrive before the connect deadline");
    }
    Fd fd(::accept4(listen_fd.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd) {
      if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) continue;
      close_listen();
      return PEERLAB_INTERNAL("accept on '" + listen_path + "': " + errnoText(errno));
    }
    Hello h{};
    Status st = readAll(fd.get(), &h, sizeof(h), deadline, "reading a hello");
    auto it = std::find(waiting.begin(), waiting.end(), h.rank);
    if (!st.isOk() || h.magic != kHelloMagic || h.size != size || it == waiting.end()) {
      if (st.code() == StatusCode::kTimeout) {
        close_listen();
        return PEERLAB_TIMEOUT("rank " + std::to_string(rank) + ": rank(s) " + rankList(waiting) +
                               " did not arrive before the connect deadline");
      }
      if (st.isOk() && h.magic == kHelloMagic && h.size != size) {
        close_listen();
        return PEERLAB_INVALID_ARGUMENT("rank " + std::to_string(h.rank) + " was started with size " +
                                        std::to_string(h.size) + ", this rank with " + std::to_string(size));
      }
      continue;  // a stray or failed connection: keep waiting for the real ones
    }
    waiting.erase(it);
    mesh->peers_[static_cast<size_t>(h.rank)]->fd = std::move(fd);
  }
  close_listen();
  return mesh;
}

UnixMesh::~UnixMesh() {
  const Deadline bye_deadline = Deadline::afterMs(200);
  // A rank leaving after a failure passes the failure on, so peers learn the cause rather than "it left".
  const Status failed = failure();
  const uint32_t type = failed.isOk() ? kTypeBye : kTypeFailed;
  const std::string why = failed.message();
  for (size_t r = 0; r < peers_.size(); ++r) {
    Peer* p = peers_[r].get();
    if (p == nullptr || static_cast<int>(r) == rank_) continue;
    if (p->fd && p->state == Peer::State::kOpen && p->send_mu.try_lock_for(std::chrono::milliseconds(100))) {
      sendRaw(*p, static_cast<int>(r), type, 0, why.data(), failed.isOk() ? 0 : why.size(), nullptr, 0, bye_deadline,
              false)
          .ignore();
      p->send_mu.unlock();
    }
    if (p->fd) {
      ::shutdown(p->fd.get(), SHUT_RDWR);
      p->fd.reset();
    }
  }
}

bool UnixMesh::reaches(int peer) const {
  return peer >= 0 && peer < size_ && peers_[static_cast<size_t>(peer)] != nullptr;
}

Status UnixMesh::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void UnixMesh::setFailure(const Status& failure) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failure_.isOk() && !failure.isOk()) failure_ = failure;
}

void UnixMesh::abort(std::string_view why) noexcept {
  try {
    const std::string reason(why);
    setFailure(PEERLAB_UNAVAILABLE("rank " + std::to_string(rank_) + " aborted: " + reason));
    const Deadline deadline = Deadline::afterMs(1000);
    for (size_t r = 0; r < peers_.size(); ++r) {
      Peer* p = peers_[r].get();
      if (p == nullptr || static_cast<int>(r) == rank_ || !p->fd) continue;
      if (p->send_mu.try_lock_until(deadline.when())) {
        sendRaw(*p, static_cast<int>(r), kTypeAbort, 0, reason.data(), reason.size(), nullptr, 0, deadline, false)
            .ignore();
        p->send_mu.unlock();
      } else {
        // Another thread is stuck mid-frame: a reset connection still tells the peer that this rank is gone.
        ::shutdown(p->fd.get(), SHUT_RDWR);
      }
    }
  } catch (...) {
  }
}

Status UnixMesh::peerClosedError(int peer, std::string_view what) const {
  const Peer& p = *peers_[static_cast<size_t>(peer)];
  return PEERLAB_UNAVAILABLE(std::string(what) + ": rank " + std::to_string(peer) + " " + p.gone_why);
}

void UnixMesh::markGone(int peer, const std::string& why, bool dead) {
  Peer& p = *peers_[static_cast<size_t>(peer)];
  std::lock_guard<std::mutex> lock(mu_);
  // The first word stands: a reset after a goodbye (the peer closed with data unread) is not a death.
  if (p.state != Peer::State::kOpen) return;
  p.state = dead ? Peer::State::kDead : Peer::State::kClosed;
  p.gone_why = why;
  if (dead && failure_.isOk()) failure_ = PEERLAB_UNAVAILABLE("rank " + std::to_string(peer) + " " + why);
}

Status UnixMesh::sendRaw(Peer& p, int peer, uint32_t type, uint64_t tag, const void* data, size_t bytes, const int* fds,
                         size_t nfds, Deadline deadline, bool check_failure) {
  WireHeader h{kWireMagic, type, tag, bytes, static_cast<uint32_t>(nfds), rank_};
  size_t sent = 0;
  const size_t total = sizeof(h) + bytes;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerFrame)];
  while (sent < total) {
    if (check_failure) {
      Status f = failure();
      if (!f.isOk()) {
        return sent > 0 ? f.withContext("(a message to rank " + std::to_string(peer) + " was cut short)") : f;
      }
    }
    if (check_failure) {
      std::lock_guard<std::mutex> lock(mu_);
      if (p.state != Peer::State::kOpen) {
        return PEERLAB_UNAVAILABLE("sending to rank " + std::to_string(peer) + ": rank " + std::to_string(peer) + " " +
                                   p.gone_why);
      }
    }
    iovec iov[2];
    int iovcnt = 0;
    if (sent < sizeof(h)) {
      iov[iovcnt++] = {reinterpret_cast<char*>(&h) + sent, sizeof(h) - sent};
      if (bytes > 0) iov[iovcnt++] = {const_cast<void*>(data), bytes};
    } else {
      iov[iovcnt++] = {const_cast<char*>(static_cast<const char*>(data)) + (sent - sizeof(h)), total - sent};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(iovcnt);
    // Descriptors ride on the first byte of the frame, i.e. the first successful sendmsg.
    if (sent == 0 && nfds > 0) {
      std::memset(control, 0, sizeof(control));
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
      std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    ssize_t n = ::sendmsg(p.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    const int err = n < 0 ? errno : EAGAIN;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      if (deadline.expired()) {
        if (sent > 0) {
          setFailure(PEERLAB_TIMEOUT("a message to rank " + std::to_string(peer) +
                                     " was cut short by its deadline; the connection is unusable"));
        }
        return PEERLAB_TIMEOUT("sending " + std::to_string(bytes) + " bytes to rank " + std::to_string(peer) +
                               ": deadline passed (the peer is not receiving)");
      }
      if (check_failure) {
        progressInternal(deadline.remainingMsForPoll(), peer).ignore();
      } else {
        pollfd pfd{p.fd.get(), POLLOUT, 0};
        ::poll(&pfd, 1, deadline.remainingMsForPoll());
      }
      continue;
    }
    // EPIPE / ECONNRESET: the peer is gone. Reading tells whether it said goodbye first.
    if (check_failure) progressInternal(0, -1).ignore();
    std::lock_guard<std::mutex> lock(mu_);
    if (p.state == Peer::State::kOpen) {
      p.state = Peer::State::kDead;
      p.gone_why = "died (its connection failed: " + errnoText(err) + ")";
      if (failure_.isOk()) failure_ = PEERLAB_UNAVAILABLE("rank " + std::to_string(peer) + " " + p.gone_why);
    }
    return PEERLAB_UNAVAILABLE("sending to rank " + std::to_string(peer) + ": rank " + std::to_string(peer) + " " +
                               p.gone_why);
  }
  return Status::ok();
}

Status UnixMesh::send(int peer, Channel channel, uint64_t tag, const void* data, size_t bytes, const int* fds,
                      size_t nfds, Deadline deadline) {
  if (!reaches(peer)) {
    return PEERLAB_INVALID_ARGUMENT("rank " + std::to_string(peer) + " is not reachable from rank " +
                                    std::to_string(rank_) + " over the local sockets");
  }
  if (nfds > kMaxFdsPerFrame) return PEERLAB_INVALID_ARGUMENT("too many descriptors in one frame");
  if (bytes > kMaxFrameBytes) return PEERLAB_INVALID_ARGUMENT("message too large");
  if (bytes > 0 && data == nullptr) return PEERLAB_INVALID_ARGUMENT("null buffer");
  PEERLAB_RETURN_IF_ERROR(failure());
  active_.fetch_add(1);
  struct Leave {
    std::atomic<int>& a;
    ~Leave() { a.fetch_sub(1); }
  } leave{active_};

  if (peer == rank_) {
    // A message to itself goes straight to its own queue (descriptors duplicated, as the kernel would).
    Frame f;
    f.channel = channel;
    f.tag = tag;
    if (bytes > 0)
      f.payload.assign(static_cast<const unsigned char*>(data), static_cast<const unsigned char*>(data) + bytes);
    for (size_t i = 0; i < nfds; ++i) {
      int d = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
      if (d < 0) return PEERLAB_INVALID_ARGUMENT("descriptor " + std::to_string(fds[i]) + ": " + errnoText(errno));
      f.fds.emplace_back(d);
    }
    std::lock_guard<std::mutex> lock(mu_);
    peers_[static_cast<size_t>(peer)]->queues[static_cast<int>(channel)].push_back(std::move(f));
    return Status::ok();
  }
  Peer& p = *peers_[static_cast<size_t>(peer)];
  if (!p.send_mu.try_lock_until(deadline.when())) {
    return PEERLAB_TIMEOUT("sending to rank " + std::to_string(peer) + ": another send to it did not finish in time");
  }
  std::lock_guard<std::timed_mutex> hold(p.send_mu, std::adopt_lock);
  return sendRaw(p, peer, static_cast<uint32_t>(channel), tag, data, bytes, fds, nfds, deadline, true);
}

StatusOr<Frame> UnixMesh::recv(int peer, Channel channel, Deadline deadline) {
  if (!reaches(peer)) {
    return PEERLAB_INVALID_ARGUMENT("rank " + std::to_string(peer) + " is not reachable from rank " +
                                    std::to_string(rank_) + " over the local sockets");
  }
  active_.fetch_add(1);
  struct Leave {
    std::atomic<int>& a;
    ~Leave() { a.fetch_sub(1); }
  } leave{active_};
  Peer& p = *peers_[static_cast<size_t>(peer)];
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      // A message that arrived before a failure is still delivered; only waiting for more fails.
      auto& q = p.queues[static_cast<int>(channel)];
      if (!q.empty()) {
        Frame f = std::move(q.front());
        q.pop_front();
        return f;
      }
      if (!failure_.isOk()) return failure_;
      if (p.state != Peer::State::kOpen) {
        return PEERLAB_UNAVAILABLE("waiting for a message from rank " + std::to_string(peer) + ": rank " +
                                   std::to_string(peer) + " " + p.gone_why);
      }
    }
    if (deadline.expired()) {
      return PEERLAB_TIMEOUT("rank " + std::to_string(rank_) + " waited for a message from rank " +
                             std::to_string(peer) + " until its deadline");
    }
    progressInternal(deadline.remainingMsForPoll(), -1).ignore();
  }
}

Status UnixMesh::progress(int timeout_ms) {
  active_.fetch_add(1);
  Status st = progressInternal(timeout_ms, -1);
  active_.fetch_sub(1);
  return st;
}

Status UnixMesh::progressInternal(int timeout_ms, int write_peer) {
  // Other threads may be waiting for frames this one reads: wake up often enough for them to see their queues.
  if (active_.load() > 1) timeout_ms = std::min(timeout_ms, 5);
  std::vector<pollfd> pfds;
  std::vector<int> who;
  std::vector<std::unique_lock<std::mutex>> held;
  for (int r = 0; r < size_; ++r) {
    Peer* p = peers_[static_cast<size_t>(r)].get();
    if (p == nullptr || r == rank_ || !p->fd) continue;
    std::unique_lock<std::mutex> rx;
    short events = 0;
    if (!p->rx_done) {
      rx = std::unique_lock<std::mutex>(p->rx_mu, std::try_to_lock);
      if (rx.owns_lock()) events |= POLLIN;
    }
    if (r == write_peer) {
      events |= POLLOUT;
    }
    if (events == 0) continue;
    pfds.push_back({p->fd.get(), events, 0});
    who.push_back(r);
    held.push_back(std::move(rx));
  }
  if (pfds.empty()) {
    // Every socket is being read by another thread (or none is left): wait briefly, let it run.
    if (timeout_ms > 0) sleepMs(std::min(timeout_ms, 2));
    return failure();
  }
  int n = ::poll(pfds.data(), pfds.size(), timeout_ms);
  if (n > 0) {
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (held[i].owns_lock() && (pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) readAvailable(who[i]);
    }
  }
  return failure();
}

void UnixMesh::readAvailable(int peer) {
  Peer& p = *peers_[static_cast<size_t>(peer)];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerFrame)];
  while (!p.rx_done) {
    // Read exactly the rest of the current frame's header or payload, so the descriptors a read returns always
    // belong to the frame being read (they ride on its first byte).
    void* dst;
    size_t want;
    if (p.header_got < sizeof(WireHeader)) {
      dst = reinterpret_cast<char*>(&p.header) + p.header_got;
      want = sizeof(WireHeader) - p.header_got;
    } else {
      dst = p.partial.payload.data() + p.payload_got;
      want = p.partial.payload.size() - p.payload_got;
    }
    iovec iov{dst, want};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = want > 0 ? ::recvmsg(p.fd.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) : 0;
    if (want > 0 && n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      const int err = errno;
      p.rx_done = true;
      markGone(peer, "died (its connection failed: " + errnoText(err) + ")", true);
      return;
    }
    if (want > 0 && n == 0) {
      p.rx_done = true;
      bool said_bye;
      {
        std::lock_guard<std::mutex> lock(mu_);
        said_bye = p.state != Peer::State::kOpen;
      }
      if (!said_bye)
        markGone(peer, "died (its connection closed without a goodbye: the process exited or crashed)", true);
      return;
    }
    if (want > 0) {
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
          const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
          const int* in = reinterpret_cast<const int*>(CMSG_DATA(c));
          for (size_t i = 0; i < count; ++i)
            p.partial.fds.emplace_back(in[i]);
        }
      }
      if (msg.msg_flags & MSG_CTRUNC) {
        p.rx_done = true;
        markGone(peer, "sent more descriptors than a frame holds (protocol error)", true);
        return;
      }
    }
    if (p.header_got < sizeof(WireHeader)) {
      p.header_got += static_cast<size_t>(n);
      if (p.header_got < sizeof(WireHeader)) continue;
      const WireHeader& h = p.header;
      const bool known = h.type < static_cast<uint32_t>(kChannels) || h.type == kTypeAbort || h.type == kTypeBye ||
                         h.type == kTypeFailed;
      if (h.magic != kWireMagic || !known || h.bytes > kMaxFrameBytes || h.nfds > kMaxFdsPerFrame || h.sender != peer) {
        p.rx_done = true;
        markGone(peer, "sent a malformed frame (protocol error)", true);
        return;
      }
      p.partial.payload.resize(h.bytes);
      p.payload_got = 0;
    } else {
      p.payload_got += static_cast<size_t>(n);
    }
    if (p.payload_got < p.partial.payload.size()) continue;

    // A whole frame.
    const WireHeader h = p.header;
    Frame f = std::move(p.partial);
    p.partial = Frame();
    p.header_got = 0;
    p.payload_got = 0;
    if (f.fds.size() != h.nfds) {
      p.rx_done = true;
      markGone(peer, "sent a frame whose descriptors were lost (protocol error)", true);
      return;
    }
    if (h.type == kTypeAbort) {
      const std::string why(f.payload.begin(), f.payload.end());
      markGone(peer, "aborted: " + why, true);
      continue;
    }
    if (h.type == kTypeFailed) {
      const std::string why(f.payload.begin(), f.payload.end());
      markGone(peer, "failed: " + why, true);
      continue;
    }
    if (h.type == kTypeBye) {
      markGone(peer, "has closed its bootstrap (it finished)", false);
      continue;
    }
    f.channel = static_cast<Channel>(h.type);
    f.tag = h.tag;
    std::lock_guard<std::mutex> lock(mu_);
    p.queues[h.type].push_back(std::move(f));
  }
}

bool UnixMesh::hasFrame(int peer, Channel channel) const {
  if (!reaches(peer)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return !peers_[static_cast<size_t>(peer)]->queues[static_cast<int>(channel)].empty();
}

Status UnixMesh::sendFds(int peer, const int* fds, size_t count, Deadline deadline) {
  if (count == 0) return Status::ok();
  if (fds == nullptr) return PEERLAB_INVALID_ARGUMENT("sendFds: null descriptor array");
  for (size_t i = 0; i < count; ++i) {
    if (fcntl(fds[i], F_GETFD) < 0) {
      return PEERLAB_INVALID_ARGUMENT("sendFds: descriptor " + std::to_string(fds[i]) + " is not open");
    }
  }
  for (size_t i = 0; i < count; i += kMaxFdsPerFrame) {
    const size_t n = std::min(count - i, kMaxFdsPerFrame);
    PEERLAB_RETURN_IF_ERROR(send(peer, Channel::kFds, count, nullptr, 0, fds + i, n, deadline));
  }
  return Status::ok();
}

Status UnixMesh::recvFds(int peer, int* fds, size_t count, Deadline deadline) {
  if (count == 0) return Status::ok();
  if (fds == nullptr) return PEERLAB_INVALID_ARGUMENT("recvFds: null descriptor array");
  size_t got = 0;
  while (got < count) {
    auto f = recv(peer, Channel::kFds, deadline);
    if (!f.isOk()) {
      for (size_t i = 0; i < got; ++i)
        ::close(fds[i]);
      return f.status();
    }
    if (f->tag != count || got + f->fds.size() > count) {
      for (size_t i = 0; i < got; ++i)
        ::close(fds[i]);
      return PEERLAB_INVALID_ARGUMENT("recvFds: rank " + std::to_string(peer) + " sent " + std::to_string(f->tag) +
                                      " descriptors, this rank expected " + std::to_string(count));
    }
    for (Fd& fd : f->fds)
      fds[got++] = fd.release();  // owned by the caller now
  }
  return Status::ok();
}

uint64_t hostIdentity() {
  static const uint64_t id = [] {
    std::string boot;
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::getline(in, boot);
    uint64_t h = fnv1a(0xcbf29ce484222325ull, hostName());
    h = fnv1a(h, "|");
    return fnv1a(h, boot);
  }();
  return id;
}

std::string hostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "unknown";
  return host;
}

size_t maxSocketPathLength() {
  return sizeof(sockaddr_un{}.sun_path) - 1;
}

}  // namespace peerlab::detail
