#pragma once
/// Layout and host rules of the MoE low-latency (LL) mode, shared by the kernels and the CPU tests.
///
/// Every rank's symmetric region holds, each but the last twice (calls alternate between two parities, so a sender
/// never overwrites what a receiver may still read from the call before):
///   dispatch slab     [source rank][local expert][slot] rows: payload (bf16 H, or fp8 e4m3 H plus H/128 fp32
///                     scales), LlRowMeta in the row's last 16 bytes; `capacity` slots per (source rank, local expert)
///   dispatch signals  uint64 [source rank][local expert]: (call epoch << 32) | rows written
///   combine rows      bf16 [token][top-k slot][H]: expert outputs sent back to the token's rank
///   combine signals   uint64 [global expert]: call epoch, written once that expert's outputs for this rank are sent
///   combine done      uint64 [rank]: the last combine rank r finished reading (r pushes it to every rank); a
///                     combine writes into r's rows of a parity only once r is done with that parity's previous call
/// The slot of a (token, expert) pair is its rank among the sender's (token, slot) pairs of that expert, in token
/// then slot order: deterministic, with no count exchange first. Pairs at slot >= capacity are dropped (counted,
/// never written).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <type_traits>

namespace peerlab::alltoallv::moe {

/// Payload of a dispatched LL row.
enum class LlPayload : uint32_t {
  kBf16 = 0,  ///< the token as is
  kFp8 = 1,   ///< e4m3 with one fp32 scale per 128 elements (DeepEP's layout): x ~= q * scale
};

/// Most top-k slots per token (both modes).
inline constexpr int kMaxTopK = 16;
inline constexpr int kFp8Group = 128;
inline constexpr float kFp8E4m3Max = 448.f;
/// Groups whose largest magnitude is below this are scaled as if it were this (no division by zero).
inline constexpr float kFp8MinAmax = 1e-4f;

/// Routing metadata at the end of every slab row.
struct LlRowMeta {
  int32_t token;  ///< the token's index on its source rank
  int32_t slot;   ///< its top-k slot
  float weight;   ///< its routing weight
  int32_t pad;
};
static_assert(sizeof(LlRowMeta) == 16);

struct LlShape {
  int ranks = 1;
  int hidden = 128;  ///< H (fp8: a multiple of 128; bf16: of 8)
  int top_k = 1;
  int experts = 1;     ///< E, a multiple of ranks
  int max_tokens = 1;  ///< tokens per rank per LL call at most (sizes the combine rows)
  int capacity = 1;    ///< slots per (source rank, local expert)
  LlPayload payload = LlPayload::kBf16;
};

/// Byte offsets inside one rank's LL region (the same on every rank).
struct LlLayout {
  int ranks;
  int local_experts;
  int experts;
  int top_k;
  int hidden;
  int capacity;
  int max_tokens;
  uint32_t payload;
  uint64_t payload_bytes;  ///< 2H or H
  uint64_t scale_bytes;    ///< fp8: 4 H / 128
  uint64_t row_bytes;      ///< payload + scales + meta, rounded up to 16
  uint64_t slab_offset;
  uint64_t slab_parity_bytes;
  uint64_t dispatch_signal_offset;
  uint64_t combine_offset;
  uint64_t combine_parity_bytes;
  uint64_t combine_signal_offset;
  uint64_t combine_done_offset;
  uint64_t total_bytes;

  /// LlRowMeta sits in the row's last 16 bytes (16-byte aligned; fp8 scales end on a 4-byte boundary).
  __host__ __device__ uint64_t metaOffset() const { return row_bytes - sizeof(LlRowMeta); }
  /// Row `slot` of (source `src`, local expert `le`) in the dispatch slab of `parity`.
  __host__ __device__ uint64_t slabRow(int parity, int src, int le, int slot) const {
    return slab_offset + static_cast<uint64_t>(parity) * slab_parity_bytes +
           ((static_cast<uint64_t>(src) * local_experts + le) * capacity + slot) * row_bytes;
  }
  __host__ __device__ uint64_t dispatchSignal(int parity, int src, int le) const {
    return dispatch_signal_offset + ((static_cast<uint64_t>(parity) * ranks + src) * local_experts + le) * 8;
  }
  /// bf16 row of (token, top-k slot) among the combine rows of `parity`.
  __host__ __device__ uint64_t combineRow(int parity, int token, int slot) const {
    return combine_offset + static_cast<uint64_t>(parity) * combine_parity_bytes +
           (static_cast<uint64_t>(token) * top_k + slot) * 2ull * hidden;
  }
  __host__ __device__ uint64_t combineSignal(int parity, int global_expert) const {
    return combine_signal_offset + (static_cast<uint64_t>(parity) * experts + global_expert) * 8;
  }
  __host__ __device__ uint64_t combineDone(int rank) const {
    return combine_done_offset + static_cast<uint64_t>(rank) * 8;
  }
  /// Rows of one local expert in the packed dispatch output (every source's slots).
  __host__ __device__ uint64_t expertStride() const { return static_cast<uint64_t>(ranks) * capacity; }
};
static_assert(std::is_trivially_copyable_v<LlLayout>);

inline constexpr uint64_t llAlign(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}

/// The layout of `s` (assumes a valid shape: see llShapeError).
inline LlLayout makeLlLayout(const LlShape& s) {
  LlLayout l{};
  l.ranks = s.ranks;
  l.local_experts = s.experts / s.ranks;
  l.experts = s.experts;
  l.top_k = s.top_k;
  l.hidden = s.hidden;
  l.capacity = s.capacity;
  l.max_tokens = s.max_tokens;
  l.payload = static_cast<uint32_t>(s.payload);
  const uint64_t h = static_cast<uint64_t>(s.hidden);
  l.payload_bytes = s.payload == LlPayload::kFp8 ? h : 2 * h;
  l.scale_bytes = s.payload == LlPayload::kFp8 ? 4 * (h / kFp8Group) : 0;
  l.row_bytes = llAlign(l.payload_bytes + l.scale_bytes + sizeof(LlRowMeta), 16);
  l.slab_offset = 0;
  l.slab_parity_bytes = static_cast<uint64_t>(s.experts) * static_cast<uint64_t>(s.capacity) * l.row_bytes;
  l.dispatch_signal_offset = l.slab_offset + 2 * l.slab_parity_bytes;
  l.combine_offset = llAlign(l.dispatch_signal_offset + 2ull * s.experts * 8, 256);
  l.combine_parity_bytes = static_cast<uint64_t>(s.max_tokens) * static_cast<uint64_t>(s.top_k) * 2 * h;
  l.combine_signal_offset = l.combine_offset + 2 * l.combine_parity_bytes;
  l.combine_done_offset = l.combine_signal_offset + 2ull * s.experts * 8;
  l.total_bytes = llAlign(l.combine_done_offset + 8ull * s.ranks, 4096);
  return l;
}

/// Empty when `s` is a valid LL shape, else the reason (one line, naming the value).
std::string llShapeError(const LlShape& s);

/// Signal word of a dispatch (source, local expert): the call's epoch and the rows it wrote.
__host__ __device__ inline uint64_t llSignalWord(uint32_t epoch, uint32_t rows) {
  return (static_cast<uint64_t>(epoch) << 32) | rows;
}
__host__ __device__ inline uint32_t llSignalEpoch(uint64_t w) {
  return static_cast<uint32_t>(w >> 32);
}
__host__ __device__ inline uint32_t llSignalRows(uint64_t w) {
  return static_cast<uint32_t>(w & 0xffffffffu);
}
/// Whether epoch `a` is at or past `b` (wrap-safe).
__host__ __device__ inline bool llEpochReached(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) >= 0;
}
/// Epoch 1 is the first call; parity picks the slab and signal copy.
__host__ __device__ inline int llParity(uint32_t epoch) {
  return static_cast<int>(epoch & 1u);
}

/// Overflow rule: a pair whose slot reaches the capacity is dropped; the rows written are min(pairs, capacity).
__host__ __device__ inline bool llKept(int64_t slot, int capacity) {
  return slot < capacity;
}
__host__ __device__ inline int64_t llDropped(int64_t pairs, int capacity) {
  return pairs > capacity ? pairs - capacity : 0;
}

/// Which path a call takes.
enum class MoeMode : uint32_t {
  kAuto = 0,        ///< low latency when the exchange has it and the call fits (llFits), else normal
  kNormal = 1,      ///< route, pack, alltoallv, count, place, fan-out (any token count up to max_tokens)
  kLowLatency = 2,  ///< one kernel per phase into the fixed slabs
};

/// The auto rule. The LL combine rows hold `ll_max_tokens` tokens per rank, so a call with more tokens cannot take
/// LL; a call within it always can (a pair beyond an expert's capacity is dropped and counted, not an error of the
/// mode). Every rank must take the same mode in one call (ranks that step the same batch bound do): a rank in the
/// other mode looks like a dead peer to the LL kernels, which then report a timeout.
inline MoeMode chooseMoeMode(MoeMode requested, int ll_max_tokens, int num_tokens) {
  const bool fits = ll_max_tokens > 0 && num_tokens <= ll_max_tokens;
  if (requested == MoeMode::kAuto) return fits ? MoeMode::kLowLatency : MoeMode::kNormal;
  return requested;
}

/// Bytes a dispatch (or combine) moves for one rank's tokens, two ways (run-file fields busbw_gbps / nvlink_gbps).
struct MoeTrafficBytes {
  uint64_t logical = 0;  ///< row bytes per (token, valid top-k selection), the local rank included (DeepEP / pplx)
  uint64_t nvlink = 0;   ///< row bytes per (token, destination rank other than the source), once per pair
};
/// `ids` [tokens, top_k] of rank `rank`; `row_bytes` the bytes of one token row (2H for bf16).
MoeTrafficBytes moeTrafficBytes(const int32_t* ids, int tokens, int top_k, int experts, int ranks, int rank,
                                uint64_t row_bytes);

}  // namespace peerlab::alltoallv::moe
