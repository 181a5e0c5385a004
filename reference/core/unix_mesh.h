#pragma once
/// A full mesh of Unix stream sockets between the ranks of one host: framed messages on independent channels,
/// file descriptors with SCM_RIGHTS, abort broadcast, and peer death detection (EOF or reset without a goodbye).
/// The local bootstrap runs entirely on it; the MPI bootstrap uses it for fd passing between ranks of a host.

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "reference/core/deadline.h"
#include "reference/core/fd.h"
#include "reference/core/status.h"

namespace peerlab::detail {

/// Independent message streams: a recv on one channel never consumes a frame of another.
enum class Channel : uint32_t { kData = 0, kColl = 1, kFds = 2 };
inline constexpr int kChannels = 3;

/// Most descriptors one frame carries (below the kernel's SCM_MAX_FD).
inline constexpr size_t kMaxFdsPerFrame = 64;

/// A received message. Owns its file descriptors until they are released.
struct Frame {
  Channel channel = Channel::kData;
  uint64_t tag = 0;
  std::vector<unsigned char> payload;
  std::vector<Fd> fds;
};

class UnixMesh {
 public:
  struct PeerAddress {
    int rank = -1;
    std::string path;  ///< its listening socket
  };

  /// Listens on `listen_path`, then connects to every rank in `peers`: a rank connects to the lower ranks and
  /// accepts the higher ones, so no two ranks wait on each other. Times out naming the ranks that did not arrive.
  static StatusOr<std::unique_ptr<UnixMesh>> connect(int rank, int size, const std::string& listen_path,
                                                     const std::vector<PeerAddress>& peers, Deadline deadline);
  /// Says goodbye to every connected peer (so they can tell a clean exit from a crash) and closes the sockets.
  ~UnixMesh();
  UnixMesh(const UnixMesh&) = delete;
  UnixMesh& operator=(const UnixMesh&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// True when `peer` (or this rank itself) is reachable through the mesh.
  bool reaches(int peer) const;

  /// Sends one frame; while the socket is full, keeps reading every peer so two ranks sending to each other
  /// cannot block each other. Frames to one peer from several threads are never interleaved.
  Status send(int peer, Channel channel, uint64_t tag, const void* data, size_t bytes, const int* fds, size_t nfds,
              Deadline deadline);
  /// The next frame of `channel` from `peer`, waiting with a deadline.
  StatusOr<Frame> recv(int peer, Channel channel, Deadline deadline);
  /// Reads what has arrived from every peer for up to `timeout_ms` (0: no wait). Returns the failure, if any.
  Status progress(int timeout_ms);
  /// True when a frame of `channel` from `peer` is queued (a recv would not wait).
  bool hasFrame(int peer, Channel channel) const;

  /// Sends `count` descriptors (in frames of at most kMaxFdsPerFrame).
  Status sendFds(int peer, const int* fds, size_t count, Deadline deadline);
  /// Receives `count` descriptors that `peer` sent with sendFds; the caller owns them. A count mismatch is an error.
  Status recvFds(int peer, int* fds, size_t count, Deadline deadline);

  /// The first failure: a peer aborted or died, or this rank aborted. Ok while none.
  Status failure() const;
  /// Records a failure found elsewhere (e.g. by the MPI layer); the first one wins.
  void setFailure(const Status& failure);
  /// Tells every peer this rank failed (best effort, bounded), then fails every later call.
  void abort(std::string_view why) noexcept;

 private:
  struct Peer;
  UnixMesh(int rank, int size);
  Status sendRaw(Peer& p, int peer, uint32_t type, uint64_t tag, const void* data, size_t bytes, const int* fds,
                 size_t nfds, Deadline deadline, bool check_failure);
  Status progressInternal(int timeout_ms, int write_peer);
  void readAvailable(int peer);
  void markGone(int peer, const std::string& why, bool dead);
  Status peerClosedError(int peer, std::string_view what) const;

  int rank_;
  int size_;
  std::vector<std::unique_ptr<Peer>> peers_;  // by rank; null for ranks outside the mesh
  mutable std::mutex mu_;                     // queues, peer states, failure_
  Status failure_;
  std::atomic<int> active_{0};
};

/// A hash of the host name and kernel boot id: equal for the processes of one host.
uint64_t hostIdentity();
/// This host's name.
std::string hostName();
/// Longest path a Unix socket address holds.
size_t maxSocketPathLength();

}  // namespace peerlab::detail
