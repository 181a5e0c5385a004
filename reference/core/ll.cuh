#pragma once
/// LL ("low latency") lines: 16 bytes that carry 8 data bytes and a tag beside each 4-byte half, written with one
/// 16-byte store. Every aligned 8-byte half {data, tag} arrives in one piece, so a reader that sees the tag in both
/// halves has the whole line: the data carries its own flag, and neither side needs a fence or a separate signal.
/// A line is reused with a new tag each time (epochs), never reset.

#include <cstdint>

#include "reference/core/device_time.cuh"

namespace peerlab {

/// Writes `data` with `tag` into the line at `p` (local or peer memory).
__device__ __forceinline__ void storeLl(uint4* p, uint64_t data, uint32_t tag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(static_cast<uint32_t>(data)), "r"(tag),
               "r"(static_cast<uint32_t>(data >> 32)), "r"(tag)
               : "memory");
}

/// Reads the line at `p`; true when both halves carry `tag` (then `*data` is the payload).
__device__ __forceinline__ bool loadLl(const uint4* p, uint32_t tag, uint64_t* data) {
  uint32_t d0, f0, d1, f1;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1)
               : "l"(p)
               : "memory");
  *data = static_cast<uint64_t>(d1) << 32 | d0;
  return f0 == tag && f1 == tag;
}

/// Spins on the line at `p` until it carries `tag`, or until `timeout_ns` after `t0` (%globaltimer) has passed.
__device__ __forceinline__ bool waitLl(const uint4* p, uint32_t tag, uint64_t t0, uint64_t timeout_ns, uint64_t* data) {
  while (!loadLl(p, tag, data)) {
    if (globalTimerNs() - t0 > timeout_ns) return false;
  }
  return true;
}

}  // namespace peerlab
