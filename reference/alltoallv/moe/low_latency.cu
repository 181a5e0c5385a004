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

// Spins until `pred(*p)` (acquire, system scope); true with the word in *word. False at the deadline, and at once
// while an error is on record (a call behind a failed one does not wait out a deadline of its own).
template <class Pred>
__device__ __forceinline__ bool llWait(const uint64_t* p, Pred pred, uint64_t timeout_ns, const LlState* state,
                                       uint64_t* word) {
  const uint64_t start = globalTimerNs();
  for (uint32_t spin = 0;; ++spin) {
    const uint64_t w = loadAcquireSys64(p);
    if (pred(w)) {
      *word = w;
      return true;
    }
    if ((spin & 15u) == 15u) {
      if (*reinterpret_cast<const volatile uint32_t*>(&state->code) != kDeviceOk) return false;
      if (globalTimerNs() - start > timeout_ns) return false;
    }
  }
}

// Kernel spans (LlKernelTimes): every CTA stamps its start of work and its end into the call's slot.
__device__ __forceinline__ void llStampStart(uint64_t (*slots)[2], uint32_t epoch) {
  if (slots != nullptr && threadIdx.x == 0) {
    atomicMin(reinterpret_cast<unsigned long long*>(&slots[epoch % kLlTimeSlots][0]), globalTimerNs());
  }
}

// The last CTA of a launch advances the epoch (every CTA read it at its start) and empties the next call's time slot.
__device__ __forceinline__ void llCloseCall(uint32_t* arrived, uint32_t* epoch_word, uint32_t epoch,
                                            uint64_t (*slots)[2]) {
  __syncthreads();
  if (threadIdx.x == 0) {
    if (slots != nullptr) {
      atomicMax(reinterpret_cast<unsigned long long*>(&slots[epoch % kLlTimeSlots][1]), globalTimerNs());
    }
    __threadfence();
    if (atomicAdd(arrived, 1u) + 1 == gridDim.x) {
      *arrived = 0;
      *epoch_word = epoch;
      if (slots != nullptr) {
        slots[(epoch + 1) % kLlTimeSlots][0] = UINT64_MAX;
        slots[(epoch + 1) % kLlTimeSlots][1] = 0;
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
  int32_t* recv_pairs;
  int2* recv_rows;
  LlState* state;
  LlKernelTimes* times;
  uint64_t timeout_ns;
  uint32_t fault;
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
    *a.region.at<int32_t>(e / L.local_experts, L.countOf(parity, a.rank, e % L.local_experts)) = kept;
  }
  if (dropped > 0) atomicAdd(&a.state->dropped, dropped);
  fenceAcqRelSys();
  __syncthreads();
  if (tid < L.ranks && a.fault != static_cast<uint32_t>(LlFault::kSkipDispatchSignals)) {
    storeReleaseSys64(a.region.at<uint64_t>(tid, L.countBlock(parity, a.rank)),
                      llFlagWord(epoch, static_cast<uint32_t>(a.num_tokens)));
  }
  for (int e = tid; e < L.experts; e += kLlThreads)
    sh.hist[e] = 0;
  __syncthreads();
}

// Warp 0: token t's pairs against the pairs before it (sh.hist), which it keeps, and where each goes.
__device__ void routeToken(const DispatchArgs& a, int t, int parity, DispatchShared& sh, int lane) {
  const LlLayout& L = a.layout;
  const int k = L.top_k;
  const bool slot = lane < k;
  const int e = slot ? __ldg(a.ids + static_cast<int64_t>(t) * k + lane) : -1;
  const float weight = slot ? __ldg(a.weights + static_cast<int64_t>(t) * k + lane) : 0.f;  // with the id, not after
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

// 16 bf16 values quantized with `mult` into 16 e4m3 bytes.
__device__ __forceinline__ uint4 quantize16(const uint4& lo, const uint4& hi, float mult) {
  uint8_t q8[16];
  const auto* a = reinterpret_cast<const __nv_bfloat162*>(&lo);
  const auto* b = reinterpret_cast<const __nv_bfloat162*>(&hi);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __bfloat1622float2(a[i]);
    const float2 y = __bfloat1622float2(b[i]);
    q8[2 * i] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fmul_rn(x.x, mult), __NV_SATFINITE, __NV_E4M3));
    q8[2 * i + 1] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fmul_rn(x.y, mult), __NV_SATFINITE, __NV_E4M3));
    q8[8 + 2 * i] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fmul_rn(y.x, mult), __NV_SATFINITE, __NV_E4M3));
    q8[9 + 2 * i] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fmul_rn(y.y, mult), __NV_SATFINITE, __NV_E4M3));
  }
  uint4 q;
  memcpy(&q, q8, 16);
  return q;
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
template <bool kFp8>
__device__ __forceinline__ void storeTokenBatch(const DispatchShared& sh, const LlLayout& L, int base, int units,
                                                const uint4 (&v)[kLlBatch]) {
  const int tid = static_cast<int>(threadIdx.x);
  const int nrows = sh.nrows;
  if constexpr (!kFp8) {
#pragma unroll
    for (int b = 0; b < kLlBatch; ++b) {
      const int u = base + b * kLlThreads + tid;
      if (u >= units) continue;
      for (int i = 0; i < nrows; ++i)
        reinterpret_cast<uint4*>(sh.row[i])[u] = v[b];
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
        reinterpret_cast<uint4*>(sh.row[i])[u] = q;
        if ((tid & 7) == 0) reinterpret_cast<float*>(sh.row[i] + L.payload_bytes)[u / 8] = scale;
      }
    }
  }
}

// One CTA sends token t: routed, read once (its first batch in flight while routing), written once per rank that
// holds one of its kept pairs, with those pairs; then one flag per rank.
template <bool kFp8>
__device__ void sendToken(const DispatchArgs& a, int t, uint32_t epoch, int parity, int* scanned, DispatchShared& sh) {
  const LlLayout& L = a.layout;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int units = kFp8 ? L.hidden / 16 : L.hidden / 8;
  constexpr int kStep = kFp8 ? kLlThreads * kLlBatch / 2 : kLlThreads * kLlBatch;
  const auto* src = reinterpret_cast<const uint4*>(a.tokens + static_cast<int64_t>(t) * L.hidden);
  uint4 v[kLlBatch];
  loadTokenBatch<kFp8>(src, 0, units, v);
  countPairs(a.ids, *scanned, t * L.top_k, L.experts, sh.hist);
  *scanned = t * L.top_k;
  if (tid < 32) routeToken(a, t, parity, sh, lane);
  __syncthreads();
  for (int base = 0;;) {
    storeTokenBatch<kFp8>(sh, L, base, units, v);
    base += kStep;
    if (base >= units) break;
    loadTokenBatch<kFp8>(src, base, units, v);
  }
  if (tid < L.top_k && sh.dest[tid] >= 0) {
    uint8_t* row = a.region.at<uint8_t>(sh.dest[tid], L.dispatchRow(parity, a.rank, t));
    reinterpret_cast<LlPairEntry*>(row + L.meta_offset)[sh.index[tid]] = sh.entry[tid];
  }
  // Publish: the writers' fences, then (epoch, kept pairs) to every rank, 0 where nothing went.
  fenceAcqRelSys();
  __syncthreads();
  if (tid < L.ranks && a.fault != static_cast<uint32_t>(LlFault::kSkipDispatchSignals)) {
    storeReleaseSys64(a.region.at<uint64_t>(tid, L.dispatchFlag(parity, a.rank, t)),
                      llFlagWord(epoch, static_cast<uint32_t>(sh.pairs[tid])));
  }
  if (tid == 0) a.token_dests[t] = sh.dest_mask;
}

// Kept pairs of local expert `le` that source `s` sends this call (0 when its count block never came).
__device__ __forceinline__ int keptFrom(const LlLayout& L, const DispatchShared& sh, int s, int le) {
  return sh.hist[s * L.local_experts + le];
}

// One CTA takes received row (s, t): its flag, its pairs' places in the packed layout (the payload's first batch in
// flight meanwhile), then the payload fanned out.
template <bool kFp8>
__device__ void receiveRow(const DispatchArgs& a, int s, int t, uint32_t epoch, int parity, DispatchShared& sh) {
  const LlLayout& L = a.layout;
  const int tid = static_cast<int>(threadIdx.x);
  const int k = L.top_k;
  if (tid == 0) {
    uint64_t w = 0;
    const bool ok = llWait(
        a.region.at<uint64_t>(a.rank, L.dispatchFlag(parity, s, t)),
        [epoch](uint64_t x) { return llFlagEpoch(x) == epoch; }, a.timeout_ns, a.state, &w);
    if (!ok) llReport(a.state, kDeviceTimeout, s, kWhatDispatch);
    int m = ok ? static_cast<int>(llFlagValue(w)) : 0;
    if (m > k) {
      llReport(a.state, kDeviceBadInput, s, kWhatDispatch);
      m = 0;
    }
    sh.m = m;
  }
  __syncthreads();
  const int m = sh.m;
  const uint8_t* row = a.region.at<const uint8_t>(a.rank, L.dispatchRow(parity, s, t));
  const auto* from = reinterpret_cast<const uint4*>(row);
  const int vecs = static_cast<int>(L.payload_bytes / 16);
  constexpr int kStep = kLlThreads * kLlBatch;
  uint4 v[kLlBatch];
  if (m > 0) {
#pragma unroll
    for (int b = 0; b < kLlBatch; ++b) {
      const int c = b * kLlThreads + tid;
      v[b] = c < vecs ? __ldcg(from + c) : make_uint4(0, 0, 0, 0);
    }
  }
  const uint64_t slot = static_cast<uint64_t>(s) * L.max_tokens + t;
  if (tid < k) {
    int out = -1;
    float w = 0.f;
    if (tid < m) {
      const int4 raw = __ldcg(reinterpret_cast<const int4*>(row + L.meta_offset) + tid);
      const int le = raw.x;
      w = __int_as_float(raw.w);
      // A pair must land inside its source's share of the expert's rows: anything else is a malformed row.
      if (le >= 0 && le < L.local_experts && raw.y >= 0 && raw.y < k && raw.z >= 0 && raw.z < keptFrom(L, sh, s, le)) {
        int base = 0;
        for (int q = 0; q < s; ++q)
          base += keptFrom(L, sh, q, le);
        out = static_cast<int>(static_cast<uint64_t>(le) * L.expertStride()) + base + raw.z;
        a.row_source[out] = make_int4(s, t, raw.y, 0);
        a.row_weight[out] = w;
      } else {
        llReport(a.state, kDeviceBadInput, s, kWhatDispatch);
      }
    }
    sh.out[tid] = out;
    a.recv_rows[slot * k + tid] = make_int2(out, __float_as_int(w));
  }
  if (tid == 0) a.recv_pairs[slot] = m;
  __syncthreads();
  if (m > 0) {
    for (int base = 0;;) {
      for (int j = 0; j < m; ++j) {
        const int o = sh.out[j];
        if (o < 0) continue;
        auto* to = reinterpret_cast<uint4*>(a.rows + static_cast<uint64_t>(o) * L.payload_bytes);
#pragma unroll
        for (int b = 0; b < kLlBatch; ++b) {
          const int c = base + b * kLlThreads + tid;
          if (c < vecs) to[c] = v[b];
        }
      }
      base += kStep;
      if (base >= vecs) break;
#pragma unroll
      for (int b = 0; b < kLlBatch; ++b) {
        const int c = base + b * kLlThreads + tid;
        v[b] = c < vecs ? __ldcg(from + c) : make_uint4(0, 0, 0, 0);
      }
    }
    if constexpr (kFp8) {
      const int groups = L.hidden / kFp8Group;
      const auto* sc = reinterpret_cast<const float*>(row + L.payload_bytes);
      for (int g = tid; g < groups; g += kLlThreads) {
        const float x = __ldcg(sc + g);
        for (int j = 0; j < m; ++j)
          if (sh.out[j] >= 0) a.scales[static_cast<uint64_t>(sh.out[j]) * groups + g] = x;
      }
    }
  }
  __syncthreads();
}

// Sends: CTA per token (the CTA with the fewest tokens also counts). Receives: every source's count block, then the
// received rows in turn, this rank's own first (they are ready first).
template <bool kFp8>
__global__ void __launch_bounds__(kLlThreads, 1) llDispatchKernel(DispatchArgs a) {
  __shared__ DispatchShared sh;
  awaitPriorGrids();
  releaseDependents();
  const LlLayout& L = a.layout;
  const int tid = static_cast<int>(threadIdx.x);
  const int n = L.ranks;
  const uint32_t epoch = a.state->dispatch_epoch + 1;
  const int parity = llParity(epoch);
  uint64_t(*slots)[2] = a.times != nullptr ? a.times->dispatch : nullptr;
  llStampStart(slots, epoch);
  for (int e = tid; e < L.experts; e += kLlThreads)
    sh.hist[e] = 0;
  __syncthreads();

  if (static_cast<int>(blockIdx.x) == a.num_tokens % static_cast<int>(gridDim.x)) sendCounts(a, epoch, parity, sh);
  int scanned = 0;
  for (int t = static_cast<int>(blockIdx.x); t < a.num_tokens; t += static_cast<int>(gridDim.x))
    sendToken<kFp8>(a, t, epoch, parity, &scanned, sh);

  if (tid < n) {
    uint64_t w = 0;
    const bool ok = llWait(
        a.region.at<uint64_t>(a.rank, L.countBlock(parity, tid)),
        [epoch](uint64_t x) { return llFlagEpoch(x) == epoch; }, a.timeout_ns, a.state, &w);
    if (!ok) llReport(a.state, kDeviceTimeout, tid, kWhatDispatch);
    sh.ok[tid] = ok ? 1 : 0;
    sh.tokens[tid] = ok ? static_cast<int>(min(llFlagValue(w), static_cast<uint32_t>(L.max_tokens))) : 0;
  }
  __syncthreads();
  // Every source's kept pairs per local expert, once (the sends are done with hist).
  for (int x = tid; x < n * L.local_experts; x += kLlThreads) {
    const int s = x / L.local_experts;
    const int c = sh.ok[s] ? __ldcg(a.region.at<const int32_t>(a.rank, L.countOf(parity, s, x % L.local_experts))) : 0;
    sh.hist[x] = min(max(c, 0), L.capacity);
  }
  __syncthreads();
  if (blockIdx.x == 0) {
    for (int le = tid; le < L.local_experts; le += kLlThreads) {
      int64_t rows = 0;
      for (int s = 0; s < n; ++s)
        rows += keptFrom(L, sh, s, le);
      a.expert_counts[le] = rows;
    }
    if (tid < n) a.recv_tokens[tid] = sh.tokens[tid];
  }
  int total = 0;
  for (int s = 0; s < n; ++s)
    total += sh.tokens[s];
  for (int q = static_cast<int>(blockIdx.x); q < total; q += static_cast<int>(gridDim.x)) {
    int s = a.rank;
    int t = q;
    for (int i = 0; i < n; ++i) {
      s = a.rank + i < n ? a.rank + i : a.rank + i - n;
      if (t < sh.tokens[s]) break;
      t -= sh.tokens[s];
    }
    receiveRow<kFp8>(a, s, t, epoch, parity, sh);
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
  const int32_t* recv_pairs;
  const int2* recv_rows;
  LlState* state;
  LlKernelTimes* times;
  uint64_t timeout_ns;
  uint32_t fault;
};
static_assert(std::is_trivially_copyable_v<CombineArgs>);

struct CombineShared {
  int tokens[kMaxRanks];
  int ok[kMaxRanks];
  int out[kMaxTopK];
  float weight[kMaxTopK];
  int m;
};

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

// One CTA sends the partial sum of received row (s, t): w * out of its pairs in slot order, fp32, rounded once.
__device__ void sendPartial(const CombineArgs& a, int s, int t, uint32_t epoch, int parity, CombineShared& sh) {
  const LlLayout& L = a.layout;
  const int tid = static_cast<int>(threadIdx.x);
  const int k = L.top_k;
  const uint64_t slot = static_cast<uint64_t>(s) * L.max_tokens + t;
  if (tid == 0) sh.m = min(max(a.recv_pairs[slot], 0), k);
  if (tid < k) {
    const int2 p = a.recv_rows[slot * k + tid];
    sh.out[tid] = p.x;
    sh.weight[tid] = __int_as_float(p.y);
  }
  __syncthreads();
  const int m = sh.m;
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
        if (c < vecs) to[c] = packBf16x8(acc[b]);
      }
    }
    fenceAcqRelSys();
  }
  __syncthreads();
  if (m > 0 && tid == 0 && a.fault != static_cast<uint32_t>(LlFault::kSkipCombineSignals)) {
    storeReleaseSys64(a.region.at<uint64_t>(s, L.combineFlag(parity, a.rank, t)), llFlagWord(epoch, 0));
  }
}

// One CTA finishes this rank's token t: the partial sums of the ranks it went to, in rank order, fp32, rounded once.
__device__ void finishToken(const CombineArgs& a, int t, uint32_t epoch, int parity, CombineShared& sh) {
  const LlLayout& L = a.layout;
  const int tid = static_cast<int>(threadIdx.x);
  const int n = L.ranks;
  const uint32_t mask = a.token_dests[t];
  if (tid < n) {
    bool ok = false;
    if ((mask >> tid) & 1u) {
      uint64_t w = 0;
      ok = llWait(
          a.region.at<uint64_t>(a.rank, L.combineFlag(parity, tid, t)),
          [epoch](uint64_t x) { return llFlagEpoch(x) == epoch; }, a.timeout_ns, a.state, &w);
      if (!ok) llReport(a.state, kDeviceTimeout, tid, kWhatCombine);
    }
    sh.ok[tid] = ok ? 1 : 0;
  }
  __syncthreads();
  const int vecs = L.hidden / 8;
  auto* to = reinterpret_cast<uint4*>(a.out + static_cast<int64_t>(t) * L.hidden);
  for (int base = 0; base < vecs; base += kLlThreads * kLlBatch) {
    float acc[kLlBatch][8] = {};
    for (int r = 0; r < n; ++r) {
      if (!sh.ok[r]) continue;
      const auto* from = a.region.at<const uint4>(a.rank, L.combineRow(parity, r, t));
      uint4 v[kLlBatch];
#pragma unroll
      for (int b = 0; b < kLlBatch; ++b) {
        const int c = base + b * kLlThreads + tid;
        v[b] = c < vecs ? __ldcg(from + c) : make_uint4(0, 0, 0, 0);
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

// Sends: CTA per received row, other ranks' rows first (their round trip is longer). Receives: CTA per token.
__global__ void __launch_bounds__(kLlThreads, 1) llCombineKernel(CombineArgs a) {
  __shared__ CombineShared sh;
  awaitPriorGrids();
  releaseDependents();
  const LlLayout& L = a.layout;
  const int tid = static_cast<int>(threadIdx.x);
  const int n = L.ranks;
  const uint32_t epoch = a.state->combine_epoch + 1;
  const int parity = llParity(epoch);
  uint64_t(*slots)[2] = a.times != nullptr ? a.times->combine : nullptr;
  llStampStart(slots, epoch);
  const bool signal = a.fault != static_cast<uint32_t>(LlFault::kSkipCombineSignals);
  // This rank has started this combine, so it has finished the one before: peers may write that parity again.
  if (blockIdx.x == 0 && tid < n && signal) {
    storeReleaseSys64(a.region.at<uint64_t>(tid, L.combineMark(a.rank)), llFlagWord(0, epoch));
  }
  if (tid < n) sh.tokens[tid] = min(max(a.recv_tokens[tid], 0), L.max_tokens);
  __syncthreads();
  int total = 0;
  for (int s = 0; s < n; ++s)
    total += sh.tokens[s];
  for (int q = static_cast<int>(blockIdx.x); q < total; q += static_cast<int>(gridDim.x)) {
    int s = a.rank;
    int t = q;
    for (int i = 1; i <= n; ++i) {
      s = a.rank + i < n ? a.rank + i : a.rank + i - n;
      if (t < sh.tokens[s]) break;
      t -= sh.tokens[s];
    }
    sendPartial(a, s, t, epoch, parity, sh);
  }
  for (int t = static_cast<int>(blockIdx.x); t < a.num_tokens; t += static_cast<int>(gridDim.x))
    finishToken(a, t, epoch, parity, sh);
  // Every peer has started this combine, so it has finished the one before: the next combine may write into the
  // parity that one read (a rank whose tokens need nothing from a peer learns it only here).
  if (blockIdx.x == 0 && tid < n) {
    uint64_t w = 0;
    const bool ok = llWait(
        a.region.at<uint64_t>(a.rank, L.combineMark(tid)),
        [epoch](uint64_t x) { return llEpochReached(llFlagValue(x), epoch); }, a.timeout_ns, a.state, &w);
    if (!ok) llReport(a.state, kDeviceTimeout, tid, kWhatCombine);
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
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemset(x.token_dests_->ptr, 0, x.token_dests_->bytes)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaDeviceGetAttribute(&x.sms_, cudaDevAttrMultiProcessorCount, device)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaDeviceSynchronize()));
  }
  return x;
}

int LowLatencyExchange::ctasFor(int num_tokens) const {
  const int cap = config_.max_ctas > 0 ? std::min(config_.max_ctas, sms_) : sms_;
  return std::max(1, std::min(cap, layout_.ranks * std::max(num_tokens, 1)));
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
  a.recv_rows = recv_rows_->as<int2>();
  a.state = state_->as<LlState>();
  a.times = times_;
  a.timeout_ns = static_cast<uint64_t>(config_.timeout_ms) * 1'000'000ull;
  a.fault = static_cast<uint32_t>(fault_);
  const dim3 grid(static_cast<unsigned>(ctasFor(num_tokens)));
  const dim3 block(kLlThreads);
  const cudaError_t err = config_.payload == LlPayload::kFp8
                              ? launchKernel(llDispatchKernel<true>, grid, block, stream, programmatic_, a)
                              : launchKernel(llDispatchKernel<false>, grid, block, stream, programmatic_, a);
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
  a.recv_rows = recv_rows_->as<int2>();
  a.state = state_->as<LlState>();
  a.times = times_;
  a.timeout_ns = static_cast<uint64_t>(config_.timeout_ms) * 1'000'000ull;
  a.fault = static_cast<uint32_t>(fault_);
  const cudaError_t err = launchKernel(llCombineKernel, dim3(static_cast<unsigned>(ctasFor(num_tokens_))),
                                       dim3(kLlThreads), stream, programmatic_, a);
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
