#pragma once
/// GPU-initiated alltoallv with device-side counts over symmetric memory.
///
/// One kernel launch per call and no host involvement. Two protocols:
///
/// Fused (the default, push only): one pass. At kernel start each rank writes, into its slot in every peer's
/// symmetric region, its row of counts and, for every segment of at most `ll_max_bytes`, the payload itself, all as
/// LL words (8 data bytes + two copies of the call's tag per 16-byte store; see layout.h): a receiver that sees the
/// tags needs no fence and no separate completion flag, so a small call costs one NVLink trip plus a local copy out
/// of the slot. Segments above the threshold are pushed straight into the receiver's buffer: below
/// Options::queue_min_bytes in total, each CTA copies one contiguous piece (CTAs shared out by bytes); above, by a
/// work-stealing grid (CTAs take chunks from per-peer queues, starting spread over all peers, or with every rank on one
/// peer at a time when the traffic is even, and moving on when one runs dry). Each CTA releases its own pushes: once
/// its last chunk is done, one fence, then the bytes it moved for each receiver added to that receiver's count for this
/// rank; the receiver's CTA 0 waits until every large segment's count is whole (no CTA waits for another, and the last
/// chunk costs one fence and one NVLink trip). Every CTA reads the count matrix from the slot headers and validates it,
/// so on bad counts nothing is copied into any receive buffer and every rank reports the same error. Slots alternate
/// with the call's parity: a sender writes a slot again two calls later, and it cannot start that call before the
/// receiver has started the call in between (every call waits for every peer's header), i.e. finished reading it.
/// Large pushes into a receiver's buffer likewise start only after its header of the same call, so they never race
/// the receiver's consumers of the previous call.
///
/// A small call is latency-bound: one thread's chain of dependent instructions sets its time, so the fused kernel
/// keeps its critical path short: warp 0 loads the epoch and the row together, computes
/// offsets and the send and receive lists with shuffles into per-peer pointers in shared memory (no serial loops, no
/// local memory), and every word of the call is then one lookup, one load and one store; the local segment of a call
/// without large segments is copied in the same loop as the LL words. The launch arguments are copied into shared
/// memory while the kernel waits for the one before it. When the capacities guarantee that every call is small
/// (send_capacity x elem_bytes within the LL threshold), the launch uses a kernel compiled without the work queue
/// (Options::small_kernel).
///
/// Two-phase (push or pull): counts first (epoch-tagged words), then the payload with 16-byte loads/stores directly
/// between ranks' buffers (push: the sender stores into the receiver's buffer; pull: the receiver loads from the
/// sender's), then a system-scope release flag per segment.
///
/// Calls are reusable back to back and capturable in a CUDA graph (the epoch lives in device memory). Every device
/// wait is bounded by %globaltimer.
///
/// Buffers: the send and receive buffers both live in the symmetric region owned by AllToAllV (sendBuffer(),
/// recvBuffer()): push writes straight into the peer's receive buffer and pull reads straight from the peer's send
/// buffer, so large segments never stage a copy (small fused segments pass through the receiver's LL slot and one
/// local copy, cheaper than the NVLink trip it saves). Producers write their data into sendBuffer(); consumers read
/// recvBuffer(). A user buffer outside the region would cost one extra full copy per call.
///
/// CTAs spin on peers, so every CTA of a launch must be resident at once (grids are capped accordingly); another
/// kernel holding the SMs for longer than the timeout makes the call fail with `timeout` instead of hanging.
///
///   auto a2a = AllToAllV::create(boot, device, {.elem_bytes = 2, .send_capacity = n, .recv_capacity = m}, deadline);
///   producer<<<..., stream>>>(a2a->sendBuffer(), counts);          // counts: int64 per destination, on the GPU
///   a2a->run(stream, counts, recv_counts, recv_offsets);           // launches one kernel, never syncs
///   consumer<<<..., stream>>>(a2a->recvBuffer(), recv_counts, recv_offsets);
///   a2a->checkStatus(deadline);                                     // optional: the one explicit host sync

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "reference/alltoallv/layout.h"
#include "reference/alltoallv/symmetric_memory.h"
#include "reference/core/bootstrap.h"
#include "reference/core/deadline.h"
#include "reference/core/memory.h"
#include "reference/core/status.h"

namespace peerlab::alltoallv {

/// Who moves the payload across NVLink.
enum class Transfer : uint32_t {
  kPush = 0,  ///< the sender stores into the receiver's buffer (posted writes)
  kPull = 1,  ///< the receiver loads from the sender's buffer
};
std::string_view transferName(Transfer t);

/// How a call synchronizes (see the file comment).
enum class Protocol : uint32_t {
  kAuto = 0,      ///< fused for push, two-phase for pull
  kFused = 1,     ///< counts, small segments and their completion in one pass of LL words; push only
  kTwoPhase = 2,  ///< counts, then payload, then a completion flag per segment
};
std::string_view protocolName(Protocol p);

/// Segments up to this size ride in LL slots by default (fused protocol). LL words carry 8 data bytes per 16, so
/// they double what a segment puts on the link, but they need no per-receiver flag and no fence; the crossover was
/// measured (docs/alltoallv.md).
inline constexpr uint64_t kDefaultLlMaxBytes = 512 * 1024;
/// Default Options::queue_min_bytes. Below it the static split wins, where the queue's per-chunk barriers and job
/// changes are a large share of the call; above it the queue keeps CTAs busy while links are uneven
/// (docs/alltoallv.md has the measurements).
inline constexpr uint64_t kDefaultQueueMinBytes = 32ull << 20;
/// Largest LL threshold accepted (every rank keeps 2 x ranks slots of twice this size).
inline constexpr uint64_t kMaxLlMaxBytes = 1024 * 1024;

struct Options {
  size_t elem_bytes = 1;       ///< any size >= 1 (1, 2, 3, 4, 6, 8, 16, a token row...)
  uint64_t send_capacity = 0;  ///< elements the send buffer holds (a rank's send counts must sum to at most this)
  uint64_t recv_capacity = 0;  ///< elements the receive buffer holds
  Transfer transfer = Transfer::kPush;
  Protocol protocol = Protocol::kAuto;
  /// Fused: segments of at most this many bytes travel in LL slots with the counts (0: only the counts do).
  uint64_t ll_max_bytes = kDefaultLlMaxBytes;
  /// Fused: bytes per work-queue chunk of the large segments (a multiple of 16; 0: from the call's size).
  uint64_t chunk_bytes = 0;
  int max_ctas = 0;  ///< CTAs per launch at most: 0 = as many as can be resident at once (two-phase: one per SM)
  int64_t timeout_ms = 10'000;  ///< bound of every device-side wait
  /// Programmatic dependent launch (compute capability 9.0 and up; ignored below): each call's kernel is launched
  /// with cudaLaunchAttributeProgrammaticStreamSerialization, so the GPU may schedule it while the previous kernel in
  /// the stream is still running; it waits for that kernel's completion and memory (griddepcontrol.wait) before it
  /// reads or writes anything, so results are the same, and back-to-back calls overlap one call's launch with the
  /// previous call's tail. Each call also lets the kernel after it launch early: work after a call that opts into
  /// programmatic launch itself must wait for its prerequisites (cudaGridDependencySynchronize) as usual.
  bool programmatic_launch = true;
  /// Fused: when the capacities guarantee that every call is small (send_capacity x elem_bytes within the LL
  /// threshold, so every segment rides in LL slots), launch a kernel compiled without the large-segment path: the same
  /// protocol and results, with less code to fetch and fewer registers per call.
  bool small_kernel = true;
  /// Fused, large segments: when the traffic is even (queueInStep), the work queue's CTAs go through the peers in
  /// step (every rank sends to one peer at a time, see queueStartJob); false always spreads them over every peer.
  bool queue_in_step = true;
  /// Fused, large segments: a rank whose large sends (and local copy) total fewer bytes than this splits them over its
  /// CTAs statically, one contiguous piece per CTA (splitJob), instead of the work queue. Each rank decides for its
  /// own sends: receivers count bytes, whoever moves them. 0: always the queue.
  uint64_t queue_min_bytes = kDefaultQueueMinBytes;
};

/// Device-side status of the calls since the last check (first error wins).
struct DeviceStatus {
  uint32_t code;   ///< DeviceError (device_time.cuh)
  int32_t rank;    ///< the rank concerned (missing peer, overflowing receiver, bad sender)
  uint64_t epoch;  ///< the call that failed (1 = first call)
  uint64_t a;      ///< overflow: elements that would arrive; bad input: the offending count or total
  uint64_t b;      ///< overflow: the receive capacity; bad input: the capacity it exceeds
  uint32_t what;   ///< which wait or check (see alltoallv.cu)
  uint32_t pad;
};
static_assert(std::is_trivially_copyable_v<DeviceStatus>);

/// Device-resident state of one AllToAllV (not symmetric).
struct DeviceState {
  uint64_t epoch;                ///< calls completed on this rank
  uint32_t seg_done[kMaxRanks];  ///< two-phase: CTAs finished per segment in the current call
  uint32_t grid_done;            ///< two-phase: CTAs finished in the current call
  uint32_t arrived;              ///< fused: CTAs of the current call that have read the epoch
  uint32_t pad[2];
  /// Fused: next chunk of each work-queue job, by call parity (epoch & 1). Call e takes chunks from [e & 1] and
  /// zeroes [(e + 1) & 1], which the call before it (complete before e starts) used: no CTA waits for another to
  /// reset the queue.
  unsigned long long next_chunk[2][kMaxRanks];
  DeviceStatus status;
};
static_assert(std::is_trivially_copyable_v<DeviceState>);

/// Where things sit in each rank's symmetric region.
struct RegionLayout {
  static constexpr uint64_t kCountsOffset = 0;   ///< uint64 words [kMaxRanks][kMaxRanks]: row of source s at s
  static constexpr uint64_t kDoneOffset = 1024;  ///< uint64 flags [kMaxRanks]: epoch of peer s's completion
  /// Fused, large segments: uint64 [2 parities][kMaxRanks]: bytes that source s has pushed into this rank's receive
  /// buffer in the current call of that parity (each CTA adds its share after a release fence; the receiver zeroes
  /// the word once the whole segment has arrived, two calls before the next use of that parity).
  static constexpr uint64_t kArrivedBytesOffset = 2048;
  static constexpr uint64_t kControlBytes = 4096;
  static constexpr uint64_t kGuardBytes = 4096;  ///< after the receive buffer: never written by a correct call
  uint64_t staging_offset = 0;  ///< fused: LL slots [2 parities][ranks sources], slot_stride bytes each
  uint64_t slot_stride = 0;
  uint64_t staging_bytes = 0;
  uint64_t send_offset = 0;
  uint64_t send_bytes = 0;
  uint64_t recv_offset = 0;
  uint64_t recv_bytes = 0;
  uint64_t total_bytes = 0;

  /// `ranks` > 0 adds the fused protocol's LL slots for segments of up to `ll_bytes`.
  static RegionLayout make(uint64_t send_bytes, uint64_t recv_bytes, int ranks = 0, uint64_t ll_bytes = 0);
};

/// Everything one launch needs; trivially copyable.
struct KernelArgs {
  SymmetricView region;
  uint64_t send_offset;
  uint64_t recv_offset;
  uint64_t elem_bytes;
  uint64_t send_capacity;
  uint64_t recv_capacity;
  const int64_t* send_counts;
  int64_t* recv_counts;
  int64_t* recv_offsets;
  DeviceState* state;
  uint64_t timeout_ns;
  uint64_t staging_offset;  ///< fused: LL slots (RegionLayout)
  uint64_t slot_stride;
  uint64_t ll_bytes;     ///< fused: segments of at most this many bytes ride in LL slots
  uint64_t chunk_bytes;  ///< fused: work-queue chunk (0: autoChunkBytes)
  uint32_t transfer;
  uint32_t protocol;       ///< kFused or kTwoPhase (resolved)
  uint32_t queue_in_step;  ///< fused: Options::queue_in_step
  uint32_t reserved;
  uint64_t queue_min_bytes;  ///< fused: Options::queue_min_bytes
  uint64_t* trace;           ///< fused, diagnostics: phase timestamps (see AllToAllV::setTrace), null when off
};
static_assert(std::is_trivially_copyable_v<KernelArgs>);

/// Diagnostics of the fused protocol: CTA 0's thread 0 of call e writes %globaltimer at these points into
/// trace[(e % kTraceCalls) * kTracePoints + point]; kTraceQueued, kTraceLast and kTraceEnd are the latest over every
/// CTA of the launch (atomicMax).
inline constexpr int kTraceCalls = 64;
inline constexpr int kTracePoints = 16;
enum TracePoint : int {
  kTraceEntry = 0,     ///< kernel entry (after the wait for the previous kernel, with programmatic launch)
  kTraceSent = 1,      ///< this thread's share of the header and LL payload stores issued
  kTraceCounts = 2,    ///< the count matrix read and checked (after the CTA barrier)
  kTracePayload = 3,   ///< this thread's LL payload words copied out (large segments done)
  kTraceClose = 4,     ///< every CTA of the launch arrived
  kTraceExit = 5,      ///< the epoch written
  kTraceEpoch = 6,     ///< the epoch loaded (between kTraceEntry and kTraceSent)
  kTraceRow = 7,       ///< the row's offsets and the send list computed (between kTraceEpoch and kTraceSent)
  kTraceResident = 8,  ///< CTA 0 running, before it waits for the previous kernel (programmatic launch)
  kTraceLoaded = 9,    ///< this rank's send counts loaded (loaded together with the epoch: same as kTraceEpoch)
  kTraceHeaders = 10,  ///< every peer's header words seen (between kTraceSent and kTraceCounts)
  kTraceLocal = 11,    ///< CTA 0's share of the work queue done (small calls: equal to kTraceCounts)
  kTraceLast = 12,     ///< large segments: the latest CTA's pushes released (its fence returned, byte counts sent)
  kTraceFlags = 13,    ///< large segments: CTA 0 saw every large segment's bytes arrive
  kTraceQueued = 14,   ///< large segments: the latest CTA done with its copies (off the work queue, or its piece)
  kTraceEnd = 15,      ///< the latest CTA done with the call
};

class AllToAllV {
 public:
  /// Collective over `boot` (rank r on `device`, at most kMaxRanks ranks, same options on every rank).
  static StatusOr<AllToAllV> create(Bootstrap& boot, int device, const Options& options, Deadline deadline);

  AllToAllV(AllToAllV&&) noexcept = default;
  AllToAllV& operator=(AllToAllV&&) noexcept = default;
  ~AllToAllV() = default;

  /// The send buffer (send_capacity elements): segment for destination d starts at the sum of counts before d.
  void* sendBuffer() const { return static_cast<uint8_t*>(region_.local()) + layout_.send_offset; }
  /// The receive buffer (recv_capacity elements): segment from source s starts at recv_offsets[s].
  void* recvBuffer() const { return static_cast<uint8_t*>(region_.local()) + layout_.recv_offset; }
  /// Bytes after the receive capacity that a correct call never writes (tests check them).
  void* recvGuard() const { return static_cast<uint8_t*>(recvBuffer()) + options_.recv_capacity * options_.elem_bytes; }
  size_t recvGuardBytes() const { return RegionLayout::kGuardBytes; }

  /// Enqueues one call on `stream` (a stream of this rank's device): `send_counts` (int64 per destination, written
  /// by earlier work on the GPU) in; `recv_counts` and `recv_offsets` (int64 per source, elements) out. Launches one
  /// kernel and nothing else (no memset, no event, no host sync): safe inside CUDA graph capture. `ctas` overrides
  /// the CTA count for this launch (at most maxCtas()).
  Status run(cudaStream_t stream, const int64_t* send_counts, int64_t* recv_counts, int64_t* recv_offsets,
             int ctas = 0);

  /// Waits (with `deadline`) for the calls enqueued on `stream`, reads and clears the device status: ok, or
  /// `invalid_argument` (capacity overflow, bad counts) or `timeout` naming the rank and sizes.
  Status checkStatus(cudaStream_t stream, Deadline deadline);
  /// The same on the stream of the most recent run().
  Status checkStatus(Deadline deadline);

  /// Collective teardown (waits for this rank's outstanding work first). The object is empty afterwards.
  Status close(Bootstrap& boot, Deadline deadline);

  const Options& options() const { return options_; }
  int rank() const { return region_.rank(); }
  int size() const { return region_.size(); }
  int device() const { return region_.device(); }
  /// CTAs a launch uses when `ctas` is 0, and the most it may use.
  int defaultCtas() const { return default_ctas_; }
  int maxCtas() const { return max_ctas_; }
  /// CTAs a run() with `ctas` launches.
  int gridFor(int ctas) const;
  /// The protocol in use (kAuto resolved).
  Protocol protocol() const { return protocol_; }
  /// Whether calls launch with programmatic dependent launch (Options::programmatic_launch and the device has it).
  bool programmaticLaunch() const { return programmatic_; }
  /// Whether calls launch the small-call kernel (Options::small_kernel and capacities within the LL threshold).
  bool smallKernel() const;
  /// The arguments the next launch gets (for tests).
  KernelArgs kernelArgs(const int64_t* send_counts, int64_t* recv_counts, int64_t* recv_offsets) const;
  /// Diagnostics: later fused launches write their phase timestamps (TracePoint) into `device_words`
  /// (kTraceCalls * kTracePoints words of device memory on this rank's device; nullptr turns it off).
  void setTrace(uint64_t* device_words) { trace_ = device_words; }

 private:
  AllToAllV(Options options, Protocol protocol, RegionLayout layout, SymmetricRegion region, DeviceBuffer state,
            PinnedBuffer host, int default_ctas, int max_ctas, int sms, bool programmatic)
      : options_(options),
        protocol_(protocol),
        layout_(layout),
        region_(std::move(region)),
        state_(std::move(state)),
        host_status_(std::move(host)),
        default_ctas_(default_ctas),
        max_ctas_(max_ctas),
        sms_(sms),
        programmatic_(programmatic) {}

  Status drain(Deadline deadline);
  /// Fused: the largest segment that rides in LL slots (what the slots hold past their header words).
  uint64_t llBytes() const;

  Options options_;
  Protocol protocol_ = Protocol::kFused;
  RegionLayout layout_;
  SymmetricRegion region_;
  DeviceBuffer state_;
  PinnedBuffer host_status_;
  int default_ctas_ = 0;
  int max_ctas_ = 0;
  int sms_ = 0;
  bool programmatic_ = false;  ///< options_.programmatic_launch on a device that has it
  cudaStream_t last_stream_ = nullptr;
  uint64_t* trace_ = nullptr;
};

/// Turns a device status into the Status the host API reports (ok when code is kDeviceOk).
Status statusFromDevice(const DeviceStatus& s, size_t elem_bytes);

}  // namespace peerlab::alltoallv
