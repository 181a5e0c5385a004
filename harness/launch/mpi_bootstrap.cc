// The MPI bootstrap: bytes and collectives over a duplicate of MPI_COMM_WORLD with non-blocking calls polled until
// their deadline; file descriptors between ranks of one host over side Unix sockets (set up through MPI).

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iterator>
#include <mutex>
#include <optional>
#include <thread>

#include "harness/launch/launch.h"
#include "reference/core/unix_mesh.h"

namespace peerlab::launch {

namespace {

using detail::Channel;
using detail::UnixMesh;

constexpr int kTagData = 0x5045;
constexpr int kTagAbort = 0x5046;
constexpr int kAbortBytes = 512;
constexpr size_t kChunk = size_t{1} << 30;  // MPI counts are int

// Every MPI call goes through this lock, whatever thread level the library provides.
std::mutex& mpiMutex() {
  static std::mutex m;
  return m;
}

std::string mpiError(int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, static_cast<size_t>(len));
}

Status mpiStatus(int rc, std::string_view what) {
  if (rc == MPI_SUCCESS) return Status::ok();
  return PEERLAB_INTERNAL(std::string(what) + ": " + mpiError(rc));
}

void finalizeAtExit() {
  std::lock_guard<std::mutex> lock(mpiMutex());
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Finalize();
}

Status ensureMpi() {
  std::lock_guard<std::mutex> lock(mpiMutex());
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (fin) return PEERLAB_UNAVAILABLE("MPI was already finalized in this process");
  if (!init) {
    int provided = 0;
    PEERLAB_RETURN_IF_ERROR(
        mpiStatus(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread"));
    std::atexit(finalizeAtExit);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return Status::ok();
}

void pause(int& spins) {
  // Spin briefly for latency, then back off to 1 ms so a long wait costs little CPU.
  if (++spins < 100) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000, (spins - 100) * 10 + 10)));
  }
}

struct HostInfo {
  uint64_t host_id;
  int32_t pid;
  char host[64];
  char path[108];
};

class MpiBootstrap final : public Bootstrap {
 public:
  static StatusOr<std::unique_ptr<Bootstrap>> connect(Deadline deadline) {
    PEERLAB_RETURN_IF_ERROR(ensureMpi());
    std::unique_ptr<MpiBootstrap> b(new MpiBootstrap());
    MPI_Request req = MPI_REQUEST_NULL;
    {
      std::lock_guard<std::mutex> lock(mpiMutex());
      PEERLAB_RETURN_IF_ERROR(mpiStatus(MPI_Comm_idup(MPI_COMM_WORLD, &b->comm_, &req), "MPI_Comm_idup"));
    }
    PEERLAB_RETURN_IF_ERROR(b->wait(req, nullptr, deadline, "duplicating MPI_COMM_WORLD", false, false));
    {
      std::lock_guard<std::mutex> lock(mpiMutex());
      MPI_Comm_set_errhandler(b->comm_, MPI_ERRORS_RETURN);
      MPI_Comm_rank(b->comm_, &b->rank_);
      MPI_Comm_size(b->comm_, &b->size_);
      for (int r = 0; r < b->size_; ++r) {
        b->send_mu_.push_back(std::make_unique<std::mutex>());
        b->recv_mu_.push_back(std::make_unique<std::mutex>());
      }
      PEERLAB_RETURN_IF_ERROR(
          mpiStatus(MPI_Irecv(b->abort_in_, kAbortBytes, MPI_BYTE, MPI_ANY_SOURCE, kTagAbort, b->comm_, &b->abort_req_),
                    "posting the abort receive"));
    }
    PEERLAB_RETURN_IF_ERROR(b->connectSideChannel(deadline));
    return std::unique_ptr<Bootstrap>(std::move(b));
  }

  ~MpiBootstrap() override {
    mesh_.reset();  // goodbyes to the peers of this host
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) return;
    // Let buffered sends reach peers that are still receiving them (bounded).
    const Deadline drain = Deadline::afterMs(failure_.isOk() ? 10'000 : 500);
    int spins = 0;
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mpiMutex());
        reapSendsLocked();
        if (pending_.empty() || drain.expired()) break;
      }
      pause(spins);
    }
    std::lock_guard<std::mutex> lock(mpiMutex());
    if (!pending_.empty()) {
      leaked_ = true;
      for (auto& p : pending_)
        p.release();  // MPI may still read these buffers
    }
    if (abort_req_ != MPI_REQUEST_NULL) {
      MPI_Cancel(&abort_req_);
      MPI_Wait(&abort_req_, MPI_STATUS_IGNORE);
    }
    // A communicator with an abandoned collective or send cannot be freed safely: leave it to MPI_Finalize.
    if (comm_ != MPI_COMM_NULL && !leaked_) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status allgather(const void* send, void* recv, size_t bytes, Deadline deadline) override {
    PEERLAB_RETURN_IF_ERROR(failure());
    if (bytes == 0) return barrier(deadline);
    if (send == nullptr || recv == nullptr) return PEERLAB_INVALID_ARGUMENT("allgather: null buffer");
    char* out = static_cast<char*>(recv);
    std::memmove(out + static_cast<size_t>(rank_) * bytes, send, bytes);
    for (size_t off = 0; off < bytes; off += kChunk) {
      const size_t len = std::min(kChunk, bytes - off);
      MPI_Request req = MPI_REQUEST_NULL;
      MPI_Datatype piece = MPI_DATATYPE_NULL;
      {
        std::lock_guard<std::mutex> lock(mpiMutex());
        // One element per rank: `len` bytes, with an extent of `bytes`, so rank r's piece lands at r * bytes + off.
        MPI_Datatype contiguous = MPI_DATATYPE_NULL;
        PEERLAB_RETURN_IF_ERROR(
            mpiStatus(MPI_Type_contiguous(static_cast<int>(len), MPI_BYTE, &contiguous), "MPI_Type_contiguous"));
        MPI_Type_create_resized(contiguous, 0, static_cast<MPI_Aint>(bytes), &piece);
        MPI_Type_commit(&piece);
        MPI_Type_free(&contiguous);
        int rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out + off, 1, piece, comm_, &req);
        if (rc != MPI_SUCCESS) {
          MPI_Type_free(&piece);
          return mpiStatus(rc, "MPI_Iallgather");
        }
      }
      Status st = wait(req, nullptr, deadline, "allgather", false, true);
      {
        std::lock_guard<std::mutex> lock(mpiMutex());
        if (req == MPI_REQUEST_NULL) MPI_Type_free(&piece);  // an abandoned request may still use it
      }
      PEERLAB_RETURN_IF_ERROR(st);
    }
    return Status::ok();
  }

  Status barrier(Deadline deadline) override {
    PEERLAB_RETURN_IF_ERROR(failure());
    MPI_Request req = MPI_REQUEST_NULL;
    {
      std::lock_guard<std::mutex> lock(mpiMutex());
      PEERLAB_RETURN_IF_ERROR(mpiStatus(MPI_Ibarrier(comm_, &req), "MPI_Ibarrier"));
    }
    return wait(req, nullptr, deadline, "barrier", false, true);
  }

  Status send(int peer, const void* data, size_t bytes, Deadline deadline) override {
    PEERLAB_RETURN_IF_ERROR(checkPeer(peer, "send"));
    if (bytes > 0 && data == nullptr) return PEERLAB_INVALID_ARGUMENT("send: null buffer");
    PEERLAB_RETURN_IF_ERROR(failure());
    if (peer == rank_) {
      std::lock_guard<std::mutex> lock(self_mu_);
      const auto* p = static_cast<const unsigned char*>(data);
      self_.emplace_back(p, p + bytes);
      return Status::ok();
    }
    // Header (the size) first, so a size mismatch is reported instead of truncating; then the chunks. One sender
    // per peer at a time keeps a header next to its chunks.
    std::lock_guard<std::mutex> order(*send_mu_[static_cast<size_t>(peer)]);
    uint64_t size = bytes;
    PEERLAB_RETURN_IF_ERROR(sendRaw(peer, &size, sizeof(size), deadline));
    for (size_t off = 0; off < bytes; off += kChunk) {
      PEERLAB_RETURN_IF_ERROR(
          sendRaw(peer, static_cast<const char*>(data) + off, std::min(kChunk, bytes - off), deadline));
    }
    return Status::ok();
  }

  Status recv(int peer, void* data, size_t bytes, Deadline deadline) override {
    PEERLAB_RETURN_IF_ERROR(checkPeer(peer, "recv"));
    if (bytes > 0 && data == nullptr) return PEERLAB_INVALID_ARGUMENT("recv: null buffer");
    PEERLAB_RETURN_IF_ERROR(failure());
    if (peer == rank_) {
      std::lock_guard<std::mutex> lock(self_mu_);
      if (self_.empty()) return PEERLAB_INVALID_ARGUMENT("recv: this rank has sent itself nothing");
      if (self_.front().size() != bytes) {
        return PEERLAB_INVALID_ARGUMENT("recv: queued message has " + std::to_string(self_.front().size()) +
                                        " bytes, expected " + std::to_string(bytes));
      }
      if (bytes > 0) std::memcpy(data, self_.front().data(), bytes);
      self_.pop_front();
      return Status::ok();
    }
    std::lock_guard<std::mutex> order(*recv_mu_[static_cast<size_t>(peer)]);
    uint64_t size = 0;
    PEERLAB_RETURN_IF_ERROR(recvRaw(peer, &size, sizeof(size), deadline));
    if (size != bytes) {
      // Drain the message so the stream stays in step, then report the mismatch.
      std::vector<char> sink(std::min<uint64_t>(size, kChunk));
      for (uint64_t off = 0; off < size; off += kChunk) {
        PEERLAB_RETURN_IF_ERROR(recvRaw(peer, sink.data(), std::min<uint64_t>(kChunk, size - off), deadline));
      }
      return PEERLAB_INVALID_ARGUMENT("recv: rank " + std::to_string(peer) + " sent " + std::to_string(size) +
                                      " bytes, this rank expected " + std::to_string(bytes));
    }
    for (size_t off = 0; off < bytes; off += kChunk) {
      PEERLAB_RETURN_IF_ERROR(recvRaw(peer, static_cast<char*>(data) + off, std::min(kChunk, bytes - off), deadline));
    }
    return Status::ok();
  }

  Status sendFds(int peer, const int* fds, size_t count, Deadline deadline) override {
    PEERLAB_RETURN_IF_ERROR(checkPeer(peer, "sendFds"));
    PEERLAB_RETURN_IF_ERROR(failure());
    PEERLAB_RETURN_IF_ERROR(sameHost(peer, "sendFds"));
    return mesh_->sendFds(peer, fds, count, deadline);
  }

  Status recvFds(int peer, int* fds, size_t count, Deadline deadline) override {
    PEERLAB_RETURN_IF_ERROR(checkPeer(peer, "recvFds"));
    PEERLAB_RETURN_IF_ERROR(sameHost(peer, "recvFds"));
    if (count == 0) return failure();
    // Wait for the first frame while watching for MPI aborts too, then take the descriptors.
    int spins = 0;
    while (!mesh_->hasFrame(peer, Channel::kFds)) {
      PEERLAB_RETURN_IF_ERROR(failure());
      if (deadline.expired()) {
        return PEERLAB_TIMEOUT("recvFds: rank " + std::to_string(rank_) + " waited for descriptors from rank " +
                               std::to_string(peer) + " until its deadline");
      }
      mesh_->progress(spins++ < 10 ? 0 : std::min(5, deadline.remainingMsForPoll())).ignore();
    }
    return mesh_->recvFds(peer, fds, count, deadline);
  }

  void abort(std::string_view why) noexcept override {
    try {
      setFailure(PEERLAB_UNAVAILABLE("rank " + std::to_string(rank_) + " aborted: " + std::string(why)));
      if (!abort_out_.empty()) return;  // told the peers already; its sends may still read abort_out_
      abort_out_.assign(why.substr(0, kAbortBytes));
      if (abort_out_.empty()) abort_out_ = "(no reason)";
      std::vector<MPI_Request> reqs;
      {
        std::lock_guard<std::mutex> lock(mpiMutex());
        for (int p = 0; p < size_; ++p) {
          if (p == rank_) continue;
          MPI_Request r = MPI_REQUEST_NULL;
          if (MPI_Isend(abort_out_.data(), static_cast<int>(abort_out_.size()), MPI_BYTE, p, kTagAbort, comm_, &r) ==
              MPI_SUCCESS) {
            reqs.push_back(r);
          }
        }
      }
      const Deadline deadline = Deadline::afterMs(1000);
      int spins = 0;
      while (!reqs.empty() && !deadline.expired()) {
        {
          std::lock_guard<std::mutex> lock(mpiMutex());
          int done = 0;
          MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE);
          if (done) reqs.clear();
        }
        pause(spins);
      }
      if (!reqs.empty()) leaked_ = true;
      if (mesh_) mesh_->abort(why);
    } catch (...) {
    }
  }

  std::string_view kind() const override { return "mpi"; }

 private:
  MpiBootstrap() = default;

  Status checkPeer(int peer, std::string_view what) const {
    if (peer < 0 || peer >= size_) {
      return PEERLAB_INVALID_ARGUMENT(std::string(what) + ": peer rank " + std::to_string(peer) + " is not in [0, " +
                                      std::to_string(size_) + ")");
    }
    return Status::ok();
  }

  Status sameHost(int peer, std::string_view what) const {
    if (!mesh_ || !mesh_->reaches(peer)) {
      return PEERLAB_UNAVAILABLE(std::string(what) + ": rank " + std::to_string(peer) + " runs on host '" +
                                 hosts_.at(static_cast<size_t>(peer)) +
                                 "'; file descriptors pass only between ranks of one host");
    }
    return Status::ok();
  }

  void setFailure(const Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.isOk()) failure_ = s;
  }

  // The first failure: an abort message from any rank, a dead rank of this host, or this rank's own abort.
  Status failure() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!failure_.isOk()) return failure_;
    }
    {
      std::lock_guard<std::mutex> lock(mpiMutex());
      reapSendsLocked();
      if (abort_req_ != MPI_REQUEST_NULL) {
        int done = 0;
        MPI_Status st;
        MPI_Test(&abort_req_, &done, &st);
        if (done) {
          int len = 0;
          MPI_Get_count(&st, MPI_BYTE, &len);
          const std::string why(abort_in_, static_cast<size_t>(std::clamp(len, 0, kAbortBytes)));
          setFailure(PEERLAB_UNAVAILABLE("rank " + std::to_string(st.MPI_SOURCE) + " aborted: " + why));
        }
      }
    }
    if (mesh_) {
      Status m = mesh_->progress(0);
      if (!m.isOk()) setFailure(m);
    }
    std::lock_guard<std::mutex> lock(mu_);
    return failure_;
  }

  // Polls `req` until it completes, the deadline passes or a failure shows up. A receive that did not complete is
  // cancelled; a collective or send cannot be withdrawn, so the bootstrap is then unusable.
  Status wait(MPI_Request& req, MPI_Status* status, Deadline deadline, std::string_view what, bool cancellable,
              bool watch_failures) {
    int spins = 0;
    std::optional<Deadline> grace;
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mpiMutex());
        int done = 0;
        MPI_Status st;
        int rc = MPI_Test(&req, &done, &st);
        if (rc != MPI_SUCCESS) return mpiStatus(rc, what);
        if (done) {
          if (status != nullptr) *status = st;
          return Status::ok();
        }
      }
      Status f = watch_failures ? failure() : Status::ok();
      const bool expired = deadline.expired();
      if (!f.isOk() && !expired && !grace) {
        // The failure may have raced the last pieces of this operation: give it a moment to complete first.
        grace = Deadline::afterMs(200).min(deadline);
      }
      if ((!f.isOk() && grace->expired()) || expired) {
        abandon(req, cancellable, what);
        if (!f.isOk()) return f.withContext(what);
        return PEERLAB_TIMEOUT(std::string(what) + ": rank " + std::to_string(rank_) +
                               " reached its deadline (a peer did not take part)");
      }
      pause(spins);
    }
  }

  void abandon(MPI_Request& req, bool cancellable, std::string_view what) {
    if (cancellable) {
      std::lock_guard<std::mutex> lock(mpiMutex());
      MPI_Cancel(&req);
      MPI_Wait(&req, MPI_STATUS_IGNORE);
      return;
    }
    leaked_ = true;
    setFailure(PEERLAB_UNAVAILABLE("an unfinished " + std::string(what) +
                                   " was abandoned; this MPI bootstrap cannot be used any more"));
  }

  // Buffered send: the bytes are copied and the MPI_Isend completes in the background (reaped by later calls and
  // the destructor), so two ranks sending to each other before receiving cannot deadlock.
  Status sendRaw(int peer, const void* data, size_t bytes, Deadline deadline) {
    auto pending = std::make_unique<PendingSend>();
    pending->bytes.assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
    std::lock_guard<std::mutex> lock(mpiMutex());
    reapSendsLocked();
    PEERLAB_RETURN_IF_ERROR(mpiStatus(
        MPI_Isend(pending->bytes.data(), static_cast<int>(bytes), MPI_BYTE, peer, kTagData, comm_, &pending->req),
        "MPI_Isend to rank " + std::to_string(peer)));
    pending_.push_back(std::move(pending));
    return Status::ok();
  }

  void reapSendsLocked() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      int done = 0;
      MPI_Test(&(*it)->req, &done, MPI_STATUS_IGNORE);
      it = done ? pending_.erase(it) : std::next(it);
    }
  }

  Status recvRaw(int peer, void* data, size_t bytes, Deadline deadline) {
    MPI_Request req = MPI_REQUEST_NULL;
    {
      std::lock_guard<std::mutex> lock(mpiMutex());
      PEERLAB_RETURN_IF_ERROR(
          mpiStatus(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, kTagData, comm_, &req), "MPI_Irecv"));
    }
    MPI_Status st;
    PEERLAB_RETURN_IF_ERROR(wait(req, &st, deadline, "recv from rank " + std::to_string(peer), true, true));
    int got = 0;
    MPI_Get_count(&st, MPI_BYTE, &got);
    if (static_cast<size_t>(got) != bytes) {
      return PEERLAB_INVALID_ARGUMENT("recv: rank " + std::to_string(peer) + " sent " + std::to_string(got) +
                                      " bytes, expected " + std::to_string(bytes));
    }
    return Status::ok();
  }

  // Exchanges host names and socket paths, then connects a Unix socket mesh among the ranks of each host.
  Status connectSideChannel(Deadline deadline) {
    auto dir = makePrivateDir("peerlab-mpi");
    Status st = dir.status();
    HostInfo mine{};
    mine.host_id = detail::hostIdentity();
    mine.pid = static_cast<int32_t>(getpid());
    std::snprintf(mine.host, sizeof(mine.host), "%s", detail::hostName().c_str());
    const std::string path = dir.isOk() ? *dir + "/s" : std::string();
    std::snprintf(mine.path, sizeof(mine.path), "%s", path.c_str());
    std::vector<HostInfo> all(static_cast<size_t>(size_));
    PEERLAB_RETURN_IF_ERROR(allgather(&mine, all.data(), sizeof(HostInfo), deadline).withContext("exchanging hosts"));
    std::vector<UnixMesh::PeerAddress> peers;
    for (int r = 0; r < size_; ++r) {
      const HostInfo& h = all[static_cast<size_t>(r)];
      hosts_.emplace_back(h.host, strnlen(h.host, sizeof(h.host)));
      if (r != rank_ && h.host_id == mine.host_id) {
        peers.push_back({r, std::string(h.path, strnlen(h.path, sizeof(h.path)))});
      }
    }
    if (st.isOk()) {
      auto mesh = UnixMesh::connect(rank_, size_, path, peers, deadline);
      if (mesh.isOk()) {
        mesh_ = std::move(mesh).value();
      } else {
        st = mesh.status();
      }
      std::error_code ec;
      std::filesystem::remove_all(*dir, ec);
    }
    // Every rank learns whether every rank connected, so none goes on with a half-built side channel.
    int32_t ok = st.isOk() ? 1 : 0;
    std::vector<int32_t> oks(static_cast<size_t>(size_));
    PEERLAB_RETURN_IF_ERROR(allgather(&ok, oks.data(), sizeof(ok), deadline));
    if (!st.isOk()) return st.withContext("connecting the same-host fd channel");
    for (int r = 0; r < size_; ++r) {
      if (!oks[static_cast<size_t>(r)]) {
        return PEERLAB_UNAVAILABLE("rank " + std::to_string(r) + " could not connect its same-host fd channel");
      }
    }
    return Status::ok();
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::unique_ptr<UnixMesh> mesh_;
  std::vector<std::string> hosts_;
  MPI_Request abort_req_ = MPI_REQUEST_NULL;
  char abort_in_[kAbortBytes] = {};
  std::string abort_out_;
  std::mutex mu_;
  Status failure_;
  bool leaked_ = false;
  struct PendingSend {
    MPI_Request req = MPI_REQUEST_NULL;
    std::vector<char> bytes;
  };
  std::deque<std::unique_ptr<PendingSend>> pending_;  // guarded by mpiMutex()
  std::vector<std::unique_ptr<std::mutex>> send_mu_;  // by peer
  std::vector<std::unique_ptr<std::mutex>> recv_mu_;  // by peer
  std::mutex self_mu_;
  std::deque<std::vector<unsigned char>> self_;
};

}  // namespace

StatusOr<std::unique_ptr<Bootstrap>> connectMpi(Deadline deadline) {
  return MpiBootstrap::connect(deadline);
}

}  // namespace peerlab::launch
