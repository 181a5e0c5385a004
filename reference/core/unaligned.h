#pragma once
/// Loads and stores at any byte address, host and device alike (memcpy on the host, where tests simulate kernels):
/// 8-byte words assembled from aligned accesses, and the widest aligned stores that fit a piece of up to 8 bytes.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>

namespace peerlab {

/// A naturally aligned load or store of T at `p` (memcpy on the host, where the tests simulate the kernels).
template <class T>
__host__ __device__ inline T loadAligned(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const T*>(p);
#else
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
#endif
}
template <class T>
__host__ __device__ inline void storeAligned(uint8_t* p, T v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<T*>(p) = v;
#else
  std::memcpy(p, &v, sizeof(T));
#endif
}

/// 8 bytes from any address: aligned loads realigned in registers. Reads up to 15 bytes past `p`, which the caller
/// keeps mapped (alltoallv: the send buffer is always followed by the receive buffer inside a rank's region).
__host__ __device__ inline uint64_t load8(const uint8_t* p) {
  const uint32_t o = static_cast<uint32_t>(reinterpret_cast<uint64_t>(p) & 7);
  const uint64_t lo = loadAligned<uint64_t>(p - o);
  if (o == 0) return lo;
  return (lo >> (8 * o)) | (loadAligned<uint64_t>(p - o + 8) << (64 - 8 * o));
}
/// The low `len` (1..8) bytes of `v` to any address, with the widest aligned stores that fit.
__host__ __device__ inline void store8(uint8_t* p, uint64_t v, uint64_t len) {
  const uint64_t addr = reinterpret_cast<uint64_t>(p);
  if (len == 8 && (addr & 7) == 0) {
    storeAligned<uint64_t>(p, v);
    return;
  }
  for (uint64_t i = 0; i < len;) {
    const uint64_t left = len - i;
    if (((addr + i) & 3) == 0 && left >= 4) {
      storeAligned<uint32_t>(p + i, static_cast<uint32_t>(v >> (8 * i)));
      i += 4;
    } else if (((addr + i) & 1) == 0 && left >= 2) {
      storeAligned<uint16_t>(p + i, static_cast<uint16_t>(v >> (8 * i)));
      i += 2;
    } else {
      p[i] = static_cast<uint8_t>(v >> (8 * i));
      i += 1;
    }
  }
}

/// The `n` (0..8) bytes at `p` as a little-endian word, reading nothing past them: one 8-byte load when they are a
/// whole aligned word.
__host__ __device__ inline uint64_t loadUpTo8(const uint8_t* p, uint64_t n) {
  if (n == 8 && (reinterpret_cast<uint64_t>(p) & 7) == 0) return loadAligned<uint64_t>(p);
  uint64_t v = 0;
  for (uint64_t i = 0; i < n; ++i)
    v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace peerlab
