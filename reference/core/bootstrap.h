#pragma once
/// Bootstrap: how the ranks of one job exchange bytes and file descriptors on the host. The primitives use this
/// interface to trade IPC handles; reference/core/local_bootstrap.h implements it over Unix sockets, harness/launch
/// over MPI.

#include <cstddef>
#include <string>
#include <string_view>

#include "reference/core/deadline.h"
#include "reference/core/status.h"

namespace peerlab {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  /// Every rank contributes `bytes` from `send`; `recv` holds size() * bytes, rank r's contribution at r * bytes.
  virtual Status allgather(const void* send, void* recv, size_t bytes, Deadline deadline) = 0;
  /// Returns when every rank has entered the barrier, or fails (timeout, a peer aborted or died).
  virtual Status barrier(Deadline deadline) = 0;
  /// Point-to-point bytes; a send matches the peer's recv of the same size, in order.
  virtual Status send(int peer, const void* data, size_t bytes, Deadline deadline) = 0;
  virtual Status recv(int peer, void* data, size_t bytes, Deadline deadline) = 0;
  /// Passes POSIX file descriptors to a peer on the same host (SCM_RIGHTS); `unavailable` where impossible.
  virtual Status sendFds(int peer, const int* fds, size_t count, Deadline deadline) = 0;
  /// Receives `count` descriptors from `peer`; the caller owns and closes them.
  virtual Status recvFds(int peer, int* fds, size_t count, Deadline deadline) = 0;
  /// Tells every peer that this rank failed; their pending and later calls fail with a message naming it.
  virtual void abort(std::string_view why) noexcept = 0;
  /// "local" or "mpi".
  virtual std::string_view kind() const = 0;
};

}  // namespace peerlab
