#pragma once
/// Global-memory accesses with an explicit PTX memory order and scope: what flags, counters and epochs between GPUs
/// (scope sys: peer memory over NVLink or PCIe) and between the CTAs of one launch (scope gpu) are read and written
/// with. Relaxed accesses never read a stale L1 copy and never wait for earlier stores; acquire / release give the
/// ordering a flag that publishes data needs.

#include <cstdint>

namespace peerlab {

__device__ __forceinline__ uint32_t loadRelaxedSys(const volatile uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void storeRelaxedSys(volatile uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint64_t loadRelaxedSys64(const volatile uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void storeRelaxedSys64(volatile uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/// Acquire load of a 32-bit flag at system scope (peer memory over NVLink or PCIe).
__device__ __forceinline__ uint32_t loadAcquireSys(const volatile uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
/// Release store of a 32-bit flag at system scope.
__device__ __forceinline__ void storeReleaseSys(volatile uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
/// Acquire load / release store of 64-bit flags at system scope.
__device__ __forceinline__ uint64_t loadAcquireSys64(const volatile uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void storeReleaseSys64(volatile uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/// Between the CTAs of one launch on one GPU.
__device__ __forceinline__ uint64_t loadRelaxedGpu64(const volatile uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t loadAcquireGpu32(const volatile uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void redRelaxedGpuAdd32(uint32_t* p, uint32_t v) {
  asm volatile("red.relaxed.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/// Adds to a counter that a peer polls (after fenceAcqRelSys(), the add releases what came before it).
__device__ __forceinline__ void redRelaxedSysAdd64(uint64_t* p, uint64_t v) {
  asm volatile("red.relaxed.sys.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void fenceAcqRelSys() {
  asm volatile("fence.acq_rel.sys;" ::: "memory");
}

}  // namespace peerlab
