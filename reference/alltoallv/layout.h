#pragma once
/// Layout math of the alltoallv, shared by the kernels (device) and the tests and references (host): offsets from a
/// count matrix, how the CTAs of one call are split between peer segments, how one segment copy is cut into a byte
/// head, a 16-byte vector body and a byte tail, and how it is cut into work-queue chunks; the LL slot format.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>

#include "reference/core/unaligned.h"

namespace peerlab::alltoallv {

/// Most ranks one alltoallv spans (one NVLink domain of 8 GPUs); checked at run time.
inline constexpr int kMaxRanks = 8;

/// Count matrix `m[src * n + dst]` in elements: what `src` sends to `dst`.
/// Offset (elements) of src's segment for dst inside src's send buffer: sum of m[src][d] for d < dst.
__host__ __device__ inline uint64_t sendOffset(const uint64_t* m, int n, int src, int dst) {
  uint64_t o = 0;
  for (int d = 0; d < dst; ++d)
    o += m[src * n + d];
  return o;
}
/// Offset (elements) of src's segment inside dst's receive buffer: sum of m[s][dst] for s < src.
__host__ __device__ inline uint64_t recvOffset(const uint64_t* m, int n, int src, int dst) {
  uint64_t o = 0;
  for (int s = 0; s < src; ++s)
    o += m[s * n + dst];
  return o;
}
/// Elements dst receives in total.
__host__ __device__ inline uint64_t recvTotal(const uint64_t* m, int n, int dst) {
  return recvOffset(m, n, n, dst);
}
/// Elements src sends in total.
__host__ __device__ inline uint64_t sendTotal(const uint64_t* m, int n, int src) {
  return sendOffset(m, n, src, n);
}

/// Weight of the local segment when CTAs are shared out: a local copy runs at HBM speed, several times NVLink's.
inline constexpr uint64_t kSelfWeightDivisor = 4;

/// Splits `ctas` CTAs between `n` segments of `bytes[i]` bytes (segment `self` weighted down): every non-empty
/// segment gets at least one CTA when ctas >= its count, the rest go by largest remainder. Deterministic, integer
/// only, so every CTA of every rank computes the same split. Writes `out[i]` (sum == ctas when any bytes).
__host__ __device__ inline void splitCtas(const uint64_t* bytes, int n, int self, int ctas, int* out) {
  uint64_t w[kMaxRanks];
  uint64_t total = 0;
  int nonempty = 0;
  for (int i = 0; i < n; ++i) {
    w[i] = bytes[i] == 0 ? 0 : (i == self ? bytes[i] / kSelfWeightDivisor + 1 : bytes[i]);
    total += w[i];
    nonempty += bytes[i] ? 1 : 0;
    out[i] = 0;
  }
  if (total == 0 || ctas <= 0) return;
  // One CTA for each non-empty segment first (or as many as there are CTAs, biggest first).
  int left = ctas;
  if (ctas < nonempty) {
    for (int k = 0; k < ctas; ++k) {
      int best = -1;
      for (int i = 0; i < n; ++i)
        if (w[i] && out[i] == 0 && (best < 0 || w[i] > w[best])) best = i;
      out[best] = 1;
    }
    return;
  }
  for (int i = 0; i < n; ++i)
    if (w[i]) {
      out[i] = 1;
      --left;
    }
  // The rest in proportion to the weights, then by largest remainder (ties: lower index).
  uint64_t rem[kMaxRanks];
  int given = 0;
  for (int i = 0; i < n; ++i) {
    // Weights are bytes (< 2^40 in practice) and left < 2^16: the product fits in 64 bits.
    const uint64_t num = w[i] * static_cast<uint64_t>(left);
    out[i] += static_cast<int>(num / total);
    given += static_cast<int>(num / total);
    rem[i] = num % total;
  }
  for (int k = given; k < left; ++k) {
    int best = -1;
    for (int i = 0; i < n; ++i)
      if (w[i] && (best < 0 || rem[i] > rem[best])) best = i;
    out[best] += 1;
    rem[best] = 0;
  }
}

/// How one segment copy of `bytes` from `src` to `dst` is cut: bytes one by one until dst is 16-byte aligned (head),
/// whole 16-byte chunks (body), the rest one by one (tail). `shift` is src's misalignment once dst is aligned: 0
/// means plain vector copies; otherwise the body realigns source vectors in registers.
struct CopyPlan {
  uint64_t head = 0;
  uint64_t chunks = 0;
  uint64_t tail = 0;
  uint32_t shift = 0;
};

__host__ __device__ inline CopyPlan planCopy(uint64_t src_addr, uint64_t dst_addr, uint64_t bytes) {
  CopyPlan p;
  p.head = (16 - (dst_addr & 15)) & 15;
  if (p.head > bytes) p.head = bytes;
  const uint64_t rest = bytes - p.head;
  p.chunks = rest / 16;
  p.tail = rest % 16;
  p.shift = static_cast<uint32_t>((src_addr + p.head) & 15);
  return p;
}

/// Body chunks [begin, end) that piece `i` of `pieces` copies: contiguous, as even as possible.
__host__ __device__ inline void pieceRange(uint64_t chunks, int pieces, int i, uint64_t* begin, uint64_t* end) {
  const uint64_t base = chunks / static_cast<uint64_t>(pieces);
  const uint64_t extra = chunks % static_cast<uint64_t>(pieces);
  const uint64_t ui = static_cast<uint64_t>(i);
  *begin = ui * base + (ui < extra ? ui : extra);
  *end = *begin + base + (ui < extra ? 1 : 0);
}

/// Bytes that piece `i` of `pieces` of a copy cut as `p` moves: its body chunks, plus the head (piece 0) and the
/// tail (the last piece).
__host__ __device__ inline uint64_t pieceBytes(const CopyPlan& p, int pieces, int i) {
  uint64_t b = 0;
  uint64_t e = 0;
  pieceRange(p.chunks, pieces, i, &b, &e);
  return (e - b) * 16 + (i == 0 ? p.head : 0) + (i == pieces - 1 ? p.tail : 0);
}

/// Queue chunks of a segment copy cut as `p` (`bytes` in total) when a chunk holds `units` 16-byte body units: the
/// body split in runs of `units`, at least one chunk when there is any byte (chunk 0 copies the head, the last chunk
/// the tail), none for an empty segment.
__host__ __device__ inline uint64_t queueChunks(const CopyPlan& p, uint64_t bytes, uint64_t units) {
  if (bytes == 0) return 0;
  if (p.chunks == 0) return 1;
  return (p.chunks + units - 1) / units;
}
/// Body units [begin, end) of queue chunk `c` (see queueChunks).
__host__ __device__ inline void queueChunkRange(const CopyPlan& p, uint64_t units, uint64_t c, uint64_t* begin,
                                                uint64_t* end) {
  const uint64_t b = c * units;
  *begin = b < p.chunks ? b : p.chunks;
  *end = b + units < p.chunks ? b + units : p.chunks;
}

/// Smallest and largest queue chunk the automatic choice picks.
inline constexpr uint64_t kMinChunkBytes = 16 * 1024;
inline constexpr uint64_t kMaxChunkBytes = 1024 * 1024;
/// Chunk size of the work queue when none is configured: about 16 chunks per CTA so that CTAs finishing early keep
/// taking work until the end (a power of two in [kMinChunkBytes, kMaxChunkBytes]).
__host__ __device__ inline uint64_t autoChunkBytes(uint64_t total_bytes, int ctas) {
  const uint64_t per = total_bytes / (16ull * static_cast<uint64_t>(ctas > 0 ? ctas : 1));
  uint64_t c = kMinChunkBytes;
  while (c < per && c < kMaxChunkBytes)
    c *= 2;
  return c;
}

/// Low-latency (LL) slots of the fused protocol. A sender writes 16-byte words {data lo, tag, data hi, tag} into the
/// receiver's slot for it; a word is complete once both tags equal the call's tag (each 8-byte half is written
/// atomically), so the data needs neither a fence nor a separate completion flag. The first kLlHeaderWords words of
/// a slot carry the sender's row of counts (two 32-bit counts per word), the payload follows at 8 bytes per word.
inline constexpr uint64_t kLlHeaderWords = kMaxRanks / 2;
/// Header words in use for `n` ranks.
__host__ __device__ inline uint64_t llHeaderWords(int n) {
  return (static_cast<uint64_t>(n) + 1) / 2;
}
/// LL words that carry `bytes` of payload.
__host__ __device__ inline uint64_t llWords(uint64_t bytes) {
  return (bytes + 7) / 8;
}
/// Bytes of one slot holding segments of up to `ll_bytes`.
__host__ __device__ inline uint64_t llSlotBytes(uint64_t ll_bytes) {
  return 16 * (kLlHeaderWords + llWords(ll_bytes));
}
/// Tag of call `epoch` (>= 1): never 0 (a zeroed slot never matches), and calls two apart, which share a slot, differ.
__host__ __device__ inline uint32_t llTag(uint64_t epoch) {
  return static_cast<uint32_t>((epoch - 1) % 0xFFFFFFFFull) + 1;
}

/// Data of header word `k` of a row of `n` counts: counts 2k (low half) and 2k + 1 (high half, 0 past the end).
__host__ __device__ inline uint64_t llHeaderData(const uint64_t* row, int n, uint64_t k) {
  const uint64_t hi = 2 * k + 1 < static_cast<uint64_t>(n) ? row[2 * k + 1] : 0;
  return row[2 * k] | hi << 32;
}

/// The LL words of one call as one grid-wide list: peers in rotated order j = 1..n-1 (sending to (me + j) % n,
/// receiving from (me - j) mod n, so ranks start on different peers), peer j's words at [first[j], first[j + 1]).
struct LlList {
  uint64_t first[kMaxRanks + 1];
  uint64_t words;
};
__host__ __device__ inline int llSendPeer(int me, int j, int n) {
  return (me + j) % n;
}
__host__ __device__ inline int llRecvPeer(int me, int j, int n) {
  return (me + n - j) % n;
}
/// Sender side, from this rank's row alone: every peer gets the header words, plus its segment's payload words when
/// the row is valid and the segment has at most `ll_bytes`. Writes `*out` (kernels pass shared memory: a list built
/// in a local variable lives in the thread's stack, and on the device every step of the sum would wait for a store
/// and a load of local memory).
__host__ __device__ inline void llSendListInto(const uint64_t* row, bool row_ok, int n, int me, uint64_t elem_bytes,
                                               uint64_t ll_bytes, LlList* out) {
  uint64_t words = 0;
  for (int j = 1; j < n; ++j) {
    const uint64_t bytes = row_ok ? row[llSendPeer(me, j, n)] * elem_bytes : 0;
    out->first[j] = words;
    words += llHeaderWords(n) + (row_ok && bytes <= ll_bytes ? llWords(bytes) : 0);
  }
  out->first[0] = 0;
  out->first[n > 1 ? n : 1] = words;
  out->words = words;
}
__host__ __device__ inline LlList llSendList(const uint64_t* row, bool row_ok, int n, int me, uint64_t elem_bytes,
                                             uint64_t ll_bytes) {
  LlList l{};
  llSendListInto(row, row_ok, n, me, elem_bytes, ll_bytes, &l);
  return l;
}
/// Receiver side, from a valid matrix: the payload words of every source whose segment has at most `ll_bytes`.
__host__ __device__ inline void llRecvListInto(const uint64_t* m, int n, int me, uint64_t elem_bytes, uint64_t ll_bytes,
                                               LlList* out) {
  uint64_t words = 0;
  for (int j = 1; j < n; ++j) {
    const uint64_t bytes = m[llRecvPeer(me, j, n) * n + me] * elem_bytes;
    out->first[j] = words;
    words += bytes <= ll_bytes ? llWords(bytes) : 0;
  }
  out->first[0] = 0;
  out->first[n > 1 ? n : 1] = words;
  out->words = words;
}
__host__ __device__ inline LlList llRecvList(const uint64_t* m, int n, int me, uint64_t elem_bytes, uint64_t ll_bytes) {
  LlList l{};
  llRecvListInto(m, n, me, elem_bytes, ll_bytes, &l);
  return l;
}
/// The peer index j (1..n-1) that word `w` (< l.words) belongs to.
__host__ __device__ inline int llPeerIndex(const LlList& l, int n, uint64_t w) {
  int j = 1;
  while (j + 1 < n && w >= l.first[j + 1])
    ++j;
  return j;
}

/// The work queue of one rank in one call: its peer segments above the LL threshold (rotated order), then its local
/// copy; `self` is the local copy's job or -1.
struct QueueJobs {
  int rank[kMaxRanks];
  uint64_t bytes[kMaxRanks];
  int count;
  int self;
};
__host__ __device__ inline QueueJobs queueJobs(const uint64_t* m, int n, int me, uint64_t elem_bytes,
                                               uint64_t ll_bytes) {
  QueueJobs q{};
  q.self = -1;
  for (int j = 1; j < n; ++j) {
    const int d = llSendPeer(me, j, n);
    if (m[me * n + d] * elem_bytes > ll_bytes) {
      q.rank[q.count] = d;
      q.bytes[q.count++] = m[me * n + d] * elem_bytes;
    }
  }
  if (m[me * n + me] != 0) {
    q.self = q.count;
    q.rank[q.count] = me;
    q.bytes[q.count++] = m[me * n + me] * elem_bytes;
  }
  return q;
}
/// Whether a call's queue goes through the peers in step: every off-diagonal segment of the matrix is large and
/// within 1/8 of the largest (the same answer on every rank, which all read the same matrix). Uneven traffic keeps
/// the spread start: in step, two senders whose turns meet at one receiver would halve each other while the other
/// links idle (docs/alltoallv.md).
__host__ __device__ inline bool queueInStep(const uint64_t* m, int n, uint64_t elem_bytes, uint64_t ll_bytes) {
  uint64_t lo = ~0ull;
  uint64_t hi = 0;
  for (int s = 0; s < n; ++s) {
    for (int d = 0; d < n; ++d) {
      if (s == d) continue;
      const uint64_t b = m[s * n + d] * elem_bytes;
      lo = b < lo ? b : lo;
      hi = b > hi ? b : hi;
    }
  }
  return n > 2 && lo > ll_bytes && hi - lo <= hi / 8;
}
/// The job CTA `cta` of `ctas` starts on. In step (see queueInStep): the local copy, if any, gets its byte-weighted
/// share of CTAs (the last ones) and every other CTA starts on the first peer job; CTAs move to the next job together
/// as each runs dry. With every rank doing the same, each step of the rotation is a permutation (a GPU sends to one
/// peer and receives from one), which the links carry faster than traffic spread over every peer at once.
/// Spread: CTAs shared out by bytes so every job has CTAs from the start. Only for q.count > 0.
__host__ __device__ inline int queueStartJob(const QueueJobs& q, int ctas, int cta, bool in_step) {
  int g[kMaxRanks];
  splitCtas(q.bytes, q.count, q.self, ctas, g);
  if (in_step) {
    if (q.self > 0 && cta >= ctas - g[q.self]) return q.self;
    return 0;
  }
  for (int i = 0, cum = 0; i < q.count; cum += g[i], ++i) {
    if (cta < cum + g[i]) return i;
  }
  return cta % q.count;
}

/// Fused, large segments without the work queue (Options::queue_min_bytes): CTAs for each job of `q` in proportion
/// to its bytes (splitCtas), one contiguous piece each, about kSplitBytesPerCta per CTA (at least one CTA per job, at
/// most `ctas`). Writes the job and the piece of CTA `cta` (job -1: no piece) and the pieces of its job.
inline constexpr uint64_t kSplitBytesPerCta = 64 * 1024;
__host__ __device__ inline void splitJob(const QueueJobs& q, int ctas, int cta, int* job, int* piece, int* pieces) {
  *job = -1;
  *piece = 0;
  *pieces = 0;
  uint64_t total = 0;
  for (int i = 0; i < q.count; ++i)
    total += q.bytes[i];
  if (total == 0 || ctas <= 0) return;
  uint64_t want = (total + kSplitBytesPerCta - 1) / kSplitBytesPerCta;
  if (want < static_cast<uint64_t>(q.count)) want = static_cast<uint64_t>(q.count);
  const int active = want < static_cast<uint64_t>(ctas) ? static_cast<int>(want) : ctas;
  int g[kMaxRanks];
  splitCtas(q.bytes, q.count, q.self, active, g);
  for (int i = 0, cum = 0; i < q.count; cum += g[i], ++i) {
    if (cta < cum + g[i]) {
      *job = i;
      *piece = cta - cum;
      *pieces = g[i];
      return;
    }
  }
}

/// Counts travel as 64-bit words that carry their own epoch tag (low 32 bits: count, high 32: epoch), so a reader
/// needs no separate flag: an 8-byte store is single-copy atomic. Counts must stay below kCountInvalid.
inline constexpr uint32_t kCountInvalid = 0xFFFFFFFFu;
__host__ __device__ inline uint64_t packCount(uint32_t epoch, uint64_t count) {
  const uint32_t c = count >= kCountInvalid ? kCountInvalid : static_cast<uint32_t>(count);
  return (static_cast<uint64_t>(epoch) << 32) | c;
}
__host__ __device__ inline uint32_t countEpoch(uint64_t word) {
  return static_cast<uint32_t>(word >> 32);
}
__host__ __device__ inline uint32_t countValue(uint64_t word) {
  return static_cast<uint32_t>(word);
}

}  // namespace peerlab::alltoallv
