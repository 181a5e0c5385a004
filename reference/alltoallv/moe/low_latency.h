#pragma once
/// MoE low-latency (LL) dispatch and combine: one kernel per phase over fixed buffers in symmetric memory (layout and
/// rules in ll_layout.h), no count exchange first and no host sync, so both are graph-capturable.
///
/// Dispatch: one CTA per token and slice group (a row's 16-byte units split in kLlSlices slices, each with its own
/// flag; at small T several CTAs share a row on each side; items beyond the grid go round again). It ranks its token's
/// pairs against the pairs of every token before it (a per-expert count in shared memory), keeps those below the
/// capacity, reads the token once, quantizes it once (fp8), and writes it once into every rank that holds one of its
/// kept pairs, with the list of those pairs; one release store of (epoch, pairs) per (token, rank) follows, a zero for
/// a rank it skips. One CTA also counts every pair of the call and sends each rank its kept pairs per local expert in a
/// count block (epoch, tokens). Every CTA then waits for the count blocks (bounded by %globaltimer), takes received
/// rows in turn, waits for each row's flag and fans the row out into the packed expert layout (LlDispatchOutput):
/// expert by expert, source rank by source rank, each source's pairs in (token, slot) order. Combine: for every
/// received row, the CTA that takes it sums w * out of its local experts in fp32 in slot order, rounds once to bf16 and
/// writes that partial sum once back into the token's rank, then a release store of the epoch; every token sums its
/// partial sums in fp32 in rank order and rounds once to bf16. A pair beyond its expert's capacity is dropped: not
/// sent, counted, reported by checkStatus(), and left out of its token's combine.
///
/// Calls alternate between two buffer parities. A dispatch waits for every peer's count block of the same call, and
/// a combine for every peer's mark of the same call, so a rank writes into a parity only once every peer has finished
/// the call two before; calls may repeat back to back (a benchmark loop of dispatches, or of combines after one
/// dispatch). Every CTA spins only after its own sends and a launch uses at most as many CTAs as the SMs hold at
/// once (one per SM, or two where the kernels fit twice), so a launch never waits on itself. Kernels go out with
/// programmatic dependent launch where the device has it (their CTAs wait for the kernel before them first). A missing
/// signal (dead peer, a rank in the other mode) sets the error word and the call completes; later waits give up at once
/// while the error is on record; checkStatus() reports a timeout naming the rank.

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <type_traits>

#include "reference/alltoallv/moe/ll_layout.h"
#include "reference/alltoallv/symmetric_memory.h"
#include "reference/core/bootstrap.h"
#include "reference/core/deadline.h"
#include "reference/core/memory.h"
#include "reference/core/status.h"

namespace peerlab::alltoallv::moe {

struct LlConfig {
  int hidden = 7168;
  int top_k = 8;
  int experts = 256;
  int max_tokens = 128;  ///< tokens per rank per call at most
  int capacity = 0;      ///< slots per (source rank, local expert); 0: max_tokens (no drops with distinct top-k)
  LlPayload payload = LlPayload::kBf16;
  /// A rank's rows (and the combine rows of its tokens) go as tagged words when it routes at most this many tokens
  /// in a call: twice the bytes, but no fence before the flag (ll_layout.h). 0: always plain.
  int tagged_max_tokens = kLlDefaultTaggedMaxTokens;
  int64_t timeout_ms = 10'000;  ///< bound of every device wait
  int max_ctas = 0;             ///< 0: as many as can be resident (ctas_per_sm per SM)
  /// CTAs per SM a launch may use (1 or 2; 2 only where the kernels fit twice): with 2 a CTA that takes a second
  /// received row no longer waits for its first one's fan-out (T=128 on 2 ranks: 256 rows on 132 SMs).
  int ctas_per_sm = kLlDefaultCtasPerSm;
  bool programmatic_launch = true;  ///< launch with programmatic dependent launch where the device has it
};

/// The packed dispatch output, on the GPU (valid until the next dispatch).
struct LlDispatchOutput {
  const uint8_t* rows;           ///< [E / n][n * capacity] rows of payload_bytes (bf16 H or fp8 e4m3 H)
  const float* scales;           ///< fp8: [E / n][n * capacity][H / 128]; bf16: null
  const int64_t* expert_counts;  ///< [E / n] rows of each local expert (from row expert * expert_stride)
  const int4* row_source;        ///< {source rank, source token, top-k slot, 0} per row
  const float* row_weight;       ///< the routing weight per row
  int local_experts;
  uint64_t expert_stride;  ///< n * capacity
  uint64_t payload_bytes;
  LlPayload payload;
};
static_assert(std::is_trivially_copyable_v<LlDispatchOutput>);

/// Device-side status and epochs (not symmetric).
struct LlState {
  uint32_t dispatch_epoch;  ///< dispatch calls completed
  uint32_t combine_epoch;
  uint32_t dispatch_arrived;  ///< CTAs done with the current call (the last one advances the epoch)
  uint32_t combine_arrived;
  uint32_t code;  ///< kDeviceOk, or the first error: kDeviceTimeout, kDeviceBadInput (a malformed row)
  int32_t rank;   ///< the peer whose signal never came or whose row was malformed
  uint32_t what;  ///< 1: dispatch, 2: combine
  uint32_t pad;
  unsigned long long dropped;  ///< pairs dropped for capacity since the last check
};
static_assert(std::is_trivially_copyable_v<LlState>);

/// Test hooks: faults the kernels inject on purpose (the scorecard's dropped writes).
enum class LlFault : uint32_t {
  kNone = 0,
  kSkipDispatchSignals = 1,  ///< send rows and counts but never their flags: receivers must time out
  kSkipCombineSignals = 2,   ///< send partial sums but never their flags nor the marks
};

class LowLatencyExchange {
 public:
  /// Collective over `boot` (same config on every rank): maps the symmetric rows and flags, allocates the packed
  /// output.
  static StatusOr<LowLatencyExchange> create(Bootstrap& boot, int device, const LlConfig& config, Deadline deadline);

  LowLatencyExchange(LowLatencyExchange&&) noexcept = default;
  LowLatencyExchange& operator=(LowLatencyExchange&&) noexcept = default;
  ~LowLatencyExchange() = default;

  /// One kernel: sends `num_tokens` (<= max_tokens) tokens to their experts' ranks and packs what arrives here.
  Status dispatch(const __nv_bfloat16* tokens, const int32_t* topk_ids, const float* topk_weights, int num_tokens,
                  cudaStream_t stream);
  /// One kernel: `expert_out` ([E / n][n * capacity][H] bf16, the packed layout of the last dispatch) back to the
  /// tokens' ranks, summed with the weights into `out` ([num_tokens, H] of the last dispatch).
  Status combine(const __nv_bfloat16* expert_out, __nv_bfloat16* out, cudaStream_t stream);
  /// Waits for `stream`, reads and clears the device status: ok; invalid_argument when pairs were dropped for
  /// capacity (the count in the message and in droppedPairs()); timeout naming the peer that never signalled.
  Status checkStatus(cudaStream_t stream, Deadline deadline);
  /// Pairs dropped for capacity, as of the last checkStatus().
  uint64_t droppedPairs() const { return dropped_; }
  /// Collective teardown.
  Status close(Bootstrap& boot, Deadline deadline);

  LlDispatchOutput output() const;
  const LlLayout& layout() const { return layout_; }
  const LlConfig& config() const { return config_; }
  void setFault(LlFault f) { fault_ = f; }
  /// Kernel spans into `times` (device memory, llClearTimes() first; null: off), with `phases` the phase stamps too
  /// (a few atomics more per CTA). Captured into graphs as set.
  void setKernelTimes(LlKernelTimes* times, bool phases = false) {
    times_ = times;
    phases_ = phases;
  }
  /// Whether kernels launch with programmatic dependent launch.
  bool programmaticLaunch() const { return programmatic_; }
  /// CTAs of a combine launch for `num_tokens` tokens on this rank: one per row it may take, at most what can be
  /// resident (ctasPerSm() per SM).
  int ctasFor(int num_tokens) const;
  /// CTAs per dispatch row on each side (slice groups: 1, 2, 4 or 8): as many as one CTA per SM allows beside one
  /// per row.
  int sliceGroupsFor(int num_tokens) const;
  /// CTAs of a dispatch launch: ctasFor's rows times sliceGroupsFor, at most what can be resident.
  int dispatchCtasFor(int num_tokens) const;
  /// CTAs per SM a launch may use (config.ctas_per_sm where the kernels fit that often, else 1).
  int ctasPerSm() const { return per_sm_; }

 private:
  LowLatencyExchange() = default;
  int ctaCap() const;       ///< one per SM, or config.max_ctas: the bound slice groups are chosen against
  int residentCap() const;  ///< CTAs a launch may have: ctasPerSm() per SM, or config.max_ctas
  LlConfig config_;
  LlLayout layout_{};
  int rank_ = 0;
  int device_ = -1;
  int sms_ = 1;
  int per_sm_ = 1;
  int num_tokens_ = 0;
  LlFault fault_ = LlFault::kNone;
  LlKernelTimes* times_ = nullptr;
  bool phases_ = false;
  bool programmatic_ = false;
  uint64_t dropped_ = 0;
  std::unique_ptr<SymmetricRegion> region_;
  DeviceBuffer token_dests_;  // uint32 [max_tokens]: bit d set when the token has a kept pair on rank d
  DeviceBuffer recv_tokens_;  // int32 [n]: rows each source sent in the last dispatch
  // The rows the last dispatch took, by receive order q (< n * max_tokens), for the combine:
  DeviceBuffer recv_pairs_;  // int32 [q]: kept pairs of the row
  DeviceBuffer recv_rows_;   // int2 [q, k]: {packed output row, weight bits} per kept pair, slot order
  DeviceBuffer recv_src_;    // int2 [q]: {source rank, source token}
  DeviceBuffer rows_;
  DeviceBuffer scales_;
  DeviceBuffer counts_;  // int64 [E / n]
  DeviceBuffer row_source_;
  DeviceBuffer row_weight_;
  DeviceBuffer state_;
  PinnedBuffer host_state_;
};

}  // namespace peerlab::alltoallv::moe
