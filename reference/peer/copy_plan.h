#pragma once
/// Host-side planning for peer copies: argument validation, path selection, the staged copy's chunk plan, the
/// head/body/tail split of the SM copy kernels and their launch configuration. Pure functions, tested on the CPU.

#include <cuda_runtime_api.h>
#include <vector_functions.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "reference/core/status.h"

namespace peerlab::peer {

/// How a peer copy moves its bytes.
enum class CopyPath {
  kAuto,        ///< copy engine over peer access, host-staged when peer access is impossible
  kCopyEngine,  ///< cudaMemcpyPeerAsync with peer access enabled (the DMA engines, no SMs)
  kSmPull,      ///< a kernel on the destination GPU loads from the source over NVLink/PCIe
  kSmPush,      ///< a kernel on the source GPU stores into the destination
  kStaged,      ///< through pinned host bounce buffers, double-buffered (no peer access needed)
};

/// "auto", "ce", "sm_pull", "sm_push", "staged".
std::string_view copyPathName(CopyPath path);
/// Inverse of copyPathName; `invalid_argument` names the accepted values.
StatusOr<CopyPath> parseCopyPath(std::string_view name);

/// The arguments of one copy, as the caller gave them.
struct CopyRequest {
  const void* dst = nullptr;
  int dst_device = -1;
  const void* src = nullptr;
  int src_device = -1;
  size_t bytes = 0;
  CopyPath path = CopyPath::kAuto;
};

/// Checks a request against `device_count` visible devices: null pointers, bytes == 0, device ordinals out of range,
/// a peer path (SM pull/push, staged) between a device and itself, overlapping ranges on one device and address
/// wrap-around each give `invalid_argument` with a one-line message naming the input.
Status validateCopy(const CopyRequest& request, int device_count);

/// The path a copy takes. `peer` is the outcome of enabling peer access between the two devices (ignored for one
/// device and for kStaged): kAuto falls back to kStaged when it is `unavailable`; the explicit peer paths return it.
StatusOr<CopyPath> selectPath(CopyPath requested, bool same_device, const Status& peer);

/// The staged copy's chunking: `count` chunks of `chunk` bytes, the last one `last` bytes (0 < last <= chunk).
/// Chunk i uses bounce buffer i % 2, so the copy-out of chunk i+1 overlaps the copy-in of chunk i.
struct StagedPlan {
  size_t chunk = 0;
  size_t count = 0;
  size_t last = 0;
  size_t offset(size_t i) const { return i * chunk; }
  size_t size(size_t i) const { return i + 1 == count ? last : chunk; }
};
/// Smallest chunk worth a copy of its own (below it, per-chunk overhead dominates).
inline constexpr size_t kMinStagingChunk = 64 << 10;
/// Plan for `bytes` with bounce buffers of `max_chunk` bytes: copies of 4 x kMinStagingChunk or more are cut into at
/// least four chunks so that the two directions overlap; smaller ones go in one chunk. Chunks are 4 KiB multiples.
StagedPlan stagedPlan(size_t bytes, size_t max_chunk);

/// How the SM copy kernels cut a copy: `head` bytes copied one by one until the destination is 16-byte aligned,
/// `vecs` 16-byte vectors stored aligned, `tail` bytes copied one by one. `shift` is the source's misalignment
/// relative to the destination after the head (0: both aligned, plain vector loads; 1..15: aligned vector loads from
/// src + head - shift, recombined by funnel shifts). The plan never loads a byte outside [src, src + bytes): the
/// first or last vector moves to the head or tail when its aligned source block would reach outside.
struct VectorSplit {
  uint64_t head = 0;
  uint64_t vecs = 0;
  uint64_t tail = 0;
  uint32_t shift = 0;
};
VectorSplit splitForVectors(uintptr_t dst, uintptr_t src, uint64_t bytes);

/// Output vector from the aligned source blocks `a` (lower addresses) and `b` (the next block) for a source
/// misalignment of `shift` bytes (1..15): bytes shift..15 of `a`, then bytes 0..shift-1 of `b`.
__host__ __device__ inline uint32_t funnelRight(uint32_t lo, uint32_t hi, uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __funnelshift_r(lo, hi, bits);
#else
  return static_cast<uint32_t>(((static_cast<uint64_t>(hi) << 32) | lo) >> (bits & 31));
#endif
}
template <int kWordShift>
__host__ __device__ inline uint4 funnelVector(const uint4& a, const uint4& b, uint32_t bits) {
  static_assert(kWordShift >= 0 && kWordShift <= 3, "word shift is shift / 4");
  const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  return make_uint4(
      funnelRight(w[kWordShift], w[kWordShift + 1], bits), funnelRight(w[kWordShift + 1], w[kWordShift + 2], bits),
      funnelRight(w[kWordShift + 2], w[kWordShift + 3], bits), funnelRight(w[kWordShift + 3], w[kWordShift + 4], bits));
}

/// Which kernel an SM-path copy runs. kVector: every thread moves 16-byte vectors through registers (any alignment).
/// kBulk: one thread per block drives the Hopper bulk-copy engine (cp.async.bulk, global -> shared -> global) through
/// a ring of shared-memory stages; it needs compute capability 9.0 and source and destination equally aligned modulo
/// 16, and copies that do not qualify run the vector kernel. kAuto: bulk for qualifying copies of at least
/// kBulkMinBytes, vector otherwise.
enum class SmKernel { kAuto, kVector, kBulk };
/// "auto", "vec", "bulk".
std::string_view smKernelName(SmKernel kernel);

/// Launch configuration of the SM copy kernels. Vector kernel: each thread loads `unroll` independent 16-byte
/// vectors before storing them; a warp moves 32 x unroll vectors per step; the grid is SMs x blocks_per_sm blocks of
/// threads_per_block threads (fewer when the copy is small). `hints`: 0 plain ld/st; 1 loads with L1::no_allocate and
/// an L2::256B prefetch, stores with L1::no_allocate (streaming data never reused by the copying SM), all `unroll`
/// loads in flight before the first store; 2 the same loads through the read-only path (ld.global.nc), which lets
/// the compiler start stores after half of the loads (about unroll / 2 in flight, fewer registers). Bulk kernel:
/// blocks of one warp, bulk_blocks_per_sm per SM (fewer when their shared memory does not fit), each streaming its
/// share of bulk_kib-KiB chunks through bulk_stages shared-memory buffers. `sms` caps the SMs either kernel uses
/// (0: all of them).
struct SmCopyConfig {
  SmKernel kernel = SmKernel::kAuto;
  int threads_per_block = 512;
  int unroll = 8;
  int blocks_per_sm = 2;
  int hints = 2;
  int sms = 0;
  int bulk_kib = 16;
  int bulk_stages = 4;
  int bulk_blocks_per_sm = 1;
};
/// Unroll factors compiled into the vector kernel.
inline constexpr int kSmCopyUnrolls[] = {2, 4, 8};
/// Bulk kernel limits: stages per block, and the shared memory of one block (stages x chunk).
inline constexpr int kMaxBulkStages = 8;
inline constexpr int kMaxBulkSmemKib = 192;
/// Smallest copy that kAuto sends to the bulk kernel (below it the vector kernel's spread over more SMs wins).
inline constexpr uint64_t kBulkMinBytes = uint64_t{256} << 10;
/// threads_per_block a multiple of 32 in [64, 1024], unroll one of kSmCopyUnrolls, blocks_per_sm in [1, 32], hints
/// 0, 1 or 2, sms in [0, 4096], bulk_kib in [1, 64], bulk_stages in [2, kMaxBulkStages] with bulk_stages x bulk_kib
/// at most kMaxBulkSmemKib, bulk_blocks_per_sm in [1, 8].
Status validateSmCopyConfig(const SmCopyConfig& config);
/// Parses "kernel=bulk,threads=512,unroll=8,blocks_per_sm=2,hints=2,sms=0,bulk_kib=16,bulk_stages=4,
/// bulk_blocks_per_sm=1" (any subset, any order; the rest keep their defaults).
StatusOr<SmCopyConfig> parseSmCopyConfig(std::string_view text);
/// Every key, in the order above; parseSmCopyConfig reads it back.
std::string formatSmCopyConfig(const SmCopyConfig& config);

/// The kernel a copy runs: `bulk_capable` says whether the device has the bulk-copy engine (compute capability 9.0
/// or newer); `split` is the copy's splitForVectors.
SmKernel resolveSmKernel(const SmCopyConfig& config, bool bulk_capable, const VectorSplit& split);

/// Grid of one SM copy: `blocks` blocks of `threads` threads on `sms` SMs (the scheduler spreads blocks one per SM
/// first, so a grid smaller than the SM count occupies `blocks` SMs); `smem` bytes of dynamic shared memory per
/// block and `chunk` bytes per bulk copy (bulk kernel only).
struct SmLaunch {
  int blocks = 1;
  int threads = 0;
  int sms = 1;
  uint32_t smem = 0;
  uint32_t chunk = 0;
};
/// Plan for `vecs` 16-byte vectors on a device with `sm_count` SMs, for the resolved `kernel` (kVector or kBulk).
SmLaunch planSmLaunch(const SmCopyConfig& config, int sm_count, uint64_t vecs, SmKernel kernel = SmKernel::kVector);

/// Shared memory of one SM available to blocks (Hopper: 228 KiB, 1 KiB of it reserved per resident block).
inline constexpr uint32_t kSmemPerSm = 228u << 10;
inline constexpr uint32_t kSmemReservedPerBlock = 1u << 10;

/// The bulk kernel's schedule for one block: chunks 0..n-1 (the block's share, in order) through `stages` buffers.
/// Chunk k lives in stage k % stages. The first `stages` loads are issued up front; after storing chunk k, the block
/// waits until every store but the newest has finished reading shared memory (so chunk k - 1's stage is free) and
/// refills that stage with chunk k - 1 + stages. Up to `stages` loads are thus in flight while stores drain.
/// `ops` provides: load(k, stage) (arm the stage's barrier and start the load), waitLoaded(stage, parity) (false
/// when the deadline passed), store(k, stage) (start the store and commit it as one group), waitStoresRead()
/// (all store groups but the newest have read their source) and waitStoresDone() (every store group complete).
/// Returns false when a wait timed out (stores already issued are still waited for). Requires stages >= 2.
template <class Ops>
__host__ __device__ inline bool bulkPipeline(Ops& ops, uint64_t n, uint32_t stages) {
  const uint64_t prologue = n < stages ? n : stages;
  for (uint64_t k = 0; k < prologue; ++k)
    ops.load(k, static_cast<uint32_t>(k));
  bool ok = true;
  uint32_t stage = 0;              // of chunk k
  uint32_t parity = 0;             // of the barrier phase that chunk k's load completes
  uint32_t previous = stages - 1;  // stage of chunk k - 1
  for (uint64_t k = 0; k < n; ++k) {
    if (!ops.waitLoaded(stage, parity)) {
      ok = false;
      break;
    }
    ops.store(k, stage);
    if (k >= 1 && k - 1 + stages < n) {
      ops.waitStoresRead();
      ops.load(k - 1 + stages, previous);
    }
    previous = stage;
    if (++stage == stages) {
      stage = 0;
      parity ^= 1;
    }
  }
  ops.waitStoresDone();
  return ok;
}

/// Chunks of a bulk copy of `body` bytes in `chunk`-byte pieces, and block b's share: chunks b, b + blocks, ...
__host__ __device__ inline uint64_t bulkChunks(uint64_t body, uint32_t chunk) {
  return (body + chunk - 1) / chunk;
}
__host__ __device__ inline uint64_t bulkShare(uint64_t chunks, uint32_t block, uint32_t blocks) {
  return block < chunks ? (chunks - 1 - block) / blocks + 1 : 0;
}

}  // namespace peerlab::peer
