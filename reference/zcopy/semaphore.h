#pragma once
/// Semaphore words of the zero-copy protocols: where they live and how their epochs compare.
///
/// Every rank exports one small semaphore page. For each (peer, channel, direction) the page holds one slot that only
/// that peer writes: every wait polls LOCAL memory and every signal is a REMOTE write into the peer's page. Words
/// carry epochs (1, 2, 3, ... from an agreed initial value) and are never reset, so a late or early signal can never
/// be mistaken for another round; comparisons are cyclic, so the 32-bit words may wrap.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace peerlab::zcopy {

/// The two sides of a one-directional channel.
enum class Role : uint32_t {
  kSender = 0,
  kReceiver = 1,
};

constexpr Role opposite(Role r) {
  return r == Role::kSender ? Role::kReceiver : Role::kSender;
}

/// get / put: the one word the peer signals (ready or done for get, free or arrived for put).
inline constexpr uint32_t kInboxWord = 0;
/// sm_signal, in the sender's slot: "destination free" epochs from the receiver.
inline constexpr uint32_t kSmFreeWord = 1;
/// sm_signal, in the receiver's slot: one "arrived" word per block of the send kernel.
inline constexpr uint32_t kSmArrivedWord = 32;
inline constexpr uint32_t kSmMaxBlocks = 32;
/// sm_signal, in the receiver's slot from word kSmLlWord: two buffers of LL lines (reference/core/ll.cuh); message e
/// uses buffer e % 2 and tags its lines with e. Line 0 is the header: data bits 0-12 the size, bit 31 kSmLlBulk, bits
/// 13-28 and 32-63 the destination offset (bits 32-47 and 0-31). A message of at most kSmLlMaxBytes (offset below
/// 2^48) rides in the lines itself, 8 payload bytes per line from line 1; the receiver copies it into its window, and
/// no fence or separate signal is needed. Because the buffers alternate, an LL message only needs the "free" of the
/// message before it (its buffer was read two messages ago). A larger message has kSmLlBulk set: it waits for its own
/// "free", is pushed into the window and completed with the "arrived" words (release/acquire).
inline constexpr uint32_t kSmLlWord = 64;
inline constexpr uint64_t kSmLlMaxBytes = 4096;
inline constexpr uint32_t kSmLlBufferLines = 1 + static_cast<uint32_t>(kSmLlMaxBytes / 8);
inline constexpr uint32_t kSmLlBulk = 0x80000000u;
inline constexpr uint64_t kSmLlMaxOffset = uint64_t{1} << 48;
static_assert(kSmArrivedWord + kSmMaxBlocks <= kSmLlWord);
static_assert(kSmLlMaxBytes < (1u << 13));
/// The header's data word of a message (LL when `bulk` is false).
__host__ __device__ constexpr uint64_t smLlHeader(uint64_t bytes, uint64_t dst_offset, bool bulk) {
  return (bulk ? uint64_t{kSmLlBulk} : bytes) | ((dst_offset >> 32) & 0xffffu) << 13 | dst_offset << 32;
}
__host__ __device__ constexpr uint64_t smLlHeaderBytes(uint64_t h) {
  return h & 0x1fffu;
}
__host__ __device__ constexpr uint64_t smLlHeaderOffset(uint64_t h) {
  return (h >> 32) | ((h >> 13) & 0xffffu) << 32;
}
__host__ __device__ constexpr bool smLlHeaderBulk(uint64_t h) {
  return (h & kSmLlBulk) != 0;
}
/// Words per slot: a whole number of 128-byte lines, so slots never share one.
inline constexpr uint32_t kSlotWords = (kSmLlWord + 2 * 4 * kSmLlBufferLines + 31) / 32 * 32;
inline constexpr size_t kSlotBytes = kSlotWords * sizeof(uint32_t);

/// Device-held epoch counters per endpoint (private device memory, never exported).
inline constexpr uint32_t kCounterWords = 8;
inline constexpr uint32_t kCtrSignal = 0;    ///< get/put inside graphs: last epoch signalled
inline constexpr uint32_t kCtrWait = 1;      ///< get/put inside graphs: last epoch waited for
inline constexpr uint32_t kCtrSmSend = 2;    ///< sm_signal sender: last message sent
inline constexpr uint32_t kCtrSmRecv = 3;    ///< sm_signal receiver: last message waited for
inline constexpr uint32_t kCtrSmFree = 4;    ///< sm_signal receiver: last "free" signalled
inline constexpr uint32_t kCtrSmBlocks = 5;  ///< sm_signal sender: blocks of the running send kernel that finished
inline constexpr uint32_t kCtrProbe = 6;     ///< scratch word of the stream-memory-operation probe

/// Error words per endpoint, in host-mapped memory: {DeviceError code, epoch it happened at}.
inline constexpr uint32_t kErrorWords = 2;

/// True when `value` has reached `want` in the cyclic order of cuStreamWaitValue32's GEQ: (int32_t)(value - want) >= 0.
/// Valid while the two are less than 2^31 epochs apart.
__host__ __device__ constexpr bool epochReached(uint32_t value, uint32_t want) {
  return static_cast<int32_t>(value - want) >= 0;
}

/// Slot of a rank's page that `peer` writes for `channel`, by the role of the page's owner on that channel.
constexpr size_t slotIndex(int peer, int channel, Role owner_role, int channels) {
  return (static_cast<size_t>(peer) * static_cast<size_t>(channels) + static_cast<size_t>(channel)) * 2 +
         static_cast<size_t>(owner_role);
}
/// Endpoints (slots) per rank.
constexpr size_t slotCount(int ranks, int channels) {
  return static_cast<size_t>(ranks) * static_cast<size_t>(channels) * 2;
}
/// Bytes of a rank's semaphore page.
constexpr size_t pageBytes(int ranks, int channels) {
  return slotCount(ranks, channels) * kSlotBytes;
}

/// An sm_signal endpoint as a kernel sees it. Trivially copyable; Channel::smView() fills it.
struct SmEndpointView {
  uint32_t* local_words = nullptr;   ///< this endpoint's slot in the local page (the peer writes it)
  uint32_t* remote_words = nullptr;  ///< the peer endpoint's slot in the peer's page (mapped here)
  uint8_t* remote_window = nullptr;  ///< sender: the receiver's destination window (mapped here); receiver: null
  uint64_t remote_window_bytes = 0;
  uint8_t* local_window = nullptr;  ///< receiver: its own window, where LL messages are copied out; sender: null
  uint64_t local_window_bytes = 0;
  uint32_t* counters = nullptr;  ///< kCounterWords device-held epochs (local memory)
  uint32_t* error = nullptr;     ///< kErrorWords host-mapped error words
  uint64_t timeout_ns = 0;       ///< bound of every spin
};
static_assert(std::is_trivially_copyable_v<SmEndpointView>);

/// One sm_signal call as a step of a fused kernel: adjacent sm_signal calls enqueued through a MemOpBatch run in
/// order in ONE block of one kernel (one launch instead of one per call).
enum class SmStepKind : uint32_t {
  kSend = 0,  ///< sendPost of a message that one block moves (at most kSmFusedSendBytes)
  kFree = 1,  ///< recvPost: the destination is free
  kWait = 2,  ///< recvWait: wait until the message arrived
};
struct SmStep {
  SmStepKind kind = SmStepKind::kWait;
  uint32_t pad = 0;
  SmEndpointView view;
  const void* src = nullptr;  ///< kSend
  uint64_t dst_offset = 0;    ///< kSend
  uint64_t bytes = 0;         ///< kSend
};
static_assert(std::is_trivially_copyable_v<SmStep>);
/// Steps of one fused kernel (its parameters stay far below the 4 KB kernel-parameter limit).
inline constexpr uint32_t kSmProgramSteps = 16;
/// Largest send a fused step moves: the bytes one block of the send kernel moves; larger sends launch on their own.
inline constexpr uint64_t kSmFusedSendBytes = 16 * 1024;
struct SmProgram {
  SmStep step[kSmProgramSteps];
  uint32_t count = 0;
  uint32_t has_send = 0;
};
static_assert(std::is_trivially_copyable_v<SmProgram>);
static_assert(sizeof(SmProgram) <= 4000);

}  // namespace peerlab::zcopy
