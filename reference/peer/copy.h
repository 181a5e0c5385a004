#pragma once
/// PeerCopier: copies between the memory of two GPUs by the copy engines, by SM kernels (pull or push) or through
/// pinned host memory. The streams, events and bounce buffers it needs are created once (on first use of a device or
/// pair, or up front with prepare()) and reused: no copy allocates once its pair is prepared.
///
/// Stream semantics of copy(): `stream` may belong to any visible device; nullptr, cudaStreamLegacy and
/// cudaStreamPerThread mean that stream of the caller's current device. The copy starts after all work enqueued on
/// `stream` before the call, and work enqueued on `stream` after the call sees the finished copy (source fully read,
/// destination fully written). The device that runs the copy is: for ce, the device of `stream` when it is src or
/// dst, else dst; for sm_pull, dst; for sm_push, src. When `stream` belongs to that device the work goes on `stream`
/// itself (no extra synchronization); otherwise the copy runs on an internal stream of that device joined to
/// `stream` by events (record on `stream`, wait, copy, record, wait on `stream`). The staged copy always runs on two
/// internal streams of the ordered pair (device-to-host on src, host-to-device on dst) joined the same way.
/// copy() only enqueues; it never waits for the GPU. On an error the destination's content is unspecified.
///
/// Memory: src and dst must be device memory of the named devices (cudaMalloc, cudaMallocAsync pools and managed
/// memory pass the pointer check); memory that peer access does not map (cuMemCreate/VMM allocations or pools without
/// cudaMemPoolSetAccess for the peer) must be mapped for the peer by the caller before an SM path reads or writes it.
///
/// SM kernels (SmCopyConfig): a vector kernel (16-byte loads and stores by every thread, any alignment) and, on
/// compute capability 9.0, a bulk kernel that streams chunks through shared memory with the bulk-copy engine
/// (cp.async.bulk) when source and destination are equally aligned modulo 16; kAuto picks the bulk kernel for such
/// copies of kBulkMinBytes or more.
///
/// Teardown: the copier's streams and events are destroyed with their own device current (a stream is released in
/// the context that created it), and the caller's current context is restored.
///
/// Peer access: the copier enables it (enablePeerAccess) on first use of a pair and then assumes it stays enabled;
/// code that disables it must do so through peerlab (disablePeerAccess), which the copier notices, never behind its
/// back (an SM kernel reading through a removed mapping faults).
///
/// Thread safety: calls on one PeerCopier are serialized by a mutex; several threads may share one.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "reference/core/deadline.h"
#include "reference/core/status.h"
#include "reference/peer/copy_plan.h"

namespace peerlab::peer {

struct PeerCopierOptions {
  SmCopyConfig sm;                       ///< launch configuration of the SM copy kernels
  size_t staging_chunk_bytes = 8 << 20;  ///< size of each of the two bounce buffers of an ordered pair
  bool check_pointers = true;            ///< check on every copy that src/dst are memory of the named devices and
                               ///< that [p, p + bytes) stays inside its allocation (a pointer-attribute query per copy)
};

class PeerCopier {
 public:
  /// `unavailable` without a visible device; `invalid_argument` for a bad SM configuration.
  static StatusOr<PeerCopier> create(const PeerCopierOptions& options = {});

  PeerCopier(PeerCopier&&) noexcept;
  PeerCopier& operator=(PeerCopier&&) noexcept;
  /// Waits (up to 30 s) for the copies still running on internal streams before freeing what they use; bounce
  /// buffers of copies that did not finish in time are leaked rather than freed under the GPU.
  ~PeerCopier();

  /// Copies `bytes` from `src` (memory of `src_device`) to `dst` (memory of `dst_device`), ordered on `stream` (see
  /// the header comment). kAuto enables peer access and uses the copy engine, or the staged path when peer access is
  /// impossible; the explicit peer paths (ce, sm_pull, sm_push) enable peer access and fail with `unavailable` when
  /// it is impossible. Returns the path that ran.
  StatusOr<CopyPath> copy(void* dst, int dst_device, const void* src, int src_device, size_t bytes, cudaStream_t stream,
                          CopyPath path = CopyPath::kAuto);

  /// Creates now what copies src_device -> dst_device by `path` would create on first use: peer access, internal
  /// streams and events, bounce buffers. For kAuto, also the bounce buffers when peer access is impossible.
  Status prepare(int src_device, int dst_device, CopyPath path);

  /// Replaces the SM kernels' launch configuration for later copies.
  Status setSmConfig(const SmCopyConfig& config);
  SmCopyConfig smConfig() const;

  /// SMs that an SM-path copy of `bytes` (aligned) occupies on the device running it; 0 for ce, staged and auto.
  int smsFor(CopyPath path, int src_device, int dst_device, size_t bytes) const;
  /// The kernel (kVector or kBulk) an sm_pull / sm_push copy of `bytes` from `src` to `dst` runs with the current
  /// configuration; kAuto for the other paths and for devices out of range (they run no SM kernel).
  SmKernel smKernelFor(CopyPath path, int src_device, int dst_device, const void* dst, const void* src,
                       size_t bytes) const;

  /// Waits for everything enqueued on this copier's internal streams.
  Status synchronize(Deadline deadline);

  int deviceCount() const;

 private:
  struct Impl;
  explicit PeerCopier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace peerlab::peer
