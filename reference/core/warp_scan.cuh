#pragma once
/// Warp-wide inclusive prefix sum over the first kWidth lanes (Hillis-Steele with lane shuffles). Every lane of the
/// warp must call it; lanes at or beyond kWidth take part in the shuffles and get a sum that includes their own value.

#include <cstdint>

namespace peerlab {

template <int kWidth = 32, typename T>
__device__ __forceinline__ T warpInclusiveSum(T x) {
  static_assert(kWidth >= 1 && kWidth <= 32, "a warp has 32 lanes");
  const int lane = static_cast<int>(threadIdx.x & 31u);
#pragma unroll
  for (int o = 1; o < kWidth; o *= 2) {
    const T y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  return x;
}

}  // namespace peerlab
