#pragma once
/// Layout and host rules of the MoE low-latency (LL) mode, shared by the kernels and the CPU tests.
///
/// A (token, top-k slot) pair is kept when its position, its rank among the sender's pairs of the same expert in
/// token then slot order, is below the capacity; the rest are dropped (counted, never sent). Dispatch sends each token
/// ONCE to every rank that holds one of its kept pairs, with the list of those pairs (LlPairEntry, in slot order); the
/// receiver fans the row out to its local experts. Combine sends one partial sum per (token, expert rank) back.
///
/// Every rank's symmetric region holds, each but the marks twice (calls alternate between two parities; a rank
/// writes into a parity only once every peer has finished the call two before, see low_latency.h):
///   count blocks    [parity][source rank]: a flag word (epoch << 32 | tokens the source routes this call), then the
///                   source's kept pairs per local expert of this rank, each a tagged word (below)
///   dispatch flags  uint64 [parity][source rank][token][slice]: epoch << 32 | that token's kept pairs here (0:
///                   nothing was sent), one per slice of the row (kLlSlices): a row may be written and read by
///                   several CTAs, each a group of slices, each slice published on its own
///   dispatch rows   [parity][source rank][token]: payload (bf16 H, or fp8 e4m3 H plus H/128 fp32 scales), then one
///                   LlPairEntry per kept pair here
///   combine flags   uint64 [parity][expert rank][token]: the epoch (rows sent plain only)
///   combine rows    bf16 [parity][expert rank][token][H]: that rank's partial sum for the token (fp32, rounded once)
///   combine marks   uint64 [rank]: the last combine rank r has started (so it has finished the one before)
///
/// Rows go one of two ways. Plain: the bytes as they are, then a fence, then the flag with release semantics (the
/// fence waits for the peer to acknowledge every store: microseconds). Tagged: every 4 bytes travel in an 8-byte word
/// with the call's epoch beside them (epoch << 32 | data, one single-copy-atomic store), so a reader knows each word
/// is of this call without any ordering between words, and the writer needs no fence: twice the bytes, no round trip.
/// A source's rows are tagged when it routes at most tagged_max_tokens tokens in the call (its count block says how
/// many, so every reader knows); the combine rows of its tokens likewise, and those need no flag. Count words are
/// always tagged.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace peerlab::alltoallv::moe {

/// Payload of a dispatched LL row.
enum class LlPayload : uint32_t {
  kBf16 = 0,  ///< the token as is
  kFp8 = 1,   ///< e4m3 with one fp32 scale per 128 elements (DeepEP's layout): x ~= q * scale
};

/// Slices of a dispatch row, each with its own flag; a slice is a run of 16-byte units, a multiple of 8 of them
/// (whole fp8 scale groups).
inline constexpr int kLlSlices = 8;
/// The default LlConfig::tagged_max_tokens (docs/moe.md has the measurements behind it).
inline constexpr int kLlDefaultTaggedMaxTokens = 16;
/// The default LlConfig::ctas_per_sm (docs/moe.md has the measurements behind it).
inline constexpr int kLlDefaultCtasPerSm = 2;
/// Most top-k slots per token (both modes).
inline constexpr int kMaxTopK = 16;
inline constexpr int kFp8Group = 128;
inline constexpr float kFp8E4m3Max = 448.f;
/// Groups whose largest magnitude is below this are scaled as if it were this (no division by zero).
inline constexpr float kFp8MinAmax = 1e-4f;
/// Most experts in LL mode: every CTA keeps a per-expert pair count in shared memory.
inline constexpr int kLlMaxExperts = 4096;

/// One kept (token, expert) pair in a dispatched row (one 16-byte store).
struct alignas(16) LlPairEntry {
  int32_t local_expert;  ///< on the receiving rank
  int32_t slot;          ///< the token's top-k slot
  int32_t position;      ///< among the source's pairs of this expert (< capacity)
  float weight;          ///< the routing weight
};
static_assert(sizeof(LlPairEntry) == 16);

struct LlShape {
  int ranks = 1;
  int hidden = 128;  ///< H (fp8: a multiple of 128; bf16: of 8)
  int top_k = 1;
  int experts = 1;     ///< E, a multiple of ranks
  int max_tokens = 1;  ///< tokens per rank per LL call at most (sizes the dispatch and combine rows)
  int capacity = 1;    ///< kept pairs per (source rank, expert) at most
  LlPayload payload = LlPayload::kBf16;
  int tagged_max_tokens = 0;  ///< a source's rows are tagged when it routes at most this many tokens (0: never)
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
  uint64_t payload_bytes;       ///< 2H or H
  uint64_t scale_bytes;         ///< fp8: 4 H / 128
  uint64_t meta_offset;         ///< the pair entries, 16-byte aligned after payload and scales
  uint64_t row_bytes;           ///< a dispatch row: meta_offset + 16 k
  uint64_t row_stride;          ///< between dispatch rows: twice row_bytes when rows may be tagged
  uint64_t combine_row_stride;  ///< between combine rows: 2H, or 4H when rows may be tagged
  int tagged_max_tokens;
  uint64_t count_block_bytes;  ///< 16 + 8 E / n (tagged words), rounded up to 16
  uint64_t count_offset;
  uint64_t dispatch_flag_offset;
  uint64_t dispatch_row_offset;
  uint64_t combine_flag_offset;
  uint64_t combine_row_offset;
  uint64_t combine_mark_offset;
  uint64_t total_bytes;

  /// [parity][source] count block; its first word is the flag.
  __host__ __device__ uint64_t countBlock(int parity, int src) const {
    return count_offset + (static_cast<uint64_t>(parity) * ranks + src) * count_block_bytes;
  }
  /// The tagged word of local expert `le`'s kept pairs in a count block.
  __host__ __device__ uint64_t countOf(int parity, int src, int le) const {
    return countBlock(parity, src) + 16 + 8ull * le;
  }
  /// Whether a source routing `tokens` tokens sends its rows (and gets its combine rows) tagged.
  __host__ __device__ bool tagged(int tokens) const { return tokens <= tagged_max_tokens; }
  __host__ __device__ uint64_t dispatchFlag(int parity, int src, int token, int slice) const {
    return dispatch_flag_offset +
           (((static_cast<uint64_t>(parity) * ranks + src) * max_tokens + token) * kLlSlices + slice) * 8;
  }
  __host__ __device__ uint64_t dispatchRow(int parity, int src, int token) const {
    return dispatch_row_offset + ((static_cast<uint64_t>(parity) * ranks + src) * max_tokens + token) * row_stride;
  }
  /// Flag of the partial sum rank `from` sends back for `token`.
  __host__ __device__ uint64_t combineFlag(int parity, int from, int token) const {
    return combine_flag_offset + ((static_cast<uint64_t>(parity) * ranks + from) * max_tokens + token) * 8;
  }
  __host__ __device__ uint64_t combineRow(int parity, int from, int token) const {
    return combine_row_offset +
           ((static_cast<uint64_t>(parity) * ranks + from) * max_tokens + token) * combine_row_stride;
  }
  __host__ __device__ uint64_t combineMark(int rank) const {
    return combine_mark_offset + static_cast<uint64_t>(rank) * 8;
  }
  /// Rows of one local expert in the packed dispatch output (every source's kept pairs).
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
  const uint64_t n = static_cast<uint64_t>(s.ranks);
  const uint64_t rows = 2 * n * static_cast<uint64_t>(s.max_tokens);  // both parities, every source
  l.payload_bytes = s.payload == LlPayload::kFp8 ? h : 2 * h;
  l.scale_bytes = s.payload == LlPayload::kFp8 ? 4 * (h / kFp8Group) : 0;
  l.meta_offset = llAlign(l.payload_bytes + l.scale_bytes, 16);
  l.row_bytes = l.meta_offset + sizeof(LlPairEntry) * static_cast<uint64_t>(s.top_k);
  l.tagged_max_tokens = s.tagged_max_tokens;
  l.row_stride = s.tagged_max_tokens > 0 ? 2 * l.row_bytes : l.row_bytes;
  l.combine_row_stride = s.tagged_max_tokens > 0 ? 4 * h : 2 * h;
  l.count_block_bytes = llAlign(16 + 8ull * static_cast<uint64_t>(l.local_experts), 16);
  l.count_offset = 0;
  l.dispatch_flag_offset = llAlign(l.count_offset + 2 * n * l.count_block_bytes, 256);
  l.dispatch_row_offset = llAlign(l.dispatch_flag_offset + rows * kLlSlices * 8, 256);
  l.combine_flag_offset = llAlign(l.dispatch_row_offset + rows * l.row_stride, 256);
  l.combine_row_offset = llAlign(l.combine_flag_offset + rows * 8, 256);
  l.combine_mark_offset = llAlign(l.combine_row_offset + rows * l.combine_row_stride, 256);
  l.total_bytes = llAlign(l.combine_mark_offset + 8 * n, 4096);
  return l;
}

/// The 16-byte units [begin, end) of slices [first, last) of a row of `units` units.
struct LlUnits {
  int begin;
  int end;
};
__host__ __device__ inline LlUnits llSliceUnits(int units, int first, int last) {
  const int per = (units + kLlSlices * 8 - 1) / (kLlSlices * 8) * 8;
  const int b = first * per < units ? first * per : units;
  const int e = last * per < units ? last * per : units;
  return LlUnits{b, e};
}

/// Empty when `s` is a valid LL shape, else the reason (one line, naming the value).
std::string llShapeError(const LlShape& s);

/// Flag words: the call's epoch and a small value (kept pairs, tokens).
__host__ __device__ inline uint64_t llFlagWord(uint32_t epoch, uint32_t value) {
  return (static_cast<uint64_t>(epoch) << 32) | value;
}
__host__ __device__ inline uint32_t llFlagEpoch(uint64_t w) {
  return static_cast<uint32_t>(w >> 32);
}
__host__ __device__ inline uint32_t llFlagValue(uint64_t w) {
  return static_cast<uint32_t>(w & 0xffffffffu);
}
/// Whether epoch `a` is at or past `b` (wrap-safe).
__host__ __device__ inline bool llEpochReached(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) >= 0;
}
/// Epoch 1 is the first call; parity picks the copy of the count blocks, flags and rows.
__host__ __device__ inline int llParity(uint32_t epoch) {
  return static_cast<int>(epoch & 1u);
}

/// Overflow rule: a pair whose position reaches the capacity is dropped; the pairs kept are min(pairs, capacity).
__host__ __device__ inline bool llKept(int64_t position, int capacity) {
  return position < capacity;
}
__host__ __device__ inline int64_t llDropped(int64_t pairs, int capacity) {
  return pairs > capacity ? pairs - capacity : 0;
}

/// Which path a call takes.
enum class MoeMode : uint32_t {
  kAuto = 0,        ///< low latency when the exchange has it and the call is within the LL limit, else normal
  kNormal = 1,      ///< route, pack, alltoallv, count, place, fan-out (any token count up to max_tokens)
  kLowLatency = 2,  ///< one kernel per phase, no count exchange
};

/// The auto rule: LL for calls of at most `ll_limit` tokens (the LL rows hold MoeConfig::ll_max_tokens, and
/// MoeConfig::ll_auto_max_tokens may set the crossover lower), else normal; 0 means no LL. A pair beyond an expert's
/// capacity is dropped and counted, not an error of the mode. Every rank must take the same mode in one call (ranks
/// that step the same batch bound do): a rank in the other mode looks like a dead peer to the LL kernels, which then
/// report a timeout.
inline MoeMode chooseMoeMode(MoeMode requested, int ll_limit, int num_tokens) {
  const bool fits = ll_limit > 0 && num_tokens <= ll_limit;
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

/// Calls whose kernel spans LlKernelTimes keeps (a ring indexed by the call's epoch).
inline constexpr int kLlTimeSlots = 64;
/// Stamps per call: [kLlStampStart] the first CTA's start of work (after the kernel before it in the stream has
/// finished), [kLlStampEnd] the last CTA's end; with phase stamps on, the moment the last CTA reached each phase:
/// dispatch: its rows and flags sent, every count block read, every row flag it waited for seen; combine: its partial
/// sums sent, every partial sum it waited for seen, every peer's mark seen; and the last CTA's start of work.
inline constexpr int kLlStampStart = 0;
inline constexpr int kLlStampEnd = 1;
inline constexpr int kLlStampSent = 2;
inline constexpr int kLlStampSignals = 3;  ///< dispatch: count blocks read; combine: partial sums' flags seen
inline constexpr int kLlStampRows = 4;     ///< dispatch: row flags seen; combine: marks seen
inline constexpr int kLlStampLastStart = 5;
inline constexpr int kLlStamps = 6;
/// %globaltimer stamps of recent LL kernels. Start words begin at UINT64_MAX, the others at 0 (llClearTimes).
struct LlKernelTimes {
  uint64_t dispatch[kLlTimeSlots][kLlStamps];
  uint64_t combine[kLlTimeSlots][kLlStamps];
};
static_assert(std::is_trivially_copyable_v<LlKernelTimes>);
/// Every slot empty.
void llClearTimes(LlKernelTimes* t);
/// The spans (us) of the slots that hold a whole call, in slot order.
std::vector<double> llKernelSpansUs(const LlKernelTimes& t, bool combine);
/// For the slots that hold a whole call: stamp `stamp` less the call's start (us); slots without that stamp are left
/// out.
std::vector<double> llStampOffsetsUs(const LlKernelTimes& t, bool combine, int stamp);

}  // namespace peerlab::alltoallv::moe
