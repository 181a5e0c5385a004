#pragma once
/// Device side of the zero-copy semaphores: bounded waits on local words, release signals into peer words, block
/// copies with 16-byte vectors, and the sm_signal endpoint view a kernel can drive itself (device-initiated use).
///
/// Every spin is bounded by %globaltimer and reports kDeviceTimeout into the endpoint's error words instead of hanging.

#include <cstdint>

#include "reference/core/device_time.cuh"
#include "reference/core/ll.cuh"
#include "reference/core/unaligned.h"
#include "reference/zcopy/semaphore.h"

namespace peerlab::zcopy {

/// Spins until `*word` reaches `want` (cyclic order) or `timeout_ns` passes; false on timeout. A word already there
/// costs one acquire load; otherwise relaxed polls, then one acquire load (the word only moves forward, so it still
/// holds an epoch at or past `want`).
__device__ __forceinline__ bool waitWordGe(const volatile uint32_t* word, uint32_t want, uint64_t timeout_ns) {
  if (epochReached(loadAcquireSys(word), want)) return true;
  const uint64_t start = globalTimerNs();
  while (!epochReached(loadRelaxedSys(word), want)) {
    if (globalTimerNs() - start > timeout_ns) return false;
  }
  (void)loadAcquireSys(word);
  return true;
}

/// Records the first device-side error of an endpoint (plain stores: host-mapped memory needs no atomics).
__device__ __forceinline__ void reportError(uint32_t* error, uint32_t code, uint32_t epoch) {
  volatile uint32_t* e = error;
  if (e[0] == kDeviceOk) {
    e[1] = epoch;
    e[0] = code;
  }
}

/// Copies [0, bytes) from `src` to `dst` with the threads [rank, rank + count) of a block: 16-byte vectors when the
/// two pointers share their alignment, else 4-byte words or bytes. Consecutive threads touch consecutive vectors.
__device__ __forceinline__ void copyRange(uint8_t* dst, const uint8_t* src, uint64_t bytes, unsigned rank,
                                          unsigned count) {
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst);
  const uintptr_t s = reinterpret_cast<uintptr_t>(src);
  unsigned shift;
  if (((d ^ s) & 15) == 0) {
    shift = 4;
  } else if (((d ^ s) & 3) == 0) {
    shift = 2;
  } else {
    shift = 0;
  }
  const uint64_t unit = 1ull << shift;
  // Head bytes up to the common alignment, whole units, tail bytes.
  uint64_t head = (unit - (d & (unit - 1))) & (unit - 1);
  if (head > bytes) head = bytes;
  const uint64_t units = (bytes - head) >> shift;
  const uint64_t body_end = head + (units << shift);
  for (uint64_t i = rank; i < head; i += count)
    dst[i] = src[i];
  if (shift == 4) {
    auto* dv = reinterpret_cast<uint4*>(dst + head);
    const auto* sv = reinterpret_cast<const uint4*>(src + head);
    uint64_t i = rank;
    // Four independent loads in flight per thread before the stores.
    for (; i + 3 * static_cast<uint64_t>(count) < units; i += 4 * static_cast<uint64_t>(count)) {
      const uint4 a = sv[i];
      const uint4 b = sv[i + count];
      const uint4 c = sv[i + 2 * static_cast<uint64_t>(count)];
      const uint4 e = sv[i + 3 * static_cast<uint64_t>(count)];
      dv[i] = a;
      dv[i + count] = b;
      dv[i + 2 * static_cast<uint64_t>(count)] = c;
      dv[i + 3 * static_cast<uint64_t>(count)] = e;
    }
    for (; i < units; i += count)
      dv[i] = sv[i];
  } else if (shift == 2) {
    auto* dw = reinterpret_cast<uint32_t*>(dst + head);
    const auto* sw = reinterpret_cast<const uint32_t*>(src + head);
    for (uint64_t i = rank; i < units; i += count)
      dw[i] = sw[i];
  } else {
    for (uint64_t i = head + rank; i < body_end; i += count)
      dst[i] = src[i];
  }
  for (uint64_t i = body_end + rank; i < bytes; i += count)
    dst[i] = src[i];
}

/// The LL buffer of message `epoch` in an sm_signal slot (its words from kSmLlWord on).
__device__ __forceinline__ uint4* smLlBuffer(uint32_t* slot_words, uint32_t epoch) {
  return reinterpret_cast<uint4*>(slot_words + kSmLlWord) + (epoch & 1u) * kSmLlBufferLines;
}

/// sendPost of an sm_signal sender for message `e` (the sender's next epoch), by ONE block of at least 32 threads:
/// sends [0, bytes) of `src` for the receiver's window at `dst_offset`. A message of at most kSmLlMaxBytes goes out in
/// the receiver's LL buffer for its epoch (data and flag in one store: no fence) once the receiver freed the message
/// before it; a larger one waits for its own "free", is pushed into the window, and every "arrived" word is released
/// at system scope. Returns false (and reports) on timeout; nothing is written then. Every thread returns the same
/// value; the block's shared state may be reused after it returns. A kernel that keeps its epochs in registers calls
/// this directly and writes the endpoint's counter (kCtrSmSend) back before it ends; smBlockSend does both.
/// Block size: every thread takes part in the barriers, and on the receiving side each thread up to the LL buffer's
/// line count polls a line, whether the message has it or not; small messages answer fastest from a block of one
/// thread per LL line of the message (its header and one line per 8 bytes), at least one warp.
__device__ __forceinline__ bool smBlockSendEpoch(const SmEndpointView& v, uint32_t e, const void* src,
                                                 uint64_t dst_offset, uint64_t bytes) {
  const bool ll = bytes <= kSmLlMaxBytes && dst_offset < kSmLlMaxOffset;
  const auto* in = static_cast<const uint8_t*>(src);
  // Each thread's first payload word is loaded while thread 0 checks "free" (the source is not written here).
  const uint64_t count = 1 + (bytes + 7) / 8;
  uint64_t first = 0;
  if (ll && threadIdx.x >= 1 && threadIdx.x < count) {
    const uint64_t at = 8 * (threadIdx.x - 1);
    first = loadUpTo8(in + at, bytes - at < 8 ? bytes - at : 8);
  }
  bool late = false;
  if (threadIdx.x == 0) {
    late = !waitWordGe(v.local_words + kSmFreeWord, ll ? e - 1 : e, v.timeout_ns);
    if (late) reportError(v.error, kDeviceTimeout, e);
  }
  // One barrier hands thread 0's verdict to the block (and orders its acquire of "free" before everyone's stores).
  const bool ok = __syncthreads_or(late ? 1 : 0) == 0;
  uint4* lines = smLlBuffer(v.remote_words, e);
  if (ok && ll) {
    for (uint64_t l = threadIdx.x; l < count; l += blockDim.x) {
      uint64_t d;
      if (l == 0) {
        d = smLlHeader(bytes, dst_offset, false);
      } else if (l == threadIdx.x) {
        d = first;
      } else {
        const uint64_t at = 8 * (l - 1);
        d = loadUpTo8(in + at, bytes - at < 8 ? bytes - at : 8);
      }
      storeLl(lines + l, d, e);
    }
  } else if (ok) {
    if (threadIdx.x == 0) storeLl(lines, smLlHeader(bytes, dst_offset, true), e);
    copyRange(v.remote_window + dst_offset, in, bytes, threadIdx.x, blockDim.x);
    // Every thread's stores happen before the release below (CTA barrier, then a system-scope release).
    __syncthreads();
    if (threadIdx.x < kSmMaxBlocks) storeReleaseSys(v.remote_words + kSmArrivedWord + threadIdx.x, e);
  }
  return ok;
}

/// smBlockSendEpoch for the endpoint's next epoch, advancing its device counter.
__device__ __forceinline__ bool smBlockSend(const SmEndpointView& v, const void* src, uint64_t dst_offset,
                                            uint64_t bytes) {
  const uint32_t e = v.counters[kCtrSmSend] + 1;  // every thread, one broadcast load
  const bool ok = smBlockSendEpoch(v, e, src, dst_offset, bytes);
  if (threadIdx.x == 0) v.counters[kCtrSmSend] = e;
  __syncthreads();
  return ok;
}

/// recvPost of an sm_signal receiver (one thread): tells the sender the destination is free for message `f`. A release
/// store: what this thread (or its block, after a barrier) read or wrote of the window before happens before the
/// sender's next writes.
__device__ __forceinline__ void smThreadPostFreeEpoch(const SmEndpointView& v, uint32_t f) {
  storeReleaseSys(v.remote_words + kSmFreeWord, f);
}

/// smThreadPostFreeEpoch for the endpoint's next "free", advancing its device counter. Everything the stream did
/// before (readers of the previous message) is complete when this kernel runs.
__device__ __forceinline__ void smThreadPostFree(const SmEndpointView& v) {
  const uint32_t f = v.counters[kCtrSmFree] + 1;
  smThreadPostFreeEpoch(v, f);
  v.counters[kCtrSmFree] = f;
}

/// recvWait of an sm_signal receiver for message `e` (the receiver's next epoch), by a block of at least 32
/// threads. Thread 0 waits for the next message's header
/// line while every other thread already polls one payload line (until it arrives or the header shows it is not part
/// of the message). An LL message is then copied out of the lines into this side's window; for a bulk message the
/// first warp waits until every "arrived" word reaches the epoch (relaxed polls, then one acquire load per word).
/// Returns false on timeout (or an LL message outside the window). Every thread returns the same value; the block's
/// shared state may be reused after it returns. A kernel that keeps its epochs in registers writes the endpoint's
/// counter (kCtrSmRecv) back before it ends; smBlockWait does both.
__device__ __forceinline__ bool smBlockWaitEpoch(const SmEndpointView& v, uint32_t e) {
  // Thread 0 writes the header and its verdict before the first barrier; every thread reads them between the two
  // barriers, and the second (which also gathers what went wrong later) keeps the next call's thread 0 from writing
  // them again before everyone read them. Nothing in shared memory is written while the other threads poll.
  __shared__ uint64_t s_header;
  __shared__ int s_ok;
  const uint4* lines = smLlBuffer(v.local_words, e);
  const uint64_t t0 = globalTimerNs();
  uint64_t first = 0;
  bool have = false;
  if (threadIdx.x == 0) {
    uint64_t h = 0;
    const bool ok = waitLl(lines, e, t0, v.timeout_ns, &h);
    s_header = h;
    s_ok = ok ? 1 : 0;
    if (!ok) reportError(v.error, kDeviceTimeout, e);
  } else if (threadIdx.x < kSmLlBufferLines) {
    // Payload line threadIdx.x - 1, if the message has it: spin until it arrives, the header (read from the buffer,
    // as thread 0 does) says it is beyond the message, or the deadline passes (then thread 0 reports).
    int n = -1;  // the message's payload lines, once this thread saw the header
    for (;;) {
      if (loadLl(lines + threadIdx.x, e, &first)) {
        have = true;
        break;
      }
      uint64_t h = 0;
      if (n < 0 && loadLl(lines, e, &h)) n = smLlHeaderBulk(h) ? 0 : static_cast<int>((smLlHeaderBytes(h) + 7) / 8);
      if (n >= 0 && static_cast<int>(threadIdx.x) > n) break;
      if (globalTimerNs() - t0 > v.timeout_ns) break;
    }
  }
  __syncthreads();
  const uint64_t h = s_header;
  const bool arrived = s_ok != 0;
  const bool ll = !smLlHeaderBulk(h);
  bool fail = false;
  bool inside = true;
  if (arrived && ll) {
    const uint64_t bytes = smLlHeaderBytes(h);
    const uint64_t offset = smLlHeaderOffset(h);
    inside = offset <= v.local_window_bytes && bytes <= v.local_window_bytes - offset;
    const uint64_t count = (bytes + 7) / 8;
    if (inside) {
      // Payload line p (buffer line p + 1) belongs to thread (p + 1) % blockDim: threads 1.. start with the line they
      // polled above.
      const uint64_t start = threadIdx.x == 0 ? blockDim.x - 1 : threadIdx.x - 1;
      for (uint64_t p = start; p < count; p += blockDim.x) {
        uint64_t d = first;
        if (!(have && p == start) && !waitLl(lines + 1 + p, e, t0, v.timeout_ns, &d)) {
          fail = true;
          break;
        }
        const uint64_t at = 8 * p;
        store8(v.local_window + offset + at, d, bytes - at < 8 ? bytes - at : 8);
      }
    } else {
      fail = threadIdx.x == 0;
    }
  } else if (arrived && threadIdx.x < 32) {
    const volatile uint32_t* flag = v.local_words + kSmArrivedWord + threadIdx.x;
    bool mine = epochReached(loadRelaxedSys(flag), e);
    bool all = true;
    if (!__all_sync(0xffffffffu, mine)) {
      const uint64_t start = globalTimerNs();
      for (;;) {
        if (!mine) mine = epochReached(loadRelaxedSys(flag), e);
        if (__all_sync(0xffffffffu, mine)) break;
        // Lane 0 alone reads the clock, so the whole warp leaves the loop together.
        const int expired = threadIdx.x == 0 && globalTimerNs() - start > v.timeout_ns ? 1 : 0;
        if (__shfl_sync(0xffffffffu, expired, 0) != 0) {
          all = false;
          break;
        }
      }
    }
    (void)loadAcquireSys(flag);
    fail = threadIdx.x == 0 && !all;
  }
  const bool failed = __syncthreads_or(fail ? 1 : 0) != 0;
  if (threadIdx.x == 0 && failed) reportError(v.error, ll && !inside ? kDeviceBadInput : kDeviceTimeout, e);
  return arrived && !failed;
}

/// smBlockWaitEpoch for the endpoint's next epoch, advancing its device counter.
__device__ __forceinline__ bool smBlockWait(const SmEndpointView& v) {
  const uint32_t e = v.counters[kCtrSmRecv] + 1;  // every thread, one broadcast load
  const bool ok = smBlockWaitEpoch(v, e);
  if (threadIdx.x == 0) v.counters[kCtrSmRecv] = e;
  __syncthreads();
  return ok;
}

/// Runs the steps of a fused sm_signal kernel in order, by one block of at least 32 threads (kSmSendThreads when it
/// sends). Stops at the first step that times out (reported in that endpoint's error words): the channels of the
/// program are then unusable, as after any device-side timeout.
__device__ __forceinline__ void smRunSteps(const SmStep* steps, uint32_t count) {
  for (uint32_t i = 0; i < count; ++i) {
    const SmStep& st = steps[i];
    bool ok = true;
    switch (st.kind) {
      case SmStepKind::kSend:
        ok = smBlockSend(st.view, st.src, st.dst_offset, st.bytes);
        break;
      case SmStepKind::kFree:
        if (threadIdx.x == 0) smThreadPostFree(st.view);
        break;
      case SmStepKind::kWait:
        ok = smBlockWait(st.view);
        break;
    }
    if (!ok) return;
  }
}

}  // namespace peerlab::zcopy
