#pragma once
/// CTA-wide copy of one piece of a segment between (possibly peer-mapped) device buffers: bytes one by one up to
/// the destination's 16-byte boundary, then 16-byte vectors (several loads in flight per thread before the stores),
/// then the tail. When source and destination disagree modulo 16, the body still moves whole 16-byte vectors: each
/// warp loads aligned source vectors and realigns them in registers (funnel shifts over a lane shuffle).

#include <cstdint>

#include "reference/alltoallv/layout.h"

namespace peerlab::alltoallv {

/// Loads in flight per thread in the aligned body.
inline constexpr int kCopyUnroll = 8;
/// 32-vector windows in flight per warp in the realigning body.
inline constexpr int kRealignUnroll = 4;

/// Bytes [s, s + 16) of the 32-byte concatenation x:y (little endian), for 0 < s < 16.
__device__ __forceinline__ uint4 realign16(const uint4& x, const uint4& y, uint32_t s) {
  uint32_t w0, w1, w2, w3, w4;
  switch (s >> 2) {
    case 0:
      w0 = x.x, w1 = x.y, w2 = x.z, w3 = x.w, w4 = y.x;
      break;
    case 1:
      w0 = x.y, w1 = x.z, w2 = x.w, w3 = y.x, w4 = y.y;
      break;
    case 2:
      w0 = x.z, w1 = x.w, w2 = y.x, w3 = y.y, w4 = y.z;
      break;
    default:
      w0 = x.w, w1 = y.x, w2 = y.y, w3 = y.z, w4 = y.w;
      break;
  }
  const uint32_t r = (s & 3u) * 8u;
  return make_uint4(__funnelshift_r(w0, w1, r), __funnelshift_r(w1, w2, r), __funnelshift_r(w2, w3, r),
                    __funnelshift_r(w3, w4, r));
}

__device__ __forceinline__ uint4 shflDown16(const uint4& v, int delta) {
  return make_uint4(__shfl_down_sync(0xffffffffu, v.x, delta), __shfl_down_sync(0xffffffffu, v.y, delta),
                    __shfl_down_sync(0xffffffffu, v.z, delta), __shfl_down_sync(0xffffffffu, v.w, delta));
}

/// Chunks [c0, c1) of 16 bytes, both sides aligned.
__device__ __forceinline__ void copyAligned(const uint4* __restrict__ s, uint4* __restrict__ d, uint64_t c0,
                                            uint64_t c1) {
  const uint64_t stride = blockDim.x;
  uint64_t c = c0 + threadIdx.x;
  for (; c + (kCopyUnroll - 1) * stride < c1; c += kCopyUnroll * stride) {
    uint4 v[kCopyUnroll];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u)
      v[u] = s[c + u * stride];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u)
      d[c + u * stride] = v[u];
  }
  for (; c < c1; c += stride)
    d[c] = s[c];
}

/// Destination chunks [c0, c1) of 16 bytes; source chunk c starts `shift` bytes into aligned source vector s[c].
/// Reads s[c0 .. c1] (the last one holds the final bytes of chunk c1 - 1). Whole warps run this: blockDim.x % 32 == 0.
__device__ __forceinline__ void copyRealign(const uint4* __restrict__ s, uint4* __restrict__ d, uint64_t c0,
                                            uint64_t c1, uint32_t shift) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const uint64_t warp = threadIdx.x >> 5;
  const uint64_t warps = blockDim.x >> 5;
  constexpr uint64_t kWindow = 32 * kRealignUnroll;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (uint64_t wb = c0 + warp * kWindow; wb < c1; wb += warps * kWindow) {
    uint4 x[kRealignUnroll];
    uint4 extra[kRealignUnroll];
#pragma unroll
    for (int u = 0; u < kRealignUnroll; ++u) {
      const uint64_t c = wb + u * 32 + lane;
      x[u] = c <= c1 ? s[c] : zero;
      const uint64_t ce = wb + u * 32 + 32;
      extra[u] = (lane == 31 && ce <= c1) ? s[ce] : zero;
    }
#pragma unroll
    for (int u = 0; u < kRealignUnroll; ++u) {
      uint4 y = shflDown16(x[u], 1);
      if (lane == 31) y = extra[u];
      const uint64_t c = wb + u * 32 + lane;
      if (c < c1) d[c] = realign16(x[u], y, shift);
    }
  }
}

/// Body chunks [c0, c1) of the copy cut as `p`, plus the byte head and/or tail, by the whole CTA.
__device__ __forceinline__ void copyRange(const uint8_t* src, uint8_t* dst, const CopyPlan& p, uint64_t c0, uint64_t c1,
                                          bool head, bool tail) {
  const uint64_t tid = threadIdx.x;
  if (head) {
    for (uint64_t i = tid; i < p.head; i += blockDim.x)
      dst[i] = src[i];
  }
  if (tail) {
    const uint64_t t = p.head + p.chunks * 16;
    for (uint64_t i = tid; i < p.tail; i += blockDim.x)
      dst[t + i] = src[t + i];
  }
  if (c0 >= c1) return;
  auto* d = reinterpret_cast<uint4*>(dst + p.head);
  if (p.shift == 0) {
    copyAligned(reinterpret_cast<const uint4*>(src + p.head), d, c0, c1);
  } else {
    copyRealign(reinterpret_cast<const uint4*>(src + p.head - p.shift), d, c0, c1, p.shift);
  }
}

/// Piece `piece` of `pieces` of copying `bytes` from `src` to `dst`, by the whole CTA.
__device__ __forceinline__ void copyPiece(const uint8_t* src, uint8_t* dst, uint64_t bytes, int pieces, int piece) {
  const CopyPlan p = planCopy(reinterpret_cast<uint64_t>(src), reinterpret_cast<uint64_t>(dst), bytes);
  uint64_t c0 = 0;
  uint64_t c1 = 0;
  pieceRange(p.chunks, pieces, piece, &c0, &c1);
  copyRange(src, dst, p, c0, c1, piece == 0, piece == pieces - 1);
}

}  // namespace peerlab::alltoallv
