#pragma once
/// Semaphore zero-copy get / put over CUDA IPC, synchronized with stream memory operations, and an SM-signalled
/// variant for small messages. Everything is enqueued on streams: the host never spins, and a sequence of calls can be
/// captured into a CUDA graph (zcopy::Graph) and replayed.
///
///   PEERLAB_ASSIGN_OR_RETURN(auto ctx, zcopy::Context::create(boot, {.device = dev}, deadline));     // collective
///   zcopy::ChannelOptions o{.peer = 1, .channel = 0, .protocol = zcopy::Protocol::kGet, .role = zcopy::Role::kSender,
///                           .window = &src.get()};
///   PEERLAB_ASSIGN_OR_RETURN(auto ch, zcopy::Channel::create(ctx, o, deadline));                       // pairwise
///   ch.sendPost(stream); ch.sendWait(stream);              // receiver: recvPost(stream, dst, offset, n); recvWait
///   PEERLAB_RETURN_IF_ERROR(ctx.wait(stream, deadline, "get"));                                       // bounded
///   PEERLAB_RETURN_IF_ERROR(ctx.close(deadline));                                                     // collective
///
/// Semaphores (semaphore.h): per peer, channel and direction one 32-bit word in each process's exported page; waits
/// poll local memory (cuStreamWaitValue32, cyclic GEQ), signals write the peer's word (cuStreamWriteValue32 with the
/// default memory barrier, so everything before is visible first). Words carry epochs, never reset. GEQ rather than
/// EQ: a signaller may run ahead (a get sender posting an unchanged source twice) and the later epoch must satisfy the
/// earlier wait; EQ would hang. Inside a graph (Graph::capture) get/put stay stream memory operations whose epochs
/// Graph::launch writes into the executable graph before each replay (GraphSync::kMemOps), or become one-thread
/// kernels that take their epochs from device counters (GraphSync::kKernels, protocol.h ReplayEpochs).
///
/// sm_signal (semaphore.h, semaphore_device.cuh): a message of at most kSmLlMaxBytes rides in LL lines of the
/// receiver's slot (8 payload bytes and the epoch twice in one 16-byte store, two buffers alternating by epoch) and
/// the receiver's wait copies it into its window: no fence and no separate signal, and a sender needs only the "free"
/// of the message before. Larger messages are pushed into the window and released with system-scope flags.
///
/// Contexts and channels are not thread-safe: one thread drives a context and its channels, and all calls of one
/// channel go to one stream (or streams ordered by events), since their epochs are assigned in call order.
///
/// Lazy loading: a kernel's first launch may synchronize the whole device while CUDA loads its module
/// (CUDA_MODULE_LOADING=LAZY, the default), and so may a first launch that needs more per-thread stack than the device
/// has reserved so far. A stream blocked on a peer's signal would then block that launch, and a launch the peer waits
/// for would never come. Context::create loads every kernel of this library up front; a kernel of your own that
/// drives channels through smView() must be loaded before any stream can block (cudaFuncGetAttributes once), and if
/// it uses a stack frame, launched once as well.
///
/// Teardown: Channels, then Context::close (collective: every rank unmaps what it imported, barrier), then free the
/// windows. After a peer failed: Context::abandon releases stream waits that can no longer be satisfied (with memsets
/// from a rescue stream, not stream memory operations, which may be what failed), then the
/// destructors tear down without the bootstrap. Freeing memory and destroying the context synchronize the device: a
/// stream that can never drain (abandon failed) makes them wait forever, so such a process must leave with _Exit.

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "reference/core/bootstrap.h"
#include "reference/core/deadline.h"
#include "reference/core/owned.h"
#include "reference/core/status.h"
#include "reference/ipc/ipc.h"
#include "reference/zcopy/protocol.h"
#include "reference/zcopy/semaphore.h"

namespace peerlab::zcopy {

/// Options of a Context; every rank passes the same channels, initial_epoch and semaphore_kind.
struct ContextOptions {
  int device = -1;             ///< this rank's GPU (CUDA ordinal in this process)
  int channels = 8;            ///< channels per peer and direction
  uint32_t initial_epoch = 0;  ///< first epoch is initial_epoch + 1; near 2^32 to test wraps
  ipc::HandleKind semaphore_kind = ipc::HandleKind::kVmmFd;  ///< how the semaphore page is shared
  uint64_t device_timeout_ns = 10'000'000'000ull;            ///< bound of every device-side spin (sm_signal, graphs)
  /// sm_signal kernels launch with programmatic dependent launch (reference/core/programmatic.cuh) where the device
  /// has it: back to back, a call's kernel is scheduled while the previous one finishes and waits for it on the GPU.
  bool programmatic_launch = true;
};

/// One rank's zero-copy state: the exported semaphore page and the peers' pages mapped, device epoch counters,
/// host-mapped error words, and a cache of imported data windows. Movable; channels keep it alive.
class Context {
 public:
  /// Collective over `boot` (which must outlive the context). `unavailable` when stream memory operations or the
  /// handle kind are not supported here; `invalid_argument` when ranks disagree on the options.
  static StatusOr<Context> create(Bootstrap& boot, const ContextOptions& options, Deadline deadline);

  Context(Context&&) noexcept;
  Context& operator=(Context&&) noexcept;
  /// Not collective: unmaps and frees without a barrier (the path after a peer failed). Prefer close().
  ~Context();

  int rank() const;
  int size() const;
  int device() const;
  const ContextOptions& options() const;

  /// Waits for everything enqueued on `stream` so far, with a deadline: `timeout` when the deadline passes or a peer
  /// process is gone (checked every millisecond where its pid is visible), else the first device-side error of any
  /// channel (a bounded spin that timed out). Stream waits cannot time out by themselves: this is the bound.
  Status wait(cudaStream_t stream, Deadline deadline, std::string_view what);
  /// First device-side error reported by any channel (ok when none).
  Status deviceErrors() const;

  /// After a timeout or a lost peer: writes into this rank's OWN semaphore words, from the host through a separate
  /// stream, the last epoch each channel's stream waits for, so every blocked cuStreamWaitValue32 completes and the
  /// streams drain (copies then read or write the dead peer's memory, which stays allocated while it is mapped here:
  /// guaranteed for kVmmFd windows and pages). Every channel is unusable afterwards. Not collective.
  Status abandon(Deadline deadline);

  /// Collective teardown: unmaps imported windows and pages, barrier, frees this rank's page. Channels fail after it.
  Status close(Deadline deadline);

  struct Impl;
  Impl* impl() const { return impl_.get(); }

 private:
  friend class Channel;
  explicit Context(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

/// A batch of semaphore operations: adjacent calls on one stream reach the GPU as few commands as possible.
///   get / put: adjacent waits and writes of several calls become ONE cuStreamBatchMemOp (a chain like "done of one
///     message, ready of the next" costs one front-end command); within a batch only the first write carries the
///     memory barrier (later writes follow memory operations only, which write nothing the barrier must order).
///   sm_signal: adjacent calls (sends of at most kSmFusedSendBytes, frees, waits) run as steps of ONE kernel.
/// A call that copies or launches something else flushes what is pending first. Enqueue nothing else on the stream
/// while operations are pending (flush first). Works inside graph capture (one memop node or kernel node per flush).
class MemOpBatch {
 public:
  explicit MemOpBatch(cudaStream_t stream) : stream_(stream) {}
  MemOpBatch(const MemOpBatch&) = delete;
  MemOpBatch& operator=(const MemOpBatch&) = delete;
  /// Enqueues what is still pending (an error then surfaces at the next wait on the stream). Prefer flush().
  ~MemOpBatch();

  cudaStream_t stream() const { return stream_; }
  size_t pending() const { return ops_.size() + program_.count; }
  /// Enqueues the pending operations: one cuStreamWaitValue32 / cuStreamWriteValue32 for one, else one batch; or
  /// the one kernel of the pending sm_signal steps.
  Status flush();
  /// Adds a wait until (int32_t)(*addr - value) >= 0 (`flags`: CU_STREAM_WAIT_VALUE_GEQ, optionally ..._FLUSH).
  Status addWait(const uint32_t* addr, uint32_t value, unsigned flags);
  /// Adds a write of `value` to `addr`, after everything before it is visible.
  Status addWrite(uint32_t* addr, uint32_t value);
  /// Adds an sm_signal step (Channel calls do; a send of more than kSmFusedSendBytes is refused). The fused kernel
  /// launches programmatically when every step of it asked for that.
  Status addSmStep(const SmStep& step, bool programmatic = false);

 private:
  static constexpr size_t kMaxOps = 64;
  Status flushMemOps();
  Status flushSteps();
  cudaStream_t stream_;
  std::vector<CUstreamBatchMemOpParams> ops_;
  SmProgram program_{};
  bool program_programmatic_ = true;
};

/// Where a call enqueues: a stream (each semaphore operation its own command) or a MemOpBatch.
class StreamRef {
 public:
  StreamRef(cudaStream_t stream) : stream_(stream) {}                        // NOLINT: implicit on purpose
  StreamRef(MemOpBatch& batch) : stream_(batch.stream()), batch_(&batch) {}  // NOLINT
  cudaStream_t stream() const { return stream_; }
  MemOpBatch* batch() const { return batch_; }

 private:
  cudaStream_t stream_ = nullptr;
  MemOpBatch* batch_ = nullptr;
};

/// Options of one side of a one-directional channel.
struct ChannelOptions {
  int peer = -1;    ///< the other rank
  int channel = 0;  ///< 0 .. ContextOptions::channels - 1; both sides name the same one
  Protocol protocol = Protocol::kGet;
  Role role = Role::kSender;
  /// The window this side exports: the source of a get sender, the destination of a put or sm_signal receiver.
  /// Ignored on the other side. Must stay allocated until Context::close returned on every rank.
  const ipc::ExportAllocation* window = nullptr;
  size_t window_offset = 0;  ///< exported range within the allocation
  size_t window_bytes = 0;   ///< 0: to the end of the allocation
};

/// One side of a one-directional zero-copy channel. The k-th post on one side matches the k-th on the other;
/// both sides name the same byte count. Calls fail with `invalid_argument` when used out of order (protocol.h).
class Channel {
 public:
  /// Pairwise with the peer's create of the opposite role on the same channel (both must call it).
  static StatusOr<Channel> create(Context& ctx, const ChannelOptions& options, Deadline deadline);

  Channel(Channel&&) noexcept;
  Channel& operator=(Channel&&) noexcept;
  ~Channel();

  /// get sender: the source window is ready (signals the receiver).
  Status sendPost(StreamRef s);
  /// put / sm_signal sender: waits until the receiver's window is free, pushes [src, src + bytes) to its window at
  /// `dst_offset`, signals arrival.
  Status sendPost(StreamRef s, const void* src, size_t dst_offset, size_t bytes);
  /// Sender: after this (in stream order) the source may be reused (get: waits for the receiver's "done").
  Status sendWait(StreamRef s);
  /// get receiver: waits for "ready", pulls [src_offset, src_offset + bytes) of the sender's window into `dst`,
  /// signals "done".
  Status recvPost(StreamRef s, void* dst, size_t src_offset, size_t bytes);
  /// put / sm_signal receiver: the destination window is free for the next message.
  Status recvPost(StreamRef s);
  /// Receiver: after this (in stream order) the message is in place (put / sm_signal: waits for arrival).
  Status recvWait(StreamRef s);

  /// Device-side error of this channel (a bounded spin that timed out), ok when none.
  Status deviceError() const;
  /// The view a kernel uses to drive an sm_signal channel itself (functions in semaphore_device.cuh). After such a
  /// kernel, call accountDeviceCalls so the host's bookkeeping follows.
  StatusOr<SmEndpointView> smView() const;
  /// Records `count` calls of `call` made by device code through smView().
  Status accountDeviceCalls(Call call, uint64_t count);

  Protocol protocol() const;
  Role role() const;
  int peer() const;
  int channel() const;
  /// SMs this channel occupies for a `bytes` message (get / put: 0, or 1 when synchronized by kernels inside a graph
  /// (GraphSync::kKernels); sm_signal: the blocks of its send kernel).
  int smsOccupied(size_t bytes, bool sync_kernels) const;
  /// Bytes of the peer's window this side maps (get receiver, put / sm_signal sender), else 0.
  size_t remoteWindowBytes() const;

  struct State;

 private:
  friend class Graph;
  explicit Channel(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

namespace detail {
void destroyGraphExec(cudaGraphExec_t g) noexcept;
}  // namespace detail
using GraphExec = Owned<PointerTraits<cudaGraphExec_t, detail::destroyGraphExec>>;

namespace detail {
void destroyGraph(cudaGraph_t g) noexcept;
}  // namespace detail
using GraphOwner = Owned<PointerTraits<cudaGraph_t, detail::destroyGraph>>;

/// Options of Graph::capture.
struct GraphOptions {
  GraphSync sync = GraphSync::kMemOps;  ///< how captured get/put calls wait and signal
};

/// A captured sequence of channel calls (and anything else enqueued on the stream), replayable.
class Graph {
 public:
  /// Captures what `body` enqueues on `stream` into a graph (thread-local capture mode). Calls of `channels` made
  /// while capturing are captured as they would run eagerly (stream memory operations, copies, sm_signal kernels),
  /// except that get/put under GraphSync::kKernels wait and signal with one-thread kernels. Every replay moves the
  /// channels' epochs forward (sm_signal and kKernels through device counters, kMemOps through the values
  /// launch() writes into the graph's memory-operation nodes). A MemOpBatch that `body` uses must be flushed before
  /// `body` returns. The graph is uploaded to the device here.
  static StatusOr<Graph> capture(cudaStream_t stream, const std::vector<Channel*>& channels,
                                 const std::function<Status()>& body, const GraphOptions& options = {});

  Graph(Graph&&) noexcept = default;
  Graph& operator=(Graph&&) noexcept = default;

  /// Brings the graph's epochs up to date (kMemOps: the epochs of this replay into the memory-operation nodes;
  /// kKernels: device counters, one batch of memory operations, where eager calls ran since the last launch),
  /// launches, and advances the host's epochs by one replay. Launch through this, never with cudaGraphLaunch.
  Status launch(cudaStream_t stream);
  uint64_t launches() const { return launches_; }
  cudaGraphExec_t exec() const { return exec_.get(); }
  GraphSync sync() const { return sync_; }
  /// Memory-operation nodes whose epochs launch() rewrites (kMemOps), and the operations they hold.
  size_t memOpNodes() const { return nodes_.size(); }
  size_t memOps() const;

 private:
  struct Entry {
    std::shared_ptr<Channel::State> channel;
    StateDelta per_replay;
    EndpointState base;  // the host's state when the capture began: the epochs the nodes were captured with
  };
  // One memory operation of a node whose value follows a channel's epochs.
  struct Patch {
    size_t op = 0;     // index in the node's operations
    size_t entry = 0;  // channel
    bool wait = false;
    uint32_t captured = 0;
  };
  struct MemOpNode {
    CUgraphNode node = nullptr;
    CUcontext ctx = nullptr;
    unsigned flags = 0;
    std::vector<CUstreamBatchMemOpParams> ops;  // as the executable graph holds them now
    std::vector<Patch> patches;
  };
  Graph() = default;
  Status findMemOpNodes(cudaGraph_t g, size_t expected);
  // Declaration order: the executable graph goes before the graph it was instantiated from.
  GraphOwner graph_;
  GraphExec exec_;
  std::vector<Entry> entries_;
  std::vector<MemOpNode> nodes_;
  GraphSync sync_ = GraphSync::kMemOps;
  int device_ = -1;
  uint64_t launches_ = 0;
};

}  // namespace peerlab::zcopy
