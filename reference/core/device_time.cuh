#pragma once
/// Device-side deadlines: every device spin reads %globaltimer and reports instead of hanging.

#include <cstdint>

#include "reference/core/memory_order.cuh"

namespace peerlab {

/// Nanoseconds from the GPU's global timer (coarse, but monotonic and shared across SMs).
__device__ __forceinline__ uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// Error words kernels write to a device-side status slot.
enum DeviceError : uint32_t {
  kDeviceOk = 0,
  kDeviceTimeout = 1,
  kDeviceOverflow = 2,
  kDeviceBadInput = 3,
};

/// Spins until `*flag >= want` (wrap-safe signed compare) or `timeout_ns` passes; returns false on timeout.
__device__ __forceinline__ bool waitFlagGe(const volatile uint32_t* flag, uint32_t want, uint64_t timeout_ns) {
  const uint64_t start = globalTimerNs();
  while (static_cast<int32_t>(loadAcquireSys(flag) - want) < 0) {
    if (globalTimerNs() - start > timeout_ns) return false;
  }
  return true;
}

}  // namespace peerlab
