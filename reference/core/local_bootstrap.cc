#include <errno.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>

#include "reference/core/local_bootstrap.h"

#include "reference/core/fd.h"
#include "reference/core/unix_mesh.h"

namespace peerlab {

namespace {

using detail::Channel;
using detail::Frame;
using detail::UnixMesh;

Status checkPeer(int peer, int size, std::string_view what) {
  if (peer < 0 || peer >= size) {
    return PEERLAB_INVALID_ARGUMENT(std::string(what) + ": peer rank " + std::to_string(peer) + " is not in [0, " +
                                    std::to_string(size) + ")");
  }
  return Status::ok();
}

Status checkBuffer(const void* p, size_t bytes, std::string_view what) {
  if (bytes > 0 && p == nullptr) return PEERLAB_INVALID_ARGUMENT(std::string(what) + ": null buffer");
  return Status::ok();
}

class LocalBootstrap final : public Bootstrap {
 public:
  explicit LocalBootstrap(std::unique_ptr<UnixMesh> mesh) : mesh_(std::move(mesh)) {}

  int rank() const override { return mesh_->rank(); }
  int size() const override { return mesh_->size(); }

  Status allgather(const void* send, void* recv, size_t bytes, Deadline deadline) override {
    PEERLAB_RETURN_IF_ERROR(checkBuffer(send, bytes, "allgather"));
    PEERLAB_RETURN_IF_ERROR(checkBuffer(recv, bytes, "allgather"));
    const int n = size();
    const int me = rank();
    const uint64_t seq = ++collective_seq_;
    if (bytes > 0) std::memmove(static_cast<char*>(recv) + static_cast<size_t>(me) * bytes, send, bytes);
    // Everyone sends to everyone, starting with the next rank so that no rank is everyone's first target.
    for (int k = 1; k < n; ++k) {
      const int peer = (me + k) % n;
      PEERLAB_RETURN_IF_ERROR(mesh_
                                  ->send(peer, Channel::kColl, seq,
                                         static_cast<char*>(recv) + static_cast<size_t>(me) * bytes, bytes, nullptr, 0,
                                         deadline)
                                  .withContext("allgather #" + std::to_string(seq)));
    }
    for (int k = 1; k < n; ++k) {
      const int peer = (me - k + n) % n;
      auto f = mesh_->recv(peer, Channel::kColl, deadline);
      if (!f.isOk()) return f.status().withContext("allgather #" + std::to_string(seq));
      if (f->tag != seq || f->payload.size() != bytes) {
        return PEERLAB_INVALID_ARGUMENT("allgather #" + std::to_string(seq) + ": rank " + std::to_string(peer) +
                                        " contributed " + std::to_string(f->payload.size()) + " bytes to collective #" +
                                        std::to_string(f->tag) + ", this rank " + std::to_string(bytes) +
                                        " bytes (ranks called different collectives)");
      }
      if (bytes > 0)
        std::memcpy(static_cast<char*>(recv) + static_cast<size_t>(peer) * bytes, f->payload.data(), bytes);
    }
    return Status::ok();
  }

  Status barrier(Deadline deadline) override { return allgather(nullptr, nullptr, 0, deadline).withContext("barrier"); }

  Status send(int peer, const void* data, size_t bytes, Deadline deadline) override {
    PEERLAB_RETURN_IF_ERROR(checkPeer(peer, size(), "send"));
    PEERLAB_RETURN_IF_ERROR(checkBuffer(data, bytes, "send"));
    return mesh_->send(peer, Channel::kData, bytes, data, bytes, nullptr, 0, deadline);
  }

  Status recv(int peer, void* data, size_t bytes, Deadline deadline) override {
    PEERLAB_RETURN_IF_ERROR(checkPeer(peer, size(), "recv"));
    PEERLAB_RETURN_IF_ERROR(checkBuffer(data, bytes, "recv"));
    PEERLAB_ASSIGN_OR_RETURN(Frame f, mesh_->recv(peer, Channel::kData, deadline));
    if (f.payload.size() != bytes) {
      return PEERLAB_INVALID_ARGUMENT("recv: rank " + std::to_string(peer) + " sent " +
                                      std::to_string(f.payload.size()) + " bytes, this rank expected " +
                                      std::to_string(bytes));
    }
    if (bytes > 0) std::memcpy(data, f.payload.data(), bytes);
    return Status::ok();
  }

  Status sendFds(int peer, const int* fds, size_t count, Deadline deadline) override {
    PEERLAB_RETURN_IF_ERROR(checkPeer(peer, size(), "sendFds"));
    return mesh_->sendFds(peer, fds, count, deadline);
  }

  Status recvFds(int peer, int* fds, size_t count, Deadline deadline) override {
    PEERLAB_RETURN_IF_ERROR(checkPeer(peer, size(), "recvFds"));
    return mesh_->recvFds(peer, fds, count, deadline);
  }

  void abort(std::string_view why) noexcept override { mesh_->abort(why); }
  std::string_view kind() const override { return "local"; }

 private:
  std::unique_ptr<UnixMesh> mesh_;
  uint64_t collective_seq_ = 0;
};

// Rank 0 of 1: collectives are copies, messages to itself are queued.
class SingleRankBootstrap final : public Bootstrap {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status allgather(const void* send, void* recv, size_t bytes, Deadline) override {
    PEERLAB_RETURN_IF_ERROR(checkFailure());
    PEERLAB_RETURN_IF_ERROR(checkBuffer(send, bytes, "allgather"));
    PEERLAB_RETURN_IF_ERROR(checkBuffer(recv, bytes, "allgather"));
    if (bytes > 0) std::memmove(recv, send, bytes);
    return Status::ok();
  }
  Status barrier(Deadline) override { return checkFailure(); }
  Status send(int peer, const void* data, size_t bytes, Deadline) override {
    PEERLAB_RETURN_IF_ERROR(checkFailure());
    PEERLAB_RETURN_IF_ERROR(checkPeer(peer, 1, "send"));
    PEERLAB_RETURN_IF_ERROR(checkBuffer(data, bytes, "send"));
    std::lock_guard<std::mutex> lock(mu_);
    const auto* p = static_cast<const unsigned char*>(data);
    messages_.emplace_back(p, p + bytes);
    return Status::ok();
  }
  Status recv(int peer, void* data, size_t bytes, Deadline) override {
    PEERLAB_RETURN_IF_ERROR(checkFailure());
    PEERLAB_RETURN_IF_ERROR(checkPeer(peer, 1, "recv"));
    PEERLAB_RETURN_IF_ERROR(checkBuffer(data, bytes, "recv"));
    std::lock_guard<std::mutex> lock(mu_);
    // Nobody else can ever send: waiting would only run into the deadline.
    if (messages_.empty()) return PEERLAB_INVALID_ARGUMENT("recv: rank 0 of 1 has sent itself nothing");
    if (messages_.front().size() != bytes) {
      return PEERLAB_INVALID_ARGUMENT("recv: queued message has " + std::to_string(messages_.front().size()) +
                                      " bytes, expected " + std::to_string(bytes));
    }
    if (bytes > 0) std::memcpy(data, messages_.front().data(), bytes);
    messages_.pop_front();
    return Status::ok();
  }
  Status sendFds(int peer, const int* fds, size_t count, Deadline) override {
    PEERLAB_RETURN_IF_ERROR(checkFailure());
    PEERLAB_RETURN_IF_ERROR(checkPeer(peer, 1, "sendFds"));
    if (count > 0 && fds == nullptr) return PEERLAB_INVALID_ARGUMENT("sendFds: null descriptor array");
    std::vector<Fd> dups;
    for (size_t i = 0; i < count; ++i) {
      Fd d(fcntl(fds[i], F_DUPFD_CLOEXEC, 0));
      if (!d) {
        return PEERLAB_INVALID_ARGUMENT("sendFds: descriptor " + std::to_string(fds[i]) + " is not open");
      }
      dups.push_back(std::move(d));
    }
    std::lock_guard<std::mutex> lock(mu_);
    fds_.push_back(std::move(dups));
    return Status::ok();
  }
  Status recvFds(int peer, int* fds, size_t count, Deadline) override {
    PEERLAB_RETURN_IF_ERROR(checkFailure());
    PEERLAB_RETURN_IF_ERROR(checkPeer(peer, 1, "recvFds"));
    std::lock_guard<std::mutex> lock(mu_);
    if (fds_.empty() || fds_.front().size() != count) {
      return PEERLAB_INVALID_ARGUMENT("recvFds: rank 0 of 1 did not send itself " + std::to_string(count) +
                                      " descriptors");
    }
    for (size_t i = 0; i < count; ++i)
      fds[i] = fds_.front()[i].release();
    fds_.pop_front();
    return Status::ok();
  }
  void abort(std::string_view why) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.empty()) aborted_ = why.empty() ? std::string("(no reason)") : std::string(why);
  }
  std::string_view kind() const override { return "local"; }

 private:
  Status checkFailure() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_.empty()) return PEERLAB_UNAVAILABLE("rank 0 aborted: " + aborted_);
    return Status::ok();
  }
  std::mutex mu_;
  std::deque<std::vector<unsigned char>> messages_;
  std::deque<std::vector<Fd>> fds_;
  std::string aborted_;
};

}  // namespace

StatusOr<std::unique_ptr<Bootstrap>> connectLocal(int rank, int size, const std::string& dir, Deadline deadline) {
  if (size < 1 || rank < 0 || rank >= size) {
    return PEERLAB_INVALID_ARGUMENT("local bootstrap: rank " + std::to_string(rank) + " of " + std::to_string(size));
  }
  if (dir.empty()) return PEERLAB_INVALID_ARGUMENT("local bootstrap: empty socket directory");
  // Die with the launcher, so that a launcher killed with SIGKILL leaves no rank behind.
  if (const char* launcher = std::getenv(kEnvLauncherPid); launcher != nullptr && *launcher != '\0') {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (std::to_string(getppid()) != launcher) {
      return PEERLAB_UNAVAILABLE("local bootstrap: the launcher (pid " + std::string(launcher) + ") is gone");
    }
  }
  auto path = [&](int r) { return dir + "/r" + std::to_string(r); };
  std::vector<detail::UnixMesh::PeerAddress> peers;
  for (int r = 0; r < size; ++r) {
    if (r != rank) peers.push_back({r, path(r)});
  }
  PEERLAB_ASSIGN_OR_RETURN(auto mesh, detail::UnixMesh::connect(rank, size, path(rank), peers, deadline));
  return std::unique_ptr<Bootstrap>(new LocalBootstrap(std::move(mesh)));
}

std::unique_ptr<Bootstrap> singleRankBootstrap() {
  return std::make_unique<SingleRankBootstrap>();
}

std::vector<std::string> localRankEnvironment(int rank, int size, const std::string& dir) {
  return {std::string(kEnvRank) + "=" + std::to_string(rank), std::string(kEnvSize) + "=" + std::to_string(size),
          std::string(kEnvBootstrap) + "=local:" + dir, std::string(kEnvLauncherPid) + "=" + std::to_string(getpid())};
}

bool localBootstrapRequested() {
  const char* b = std::getenv(kEnvBootstrap);
  return b != nullptr && *b != '\0';
}

namespace {

StatusOr<int> intFromEnv(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return PEERLAB_INVALID_ARGUMENT(std::string(name) + " is not set");
  char* end = nullptr;
  errno = 0;
  long x = std::strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < 0 || x > 1'000'000) {
    return PEERLAB_INVALID_ARGUMENT(std::string(name) + "='" + v + "' is not a rank number");
  }
  return static_cast<int>(x);
}

}  // namespace

StatusOr<std::unique_ptr<Bootstrap>> connectLocalFromEnvironment(Deadline deadline) {
  const char* b = std::getenv(kEnvBootstrap);
  const std::string v = b != nullptr ? b : "";
  if (v.rfind("local:", 0) != 0) {
    return PEERLAB_INVALID_ARGUMENT(std::string(kEnvBootstrap) + "='" + v + "' is not local:<dir>");
  }
  PEERLAB_ASSIGN_OR_RETURN(int rank, intFromEnv(kEnvRank));
  PEERLAB_ASSIGN_OR_RETURN(int size, intFromEnv(kEnvSize));
  if (size < 1 || rank >= size) {
    return PEERLAB_INVALID_ARGUMENT(std::string(kEnvRank) + "=" + std::to_string(rank) + " is not below " + kEnvSize +
                                    "=" + std::to_string(size));
  }
  return connectLocal(rank, size, v.substr(6), deadline);
}

}  // namespace peerlab
