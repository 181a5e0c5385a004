#pragma once
/// MoE low-latency (LL) dispatch and combine: one kernel per phase over fixed per-expert slabs in symmetric memory
/// (layout and rules in ll_layout.h), no count exchange first and no host sync, so both are graph-capturable.
///
/// Dispatch: in the send phase the CTAs take the global experts in turn; the CTA holding expert g ranks this rank's
/// (token, slot) pairs of g in token order, writes each kept pair's row (bf16, or fp8 quantized per 128 elements on the
/// way) straight into slot [this rank][local expert][pair's rank] of the expert's rank's slab, then one release store
/// of (epoch, rows) into that rank's signal word. The receive phase of the same kernel waits (bounded by %globaltimer)
/// for every source's signal of each local expert and packs the rows per expert, source by source (LlDispatchOutput).
/// Combine: each local expert's output rows go back into their token's rank, at [token][top-k slot], then one release
/// store per (expert, rank); each token waits for the experts it kept and sums w * out in fp32 in slot order, rounded
/// once to bf16. A pair beyond its expert's capacity is dropped: not written, counted, reported by checkStatus(), and
/// left out of its token's combine.
///
/// Calls alternate between two slab parities. A dispatch waits for every peer's signals, and a combine for every peer
/// to have finished the combine two calls back, so no sender rewrites what a receiver may still be reading; calls may
/// repeat back to back (a benchmark loop of dispatches, or of combines after one dispatch).
/// Every CTA spins only after its own sends, and a launch uses at most one CTA per SM, so it never waits on itself.
/// A missing signal (dead peer, a rank in the other mode) sets the error word and the call completes; checkStatus()
/// reports a timeout naming the rank.

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
  int64_t timeout_ms = 10'000;  ///< bound of every device wait
  int max_ctas = 0;             ///< 0: one per SM
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
  uint32_t code;  ///< kDeviceTimeout or kDeviceOk (first timeout wins)
  int32_t rank;   ///< timeout: the peer whose signal never came
  uint32_t what;  ///< 1: dispatch wait, 2: combine wait
  uint32_t pad;
  unsigned long long dropped;  ///< pairs dropped for capacity since the last check
};
static_assert(std::is_trivially_copyable_v<LlState>);

/// Test hooks: faults the kernels inject on purpose (the scorecard's dropped writes).
enum class LlFault : uint32_t {
  kNone = 0,
  kSkipDispatchSignals = 1,  ///< send rows but never signal: receivers must time out
  kSkipCombineSignals = 2,
};

class LowLatencyExchange {
 public:
  /// Collective over `boot` (same config on every rank): maps the symmetric slabs, allocates the packed output.
  static StatusOr<LowLatencyExchange> create(Bootstrap& boot, int device, const LlConfig& config, Deadline deadline);

  LowLatencyExchange(LowLatencyExchange&&) noexcept = default;
  LowLatencyExchange& operator=(LowLatencyExchange&&) noexcept = default;
  ~LowLatencyExchange() = default;

  /// One kernel: routes `num_tokens` (<= max_tokens) tokens into every expert's slab and packs what arrives here.
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
  /// CTAs of a dispatch and of a combine launch.
  int dispatchCtas() const;
  int combineCtas(int num_tokens) const;

 private:
  LowLatencyExchange() = default;
  LlConfig config_;
  LlLayout layout_{};
  int rank_ = 0;
  int device_ = -1;
  int sms_ = 1;
  int num_tokens_ = 0;
  LlFault fault_ = LlFault::kNone;
  uint64_t dropped_ = 0;
  std::unique_ptr<SymmetricRegion> region_;
  DeviceBuffer slot_expert_;  // int32 [max_tokens, k]: the global expert of each kept slot, -1 otherwise
  DeviceBuffer slot_weight_;  // float [max_tokens, k]
  DeviceBuffer rows_;
  DeviceBuffer scales_;
  DeviceBuffer counts_;  // int64 [E / n]
  DeviceBuffer row_source_;
  DeviceBuffer row_weight_;
  DeviceBuffer state_;
  PinnedBuffer host_state_;
};

}  // namespace peerlab::alltoallv::moe
