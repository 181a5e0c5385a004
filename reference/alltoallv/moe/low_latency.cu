#include "reference/alltoallv/moe/low_latency.h"

#include <cuda_fp8.h>

#include <algorithm>
#include <cstddef>
#include <string>

#include "reference/core/check.h"
#include "reference/core/device_time.cuh"
#include "reference/core/programmatic.cuh"
#include "reference/core/scoped.h"
#include "reference/core/wait.h"

namespace peerlab::alltoallv::moe {

namespace {

constexpr int kLlThreads = 256;
// 16-byte vectors each thread has in flight when it moves a row.
constexpr int kLlBatch = 4;
constexpr uint32_t kWhatDispatch = 1;
constexpr uint32_t kWhatCombine = 2;
constexpr unsigned kAll = 0xffffffffu;

__device__ __forceinline__ unsigned lanesBelow(int lane) {
  return (1u << lane) - 1u;
}

__device__ __forceinline__ void llReport(LlState* s, uint32_t code, int peer, uint32_t what) {
  if (atomicCAS(&s->code, 0u, code) == 0u) {
    s->rank = peer;
    s->what = what;
  }
}

// Deadline of a polling loop: false once past it, or at once while an error is on record (checked every 16 spins).
struct LlSpin {
  uint64_t start;
  uint64_t timeout_ns;
  const LlState* state;
  uint32_t spin = 0;
  __device__ bool ok() {
    if ((++spin & 15u) != 0) return true;
    if (*reinterpret_cast<const volatile uint32_t*>(&state->code) != kDeviceOk) return false;
    return globalTimerNs() - start <= timeout_ns;
  }
};

// Spins until `pred(*p)` (acquire, system scope); true with the word in *word. False at the deadline, and at once
// while an error is on record (a call behind a failed one does not wait out a deadline of its own).
template <class Pred>
__device__ __forceinline__ bool llWait(const uint64_t* p, Pred pred, uint64_t timeout_ns, const LlState* state,
                                       uint64_t* word) {
  LlSpin spin{globalTimerNs(), timeout_ns, state};
  do {
    const uint64_t w = loadAcquireSys64(p);
    if (pred(w)) {
      *word = w;
      return true;
    }
  } while (spin.ok());
  return false;
}

// Tagged words (ll_layout.h): 4 bytes of data beside the call's epoch in one 8-byte word. A tagged row keeps the
// data byte at offset x in the word at 2 * (x & ~3); 16 data bytes are two 16-byte stores of two words each. Each
// 8-byte element of a vector access is single-copy atomic, so a reader that sees the tag sees that word's data.
__device__ __forceinline__ uint64_t tagWord(uint32_t x, uint32_t tag) {
  return (static_cast<uint64_t>(tag) << 32) | x;
}
__device__ __forceinline__ void storeTagged16(uint8_t* row, uint64_t off, const uint4& v, uint32_t tag) {
  uint8_t* p = row + 2 * off;
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(tagWord(v.x, tag)), "l"(tagWord(v.y, tag))
               : "memory");
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p + 16), "l"(tagWord(v.z, tag)), "l"(tagWord(v.w, tag))
               : "memory");
}
__device__ __forceinline__ void storeTagged4(uint8_t* row, uint64_t off, uint32_t x, uint32_t tag) {
  storeRelaxedSys64(reinterpret_cast<volatile uint64_t*>(row + 2 * off), tagWord(x, tag));
}
// True when all four words carry `tag`; their data in *v either way.
__device__ __forceinline__ bool loadTagged16(const uint8_t* row, uint64_t off, uint32_t tag, uint4* v) {
  const uint8_t* p = row + 2 * off;
  uint64_t a, b, c, d;
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p));
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(c), "=l"(d) : "l"(p + 16));
  *v = make_uint4(static_cast<uint32_t>(a), static_cast<uint32_t>(b), static_cast<uint32_t>(c),
                  static_cast<uint32_t>(d));
  return ((a >> 32) == tag) & ((b >> 32) == tag) & ((c >> 32) == tag) & ((d >> 32) == tag);
}

// Reads this thread's 16-byte units of a batch of a tagged row (units base + b * kLlThreads + tid below `units`),
// polling the ones not yet of this call; false at the deadline (the units then hold whatever was there).
__device__ bool pollTaggedBatch(const uint8_t* row, int base, int units, uint32_t tag, uint4 (&v)[kLlBatch],
                                uint64_t timeout_ns, const LlState* state) {
  const int tid = static_cast<int>(threadIdx.x);
  uint32_t missing = 0;
#pragma unroll
  for (int b = 0; b < kLlBatch; ++b) {
    const int c = base + b * kLlThreads + tid;
    v[b] = make_uint4(0, 0, 0, 0);
    if (c < units && !loadTagged16(row, 16ull * c, tag, &v[b])) missing |= 1u << b;
  }
  if (missing == 0) return true;
  LlSpin spin{globalTimerNs(), timeout_ns, state};
  while (spin.ok()) {
#pragma unroll
    for (int b = 0; b < kLlBatch; ++b) {
      if (((missing >> b) & 1u) && loadTagged16(row, 16ull * (base + b * kLlThreads + tid), tag, &v[b])) {
        missing &= ~(1u << b);
      }
    }
    if (missing == 0) return true;
  }
  return false;
}

// One tagged 4-byte value (a count word, an fp8 scale), polled until it is of this call; false at the deadline.
__device__ bool pollTagged4(const uint64_t* word, uint32_t tag, uint32_t* x, uint64_t timeout_ns,
                            const LlState* state) {
  uint64_t w = loadRelaxedSys64(word);
  LlSpin spin{globalTimerNs(), timeout_ns, state};
  while ((w >> 32) != tag) {
    if (!spin.ok()) return false;
    w = loadRelaxedSys64(word);
  }
  *x = static_cast<uint32_t>(w);
  return true;
}

// Kernel spans (LlKernelTimes): every CTA stamps its start of work and its end into the call's slot.
using LlSlots = uint64_t (*)[kLlStamps];
// `began` is the CTA's %globaltimer when it started work, read before the epoch was loaded: publishing it needs the
// epoch (the slot), and a stamp must not make the CTA wait for that load any earlier than its work does.
__device__ __forceinline__ void llStampStart(LlSlots slots, uint32_t epoch, bool phases, uint64_t began) {
  if (slots != nullptr && threadIdx.x == 0) {
    atomicMin(reinterpret_cast<unsigned long long*>(&slots[epoch % kLlTimeSlots][kLlStampStart]), began);
    if (phases)
      atomicMax(reinterpret_cast<unsigned long long*>(&slots[epoch % kLlTimeSlots][kLlStampLastStart]), began);
  }
}

// Phase stamps (on only when asked): the moment the last CTA got to `stamp`. Thread 0, after a CTA barrier.
__device__ __forceinline__ void llStamp(LlSlots slots, uint32_t epoch, bool phases, int stamp) {
  if (phases && slots != nullptr && threadIdx.x == 0) {
    atomicMax(reinterpret_cast<unsigned long long*>(&slots[epoch % kLlTimeSlots][stamp]), globalTimerNs());
  }
}

// The last CTA of a launch advances the epoch (every CTA read it at its start) and empties the next call's time slot.
__device__ __forceinline__ void llCloseCall(uint32_t* arrived, uint32_t* epoch_word, uint32_t epoch, LlSlots slots) {
  __syncthreads();
  if (threadIdx.x == 0) {
    if (slots != nullptr) {
      atomicMax(reinterpret_cast<unsigned long long*>(&slots[epoch % kLlTimeSlots][kLlStampEnd]), globalTimerNs());
    }
    // No fence before the count: the next kernel reads the epoch and the slots only once this grid has completed
    // (awaitPriorGrids, or stream order), which makes every write of the grid visible.
    if (atomicAdd(arrived, 1u) + 1 == gridDim.x) {
      *arrived = 0;
      *epoch_word = epoch;
      if (slots != nullptr) {
        for (int j = 0; j < kLlStamps; ++j)
          slots[(epoch + 1) % kLlTimeSlots][j] = j == kLlStampStart ? UINT64_MAX : 0;
      }
    }
  }
}

struct DispatchArgs {
  SymmetricView region;
  LlLayout layout;
  int rank;
  int num_tokens;
  const __nv_bfloat16* tokens;
  const int32_t* ids;
  const float* weights;
  uint8_t* rows;
  float* scales;
  int64_t* expert_counts;
  int4* row_source;
  float* row_weight;
  uint32_t* token_dests;
  int32_t* recv_tokens;
  int32_t* recv_pairs;  // [q]: kept pairs of the q-th row taken (receive order)
  int2* recv_src;       // [q]: {source rank, source token} of the q-th row taken
  int2* recv_rows;      // [q][k]: {packed output row, weight bits} per kept pair, slot order
  LlState* state;
  LlKernelTimes* times;
  uint64_t timeout_ns;
  uint32_t fault;
  int slice_groups;  // CTAs per row on each side (a power of two dividing kLlSlices)
  bool phases;
};
static_assert(std::is_trivially_copyable_v<DispatchArgs>);

// Shared state of the dispatch kernel.
struct DispatchShared {
  // Sending: pairs per expert among the pairs counted so far. Receiving: [source][local expert] kept pairs from each
  // source's count block.
  int hist[kLlMaxExperts];
  // The token being sent: per top-k slot its entry, its rank (-1: not kept) and its index in that rank's row.
  LlPairEntry entry[kMaxTopK];
  int dest[kMaxTopK];
  int index[kMaxTopK];
  uint8_t* row[kMaxRanks];  // the rows to write (ranks with kept pairs)
  int nrows;
  uint32_t dest_mask;
  int pairs[kMaxRanks];  // kept pairs per rank
  // Receiving.
  int tokens[kMaxRanks];  // rows each source sends this call
  int ok[kMaxRanks];      // its count block arrived
  int m;                  // kept pairs in the row being received
  int first_m;            // the first row's kept pairs, watched with the count blocks (-1: not seen that way)
  int out[kMaxTopK];      // their packed output rows (-1: malformed)
};

// Adds pairs [from, to) of `ids` to the per-expert counts.
__device__ __forceinline__ void countPairs(const int32_t* ids, int from, int to, int experts, int* hist) {
  for (int i = from + static_cast<int>(threadIdx.x); i < to; i += kLlThreads) {
    const int e = __ldg(ids + i);
    if (e >= 0 && e < experts) atomicAdd(&hist[e], 1);
  }
  __syncthreads();
}

// The CTA that counts every pair of the call: each rank's kept pairs per local expert (count block, then its flag
// with the call's token count), and the pairs dropped for capacity. Leaves hist zeroed.
__device__ void sendCounts(const DispatchArgs& a, uint32_t epoch, int parity, DispatchShared& sh) {
  const LlLayout& L = a.layout;
  const int tid = static_cast<int>(threadIdx.x);
  countPairs(a.ids, 0, a.num_tokens * L.top_k, L.experts, sh.hist);
  unsigned long long dropped = 0;
  for (int e = tid; e < L.experts; e += kLlThreads) {
    const int pairs = sh.hist[e];
    const int kept = static_cast<int>(pairs - llDropped(pairs, L.capacity));
    dropped += static_cast<unsigned long long>(pairs - kept);
    storeRelaxedSys64(a.region.at<uint64_t>(e / L.local_experts, L.countOf(parity, a.rank, e % L.local_experts)),
                      tagWord(static_cast<uint32_t>(kept), epoch));
  }
  if (dropped > 0) atomicAdd(&a.state->dropped, dropped);
  // The counts are tagged words, so with tagged rows the flag needs no fence before it. With plain rows the fence
  // goes first anyway (this CTA has time to spare while the rows go out), so a reader finds every count of this
  // call once it has the flag, without polling them.
  const bool plain = !L.tagged(a.num_tokens);
  if (plain) fenceAcqRelSys();
  __syncthreads();
  if (tid < L.ranks && a.fault != static_cast<uint32_t>(LlFault::kSkipDispatchSignals)) {
    uint64_t* flag = a.region.at<uint64_t>(tid, L.countBlock(parity, a.rank));
    const uint64_t word = llFlagWord(epoch, static_cast<uint32_t>(a.num_tokens));
    if (plain) {
      storeReleaseSys64(flag, word);
    } else {
      storeRelaxedSys64(flag, word);
    }
  }
  for (int e = tid; e < L.experts; e += kLlThreads)
    sh.hist[e] = 0;
  __syncthreads();
}

// Token t's routing, lane by lane (lane < k: its top-k slot's expert and weight), loaded by warp 0.
struct TokenRoute {
  int expert = -1;
  float weight = 0.f;
};
__device__ __forceinline__ TokenRoute loadRoute(const DispatchArgs& a, int t, int lane) {
  TokenRoute r;
  const int k = a.layout.top_k;
  if (lane < k && t < a.num_tokens) {
    r.expert = __ldg(a.ids + static_cast<int64_t>(t) * k + lane);
    r.weight = __ldg(a.weights + static_cast<int64_t>(t) * k + lane);
  }
  return r;
}

// Warp 0: token t's pairs against the pairs before it (sh.hist), which it keeps, and where each goes.
__device__ void routeToken(const DispatchArgs& a, int t, int parity, DispatchShared& sh, int lane, TokenRoute route) {
  const LlLayout& L = a.layout;
  const int k = L.top_k;
  const bool slot = lane < k;
  const int e = slot ? route.expert : -1;
  const float weight = slot ? route.weight : 0.f;
  const bool valid = slot && e >= 0 && e < L.experts;
  // Earlier slots of this token with the same expert come before this one.
  const unsigned same = __match_any_sync(kAll, valid ? e : -1 - lane);
  const int position = valid ? sh.hist[e] + __popc(same & lanesBelow(lane)) : -1;
  const bool kept = valid && llKept(position, L.capacity);
  const int d = kept ? e / L.local_experts : -1;
  const unsigned kept_lanes = __ballot_sync(kAll, kept);
  const unsigned with_d = __match_any_sync(kAll, d) & kept_lanes;
  if (slot) {
    sh.dest[lane] = d;
    sh.index[lane] = __popc(with_d & lanesBelow(lane));
    sh.entry[lane] = LlPairEntry{kept ? e - d * L.local_experts : -1, lane, position, kept ? weight : 0.f};
  }
  uint32_t mask = 0;
  int nrows = 0;
  for (int r = 0; r < L.ranks; ++r) {
    const int pairs = __popc(__ballot_sync(kAll, kept && d == r));
    if (lane == 0) {
      sh.pairs[r] = pairs;
      if (pairs > 0) {
        sh.row[nrows++] = a.region.at<uint8_t>(r, L.dispatchRow(parity, a.rank, t));
        mask |= 1u << r;
      }
    }
  }
  if (lane == 0) {
    sh.nrows = nrows;
    sh.dest_mask = mask;
  }
}

// Loads one batch of the token (bf16: a vector per unit; fp8: two, 16 elements) starting at unit `base`.
template <bool kFp8>
__device__ __forceinline__ void loadTokenBatch(const uint4* src, int base, int units, uint4 (&v)[kLlBatch]) {
  constexpr int kVecs = kFp8 ? 2 : 1;
#pragma unroll
  for (int b = 0; b < kLlBatch / kVecs; ++b) {
    const int u = base + b * kLlThreads + static_cast<int>(threadIdx.x);
#pragma unroll
    for (int i = 0; i < kVecs; ++i)
      v[b * kVecs + i] = u < units ? __ldg(src + static_cast<int64_t>(u) * kVecs + i) : make_uint4(0, 0, 0, 0);
  }
}

// 16 bf16 values quantized with `mult` into 16 e4m3 bytes (two per conversion; the same rounding as one by one).
__device__ __forceinline__ uint4 quantize16(const uint4& lo, const uint4& hi, float mult) {
  const auto* a = reinterpret_cast<const __nv_bfloat162*>(&lo);
  const auto* b = reinterpret_cast<const __nv_bfloat162*>(&hi);
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float2 x0 = __bfloat1622float2(a[2 * i]);
    const float2 x1 = __bfloat1622float2(a[2 * i + 1]);
    const float2 y0 = __bfloat1622float2(b[2 * i]);
    const float2 y1 = __bfloat1622float2(b[2 * i + 1]);
    const uint32_t p0 =
        __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(x0.x, mult), __fmul_rn(x0.y, mult)), __NV_SATFINITE, __NV_E4M3);
    const uint32_t p1 =
        __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(x1.x, mult), __fmul_rn(x1.y, mult)), __NV_SATFINITE, __NV_E4M3);
    const uint32_t q0 =
        __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(y0.x, mult), __fmul_rn(y0.y, mult)), __NV_SATFINITE, __NV_E4M3);
    const uint32_t q1 =
        __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(y1.x, mult), __fmul_rn(y1.y, mult)), __NV_SATFINITE, __NV_E4M3);
    w[i] = p0 | (p1 << 16);
    w[2 + i] = q0 | (q1 << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ float absMax8(const uint4& v) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v);
  float m = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    m = fmaxf(m, fmaxf(fabsf(f.x), fabsf(f.y)));
  }
  return m;
}

// Stores the batch at unit `base` into every row of sh.row (fp8: quantized per 128 elements, 8 threads per group,
// the scale by the group's first thread). 16-byte stores.
// Tagged rows (`tag` nonzero) take each 16 bytes as two 16-byte stores of tagged words.
template <bool kFp8>
__device__ __forceinline__ void storeTokenBatch(const DispatchShared& sh, const LlLayout& L, int base, int units,
                                                const uint4 (&v)[kLlBatch], uint32_t tag) {
  const int tid = static_cast<int>(threadIdx.x);
  const int nrows = sh.nrows;
  if constexpr (!kFp8) {
#pragma unroll
    for (int b = 0; b < kLlBatch; ++b) {
      const int u = base + b * kLlThreads + tid;
      if (u >= units) continue;
      for (int i = 0; i < nrows; ++i) {
        if (tag != 0) {
          storeTagged16(sh.row[i], 16ull * u, v[b], tag);
        } else {
          reinterpret_cast<uint4*>(sh.row[i])[u] = v[b];
        }
      }
    }
  } else {
#pragma unroll
    for (int b = 0; b < kLlBatch / 2; ++b) {
      const int u = base + b * kLlThreads + tid;
      // Every lane takes part in the group's reduction; a group (8 units) is either wholly inside the row or past it.
      float amax = fmaxf(absMax8(v[2 * b]), absMax8(v[2 * b + 1]));
#pragma unroll
      for (int o = 4; o >= 1; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(kAll, amax, o));
      amax = fmaxf(amax, kFp8MinAmax);
      if (u >= units) continue;
      const uint4 q = quantize16(v[2 * b], v[2 * b + 1], __fdiv_rn(kFp8E4m3Max, amax));
      const float scale = __fdiv_rn(amax, kFp8E4m3Max);
      for (int i = 0; i < nrows; ++i) {
        if (tag != 0) {
          storeTagged16(sh.row[i], 16ull * u, q, tag);
          if ((tid & 7) == 0) storeTagged4(sh.row[i], L.payload_bytes + 4ull * (u / 8), __float_as_uint(scale), tag);
        } else {
          reinterpret_cast<uint4*>(sh.row[i])[u] = q;
          if ((tid & 7) == 0) reinterpret_cast<float*>(sh.row[i] + L.payload_bytes)[u / 8] = scale;
        }
      }
    }
  }
}

template <bool kFp8>
__device__ __forceinline__ const uint4* tokenSource(const DispatchArgs& a, int t) {
  return reinterpret_cast<const uint4*>(a.tokens + static_cast<int64_t>(t) * a.layout.hidden);
}
template <bool kFp8>
__device__ __forceinline__ int tokenUnits(const LlLayout& L) {
  return kFp8 ? L.hidden / 16 : L.hidden / 8;
}

// A group of a row's slices: group g of `groups` (a power of two dividing kLlSlices).
struct SliceGroup {
  int first;  // slices [first, last)
  int last;
};
__device__ __forceinline__ SliceGroup sliceGroup(int g, int groups) {
  const int per = kLlSlices / groups;
  return SliceGroup{g * per, (g + 1) * per};
}

// One CTA sends slice group g of token t: routed, its units read once, written once per rank that holds one of the
// token's kept pairs, with those pairs (every group writes the entries, the same bytes); then one flag per rank and
// slice of the group. The group's first batch (`v`) and the token's route come loaded from the caller, so they are
// in flight with whatever it loads meanwhile.
template <bool kFp8>
__device__ void sendToken(const DispatchArgs& a, int t, int g, uint32_t epoch, int parity, int* scanned,
                          DispatchShared& sh, uint4 (&v)[kLlBatch], TokenRoute route) {
  const LlLayout& L = a.layout;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const SliceGroup group = sliceGroup(g, a.slice_groups);
  const LlUnits range = llSliceUnits(tokenUnits<kFp8>(L), group.first, group.last);
  constexpr int kStep = kFp8 ? kLlThreads * kLlBatch / 2 : kLlThreads * kLlBatch;
  const uint4* src = tokenSource<kFp8>(a, t);
  countPairs(a.ids, *scanned, t * L.top_k, L.experts, sh.hist);
  *scanned = t * L.top_k;
  if (tid < 32) routeToken(a, t, parity, sh, lane, route);
  __syncthreads();
  const uint32_t tag = L.tagged(a.num_tokens) ? epoch : 0;
  for (int base = range.begin; base < range.end;) {
    storeTokenBatch<kFp8>(sh, L, base, range.end, v, tag);
    base += kStep;
    if (base >= range.end) break;
    loadTokenBatch<kFp8>(src, base, range.end, v);
  }
  if (tid < L.top_k && sh.dest[tid] >= 0) {
    uint8_t* row = a.region.at<uint8_t>(sh.dest[tid], L.dispatchRow(parity, a.rank, t));
    if (tag != 0) {
      uint4 e;
      memcpy(&e, &sh.entry[tid], sizeof(e));
      storeTagged16(row, L.meta_offset + 16ull * sh.index[tid], e, tag);
    } else {
      reinterpret_cast<LlPairEntry*>(row + L.meta_offset)[sh.index[tid]] = sh.entry[tid];
    }
  }
  // Publish (epoch, kept pairs) to every rank, 0 where nothing went: after the writers' fences for plain rows; at
  // once for tagged ones, whose words say for themselves which call they belong to.
  if (tag == 0) fenceAcqRelSys();
  __syncthreads();
  const int per = group.last - group.first;
  if (tid < L.ranks * per && a.fault != static_cast<uint32_t>(LlFault::kSkipDispatchSignals)) {
    const int r = tid / per;
    uint64_t* flag = a.region.at<uint64_t>(r, L.dispatchFlag(parity, a.rank, t, group.first + tid % per));
    const uint64_t word = llFlagWord(epoch, static_cast<uint32_t>(sh.pairs[r]));
    if (tag != 0) {
      storeRelaxedSys64(flag, word);
    } else {
      storeReleaseSys64(flag, word);
    }
  }
  if (tid == 0 && g == 0) a.token_dests[t] = sh.dest_mask;
}

// Kept pairs of local expert `le` that source `s` sends this call (0 when its count block never came).
__device__ __forceinline__ int keptFrom(const LlLayout& L, const DispatchShared& sh, int s, int le) {
  return sh.hist[s * L.local_experts + le];
}

// The flags of slice group g of row (s, t), one thread per slice (threads below the group's slice count), then a
// CTA barrier: the row's kept pairs once every flag of this call is there, in sh.m (0 at the deadline, or for a
// malformed or inconsistent count; both reported).
__device__ int waitRowFlags(const DispatchArgs& a, int s, int t, int g, uint32_t epoch, int parity,
                            DispatchShared& sh) {
  const LlLayout& L = a.layout;
  const int tid = static_cast<int>(threadIdx.x);
  const SliceGroup group = sliceGroup(g, a.slice_groups);
  if (tid == 0) sh.m = -1;
  __syncthreads();
  if (tid < group.last - group.first) {
    uint64_t w = 0;
    const bool ok = llWait(
        a.region.at<uint64_t>(a.rank, L.dispatchFlag(parity, s, t, group.first + tid)),
        [epoch](uint64_t x) { return llFlagEpoch(x) == epoch; }, a.timeout_ns, a.state, &w);
    if (!ok) llReport(a.state, kDeviceTimeout, s, kWhatDispatch);
    int m = ok ? static_cast<int>(llFlagValue(w)) : 0;
    if (m > L.top_k) {
      llReport(a.state, kDeviceBadInput, s, kWhatDispatch);
      m = 0;
    }
    // Every slice says the same count, or the row is malformed.
    const int seen = atomicCAS(&sh.m, -1, m);
    if (seen != -1 && seen != m) {
      llReport(a.state, kDeviceBadInput, s, kWhatDispatch);
      atomicExch(&sh.m, 0);
    }
  }
  __syncthreads();
  const int m = max(sh.m, 0);
  __syncthreads();  // sh.m is taken again by the next row
  return m;
}

// A warp watches the flags of slice group g of row (s, t) before source s's count block says whether the row exists,
// a lane per slice: the row's kept pairs (on every lane) once every flag of the group is of this call, -1 once the
// count block says s sends fewer rows (or at the deadline, reported, so later waits give up at once).
__device__ int watchRowFlags(const DispatchArgs& a, int s, int t, int g, uint32_t epoch, int parity) {
  const LlLayout& L = a.layout;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const SliceGroup group = sliceGroup(g, a.slice_groups);
  const uint64_t* count = a.region.at<uint64_t>(a.rank, L.countBlock(parity, s));
  int m = 0;
  bool seen = true;
  if (lane < group.last - group.first) {
    const uint64_t* flag = a.region.at<uint64_t>(a.rank, L.dispatchFlag(parity, s, t, group.first + lane));
    LlSpin spin{globalTimerNs(), a.timeout_ns, a.state};
    for (;;) {
      const uint64_t w = loadAcquireSys64(flag);
      if (llFlagEpoch(w) == epoch) {
        m = static_cast<int>(llFlagValue(w));
        break;
      }
      const uint64_t c = loadAcquireSys64(count);
      if (llFlagEpoch(c) == epoch &&
          min(llFlagValue(c), static_cast<uint32_t>(L.max_tokens)) <= static_cast<uint32_t>(t)) {
        seen = false;
        break;
      }
      if (!spin.ok()) {
        if (*reinterpret_cast<const volatile uint32_t*>(&a.state->code) == kDeviceOk) {
          llReport(a.state, kDeviceTimeout, s, kWhatDispatch);
        }
        seen = false;
        break;
      }
    }
  }
  if (__ballot_sync(kAll, !seen) != 0) return -1;
  const int m0 = __shfl_sync(kAll, m, 0);
  // Every slice says the same count, within top-k, or the row is malformed.
  if (__ballot_sync(kAll, lane < group.last - group.first && m != m0) != 0 || m0 > L.top_k) {
    if (lane == 0) llReport(a.state, kDeviceBadInput, s, kWhatDispatch);
    return 0;
  }
  return m0;
}

// The first batch of a received row's payload and (threads below m) its pair entries.
struct RowLoad {
  uint4 v[kLlBatch];
  int4 entry;
  uint64_t scale;  // fp8: the scale of group range.begin / 8 + tid, as stored (a tagged word, or the float's bits)
};

// Plain rows are read with .cg loads (their flag was acquired first); tagged rows (`tag` nonzero) are polled word by
// word until each is of this call, bounded by the deadline (a row that never completes is source s's timeout).
__device__ void loadRow(const DispatchArgs& a, const uint8_t* row, LlUnits range, int s, int m, uint32_t tag,
                        RowLoad& r) {
  const int tid = static_cast<int>(threadIdx.x);
  r.entry = make_int4(-1, 0, 0, 0);
  r.scale = 0;
  const int g = range.begin / 8 + tid;
  const bool scaled = a.layout.scale_bytes > 0 && m > 0 && g < range.end / 8;
  const uint64_t scale_off = a.layout.payload_bytes + 4ull * g;
  if (scaled && tag == 0) r.scale = __ldcg(reinterpret_cast<const uint32_t*>(row + scale_off));
  if (tag == 0) {
    const auto* from = reinterpret_cast<const uint4*>(row);
#pragma unroll
    for (int b = 0; b < kLlBatch; ++b) {
      const int c = range.begin + b * kLlThreads + tid;
      r.v[b] = m > 0 && c < range.end ? __ldcg(from + c) : make_uint4(0, 0, 0, 0);
    }
    if (tid < m) r.entry = __ldcg(reinterpret_cast<const int4*>(row + a.layout.meta_offset) + tid);
    return;
  }
  if (m <= 0) return;
  uint4 e = make_uint4(0, 0, 0, 0);
  bool entry = tid >= m || loadTagged16(row, a.layout.meta_offset + 16ull * tid, tag, &e);
  const bool payload = pollTaggedBatch(row, range.begin, range.end, tag, r.v, a.timeout_ns, a.state);
  // The scale goes after the payload's words, so once they are here it most likely is too; placeRow reads it after
  // the fan-out, so this load's latency hides behind the stores (it polls again only if the word was not yet here).
  if (scaled) r.scale = loadRelaxedSys64(reinterpret_cast<const uint64_t*>(row + 2 * scale_off));
  if (!entry) {
    LlSpin spin{globalTimerNs(), a.timeout_ns, a.state};
    while (!(entry = loadTagged16(row, a.layout.meta_offset + 16ull * tid, tag, &e)) && spin.ok()) {
    }
  }
  if (!entry || !payload) llReport(a.state, kDeviceTimeout, s, kWhatDispatch);
  if (tid < m) memcpy(&r.entry, &e, sizeof(e));
}

// Received row (s, t), the q-th this rank takes, whose flag said m pairs and whose first batch and entries are in
// `r`: its pairs' places in the packed layout (from the count blocks in sh.hist), then the payload fanned out.
// Combine finds the row again by q (recv_src, recv_pairs, recv_rows).
// A CTA takes the units `range` of the row (slice group g); group 0 also keeps the row's records.
template <bool kFp8>
__device__ void placeRow(const DispatchArgs& a, int s, int t, int q, int g, LlUnits range, int m, const uint8_t* row,
                         uint32_t tag, RowLoad& r, DispatchShared& sh) {
  const LlLayout& L = a.layout;
  const int tid = static_cast<int>(threadIdx.x);
  const int k = L.top_k;
  const bool records = g == 0;
  if (tid < k) {
    int out = -1;
    float w = 0.f;
    if (tid < m) {
      const int le = r.entry.x;
      w = __int_as_float(r.entry.w);
      // A pair must land inside its source's share of the expert's rows: anything else is a malformed row.
      if (le >= 0 && le < L.local_experts && r.entry.y >= 0 && r.entry.y < k && r.entry.z >= 0 &&
          r.entry.z < keptFrom(L, sh, s, le)) {
        int base = 0;
        for (int p = 0; p < s; ++p)
          base += keptFrom(L, sh, p, le);
        out = static_cast<int>(static_cast<uint64_t>(le) * L.expertStride()) + base + r.entry.z;
        if (records) {
          a.row_source[out] = make_int4(s, t, r.entry.y, 0);
          a.row_weight[out] = w;
        }
      } else {
        llReport(a.state, kDeviceBadInput, s, kWhatDispatch);
      }
    }
    sh.out[tid] = out;
    if (records) a.recv_rows[static_cast<uint64_t>(q) * k + tid] = make_int2(out, __float_as_int(w));
  }
  if (tid == 0 && records) {
    a.recv_pairs[q] = m;
    a.recv_src[q] = make_int2(s, t);
  }
  __syncthreads();
  if (m > 0 && range.begin < range.end) {
    const auto* from = reinterpret_cast<const uint4*>(row);
    const int vecs = range.end;
    constexpr int kStep = kLlThreads * kLlBatch;
    for (int base = range.begin;;) {
      for (int j = 0; j < m; ++j) {
        const int o = sh.out[j];
        if (o < 0) continue;
        auto* to = reinterpret_cast<uint4*>(a.rows + static_cast<uint64_t>(o) * L.payload_bytes);
#pragma unroll
        for (int b = 0; b < kLlBatch; ++b) {
          const int c = base + b * kLlThreads + tid;
          if (c < vecs) to[c] = r.v[b];
        }
      }
      base += kStep;
      if (base >= vecs) break;
      if (tag != 0) {
        if (!pollTaggedBatch(row, base, vecs, tag, r.v, a.timeout_ns, a.state)) {
          llReport(a.state, kDeviceTimeout, s, kWhatDispatch);
        }
        continue;
      }
#pragma unroll
      for (int b = 0; b < kLlBatch; ++b) {
        const int c = base + b * kLlThreads + tid;
        r.v[b] = c < vecs ? __ldcg(from + c) : make_uint4(0, 0, 0, 0);
      }
    }
    if constexpr (kFp8) {
      const int groups = L.hidden / kFp8Group;  // 8 units each; the slices hold whole groups
      const auto* sc = reinterpret_cast<const float*>(row + L.payload_bytes);
      for (int g = range.begin / 8 + tid; g < range.end / 8; g += kLlThreads) {
        // The first group's scale came with the row (r.scale).
        const bool loaded = g == range.begin / 8 + tid;
        float x = 0.f;
        if (tag == 0) {
          x = loaded ? __uint_as_float(static_cast<uint32_t>(r.scale)) : __ldcg(sc + g);
        } else {
          uint32_t bits = static_cast<uint32_t>(r.scale);
          const auto* word = reinterpret_cast<const uint64_t*>(row + 2 * (L.payload_bytes + 4ull * g));
          if (!(loaded && (r.scale >> 32) == tag) && !pollTagged4(word, tag, &bits, a.timeout_ns, a.state)) {
            llReport(a.state, kDeviceTimeout, s, kWhatDispatch);
          }
          x = __uint_as_float(bits);
        }
        for (int j = 0; j < m; ++j)
          if (sh.out[j] >= 0) a.scales[static_cast<uint64_t>(sh.out[j]) * groups + g] = x;
      }
    }
  }
  __syncthreads();
}

// Received row q in receive order: this rank's own rows first (they are ready first), then rank + 1's, and so on.
__device__ __forceinline__ int2 receivedRow(const DispatchArgs& a, const DispatchShared& sh, int q) {
  const int n = a.layout.ranks;
  int s = a.rank;
  int t = q;
  for (int i = 0; i < n; ++i) {
    s = a.rank + i < n ? a.rank + i : a.rank + i - n;
    if (t < sh.tokens[s]) break;
    t -= sh.tokens[s];
  }
  return make_int2(s, t);
}

// Sends: a CTA per (token, slice group) (the CTA with the fewest of them also counts). Receives: every source's count
// block, then the received rows' slice groups in turn. The first item's loads go out before the epoch is known; the
// first row a CTA takes is known before any count block when it is one of this rank's own rows or the next rank's,
// and its flags are watched with the count blocks, so its payload loads go out with the reads of the counts.
template <bool kFp8, int kPerSm>
__global__ void __launch_bounds__(kLlThreads, kPerSm) llDispatchKernel(DispatchArgs a) {
  __shared__ DispatchShared sh;
  awaitPriorGrids();
  releaseDependents();
  const uint64_t began = globalTimerNs();
  const LlLayout& L = a.layout;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int n = L.ranks;
  const int grid = static_cast<int>(gridDim.x);
  const int groups = a.slice_groups;
  const int units = tokenUnits<kFp8>(L);
  const int b0 = static_cast<int>(blockIdx.x);
  auto groupUnits = [&](int g) {
    const SliceGroup sg = sliceGroup(g, groups);
    return llSliceUnits(units, sg.first, sg.last);
  };
  const int items = a.num_tokens * groups;
  int item = b0;
  uint4 v[kLlBatch];
  TokenRoute route;
  if (item < items) {
    const LlUnits u = groupUnits(item % groups);
    loadTokenBatch<kFp8>(tokenSource<kFp8>(a, item / groups), u.begin, u.end, v);
    if (tid < 32) route = loadRoute(a, item / groups, lane);
  }
  const uint32_t epoch = a.state->dispatch_epoch + 1;
  const int parity = llParity(epoch);
  const LlSlots slots = a.times != nullptr ? a.times->dispatch : nullptr;
  for (int e = tid; e < L.experts; e += kLlThreads)
    sh.hist[e] = 0;
  __syncthreads();
  llStampStart(slots, epoch, a.phases, began);

  if (b0 == items % grid) sendCounts(a, epoch, parity, sh);
  int scanned = 0;
  for (; item < items; item += grid) {
    const int t = item / groups;
    if (item != b0) {
      const LlUnits u = groupUnits(item % groups);
      loadTokenBatch<kFp8>(tokenSource<kFp8>(a, t), u.begin, u.end, v);
      if (tid < 32) route = loadRoute(a, t, lane);
    }
    sendToken<kFp8>(a, t, item % groups, epoch, parity, &scanned, sh, v, route);
  }
  llStamp(slots, epoch, a.phases, kLlStampSent);

  // The row this CTA would take first if the next rank sends enough rows (its own when it is below its tokens).
  const int q0 = b0 / groups;
  const int g0 = b0 % groups;
  const int first_s = q0 < a.num_tokens ? a.rank : (a.rank + 1 < n ? a.rank + 1 : 0);
  const int first_t = q0 < a.num_tokens ? q0 : q0 - a.num_tokens;
  if (tid < n) {
    uint64_t w = 0;
    const bool ok = llWait(
        a.region.at<uint64_t>(a.rank, L.countBlock(parity, tid)),
        [epoch](uint64_t x) { return llFlagEpoch(x) == epoch; }, a.timeout_ns, a.state, &w);
    if (!ok) llReport(a.state, kDeviceTimeout, tid, kWhatDispatch);
    sh.ok[tid] = ok ? 1 : 0;
    sh.tokens[tid] = ok ? static_cast<int>(min(llFlagValue(w), static_cast<uint32_t>(L.max_tokens))) : 0;
  } else if (tid >= kLlThreads - 32) {  // a warp of its own, never one of the count block's waiters
    const int m = first_t < L.max_tokens ? watchRowFlags(a, first_s, first_t, g0, epoch, parity) : -1;
    if (tid == kLlThreads - 32) sh.first_m = m;
  }
  __syncthreads();
  int total = 0;
  for (int s = 0; s < n; ++s)
    total += sh.tokens[s];
  const int2 first = q0 < total ? receivedRow(a, sh, q0) : make_int2(-1, -1);
  const bool first_seen = q0 < total && first.x == first_s && first.y == first_t && sh.first_m >= 0;
  // Every source's kept pairs per local expert (tagged words), once (the sends are done with hist); the first word
  // of each thread is in flight while the first row is read.
  const int count_words = n * L.local_experts;
  auto countWord = [&](int x) {
    return a.region.at<const uint64_t>(a.rank, L.countOf(parity, x / L.local_experts, x % L.local_experts));
  };
  const uint64_t first_word = tid < count_words && sh.ok[tid / L.local_experts] ? loadRelaxedSys64(countWord(tid)) : 0;
  RowLoad r;
  if (first_seen) {
    loadRow(a, a.region.at<const uint8_t>(a.rank, L.dispatchRow(parity, first.x, first.y)), groupUnits(g0), first.x,
            sh.first_m, L.tagged(sh.tokens[first.x]) ? epoch : 0, r);
  }
  for (int x = tid; x < count_words; x += kLlThreads) {
    const int s = x / L.local_experts;
    uint32_t c = 0;
    if (sh.ok[s]) {
      const uint64_t w = x == tid ? first_word : loadRelaxedSys64(countWord(x));
      if (llFlagEpoch(w) == epoch) {
        c = llFlagValue(w);
      } else if (!pollTagged4(countWord(x), epoch, &c, a.timeout_ns, a.state)) {
        llReport(a.state, kDeviceTimeout, s, kWhatDispatch);
        c = 0;
      }
    }
    sh.hist[x] = static_cast<int>(min(c, static_cast<uint32_t>(L.capacity)));
  }
  __syncthreads();
  llStamp(slots, epoch, a.phases, kLlStampSignals);
  if (blockIdx.x == 0) {
    for (int le = tid; le < L.local_experts; le += kLlThreads) {
      int64_t rows = 0;
      for (int s = 0; s < n; ++s)
        rows += keptFrom(L, sh, s, le);
      a.expert_counts[le] = rows;
    }
    if (tid < n) a.recv_tokens[tid] = sh.tokens[tid];
  }
  for (item = b0; item < total * groups; item += grid) {
    const int q = item / groups;
    const int g = item % groups;
    const int2 st = q == q0 ? first : receivedRow(a, sh, q);
    const uint8_t* row = a.region.at<const uint8_t>(a.rank, L.dispatchRow(parity, st.x, st.y));
    const uint32_t tag = L.tagged(sh.tokens[st.x]) ? epoch : 0;
    const LlUnits range = groupUnits(g);
    int m = 0;
    if (item == b0 && first_seen) {
      m = sh.first_m;
    } else {
      m = waitRowFlags(a, st.x, st.y, g, epoch, parity, sh);
      loadRow(a, row, range, st.x, m, tag, r);
    }
    llStamp(slots, epoch, a.phases, kLlStampRows);
    placeRow<kFp8>(a, st.x, st.y, q, g, range, m, row, tag, r, sh);
  }
  llCloseCall(&a.state->dispatch_arrived, &a.state->dispatch_epoch, epoch, slots);
}

struct CombineArgs {
  SymmetricView region;
  LlLayout layout;
  int rank;
  int num_tokens;
  const __nv_bfloat16* expert_out;
  __nv_bfloat16* out;
  const uint32_t* token_dests;
  const int32_t* recv_tokens;
  const int32_t* recv_pairs;  // by receive order q, as the dispatch took the rows
  const int2* recv_src;
  const int2* recv_rows;
  LlState* state;
  LlKernelTimes* times;
  uint64_t timeout_ns;
  uint32_t fault;
  bool phases;
};
static_assert(std::is_trivially_copyable_v<CombineArgs>);

struct CombineShared {
  int tokens[kMaxRanks];
  int ok[kMaxRanks];
  int out[kMaxTopK];
  float weight[kMaxTopK];
  int m;
  int2 src;
};

// What the dispatch recorded of the q-th row it took: where it came from, its pairs, their rows and weights (lanes
// below k). Loaded by the combine before it knows how many rows there are (q is always inside the arrays).
struct TakenRow {
  int2 src;
  int m;
  int2 pair;
};
__device__ __forceinline__ TakenRow loadTakenRow(const CombineArgs& a, int q) {
  const int tid = static_cast<int>(threadIdx.x);
  const int k = a.layout.top_k;
  TakenRow r;
  r.src = a.recv_src[q];
  r.m = a.recv_pairs[q];
  r.pair = tid < k ? a.recv_rows[static_cast<uint64_t>(q) * k + tid] : make_int2(-1, 0);
  return r;
}

__device__ __forceinline__ void addBf16x8(float (&acc)[8], const uint4& v) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float2 f = __bfloat1622float2(h[q]);
    acc[2 * q] += f.x;
    acc[2 * q + 1] += f.y;
  }
}

__device__ __forceinline__ void fmaBf16x8(float (&acc)[8], float w, const uint4& v) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float2 f = __bfloat1622float2(h[q]);
    acc[2 * q] = fmaf(w, f.x, acc[2 * q]);
    acc[2 * q + 1] = fmaf(w, f.y, acc[2 * q + 1]);
  }
}

__device__ __forceinline__ uint4 packBf16x8(const float (&acc)[8]) {
  uint4 o;
  auto* h = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
  for (int q = 0; q < 4; ++q)
    h[q] = __floats2bfloat162_rn(acc[2 * q], acc[2 * q + 1]);
  return o;
}

// One CTA sends the partial sum of the q-th received row (`row`, loaded by the caller): w * out of its pairs in slot
// order, fp32, rounded once, into the row's source rank.
// Tagged (the source routed few enough tokens): the partial sum goes as tagged words and needs neither fence nor flag.
__device__ void sendPartial(const CombineArgs& a, const TakenRow& row, uint32_t epoch, int parity, CombineShared& sh) {
  const LlLayout& L = a.layout;
  const int tid = static_cast<int>(threadIdx.x);
  const int k = L.top_k;
  if (tid == 0) {
    const bool inside = row.src.x >= 0 && row.src.x < L.ranks && row.src.y >= 0 && row.src.y < L.max_tokens;
    sh.m = inside ? min(max(row.m, 0), k) : 0;
    sh.src = row.src;
  }
  if (tid < k) {
    sh.out[tid] = row.pair.x;
    sh.weight[tid] = __int_as_float(row.pair.y);
  }
  __syncthreads();
  const int m = sh.m;
  const int s = sh.src.x;
  const int t = sh.src.y;
  const bool signal = a.fault != static_cast<uint32_t>(LlFault::kSkipCombineSignals);
  const bool tagged = m > 0 && L.tagged(sh.tokens[s]);
  const uint32_t tag = signal ? epoch : 0;  // withheld signals: words that never say "this call"
  if (m > 0) {
    const int vecs = L.hidden / 8;
    auto* to = a.region.at<uint4>(s, L.combineRow(parity, a.rank, t));
    for (int base = 0; base < vecs; base += kLlThreads * kLlBatch) {
      float acc[kLlBatch][8] = {};
      for (int j = 0; j < m; ++j) {
        const int o = sh.out[j];
        if (o < 0) continue;
        const float w = sh.weight[j];
        const auto* from = reinterpret_cast<const uint4*>(a.expert_out + static_cast<uint64_t>(o) * L.hidden);
        uint4 v[kLlBatch];
#pragma unroll
        for (int b = 0; b < kLlBatch; ++b) {
          const int c = base + b * kLlThreads + tid;
          v[b] = c < vecs ? from[c] : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int b = 0; b < kLlBatch; ++b)
          fmaBf16x8(acc[b], w, v[b]);
      }
#pragma unroll
      for (int b = 0; b < kLlBatch; ++b) {
        const int c = base + b * kLlThreads + tid;
        if (c >= vecs) continue;
        if (tagged) {
          storeTagged16(reinterpret_cast<uint8_t*>(to), 16ull * c, packBf16x8(acc[b]), tag);
        } else {
          to[c] = packBf16x8(acc[b]);
        }
      }
    }
    if (!tagged) fenceAcqRelSys();
  }
  __syncthreads();
  if (m > 0 && !tagged && tid == 0 && signal) {
    storeReleaseSys64(a.region.at<uint64_t>(s, L.combineFlag(parity, a.rank, t)), llFlagWord(epoch, 0));
  }
  __syncthreads();  // sh is taken again by the next row
}

// One thread: every peer has started this combine, so it has finished the one before (the next combine may write
// into the parity that one read).
__device__ void waitMark(const CombineArgs& a, int r, uint32_t epoch) {
  uint64_t w = 0;
  const bool ok = llWait(
      a.region.at<uint64_t>(a.rank, a.layout.combineMark(r)),
      [epoch](uint64_t x) { return llEpochReached(llFlagValue(x), epoch); }, a.timeout_ns, a.state, &w);
  if (!ok) llReport(a.state, kDeviceTimeout, r, kWhatCombine);
}

// One CTA finishes this rank's token t: the partial sums of the ranks it went to, in rank order, fp32, rounded once.
// With `marks`, a second warp meanwhile waits for every peer's mark (waitMark). Plain rows: their flags first, then
// .cg loads; tagged rows (this rank routed few enough tokens): the words are polled until they are of this call.
__device__ void finishToken(const CombineArgs& a, int t, uint32_t epoch, int parity, CombineShared& sh, LlSlots slots,
                            bool marks) {
  const LlLayout& L = a.layout;
  const int tid = static_cast<int>(threadIdx.x);
  const int n = L.ranks;
  const uint32_t mask = a.token_dests[t];
  const bool tagged = L.tagged(a.num_tokens);
  if (marks && tid >= kLlThreads - 32 && tid < kLlThreads - 32 + n) waitMark(a, tid - (kLlThreads - 32), epoch);
  if (tid < n) {
    bool ok = (mask >> tid) & 1u;
    if (ok && !tagged) {
      uint64_t w = 0;
      ok = llWait(
          a.region.at<uint64_t>(a.rank, L.combineFlag(parity, tid, t)),
          [epoch](uint64_t x) { return llFlagEpoch(x) == epoch; }, a.timeout_ns, a.state, &w);
      if (!ok) llReport(a.state, kDeviceTimeout, tid, kWhatCombine);
    }
    sh.ok[tid] = ok ? 1 : 0;
  }
  __syncthreads();
  llStamp(slots, epoch, a.phases, kLlStampSignals);
  const int vecs = L.hidden / 8;
  auto* to = reinterpret_cast<uint4*>(a.out + static_cast<int64_t>(t) * L.hidden);
  for (int base = 0; base < vecs; base += kLlThreads * kLlBatch) {
    float acc[kLlBatch][8] = {};
    for (int r = 0; r < n; ++r) {
      if (!sh.ok[r]) continue;
      const auto* from = a.region.at<const uint4>(a.rank, L.combineRow(parity, r, t));
      uint4 v[kLlBatch];
      if (tagged) {
        if (!pollTaggedBatch(reinterpret_cast<const uint8_t*>(from), base, vecs, epoch, v, a.timeout_ns, a.state)) {
          llReport(a.state, kDeviceTimeout, r, kWhatCombine);
        }
      } else {
#pragma unroll
        for (int b = 0; b < kLlBatch; ++b) {
          const int c = base + b * kLlThreads + tid;
          v[b] = c < vecs ? __ldcg(from + c) : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int b = 0; b < kLlBatch; ++b)
        addBf16x8(acc[b], v[b]);
    }
#pragma unroll
    for (int b = 0; b < kLlBatch; ++b) {
      const int c = base + b * kLlThreads + tid;
      if (c < vecs) to[c] = packBf16x8(acc[b]);
    }
  }
  __syncthreads();
}

// Sends: CTA per received row, in the order the dispatch took them (the first one's record is loaded before the
// epoch). Receives: CTA per token; block 0 waits for every peer's mark alongside its first token.
template <int kPerSm>
__global__ void __launch_bounds__(kLlThreads, kPerSm) llCombineKernel(CombineArgs a) {
  __shared__ CombineShared sh;
  awaitPriorGrids();
  releaseDependents();
  const uint64_t began = globalTimerNs();
  const LlLayout& L = a.layout;
  const int tid = static_cast<int>(threadIdx.x);
  const int n = L.ranks;
  const int grid = static_cast<int>(gridDim.x);
  const int q0 = static_cast<int>(blockIdx.x);
  const int tokens = tid < n ? a.recv_tokens[tid] : 0;
  TakenRow first = loadTakenRow(a, q0);
  const uint32_t epoch = a.state->combine_epoch + 1;
  const int parity = llParity(epoch);
  const LlSlots slots = a.times != nullptr ? a.times->combine : nullptr;
  const bool signal = a.fault != static_cast<uint32_t>(LlFault::kSkipCombineSignals);
  // This rank has started this combine, so it has finished the one before: peers may write that parity again.
  if (blockIdx.x == 0 && tid < n && signal) {
    storeReleaseSys64(a.region.at<uint64_t>(tid, L.combineMark(a.rank)), llFlagWord(0, epoch));
  }
  if (tid < n) sh.tokens[tid] = min(max(tokens, 0), L.max_tokens);
  __syncthreads();
  llStampStart(slots, epoch, a.phases, began);
  int total = 0;
  for (int s = 0; s < n; ++s)
    total += sh.tokens[s];
  for (int q = q0; q < total; q += grid)
    sendPartial(a, q == q0 ? first : loadTakenRow(a, q), epoch, parity, sh);
  llStamp(slots, epoch, a.phases, kLlStampSent);
  for (int t = q0; t < a.num_tokens; t += grid)
    finishToken(a, t, epoch, parity, sh, slots, blockIdx.x == 0 && t == 0);
  // Every peer has started this combine, so it has finished the one before: the next combine may write into the
  // parity that one read (a rank whose tokens need nothing from a peer learns it only here).
  if (blockIdx.x == 0) {
    if (a.num_tokens == 0 && tid < n) waitMark(a, tid, epoch);
    __syncthreads();
    llStamp(slots, epoch, a.phases, kLlStampRows);
  }
  llCloseCall(&a.state->combine_arrived, &a.state->combine_epoch, epoch, slots);
}

}  // namespace

StatusOr<LowLatencyExchange> LowLatencyExchange::create(Bootstrap& boot, int device, const LlConfig& config,
                                                        Deadline deadline) {
  LlShape shape;
  shape.ranks = boot.size();
  shape.hidden = config.hidden;
  shape.top_k = config.top_k;
  shape.experts = config.experts;
  shape.max_tokens = config.max_tokens;
  shape.capacity = config.capacity > 0 ? config.capacity : config.max_tokens;
  shape.payload = config.payload;
  shape.tagged_max_tokens = config.tagged_max_tokens;
  if (const std::string why = llShapeError(shape); !why.empty()) return PEERLAB_INVALID_ARGUMENT(why);
  if (config.timeout_ms <= 0) return PEERLAB_INVALID_ARGUMENT("ll: timeout_ms must be positive");
  LowLatencyExchange x;
  x.config_ = config;
  x.config_.capacity = shape.capacity;
  x.layout_ = makeLlLayout(shape);
  x.rank_ = boot.rank();
  x.device_ = device;
  x.programmatic_ = config.programmatic_launch && programmaticLaunchSupported(device);
  PEERLAB_ASSIGN_OR_RETURN(auto region, SymmetricRegion::create(boot, device, x.layout_.total_bytes, deadline));
  x.region_ = std::make_unique<SymmetricRegion>(std::move(region));
  const uint64_t n = static_cast<uint64_t>(shape.ranks);
  const uint64_t T = static_cast<uint64_t>(config.max_tokens);
  const uint64_t k = static_cast<uint64_t>(config.top_k);
  const uint64_t rows = static_cast<uint64_t>(x.layout_.local_experts) * x.layout_.expertStride();
  PEERLAB_ASSIGN_OR_RETURN(x.token_dests_, allocDevice(device, T * sizeof(uint32_t)));
  PEERLAB_ASSIGN_OR_RETURN(x.recv_tokens_, allocDevice(device, n * sizeof(int32_t)));
  PEERLAB_ASSIGN_OR_RETURN(x.recv_pairs_, allocDevice(device, n * T * sizeof(int32_t)));
  PEERLAB_ASSIGN_OR_RETURN(x.recv_rows_, allocDevice(device, n * T * k * sizeof(int2)));
  PEERLAB_ASSIGN_OR_RETURN(x.recv_src_, allocDevice(device, n * T * sizeof(int2)));
  PEERLAB_ASSIGN_OR_RETURN(x.rows_, allocDevice(device, rows * x.layout_.payload_bytes));
  PEERLAB_ASSIGN_OR_RETURN(x.scales_, allocDevice(device, std::max<uint64_t>(rows * x.layout_.scale_bytes, 16)));
  PEERLAB_ASSIGN_OR_RETURN(x.counts_, allocDevice(device, x.layout_.local_experts * sizeof(int64_t)));
  PEERLAB_ASSIGN_OR_RETURN(x.row_source_, allocDevice(device, rows * sizeof(int4)));
  PEERLAB_ASSIGN_OR_RETURN(x.row_weight_, allocDevice(device, rows * sizeof(float)));
  PEERLAB_ASSIGN_OR_RETURN(x.state_, allocDevice(device, sizeof(LlState)));
  PEERLAB_ASSIGN_OR_RETURN(x.host_state_, allocPinned(sizeof(LlState)));
  {
    PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemset(x.state_->ptr, 0, sizeof(LlState))));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemset(x.counts_->ptr, 0, x.counts_->bytes)));
    // A combine before any dispatch has nothing to send and nothing to wait for.
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemset(x.recv_tokens_->ptr, 0, x.recv_tokens_->bytes)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemset(x.recv_pairs_->ptr, 0, x.recv_pairs_->bytes)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemset(x.recv_src_->ptr, 0, x.recv_src_->bytes)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemset(x.token_dests_->ptr, 0, x.token_dests_->bytes)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaDeviceGetAttribute(&x.sms_, cudaDevAttrMultiProcessorCount, device)));
    // CTAs spin on peers and on each other, so every CTA of a launch must be resident at once: two per SM only where
    // all three kernels built for two fit twice.
    x.per_sm_ = 1;
    if (config.ctas_per_sm >= 2) {
      int fits = 2;
      for (const void* k : {reinterpret_cast<const void*>(llDispatchKernel<false, 2>),
                            reinterpret_cast<const void*>(llDispatchKernel<true, 2>),
                            reinterpret_cast<const void*>(llCombineKernel<2>)}) {
        int per = 0;
        PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k, kLlThreads, 0)));
        fits = std::min(fits, per);
      }
      x.per_sm_ = std::max(1, fits);
    }
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaDeviceSynchronize()));
  }
  return x;
}

int LowLatencyExchange::ctaCap() const {
  return config_.max_ctas > 0 ? std::min(config_.max_ctas, sms_) : sms_;
}

int LowLatencyExchange::residentCap() const {
  const int resident = sms_ * per_sm_;
  return config_.max_ctas > 0 ? std::min(config_.max_ctas, resident) : resident;
}

int LowLatencyExchange::ctasFor(int num_tokens) const {
  return std::max(1, std::min(residentCap(), layout_.ranks * std::max(num_tokens, 1)));
}

int LowLatencyExchange::sliceGroupsFor(int num_tokens) const {
  const int cap = ctaCap();
  const int rows = layout_.ranks * std::max(num_tokens, 1);
  int groups = 1;
  while (groups < kLlSlices && 2 * groups * rows <= cap)
    groups *= 2;
  return groups;
}

int LowLatencyExchange::dispatchCtasFor(int num_tokens) const {
  return std::max(1, std::min(residentCap(), layout_.ranks * std::max(num_tokens, 1) * sliceGroupsFor(num_tokens)));
}

LlDispatchOutput LowLatencyExchange::output() const {
  LlDispatchOutput o{};
  o.rows = rows_->as<uint8_t>();
  o.scales = config_.payload == LlPayload::kFp8 ? scales_->as<float>() : nullptr;
  o.expert_counts = counts_->as<int64_t>();
  o.row_source = row_source_->as<int4>();
  o.row_weight = row_weight_->as<float>();
  o.local_experts = layout_.local_experts;
  o.expert_stride = layout_.expertStride();
  o.payload_bytes = layout_.payload_bytes;
  o.payload = config_.payload;
  return o;
}

Status LowLatencyExchange::dispatch(const __nv_bfloat16* tokens, const int32_t* topk_ids, const float* topk_weights,
                                    int num_tokens, cudaStream_t stream) {
  if (!region_) return PEERLAB_INVALID_ARGUMENT("ll dispatch after close()");
  if (num_tokens < 0 || num_tokens > config_.max_tokens) {
    return PEERLAB_INVALID_ARGUMENT("ll dispatch: " + std::to_string(num_tokens) + " tokens, low-latency capacity " +
                                    std::to_string(config_.max_tokens));
  }
  num_tokens_ = num_tokens;
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device_));
  DispatchArgs a{};
  a.region = region_->view();
  a.layout = layout_;
  a.rank = rank_;
  a.num_tokens = num_tokens;
  a.tokens = tokens;
  a.ids = topk_ids;
  a.weights = topk_weights;
  a.rows = rows_->as<uint8_t>();
  a.scales = scales_->as<float>();
  a.expert_counts = counts_->as<int64_t>();
  a.row_source = row_source_->as<int4>();
  a.row_weight = row_weight_->as<float>();
  a.token_dests = token_dests_->as<uint32_t>();
  a.recv_tokens = recv_tokens_->as<int32_t>();
  a.recv_pairs = recv_pairs_->as<int32_t>();
  a.recv_src = recv_src_->as<int2>();
  a.recv_rows = recv_rows_->as<int2>();
  a.state = state_->as<LlState>();
  a.times = times_;
  a.phases = phases_;
  a.timeout_ns = static_cast<uint64_t>(config_.timeout_ms) * 1'000'000ull;
  a.fault = static_cast<uint32_t>(fault_);
  a.slice_groups = sliceGroupsFor(num_tokens);
  const dim3 grid(static_cast<unsigned>(dispatchCtasFor(num_tokens)));
  const dim3 block(kLlThreads);
  // Up to one CTA per SM the kernels built for one per SM (more registers); beyond, those built for two.
  const bool dense = static_cast<int>(grid.x) > sms_;
  const bool fp8 = config_.payload == LlPayload::kFp8;
  const cudaError_t err =
      fp8 ? (dense ? launchKernel(llDispatchKernel<true, 2>, grid, block, stream, programmatic_, a)
                   : launchKernel(llDispatchKernel<true, 1>, grid, block, stream, programmatic_, a))
          : (dense ? launchKernel(llDispatchKernel<false, 2>, grid, block, stream, programmatic_, a)
                   : launchKernel(llDispatchKernel<false, 1>, grid, block, stream, programmatic_, a));
  return PEERLAB_CUDA_LAUNCHED(err, "ll dispatch kernel");
}

Status LowLatencyExchange::combine(const __nv_bfloat16* expert_out, __nv_bfloat16* out, cudaStream_t stream) {
  if (!region_) return PEERLAB_INVALID_ARGUMENT("ll combine after close()");
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device_));
  CombineArgs a{};
  a.region = region_->view();
  a.layout = layout_;
  a.rank = rank_;
  a.num_tokens = num_tokens_;
  a.expert_out = expert_out;
  a.out = out;
  a.token_dests = token_dests_->as<uint32_t>();
  a.recv_tokens = recv_tokens_->as<int32_t>();
  a.recv_pairs = recv_pairs_->as<int32_t>();
  a.recv_src = recv_src_->as<int2>();
  a.recv_rows = recv_rows_->as<int2>();
  a.state = state_->as<LlState>();
  a.times = times_;
  a.phases = phases_;
  a.timeout_ns = static_cast<uint64_t>(config_.timeout_ms) * 1'000'000ull;
  a.fault = static_cast<uint32_t>(fault_);
  const dim3 grid(static_cast<unsigned>(ctasFor(num_tokens_)));
  const cudaError_t err = static_cast<int>(grid.x) > sms_
                              ? launchKernel(llCombineKernel<2>, grid, dim3(kLlThreads), stream, programmatic_, a)
                              : launchKernel(llCombineKernel<1>, grid, dim3(kLlThreads), stream, programmatic_, a);
  return PEERLAB_CUDA_LAUNCHED(err, "ll combine kernel");
}

Status LowLatencyExchange::checkStatus(cudaStream_t stream, Deadline deadline) {
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device_));
  auto* dev = state_->as<LlState>();
  PEERLAB_RETURN_IF_ERROR(
      PEERLAB_CUDA(cudaMemcpyAsync(host_state_->ptr, dev, sizeof(LlState), cudaMemcpyDeviceToHost, stream)));
  // Clear the status words only (the epochs stay).
  PEERLAB_RETURN_IF_ERROR(
      PEERLAB_CUDA(cudaMemsetAsync(&dev->code, 0, sizeof(LlState) - offsetof(LlState, code), stream)));
  PEERLAB_RETURN_IF_ERROR(waitStream(stream, deadline, "ll status"));
  const LlState h = *host_state_->as<LlState>();
  dropped_ = h.dropped;
  const std::string phase = h.what == kWhatCombine ? "combine" : "dispatch";
  if (h.code == kDeviceTimeout) {
    return PEERLAB_TIMEOUT("moe low-latency " + phase + " on rank " + std::to_string(rank_) + ": no signal from rank " +
                           std::to_string(h.rank) + " within " + std::to_string(config_.timeout_ms) + " ms");
  }
  if (h.code == kDeviceBadInput) {
    return PEERLAB_INTERNAL("moe low-latency " + phase + " on rank " + std::to_string(rank_) +
                            ": malformed row from rank " + std::to_string(h.rank) + " (left out)");
  }
  if (h.code != kDeviceOk) return PEERLAB_INTERNAL("moe low-latency: device error " + std::to_string(h.code));
  if (h.dropped > 0) {
    return PEERLAB_INVALID_ARGUMENT("moe low-latency dispatch on rank " + std::to_string(rank_) + ": " +
                                    std::to_string(h.dropped) + " (token, expert) pairs dropped, expert capacity " +
                                    std::to_string(config_.capacity) + " slots per source rank");
  }
  return Status::ok();
}

Status LowLatencyExchange::close(Bootstrap& boot, Deadline deadline) {
  if (!region_) return Status::ok();
  if (device_ >= 0) {
    auto guard = ScopedDevice::make(device_);
    if (guard.isOk()) PEERLAB_CUDA(cudaDeviceSynchronize()).ignore();
  }
  Status st = region_->close(boot, deadline);
  region_.reset();
  return st;
}

}  // namespace peerlab::alltoallv::moe
