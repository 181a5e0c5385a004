#include "reference/alltoallv/alltoallv.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "reference/alltoallv/copy.cuh"
#include "reference/core/check.h"
#include "reference/core/device_time.cuh"
#include "reference/core/ll.cuh"
#include "reference/core/programmatic.cuh"
#include "reference/core/scoped.h"
#include "reference/core/wait.h"
#include "reference/core/warp_scan.cuh"

namespace peerlab::alltoallv {

namespace {

constexpr int kThreads = 512;
/// Two-phase: payload one CTA should move at least before another CTA joins (latency-bound sizes use one CTA per
/// segment).
constexpr uint64_t kBytesPerCta = 64 * 1024;
/// Fused: capacity per CTA of the default grid (small calls spread their LL words over a few SMs).
constexpr uint64_t kFusedBytesPerCta = 8 * 1024;
/// Fused: local segments up to this size are prefetched into L1 while the counts travel.
constexpr uint64_t kPrefetchBytes = 256 * 1024;

/// Which wait or check produced a device error.
enum What : uint32_t {
  kWhatNone = 0,
  kWhatCounts = 1,     ///< waiting for a peer's row of counts
  kWhatDone = 2,       ///< waiting for a peer's completion flag
  kWhatBadCount = 3,   ///< a count is negative or too large for one call
  kWhatSendTotal = 4,  ///< a rank's counts exceed the send capacity
  kWhatRecvTotal = 5,  ///< a rank would receive more than the receive capacity
  kWhatPayload = 6,    ///< waiting for a peer's LL payload words
  kWhatLaunch = 7,     ///< waiting for this launch's own CTAs to start
};

__device__ __forceinline__ void prefetchL1(const void* p) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
}

__device__ void reportError(DeviceState* st, uint32_t code, int rank, uint64_t epoch, uint64_t a, uint64_t b,
                            uint32_t what) {
  if (atomicCAS(&st->status.code, 0u, code) == 0u) {
    st->status.rank = rank;
    st->status.epoch = epoch;
    st->status.a = a;
    st->status.b = b;
    st->status.what = what;
  }
}

/// A device-side wait gives up at its deadline, or early once this rank already has an error on record (an earlier
/// call on the stream, or another CTA of this one, failed and no checkStatus() has cleared it): a dead peer then costs
/// one timeout per batch of queued calls instead of one per call. The status word is read only after a wait has
/// already spun for kGiveUpCheckNs, never on the fast path.
constexpr uint64_t kGiveUpCheckNs = 20'000;

__device__ __forceinline__ bool gaveUp(const KernelArgs& a, uint64_t t0) {
  const uint64_t waited = globalTimerNs() - t0;
  return waited > a.timeout_ns ||
         (waited > kGiveUpCheckNs && loadRelaxedSys(&a.state->status.code) != static_cast<uint32_t>(kDeviceOk));
}

/// waitLl (core/ll.cuh) with gaveUp() as its deadline.
__device__ __forceinline__ bool waitLlOrGiveUp(const uint4* p, uint32_t tag, const KernelArgs& a, uint64_t t0,
                                               uint64_t* data) {
  while (!loadLl(p, tag, data)) {
    if (gaveUp(a, t0)) return false;
  }
  return true;
}

/// Verdict on a full count matrix, by a whole warp (lane l checks row l and column l, every lane gets the verdict):
/// every CTA of every rank reaches the same one, and the problem reported (when `report`) is the one the two-phase
/// kernel's serial check finds first.
__device__ uint32_t validateMatrixWarp(const uint64_t* m, int n, const KernelArgs& a, uint64_t epoch, bool report) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  int bad_col = -1;
  uint64_t sent = 0;
  uint64_t received = 0;
  if (lane < n) {
#pragma unroll
    for (int d = 0; d < kMaxRanks; ++d) {
      if (d < n) {
        const uint64_t v = m[lane * n + d];
        if (v == kCountInvalid && bad_col < 0) bad_col = d;
        sent += v;
        received += m[d * n + lane];
      }
    }
  }
  // First problem in the serial order: a bad count (row-major), a send total (by row), a receive total (by column).
  const uint32_t bad = __ballot_sync(0xffffffffu, bad_col >= 0);
  if (bad != 0) {
    const int r = __ffs(bad) - 1;
    if (report && lane == r) reportError(a.state, kDeviceBadInput, r, epoch, bad_col, kCountInvalid, kWhatBadCount);
    return kDeviceBadInput;
  }
  const uint32_t over_send = __ballot_sync(0xffffffffu, lane < n && sent > a.send_capacity);
  if (over_send != 0) {
    const int r = __ffs(over_send) - 1;
    if (report && lane == r) reportError(a.state, kDeviceBadInput, r, epoch, sent, a.send_capacity, kWhatSendTotal);
    return kDeviceBadInput;
  }
  const uint32_t over_recv = __ballot_sync(0xffffffffu, lane < n && received > a.recv_capacity);
  if (over_recv != 0) {
    const int r = __ffs(over_recv) - 1;
    if (report && lane == r) {
      reportError(a.state, kDeviceOverflow, r, epoch, received, a.recv_capacity, kWhatRecvTotal);
    }
    return kDeviceOverflow;
  }
  return kDeviceOk;
}

// Fused protocol: one pass (see alltoallv.h). Segments of at most ll_bytes ("small") ride in LL slots; larger ones
// ("large") are pushed into the receiver's buffer (a static split or a work queue) and completed with per-CTA byte
// counts.
//
// A small call is latency-bound, and one thread's chain of dependent instructions costs about 2 ns per step: the
// bookkeeping (row, send and receive lists, offsets, matrix check) is done by one warp with shuffles, the results
// land in shared memory as per-peer pointers, and every word of the call is then one lookup, one load and one store.
// kSmall: compiled for calls whose every segment rides in LL slots (the host picks it when the send capacity
// guarantees that), without the work queue.
template <bool kSmall>
__device__ __forceinline__ void fusedCall(const KernelArgs& a) {
  constexpr unsigned kAll = 0xffffffffu;
  __shared__ uint64_t m[kMaxRanks * kMaxRanks];
  __shared__ uint64_t s_roff[kMaxRanks];  // element offset of each source's segment in this rank's receive buffer
  __shared__ uint32_t s_err;
  __shared__ int s_job[2];
  __shared__ unsigned long long s_chunk[2];
  __shared__ uint64_t s_pushed[kMaxRanks];  // bytes this CTA pushed per work-queue job
  __shared__ uint64_t s_row[kMaxRanks];
  __shared__ uint64_t s_soff[kMaxRanks];
  __shared__ uint64_t s_epoch;
  __shared__ uint32_t s_large;
  // Sends, by peer index j = 1..n-1 (to (me + j) % n): its words in s_send, its slot at that peer, its payload.
  __shared__ LlList s_send;
  __shared__ uint4* s_out_slot[kMaxRanks];
  __shared__ const uint8_t* s_out_src[kMaxRanks];
  // Receives, by index j = 0..n-1: 0 is the local segment (plain words from the send buffer, when no segment is
  // large), j >= 1 the LL payload from (me - j) mod n: its words in s_recv, where they come from and go, how many
  // bytes.
  __shared__ LlList s_recv;
  __shared__ const uint8_t* s_in_src[kMaxRanks];
  __shared__ uint8_t* s_in_dst[kMaxRanks];
  __shared__ uint64_t s_in_bytes[kMaxRanks];
  const int n = a.region.size;
  const int me = a.region.rank;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const uint64_t eb = a.elem_bytes;
  const uint64_t hw = llHeaderWords(n);
  const uint64_t resident = globalTimerNs();
  // With programmatic launch this CTA may run before the previous kernel in the stream (an earlier call, or the
  // producer of the counts and data) has finished: wait for it, then let the next kernel get scheduled behind us.
  awaitPriorGrids();
  releaseDependents();
  const uint64_t t0 = globalTimerNs();
  uint8_t* const send = a.region.at<uint8_t>(me, a.send_offset);
  uint8_t* const recv = a.region.at<uint8_t>(me, a.recv_offset);
  auto slotOf = [&](int owner, int src, uint64_t parity) {
    return a.region.at<uint4>(owner, a.staging_offset + (parity * static_cast<uint64_t>(n) + src) * a.slot_stride);
  };

  // 1. Warp 0: the epoch (written by the previous call's kernel; CTA 0 advances it only after every CTA of this
  //    launch has counted itself in below) and this rank's row, loaded together; then the row's offsets and the send
  //    list. A count that is negative or does not fit 32 bits travels as kCountInvalid and sends nothing.
  uint64_t t_loaded = 0;
  uint64_t t_row = 0;
  if (tid < 32) {
    const uint64_t previous = loadRelaxedGpu64(&a.state->epoch);
    const int64_t c = lane < n ? a.send_counts[lane] : 0;
    const uint64_t v =
        lane >= n ? 0 : (c < 0 || c >= static_cast<int64_t>(kCountInvalid) ? kCountInvalid : static_cast<uint64_t>(c));
    const uint64_t epoch = previous + 1;
    t_loaded = globalTimerNs();
    const bool bad = __any_sync(kAll, v == kCountInvalid);
    const uint64_t valid = v == kCountInvalid ? 0 : v;
    const uint64_t incl = warpInclusiveSum<kMaxRanks>(valid);
    const uint64_t soff = incl - valid;
    const bool ok = !bad && __shfl_sync(kAll, incl, n - 1) <= a.send_capacity;
    if (lane < n) {
      s_row[lane] = v;
      s_soff[lane] = soff;
    }
    // Peer index j = lane (1..n-1) sends to d = (me + j) % n.
    const bool peer = lane >= 1 && lane < n;
    const int d = peer ? (me + lane < n ? me + lane : me + lane - n) : 0;
    const uint64_t vd = __shfl_sync(kAll, v, d);
    const uint64_t sd = __shfl_sync(kAll, soff, d);
    const uint64_t bytes = ok ? vd * eb : 0;
    const uint64_t words = peer ? hw + (ok && bytes <= a.ll_bytes ? llWords(bytes) : 0) : 0;
    const uint64_t winc = warpInclusiveSum<kMaxRanks>(words);
    const uint64_t wtotal = __shfl_sync(kAll, winc, n - 1);
    if (peer) {
      s_send.first[lane] = winc - words;
      s_out_slot[lane] = slotOf(d, me, epoch & 1);
      s_out_src[lane] = send + sd * eb;
    }
    if (lane == 0) {
      s_send.first[0] = 0;
      s_send.first[n > 1 ? n : 1] = wtotal;
      s_send.words = wtotal;
      s_epoch = epoch;
      s_err = kDeviceOk;
    }
    t_row = globalTimerNs();
  }
  __syncthreads();
  const uint64_t epoch = s_epoch;
  // Every thread of this CTA is past its last use of the epoch word: count the CTA in.
  // NOTE: relaxed on purpose. The barrier has already performed warp 0's load of the epoch, and a release here would
  // compile to a fence that waits for this thread's stores to peers (a full NVLink round trip).
  if (tid == 0) redRelaxedGpuAdd32(&a.state->arrived, 1u);
  const uint64_t parity = epoch & 1;
  // The queue counters of the other parity were the previous call's (complete before this one started): zero them
  // for the next call.
  if constexpr (!kSmall) {
    if (blockIdx.x == 0 && tid < kMaxRanks) a.state->next_chunk[parity ^ 1][tid] = 0;
  }
  // Diagnostics: this call's row; CTA 0 writes its phases, every CTA its share of the latest-CTA points.
  uint64_t* const trace_row = a.trace != nullptr && tid == 0 ? a.trace + (epoch % kTraceCalls) * kTracePoints : nullptr;
  uint64_t* const trace = blockIdx.x == 0 ? trace_row : nullptr;
  auto traceLatest = [&](int point) {
    if (trace_row != nullptr) atomicMax(reinterpret_cast<unsigned long long*>(trace_row + point), globalTimerNs());
  };
  if (trace != nullptr) {
    trace[kTraceResident] = resident;
    trace[kTraceEntry] = t0;
    trace[kTraceEpoch] = t_loaded;
    trace[kTraceLoaded] = t_loaded;
    trace[kTraceRow] = t_row;
  }
  const uint32_t tag = llTag(epoch);
  const uint64_t gthreads = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t gtid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t* const row = s_row;
  const uint64_t* const soff = s_soff;

  // 2. Before waiting for anything: the row (header words) and every small segment (payload words) into this rank's
  //    slot at each peer, spread over every thread of the grid.
  {
    const LlList& list = s_send;
    for (uint64_t w = gtid; w < list.words; w += gthreads) {
      int j = 1;
#pragma unroll
      for (int i = 2; i < kMaxRanks; ++i)
        j += i < n && w >= list.first[i] ? 1 : 0;
      const uint64_t k = w - list.first[j];
      uint4* const slot = s_out_slot[j];
      if (k < hw) {
        storeLl(slot + k, llHeaderData(row, n, k), tag);
      } else {
        const uint64_t p = k - hw;
        storeLl(slot + kLlHeaderWords + p, load8(s_out_src[j] + 8 * p), tag);
      }
    }
  }
  if (trace != nullptr) trace[kTraceSent] = globalTimerNs();
  // The local segment's source is known from the row alone (its destination needs the whole matrix): each thread
  // warms the line of the first local word it will copy into L1 now, so that copy does not wait for L2.
  const bool local_inside = row[me] != kCountInvalid && soff[me] + row[me] <= a.send_capacity;
  const uint64_t local_bytes = local_inside ? row[me] * eb : 0;
  if (local_bytes > 0 && local_bytes <= kPrefetchBytes && gtid < llWords(local_bytes)) {
    prefetchL1(send + soff[me] * eb + 8 * gtid);
  }

  // 3. Warp 0 of every CTA: the count matrix from every peer's header words (lane = source * kLlHeaderWords + word),
  //    the verdict on it, then the receive offsets and the receive list.
  if (tid < 32) {
    const int s = tid / static_cast<int>(kLlHeaderWords);
    const uint64_t k = static_cast<uint64_t>(tid) % kLlHeaderWords;
    if (s < n && k < hw) {
      const bool odd_tail = 2 * k + 1 >= static_cast<uint64_t>(n);
      uint64_t v = 0;
      bool ok = true;
      if (s == me) {
        v = llHeaderData(row, n, k);
      } else {
        ok = waitLlOrGiveUp(slotOf(me, s, parity) + k, tag, a, t0, &v);
      }
      if (ok) {
        m[s * n + 2 * k] = static_cast<uint32_t>(v);
        if (!odd_tail) m[s * n + 2 * k + 1] = v >> 32;
      } else {
        s_err = kDeviceTimeout;
        reportError(a.state, kDeviceTimeout, s, epoch, 0, 0, kWhatCounts);
      }
    }
    __syncwarp();
    if (trace != nullptr) trace[kTraceHeaders] = globalTimerNs();
    if (s_err == kDeviceOk) {
      const uint32_t err = validateMatrixWarp(m, n, a, epoch, blockIdx.x == 0);
      if (err == kDeviceOk) {
        // Lane l < n: what source l sends here, and where it lands (exclusive prefix over sources).
        const uint64_t in = lane < n ? m[lane * n + me] : 0;
        const uint64_t incl = warpInclusiveSum<kMaxRanks>(in);
        const uint64_t roff = incl - in;
        if (lane < n) s_roff[lane] = roff;
        // A segment above the LL threshold in either direction sends this rank through the work queue.
        bool large = false;
        if constexpr (!kSmall) {
          large =
              __any_sync(kAll, lane < n && lane != me && (m[me * n + lane] * eb > a.ll_bytes || in * eb > a.ll_bytes));
        }
        // Receive index j = lane: 0 is the local segment, j >= 1 comes from (me - j) mod n.
        const int src = lane < n ? (me - lane >= 0 ? me - lane : me - lane + n) : 0;
        const uint64_t bytes = __shfl_sync(kAll, in, src) * eb;
        const uint64_t at = __shfl_sync(kAll, roff, src);
        uint64_t words = 0;
        if (lane == 0) words = large ? 0 : llWords(bytes);
        if (lane >= 1 && lane < n) words = bytes <= a.ll_bytes ? llWords(bytes) : 0;
        const uint64_t winc = warpInclusiveSum<kMaxRanks>(words);
        if (lane < n) {
          s_recv.first[lane] = winc - words;
          s_in_src[lane] = lane == 0 ? send + soff[me] * eb
                                     : reinterpret_cast<const uint8_t*>(slotOf(me, src, parity) + kLlHeaderWords);
          s_in_dst[lane] = recv + at * eb;
          s_in_bytes[lane] = bytes;
        }
        if (lane == n - 1) {
          s_recv.first[n] = winc;
          s_recv.words = winc;
        }
        if (lane == 0) s_large = large ? 1u : 0u;
      }
      __syncwarp();
      if (tid == 0) s_err = err;
    }
  }
  __syncthreads();
  if (trace != nullptr) trace[kTraceCounts] = globalTimerNs();
  const bool failed = s_err != kDeviceOk;

  // Outputs: what arrives from each source and where; zeros after an error so consumers read nothing.
  if (blockIdx.x == 0 && tid < n) {
    a.recv_counts[tid] = failed ? 0 : static_cast<int64_t>(m[tid * n + me]);
    a.recv_offsets[tid] = failed ? 0 : static_cast<int64_t>(s_roff[tid]);
  }

  if (!failed) {
    // Every row passed the check, so every sender sent each of its small segments in its LL slot.
    // (A valid matrix has no segment above the send capacity, so the small kernel never sees a large one.)
    const bool large = !kSmall && s_large != 0;

    if (large) {
      // 3a. Jobs are this rank's large peer segments (rotated) and the local copy. Below queue_min_bytes in total
      //     they are split statically, one contiguous piece per CTA. Otherwise a work queue: each CTA starts on
      //     the job queueStartJob gives it (in step, for even traffic: the local copy's share of CTAs on it, all
      //     others on the first peer), takes chunks from that job's counter and moves on to the next job when it runs
      //     dry.
      const QueueJobs q = queueJobs(m, n, me, eb, a.ll_bytes);
      const int jobs = q.count;
      uint64_t total = 0;
      for (int i = 0; i < jobs; ++i)
        total += q.bytes[i];
      const uint64_t units = (a.chunk_bytes ? a.chunk_bytes : autoChunkBytes(total, static_cast<int>(gridDim.x))) / 16;
      auto srcOf = [&](int jb) { return send + soff[q.rank[jb]] * eb; };
      auto dstOf = [&](int jb) {
        return a.region.at<uint8_t>(q.rank[jb], a.recv_offset) + recvOffset(m, n, me, q.rank[jb]) * eb;
      };
      auto chunksOf = [&](int jb) {
        const CopyPlan p =
            planCopy(reinterpret_cast<uint64_t>(srcOf(jb)), reinterpret_cast<uint64_t>(dstOf(jb)), q.bytes[jb]);
        return queueChunks(p, q.bytes[jb], units);
      };
      if (tid < kMaxRanks) s_pushed[tid] = 0;
      if (total < a.queue_min_bytes) {
        // A static split: one contiguous piece per CTA, no queue.
        int jb = -1;
        int piece = 0;
        int pieces = 0;
        splitJob(q, static_cast<int>(gridDim.x), static_cast<int>(blockIdx.x), &jb, &piece, &pieces);
        __syncthreads();
        if (jb >= 0) {
          const uint8_t* src = srcOf(jb);
          uint8_t* dst = dstOf(jb);
          copyPiece(src, dst, q.bytes[jb], pieces, piece);
          if (tid == 0) {
            s_pushed[jb] = pieceBytes(
                planCopy(reinterpret_cast<uint64_t>(src), reinterpret_cast<uint64_t>(dst), q.bytes[jb]), pieces, piece);
          }
        }
        __syncthreads();
      } else {
        unsigned long long* const next = a.state->next_chunk[parity];
        // Thread 0 owns this CTA's place in the queue: the job it takes from and how many jobs it found empty, and
        // the bytes it has pushed for each job.
        int job = 0;
        int tries = 0;
        if (tid == 0 && jobs > 0)
          job = queueStartJob(q, static_cast<int>(gridDim.x), static_cast<int>(blockIdx.x),
                              a.queue_in_step != 0 && queueInStep(m, n, eb, a.ll_bytes));
        // Thread 0 turns ticket `c` of the current job into the next chunk for slot `which`: when the job has run dry
        // it moves on to the next one (job -1: every queue is empty).
        auto settle = [&](unsigned long long c, int which) {
          while (c >= chunksOf(job)) {
            if (++tries >= jobs) {
              s_job[which] = -1;
              return;
            }
            job = (job + 1) % jobs;
            c = atomicAdd(&next[job], 1ull);
          }
          s_job[which] = job;
          s_chunk[which] = c;
        };
        if (tid == 0) {
          if (jobs > 0) {
            settle(atomicAdd(&next[job], 1ull), 0);
          } else {
            s_job[0] = -1;
          }
        }
        __syncthreads();
        for (int it = 0;; ++it) {
          const int jb = s_job[it & 1];
          const uint64_t c = s_chunk[it & 1];
          if (jb < 0) break;
          // The ticket for the next chunk is drawn before this chunk is copied and read after, hiding the atomic.
          unsigned long long ticket = 0;
          if (tid == 0) ticket = atomicAdd(&next[job], 1ull);
          const uint8_t* src = srcOf(jb);
          uint8_t* dst = dstOf(jb);
          const CopyPlan p = planCopy(reinterpret_cast<uint64_t>(src), reinterpret_cast<uint64_t>(dst), q.bytes[jb]);
          uint64_t c0 = 0;
          uint64_t c1 = 0;
          queueChunkRange(p, units, c, &c0, &c1);
          const bool first = c == 0;
          const bool last = c + 1 == queueChunks(p, q.bytes[jb], units);
          copyRange(src, dst, p, c0, c1, first, last);
          if (tid == 0) {
            s_pushed[jb] += (c1 - c0) * 16 + (first ? p.head : 0) + (last ? p.tail : 0);
            // The other slot is free: everyone read it before the previous barrier.
            settle(ticket, (it + 1) & 1);
          }
          __syncthreads();
        }
      }
      if (tid == 0) traceLatest(kTraceQueued);
      // 3c. This CTA's pushes are released to each receiver as soon as they have landed: one fence, then the bytes
      //     it moved for that receiver added to the receiver's count for this rank (no CTA waits for another).
      if (tid == 0) {
        bool pushed = false;
        for (int jb = 0; jb < jobs; ++jb)
          pushed = pushed || (jb != q.self && s_pushed[jb] != 0);
        if (pushed) {
          fenceAcqRelSys();
          for (int jb = 0; jb < jobs; ++jb) {
            if (jb != q.self && s_pushed[jb] != 0) {
              redRelaxedSysAdd64(
                  a.region.at<uint64_t>(q.rank[jb], RegionLayout::kArrivedBytesOffset + (parity * kMaxRanks + me) * 8),
                  s_pushed[jb]);
            }
          }
          traceLatest(kTraceLast);
        }
      }
    }
    if (trace != nullptr) trace[kTraceLocal] = globalTimerNs();

    // 3b. The local segment (when no segment is large) and the small segments out of the LL slots, into the receive
    //     buffer, one 8-byte word per step, spread over every thread of the grid (the local words first: they wait
    //     for nothing).
    {
      const LlList& list = s_recv;
      for (uint64_t w = gtid; w < list.words; w += gthreads) {
        int j = 0;
#pragma unroll
        for (int i = 1; i < kMaxRanks; ++i)
          j += i < n && w >= list.first[i] ? 1 : 0;
        const uint64_t p = w - list.first[j];
        uint64_t v = 0;
        if (j == 0) {
          v = load8(s_in_src[0] + 8 * p);
        } else if (!waitLlOrGiveUp(reinterpret_cast<const uint4*>(s_in_src[j]) + p, tag, a, t0, &v)) {
          reportError(a.state, kDeviceTimeout, me - j >= 0 ? me - j : me - j + n, epoch, 0, 0, kWhatPayload);
          break;
        }
        const uint64_t bytes = s_in_bytes[j];
        store8(s_in_dst[j] + 8 * p, v, bytes - 8 * p < 8 ? bytes - 8 * p : 8);
      }
    }

    if (large && blockIdx.x == 0) {
      // 3d. CTA 0 waits until every large segment addressed to this rank has arrived whole, then zeroes its count
      //     for the call two epochs on (that sender adds to it only after this rank's next-but-one row of counts).
      //     After a timeout the count is left as it is: a sender that finishes later still adds to it, and the calls
      //     after a timeout are out of step with that peer anyway (its headers carry another epoch).
      if (tid < n && tid != me && m[tid * n + me] * eb > a.ll_bytes) {
        const uint64_t want = m[tid * n + me] * eb;
        uint64_t* const got =
            a.region.at<uint64_t>(me, RegionLayout::kArrivedBytesOffset + (parity * kMaxRanks + tid) * 8);
        bool ok = true;
        while (loadAcquireSys64(got) < want) {
          if (gaveUp(a, t0)) {
            reportError(a.state, kDeviceTimeout, tid, epoch, 0, 0, kWhatDone);
            ok = false;
            break;
          }
        }
        if (ok) storeRelaxedSys64(got, 0);
      }
      if (tid < 32) {
        __syncwarp();
        if (trace != nullptr) trace[kTraceFlags] = globalTimerNs();
      }
    }
  }

  // CTA 0 closes the call once every CTA has read the epoch (normally long done by now).
  if (blockIdx.x == 0 && tid == 0) {
    if (trace != nullptr) trace[kTracePayload] = globalTimerNs();
    while (loadAcquireGpu32(&a.state->arrived) < gridDim.x) {
      if (gaveUp(a, t0)) {
        reportError(a.state, kDeviceTimeout, me, epoch, 0, 0, kWhatLaunch);
        break;
      }
    }
    if (trace != nullptr) trace[kTraceClose] = globalTimerNs();
    a.state->arrived = 0;
    a.state->epoch = epoch;
    if (trace != nullptr) trace[kTraceExit] = globalTimerNs();
  }
  traceLatest(kTraceEnd);
}

// One CTA per SM (no register limit), or two (64 registers per thread) for grids larger than the SM count.
// The arguments are copied into shared memory first, one word per thread, before the kernel waits for the previous
// one: a launch's parameters start cold in the constant cache, and each phase of a call would otherwise pay a miss
// on its first use of another part of them.
template <int kCtasPerSm, bool kSmall>
__global__ void __launch_bounds__(kThreads, kCtasPerSm) fusedKernel(const __grid_constant__ KernelArgs a) {
  constexpr int kWords = sizeof(KernelArgs) / 4;
  static_assert(sizeof(KernelArgs) % 4 == 0 && kWords <= kThreads);
  __shared__ alignas(16) uint32_t s_args[kWords];
  if (threadIdx.x < kWords) s_args[threadIdx.x] = reinterpret_cast<const uint32_t*>(&a)[threadIdx.x];
  __syncthreads();
  fusedCall<kSmall>(*reinterpret_cast<const KernelArgs*>(s_args));
}

// Two-phase protocol: counts, then payload (push or pull), then a flag per segment.
__global__ void __launch_bounds__(kThreads) twoPhaseKernel(KernelArgs a) {
  __shared__ uint64_t m[kMaxRanks * kMaxRanks];
  __shared__ uint32_t s_err;
  __shared__ uint32_t s_verdict;
  __shared__ uint32_t s_last;
  const int n = a.region.size;
  const int me = a.region.rank;
  const int tid = static_cast<int>(threadIdx.x);
  const bool pull = a.transfer == static_cast<uint32_t>(Transfer::kPull);
  awaitPriorGrids();
  releaseDependents();
  const uint64_t epoch = a.state->epoch + 1;
  const uint32_t tag = static_cast<uint32_t>(epoch);
  const uint64_t t0 = globalTimerNs();
  if (tid == 0) s_err = kDeviceOk;

  // Publish this rank's row of counts into every rank's slot for it (one 8-byte tagged word per count).
  if (blockIdx.x == 0 && tid < n * n) {
    const int r = tid / n;
    const int d = tid % n;
    const int64_t c = a.send_counts[d];
    const uint64_t word = packCount(tag, c < 0 ? static_cast<uint64_t>(kCountInvalid) : static_cast<uint64_t>(c));
    // Pull: peers read our send buffer once they see the row, so the row releases what earlier kernels wrote.
    if (pull) fenceAcqRelSys();
    storeRelaxedSys64(a.region.at<uint64_t>(r, RegionLayout::kCountsOffset + (me * kMaxRanks + d) * 8), word);
  }
  __syncthreads();

  // Every CTA reads the whole matrix: one thread per count word, each bounded by the deadline.
  if (tid < n * n) {
    const int s = tid / n;
    const int d = tid % n;
    const uint64_t* w = a.region.at<uint64_t>(me, RegionLayout::kCountsOffset + (s * kMaxRanks + d) * 8);
    uint64_t v = loadRelaxedSys64(w);
    while (countEpoch(v) != tag) {
      if (gaveUp(a, t0)) {
        s_err = kDeviceTimeout;
        reportError(a.state, kDeviceTimeout, s, epoch, 0, 0, kWhatCounts);
        v = 0;
        break;
      }
      v = loadRelaxedSys64(w);
    }
    m[tid] = countValue(v);
    if (pull) fenceAcqRelSys();
  }
  __syncthreads();
  const bool timed_out = s_err == kDeviceTimeout;

  // Validate: every CTA of every rank sees the same matrix and reaches the same verdict, so on an error nobody moves
  // payload and every rank still completes the call in step. The verdict goes to its own word: other threads may
  // still be reading s_err.
  if (tid == 0) {
    uint32_t err = timed_out ? static_cast<uint32_t>(kDeviceTimeout) : static_cast<uint32_t>(kDeviceOk);
    for (int i = 0; i < n * n && !err; ++i) {
      if (m[i] == kCountInvalid) {
        err = kDeviceBadInput;
        if (blockIdx.x == 0) reportError(a.state, err, i / n, epoch, i % n, kCountInvalid, kWhatBadCount);
      }
    }
    for (int s = 0; s < n && !err; ++s) {
      const uint64_t total = sendTotal(m, n, s);
      if (total > a.send_capacity) {
        err = kDeviceBadInput;
        if (blockIdx.x == 0) reportError(a.state, err, s, epoch, total, a.send_capacity, kWhatSendTotal);
      }
    }
    for (int d = 0; d < n && !err; ++d) {
      const uint64_t total = recvTotal(m, n, d);
      if (total > a.recv_capacity) {
        err = kDeviceOverflow;
        if (blockIdx.x == 0) reportError(a.state, err, d, epoch, total, a.recv_capacity, kWhatRecvTotal);
      }
    }
    s_verdict = err;
  }
  __syncthreads();
  const bool failed = s_verdict != kDeviceOk;

  // Outputs: what arrives from each source and where; zeros after an error so consumers read nothing.
  if (blockIdx.x == 0 && tid < n) {
    a.recv_counts[tid] = failed ? 0 : static_cast<int64_t>(m[tid * n + me]);
    a.recv_offsets[tid] = failed ? 0 : static_cast<int64_t>(recvOffset(m, n, tid, me));
  }

  // Segment i: push sends to rank i, pull reads from rank i. Either way its completion flag goes to rank i.
  uint64_t seg_bytes[kMaxRanks];
  uint64_t total = 0;
  for (int i = 0; i < n; ++i) {
    seg_bytes[i] = failed ? 0 : (pull ? m[i * n + me] : m[me * n + i]) * a.elem_bytes;
    total += seg_bytes[i];
  }
  const int grid = static_cast<int>(gridDim.x);
  int active = static_cast<int>(std::min<uint64_t>((total + kBytesPerCta - 1) / kBytesPerCta, grid));
  active = std::max(active, std::min(n, grid));
  int g[kMaxRanks];
  splitCtas(seg_bytes, n, me, active, g);

  // Segments without payload are complete at once.
  if (!timed_out && blockIdx.x == 0 && tid < n && g[tid] == 0) {
    storeReleaseSys64(a.region.at<uint64_t>(tid, RegionLayout::kDoneOffset + me * 8), epoch);
  }

  int seg = -1;
  int piece = 0;
  if (!timed_out && static_cast<int>(blockIdx.x) < active) {
    int cum = 0;
    for (int i = 0; i < n; ++i) {
      if (static_cast<int>(blockIdx.x) < cum + g[i]) {
        seg = i;
        piece = static_cast<int>(blockIdx.x) - cum;
        break;
      }
      cum += g[i];
    }
  }
  if (seg >= 0) {
    const uint8_t* src;
    uint8_t* dst;
    if (pull) {
      src = a.region.at<uint8_t>(seg, a.send_offset) + sendOffset(m, n, seg, me) * a.elem_bytes;
      dst = a.region.at<uint8_t>(me, a.recv_offset) + recvOffset(m, n, seg, me) * a.elem_bytes;
    } else {
      src = a.region.at<uint8_t>(me, a.send_offset) + sendOffset(m, n, me, seg) * a.elem_bytes;
      dst = a.region.at<uint8_t>(seg, a.recv_offset) + recvOffset(m, n, me, seg) * a.elem_bytes;
    }
    copyPiece(src, dst, seg_bytes[seg], g[seg], piece);
    __syncthreads();
    if (tid == 0) {
      uint64_t* flag = a.region.at<uint64_t>(seg, RegionLayout::kDoneOffset + me * 8);
      if (g[seg] == 1) {
        // Sole CTA of the segment: the release store orders the CTA's stores (push) or loads (pull) before it.
        storeReleaseSys64(flag, epoch);
      } else {
        // Release this CTA's accesses, count it; the segment's last CTA acquires the others' and raises the flag.
        fenceAcqRelSys();
        const uint32_t done = atomicAdd(&a.state->seg_done[seg], 1u) + 1;
        if (done == static_cast<uint32_t>(g[seg])) {
          a.state->seg_done[seg] = 0;
          fenceAcqRelSys();
          storeReleaseSys64(flag, epoch);
        }
      }
    }
  }

  // The last CTA to finish waits for every peer's flag (push: their data has landed here; pull: they are done
  // reading our send buffer), then closes the call.
  if (tid == 0) s_last = atomicAdd(&a.state->grid_done, 1u) + 1 == gridDim.x ? 1u : 0u;
  __syncthreads();
  if (!s_last) return;
  if (tid < n) {
    const uint64_t* f = a.region.at<uint64_t>(me, RegionLayout::kDoneOffset + tid * 8);
    while (static_cast<int64_t>(loadAcquireSys64(f) - epoch) < 0) {
      if (gaveUp(a, t0)) {
        reportError(a.state, kDeviceTimeout, tid, epoch, 0, 0, kWhatDone);
        break;
      }
    }
  }
  __syncthreads();
  if (tid == 0) {
    a.state->grid_done = 0;
    a.state->epoch = epoch;
  }
}

}  // namespace

std::string_view transferName(Transfer t) {
  return t == Transfer::kPull ? "pull" : "push";
}

std::string_view protocolName(Protocol p) {
  switch (p) {
    case Protocol::kAuto:
      return "auto";
    case Protocol::kFused:
      return "fused";
    case Protocol::kTwoPhase:
      return "two_phase";
  }
  return "?";
}

RegionLayout RegionLayout::make(uint64_t send_bytes, uint64_t recv_bytes, int ranks, uint64_t ll_bytes) {
  auto up = [](uint64_t v, uint64_t a) { return (v + a - 1) / a * a; };
  RegionLayout l;
  l.staging_offset = kControlBytes;
  if (ranks > 0) {
    l.slot_stride = llSlotBytes(ll_bytes);
    l.staging_bytes = 2 * static_cast<uint64_t>(ranks) * l.slot_stride;
  }
  l.send_offset = up(l.staging_offset + l.staging_bytes, 4096);
  l.send_bytes = send_bytes;
  l.recv_offset = up(l.send_offset + std::max<uint64_t>(send_bytes, 16), 256);
  l.recv_bytes = recv_bytes;
  l.total_bytes = up(l.recv_offset + up(std::max<uint64_t>(recv_bytes, 16), 16) + kGuardBytes, 4096);
  return l;
}

namespace {
struct SharedOptions {
  uint64_t elem_bytes;
  uint64_t send_capacity;
  uint64_t recv_capacity;
  uint64_t ll_bytes;
  uint32_t transfer;
  uint32_t protocol;
};
}  // namespace

StatusOr<AllToAllV> AllToAllV::create(Bootstrap& boot, int device, const Options& options, Deadline deadline) {
  const int n = boot.size();
  if (n > kMaxRanks) {
    return PEERLAB_INVALID_ARGUMENT("alltoallv spans at most " + std::to_string(kMaxRanks) + " ranks, job has " +
                                    std::to_string(n));
  }
  if (options.elem_bytes == 0) return PEERLAB_INVALID_ARGUMENT("alltoallv: elem_bytes must be at least 1");
  if (options.timeout_ms <= 0) return PEERLAB_INVALID_ARGUMENT("alltoallv: timeout_ms must be positive");
  const uint64_t limit = (uint64_t{1} << 46) / options.elem_bytes;
  if (options.send_capacity > limit || options.recv_capacity > limit) {
    return PEERLAB_INVALID_ARGUMENT("alltoallv: capacities of " + std::to_string(options.send_capacity) + "/" +
                                    std::to_string(options.recv_capacity) + " elements of " +
                                    std::to_string(options.elem_bytes) + " bytes are too large");
  }
  Protocol protocol = options.protocol;
  if (protocol == Protocol::kAuto) {
    protocol = options.transfer == Transfer::kPull ? Protocol::kTwoPhase : Protocol::kFused;
  }
  if (protocol != Protocol::kFused && protocol != Protocol::kTwoPhase) {
    return PEERLAB_INVALID_ARGUMENT("alltoallv: unknown protocol " +
                                    std::to_string(static_cast<uint32_t>(options.protocol)));
  }
  if (protocol == Protocol::kFused && options.transfer == Transfer::kPull) {
    return PEERLAB_INVALID_ARGUMENT("alltoallv: the fused protocol pushes; pull needs Protocol::kTwoPhase or kAuto");
  }
  if (options.ll_max_bytes > kMaxLlMaxBytes) {
    return PEERLAB_INVALID_ARGUMENT("alltoallv: ll_max_bytes " + std::to_string(options.ll_max_bytes) +
                                    " is above the limit of " + std::to_string(kMaxLlMaxBytes));
  }
  if (options.chunk_bytes % 16 != 0) {
    return PEERLAB_INVALID_ARGUMENT("alltoallv: chunk_bytes " + std::to_string(options.chunk_bytes) +
                                    " is not a multiple of 16");
  }
  // No segment of a valid call is larger than the send buffer: slots need not be either.
  const uint64_t ll_bytes = protocol == Protocol::kFused
                                ? std::min<uint64_t>(options.ll_max_bytes, options.send_capacity * options.elem_bytes)
                                : 0;
  // Every rank must agree on sizes and protocol: a receiver smaller than its senders think would be overrun.
  SharedOptions mine{options.elem_bytes,
                     options.send_capacity,
                     options.recv_capacity,
                     ll_bytes,
                     static_cast<uint32_t>(options.transfer),
                     static_cast<uint32_t>(protocol)};
  std::vector<SharedOptions> all(static_cast<size_t>(n));
  PEERLAB_RETURN_IF_ERROR(boot.allgather(&mine, all.data(), sizeof(mine), deadline));
  for (int r = 0; r < n; ++r) {
    if (std::memcmp(&all[static_cast<size_t>(r)], &mine, sizeof(mine)) != 0) {
      return PEERLAB_INVALID_ARGUMENT(
          "alltoallv: rank " + std::to_string(r) +
          " was created with other element size, capacities, LL threshold, transfer mode or protocol than rank " +
          std::to_string(boot.rank()));
    }
  }
  const RegionLayout layout =
      RegionLayout::make(options.send_capacity * options.elem_bytes, options.recv_capacity * options.elem_bytes,
                         protocol == Protocol::kFused ? n : 0, ll_bytes);
  PEERLAB_ASSIGN_OR_RETURN(auto region, SymmetricRegion::create(boot, device, layout.total_bytes, deadline));
  PEERLAB_ASSIGN_OR_RETURN(auto state, allocDevice(device, sizeof(DeviceState)));
  PEERLAB_ASSIGN_OR_RETURN(auto host, allocPinned(sizeof(DeviceStatus)));
  int sms = 0;
  int per_sm = 1;
  {
    PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemset(state->ptr, 0, sizeof(DeviceState))));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)));
    // Load the kernels now: with lazy loading a first launch may wait for the device to go idle, which a peer's
    // spinning call (or a stream waiting on a peer) would postpone until its timeout.
    cudaFuncAttributes attrs{};
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaFuncGetAttributes(&attrs, fusedKernel<1, false>)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaFuncGetAttributes(&attrs, fusedKernel<2, false>)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaFuncGetAttributes(&attrs, fusedKernel<1, true>)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaFuncGetAttributes(&attrs, fusedKernel<2, true>)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaFuncGetAttributes(&attrs, twoPhaseKernel)));
    if (protocol == Protocol::kFused) {
      PEERLAB_RETURN_IF_ERROR(
          PEERLAB_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fusedKernel<2, false>, kThreads, 0)));
      per_sm = std::clamp(per_sm, 1, 2);
    }
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaDeviceSynchronize()));
  }
  const uint64_t biggest = std::max(options.send_capacity, options.recv_capacity) * options.elem_bytes;
  int max_ctas = 0;
  int default_ctas = 0;
  if (protocol == Protocol::kFused) {
    // CTAs spin on peers, so every CTA of a launch must be resident at once: at most what the SMs hold together.
    // By default one CTA per SM for large calls, a few for small ones.
    const int resident = sms * per_sm;
    max_ctas = options.max_ctas > 0 ? std::min(options.max_ctas, resident) : resident;
    const uint64_t by_size = (biggest + kFusedBytesPerCta - 1) / kFusedBytesPerCta;
    default_ctas = static_cast<int>(std::clamp<uint64_t>(by_size, std::min(n, max_ctas), std::min(sms, max_ctas)));
  } else {
    // One resident CTA per SM at most: CTAs spin on peers, so every CTA of a launch must be able to run at once.
    max_ctas = std::max(n, options.max_ctas > 0 ? std::min(options.max_ctas, sms) : sms);
    const int by_size = static_cast<int>(std::min<uint64_t>((biggest + kBytesPerCta - 1) / kBytesPerCta, max_ctas));
    default_ctas = std::clamp(by_size, n, max_ctas);
  }
  return AllToAllV(options, protocol, layout, std::move(region), std::move(state), std::move(host), default_ctas,
                   max_ctas, sms, options.programmatic_launch && programmaticLaunchSupported(device));
}

KernelArgs AllToAllV::kernelArgs(const int64_t* send_counts, int64_t* recv_counts, int64_t* recv_offsets) const {
  KernelArgs a{};
  a.region = region_.view();
  a.send_offset = layout_.send_offset;
  a.recv_offset = layout_.recv_offset;
  a.elem_bytes = options_.elem_bytes;
  a.send_capacity = options_.send_capacity;
  a.recv_capacity = options_.recv_capacity;
  a.send_counts = send_counts;
  a.recv_counts = recv_counts;
  a.recv_offsets = recv_offsets;
  a.state = static_cast<DeviceState*>(state_->ptr);
  a.timeout_ns = static_cast<uint64_t>(options_.timeout_ms) * 1'000'000ull;
  a.staging_offset = layout_.staging_offset;
  a.slot_stride = layout_.slot_stride;
  a.ll_bytes = protocol_ == Protocol::kFused ? llBytes() : 0;
  a.chunk_bytes = options_.chunk_bytes;
  a.queue_in_step = options_.queue_in_step ? 1u : 0u;
  a.queue_min_bytes = options_.queue_min_bytes;
  a.transfer = static_cast<uint32_t>(options_.transfer);
  a.protocol = static_cast<uint32_t>(protocol_);
  a.trace = trace_;
  return a;
}

uint64_t AllToAllV::llBytes() const {
  return (layout_.slot_stride / 16 - kLlHeaderWords) * 8;
}

bool AllToAllV::smallKernel() const {
  if (protocol_ != Protocol::kFused || !options_.small_kernel) return false;
  return options_.send_capacity <= llBytes() / options_.elem_bytes;
}

int AllToAllV::gridFor(int ctas) const {
  // Two-phase: one CTA per segment at least; fused: any grid works.
  const int floor = protocol_ == Protocol::kFused ? 1 : size();
  return std::max(floor, ctas > 0 ? std::min(ctas, max_ctas_) : default_ctas_);
}

Status AllToAllV::run(cudaStream_t stream, const int64_t* send_counts, int64_t* recv_counts, int64_t* recv_offsets,
                      int ctas) {
  if (!state_) return PEERLAB_INVALID_ARGUMENT("alltoallv: run() after close()");
  if (send_counts == nullptr || recv_counts == nullptr || recv_offsets == nullptr) {
    return PEERLAB_INVALID_ARGUMENT("alltoallv: null counts or offsets pointer");
  }
  const bool fused = protocol_ == Protocol::kFused;
  const int grid = gridFor(ctas);
  const KernelArgs args = kernelArgs(send_counts, recv_counts, recv_offsets);
  auto launch = [&]() -> cudaError_t {
    const dim3 g(static_cast<unsigned>(grid));
    const dim3 b(kThreads);
    const bool small = fused && smallKernel();
    if (small && grid > sms_) return launchKernel(fusedKernel<2, true>, g, b, stream, programmatic_, args);
    if (small) return launchKernel(fusedKernel<1, true>, g, b, stream, programmatic_, args);
    if (fused && grid > sms_) return launchKernel(fusedKernel<2, false>, g, b, stream, programmatic_, args);
    if (fused) return launchKernel(fusedKernel<1, false>, g, b, stream, programmatic_, args);
    return launchKernel(twoPhaseKernel, g, b, stream, programmatic_, args);
  };
  const char* what = fused ? "alltoallv fusedKernel" : "alltoallv twoPhaseKernel";
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) (void)cudaGetLastError();
  cudaError_t err = cudaSuccess;
  if (current != device()) {
    PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device()));
    err = launch();
  } else {
    err = launch();
  }
  last_stream_ = stream;
  return PEERLAB_CUDA_LAUNCHED(err, what);
}

Status AllToAllV::checkStatus(cudaStream_t stream, Deadline deadline) {
  if (!state_) return PEERLAB_INVALID_ARGUMENT("alltoallv: checkStatus() after close()");
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device()));
  auto* st = static_cast<DeviceState*>(state_->ptr);
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(
      cudaMemcpyAsync(host_status_->ptr, &st->status, sizeof(DeviceStatus), cudaMemcpyDeviceToHost, stream)));
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemsetAsync(&st->status, 0, sizeof(DeviceStatus), stream)));
  PEERLAB_RETURN_IF_ERROR(waitStream(stream, deadline, "alltoallv status"));
  DeviceStatus s;
  std::memcpy(&s, host_status_->ptr, sizeof(s));
  return statusFromDevice(s, options_.elem_bytes);
}

Status AllToAllV::checkStatus(Deadline deadline) {
  return checkStatus(last_stream_, deadline);
}

Status AllToAllV::drain(Deadline deadline) {
  if (last_stream_ == nullptr) return Status::ok();
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device()));
  return waitStream(last_stream_, deadline, "alltoallv teardown");
}

Status AllToAllV::close(Bootstrap& boot, Deadline deadline) {
  if (!state_) return Status::ok();
  Status st = drain(deadline);
  Status closed = region_.close(boot, deadline);
  state_.reset();
  host_status_.reset();
  last_stream_ = nullptr;
  return st.isOk() ? closed : st;
}

Status statusFromDevice(const DeviceStatus& s, size_t elem_bytes) {
  const std::string call = "alltoallv call " + std::to_string(s.epoch) + ": ";
  switch (s.code) {
    case kDeviceOk:
      return Status::ok();
    case kDeviceTimeout:
      if (s.what == kWhatLaunch) {
        return PEERLAB_TIMEOUT(call + "rank " + std::to_string(s.rank) +
                               ": not every CTA of the launch started in time (is another kernel holding the SMs?)");
      }
      return PEERLAB_TIMEOUT(call + "rank " + std::to_string(s.rank) + " did not arrive in time (waiting for its " +
                             (s.what == kWhatCounts    ? "send counts"
                              : s.what == kWhatPayload ? "payload"
                                                       : "completion flag") +
                             ")");
    case kDeviceOverflow:
      return PEERLAB_INVALID_ARGUMENT(call + "rank " + std::to_string(s.rank) + " would receive " +
                                      std::to_string(s.a) + " elements (" + std::to_string(s.a * elem_bytes) +
                                      " bytes), its receive capacity is " + std::to_string(s.b) +
                                      " elements; nothing was written");
    case kDeviceBadInput:
      if (s.what == kWhatSendTotal) {
        return PEERLAB_INVALID_ARGUMENT(call + "rank " + std::to_string(s.rank) + " sends " + std::to_string(s.a) +
                                        " elements in total, its send capacity is " + std::to_string(s.b) +
                                        " elements; nothing was written");
      }
      return PEERLAB_INVALID_ARGUMENT(call + "rank " + std::to_string(s.rank) + "'s send count for rank " +
                                      std::to_string(s.a) + " is negative or not below 2^32-1; nothing was written");
    default:
      return PEERLAB_INTERNAL(call + "unknown device status code " + std::to_string(s.code));
  }
}

}  // namespace peerlab::alltoallv
