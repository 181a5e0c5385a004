#include "reference/peer/copy.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "reference/core/check.h"
#include "reference/core/device_time.cuh"
#include "reference/core/devices.h"
#include "reference/core/memory.h"
#include "reference/core/scoped.h"
#include "reference/core/wait.h"
#include "reference/peer/peer.h"

namespace peerlab::peer {
namespace {

// What one SM copy kernel needs: the split computed on the host (copy_plan.h).
struct SmCopyView {
  uint8_t* dst;
  const uint8_t* src;
  uint64_t head;
  uint64_t vecs;
  uint64_t tail;
  uint32_t shift;
};
static_assert(std::is_trivially_copyable_v<SmCopyView>);

// kHints (SmCopyConfig::hints): 0 plain; 1 no L1 allocation and a 256-byte L2 fetch, coherent loads (the compiler
// keeps every load of a tile ahead of its stores); 2 the same through the read-only path.
// The L2 prefetch-size qualifier needs sm_80; Turing gets the same loads without it.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define PEERLAB_L2_256B ""
#else
#define PEERLAB_L2_256B ".L2::256B"
#endif

template <int kHints>
__device__ __forceinline__ uint4 loadVec(const uint4* p) {
  uint4 v;
  if constexpr (kHints == 2) {
    // The source is streamed once and not written meanwhile.
    asm volatile("ld.global.nc.L1::no_allocate" PEERLAB_L2_256B ".v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  } else if constexpr (kHints == 1) {
    asm volatile("ld.global.L1::no_allocate" PEERLAB_L2_256B ".v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  } else {
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  }
  return v;
}

template <int kHints>
__device__ __forceinline__ void storeVec(uint4* p, const uint4& v) {
  if constexpr (kHints != 0) {
    asm volatile("st.global.L1::no_allocate.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w));
  } else {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
  }
}

__device__ __forceinline__ uint4 shflDown1(const uint4& v) {
  return make_uint4(__shfl_down_sync(0xffffffffu, v.x, 1), __shfl_down_sync(0xffffffffu, v.y, 1),
                    __shfl_down_sync(0xffffffffu, v.z, 1), __shfl_down_sync(0xffffffffu, v.w, 1));
}

__device__ __forceinline__ uint4 shflLane0(const uint4& v) {
  return make_uint4(__shfl_sync(0xffffffffu, v.x, 0), __shfl_sync(0xffffffffu, v.y, 0),
                    __shfl_sync(0xffffffffu, v.z, 0), __shfl_sync(0xffffffffu, v.w, 0));
}

// Copies head bytes, then `vecs` aligned 16-byte destination vectors, then tail bytes. A warp moves a tile of
// 32 x kUnroll consecutive vectors per step (lane l handles vectors l, l + 32, ...), so every load and store
// instruction of the warp covers 512 contiguous bytes, and each thread has kUnroll loads in flight before its first
// store. kWordShift < 0: source and destination equally aligned. Otherwise the source is read as aligned blocks and
// each output vector joins block v and block v + 1 (funnel shifts by shift bytes); block v + 1 comes from the next
// lane by a shuffle, lane 31 takes it from lane 0 of the next row, and one extra load per tile gives the block after
// the tile. Tiles are distributed over warps grid-stride; the remainder (< one tile) and the bytes are spread over
// all threads.
template <int kUnroll, int kWordShift, int kHints>
__global__ void __launch_bounds__(1024) smCopyKernel(SmCopyView v) {
  constexpr uint64_t kTile = 32ull * kUnroll;
  const uint32_t lane = threadIdx.x & 31u;
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t nthreads = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t nwarps = nthreads >> 5;
  uint4* dst = reinterpret_cast<uint4*>(v.dst + v.head);
  const uint4* src = reinterpret_cast<const uint4*>(v.src + v.head - v.shift);
  const uint32_t bits = (v.shift & 3u) * 8u;
  const uint64_t tiles = v.vecs / kTile;

  for (uint64_t t = tid >> 5; t < tiles; t += nwarps) {
    const uint64_t base = t * kTile + lane;
    uint4 r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      r[u] = loadVec<kHints>(src + base + u * 32);
    if constexpr (kWordShift < 0) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        storeVec<kHints>(dst + base + u * 32, r[u]);
    } else {
      uint4 extra = make_uint4(0, 0, 0, 0);
      if (lane == 31) extra = loadVec<kHints>(src + (t + 1) * kTile);
#pragma unroll
      for (int u = 0; u + 1 < kUnroll; ++u) {
        uint4 next = shflDown1(r[u]);
        const uint4 wrap = shflLane0(r[u + 1]);
        if (lane == 31) next = wrap;
        storeVec<kHints>(dst + base + u * 32, funnelVector<kWordShift>(r[u], next, bits));
      }
      uint4 next = shflDown1(r[kUnroll - 1]);
      if (lane == 31) next = extra;
      storeVec<kHints>(dst + base + (kUnroll - 1) * 32, funnelVector<kWordShift>(r[kUnroll - 1], next, bits));
    }
  }

  for (uint64_t i = tiles * kTile + tid; i < v.vecs; i += nthreads) {
    if constexpr (kWordShift < 0) {
      storeVec<kHints>(dst + i, loadVec<kHints>(src + i));
    } else {
      storeVec<kHints>(dst + i, funnelVector<kWordShift>(loadVec<kHints>(src + i), loadVec<kHints>(src + i + 1), bits));
    }
  }
  for (uint64_t i = tid; i < v.head; i += nthreads)
    v.dst[i] = v.src[i];
  const uint64_t tail_at = v.head + 16 * v.vecs;
  for (uint64_t i = tid; i < v.tail; i += nthreads)
    v.dst[tail_at + i] = v.src[tail_at + i];
}

using SmCopyFn = void (*)(SmCopyView);

template <int kUnroll, int kHints>
SmCopyFn pickShift(uint32_t shift) {
  if (shift == 0) return smCopyKernel<kUnroll, -1, kHints>;
  switch (shift / 4) {
    case 0:
      return smCopyKernel<kUnroll, 0, kHints>;
    case 1:
      return smCopyKernel<kUnroll, 1, kHints>;
    case 2:
      return smCopyKernel<kUnroll, 2, kHints>;
    default:
      return smCopyKernel<kUnroll, 3, kHints>;
  }
}

template <int kHints>
SmCopyFn pickUnroll(int unroll, uint32_t shift) {
  switch (unroll) {
    case 2:
      return pickShift<2, kHints>(shift);
    case 4:
      return pickShift<4, kHints>(shift);
    default:
      return pickShift<8, kHints>(shift);
  }
}

SmCopyFn pickKernel(const SmCopyConfig& config, uint32_t shift) {
  switch (config.hints) {
    case 0:
      return pickUnroll<0>(config.unroll, shift);
    case 1:
      return pickUnroll<1>(config.unroll, shift);
    default:
      return pickUnroll<2>(config.unroll, shift);
  }
}

// What the bulk kernel needs: the destination-aligned body (head and tail bytes are copied by plain threads).
struct SmBulkView {
  uint8_t* dst;
  const uint8_t* src;
  uint64_t head;
  uint64_t body;  // bytes, a multiple of 16, src + head and dst + head 16-byte aligned
  uint64_t tail;
  uint32_t chunk;  // bytes per bulk copy, a multiple of 16
  uint32_t stages;
  uint64_t timeout_ns;
};
static_assert(std::is_trivially_copyable_v<SmBulkView>);

constexpr uint64_t kBulkTimeoutNs = 10'000'000'000ull;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The block's bulk-copy engine driven by one thread: chunk k of the block's share is loaded into stage k % stages
// (completing on that stage's mbarrier) and stored from there as one bulk group (bulkPipeline in copy_plan.h).
struct BulkOps {
  const SmBulkView* v;
  uint32_t smem;  // shared-window address of stage 0
  uint32_t bars;  // shared-window address of stage 0's mbarrier (8 bytes each)
  uint64_t first;
  uint64_t step;
  uint64_t deadline;

  __device__ uint64_t offset(uint64_t k) const { return (first + k * step) * v->chunk; }
  __device__ uint32_t bytes(uint64_t k) const {
    const uint64_t left = v->body - offset(k);
    return static_cast<uint32_t>(left < v->chunk ? left : v->chunk);
  }
  __device__ void load(uint64_t k, uint32_t stage) const {
    const uint32_t bar = bars + 8 * stage;
    const uint32_t n = bytes(k);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(n) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem + stage * v->chunk),
                 "l"(v->src + v->head + offset(k)), "r"(n), "r"(bar)
                 : "memory");
  }
  __device__ bool waitLoaded(uint32_t stage, uint32_t parity) const {
    const uint32_t bar = bars + 8 * stage;
    for (;;) {
      uint32_t done = 0;
      asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                   : "=r"(done)
                   : "r"(bar), "r"(parity)
                   : "memory");
      if (done) return true;
      if (globalTimerNs() > deadline) return false;
    }
  }
  __device__ void store(uint64_t k, uint32_t stage) const {
    // The stage was written by the async proxy and is read by it; the fence orders the wait above before the read.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(v->dst + v->head + offset(k)),
                 "r"(smem + stage * v->chunk), "r"(bytes(k))
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  }
  __device__ void waitStoresRead() const { asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory"); }
  __device__ void waitStoresDone() const { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
};
#endif

// Bulk copy: blocks of one warp; lane 0 streams the block's chunks (b, b + blocks, ...) through the shared-memory
// ring, all lanes of the grid copy the head and tail bytes. A load that never completes (a broken link) traps after
// the timeout instead of hanging: the launch then fails with an error the caller sees.
__global__ void __launch_bounds__(32) smBulkCopyKernel(SmBulkView v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ __align__(8) uint64_t bars[kMaxBulkStages];
  const uint64_t chunks = bulkChunks(v.body, v.chunk);
  const uint64_t mine = bulkShare(chunks, blockIdx.x, gridDim.x);
  if (threadIdx.x == 0 && mine > 0) {
    const auto smem = static_cast<uint32_t>(__cvta_generic_to_shared(ring));
    const auto bar0 = static_cast<uint32_t>(__cvta_generic_to_shared(bars));
    for (uint32_t s = 0; s < v.stages; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar0 + 8 * s) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    const BulkOps ops{&v, smem, bar0, blockIdx.x, gridDim.x, globalTimerNs() + v.timeout_ns};
    const bool ok = bulkPipeline(ops, mine, v.stages);
    for (uint32_t s = 0; s < v.stages; ++s)
      asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(bar0 + 8 * s) : "memory");
    if (!ok) __trap();
  }
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t nthreads = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = tid; i < v.head; i += nthreads)
    v.dst[i] = v.src[i];
  const uint64_t tail_at = v.head + v.body;
  for (uint64_t i = tid; i < v.tail; i += nthreads)
    v.dst[tail_at + i] = v.src[tail_at + i];
#else
  // The host launches this kernel only on devices of compute capability 9.0 or newer.
  __trap();
#endif
}

std::string hexPointer(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%p", p);
  return buf;
}

// Device of `stream`; the special handles mean the stream of the caller's current device.
StatusOr<int> streamDevice(cudaStream_t stream) {
  int device = -1;
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaGetDevice(&device)));
  } else {
    Status st = PEERLAB_CUDA(cudaStreamGetDevice(stream, &device));
    if (!st.isOk()) return PEERLAB_INVALID_ARGUMENT("copy: stream is not a valid CUDA stream: " + st.message());
  }
  return device;
}

Status checkPointer(const char* which, const void* p, int device, size_t bytes) {
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, p);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return PEERLAB_INVALID_ARGUMENT("copy: " + std::string(which) + " " + hexPointer(p) +
                                    " is not memory CUDA knows: " + describeCudaError(err));
  }
  if (attr.type == cudaMemoryTypeDevice) {
    if (attr.device != device) {
      return PEERLAB_INVALID_ARGUMENT("copy: " + std::string(which) + " " + hexPointer(p) + " is memory of device " +
                                      std::to_string(attr.device) + ", not of device " + std::to_string(device));
    }
  } else if (attr.type != cudaMemoryTypeManaged) {
    return PEERLAB_INVALID_ARGUMENT("copy: " + std::string(which) + " " + hexPointer(p) +
                                    " is host memory, not memory of device " + std::to_string(device));
  }
  // The allocation's bounds, when the driver knows them (not every allocator reports a range). The query needs a
  // current context; the caller's is restored by copy().
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaSetDevice(device)));
  CUdeviceptr base = 0;
  size_t size = 0;
  const auto addr = reinterpret_cast<CUdeviceptr>(p);
  if (PEERLAB_DRIVER_CALL(cuMemGetAddressRange, &base, &size, addr) == CUDA_SUCCESS && size > 0) {
    if (addr + bytes > base + size) {
      return PEERLAB_INVALID_ARGUMENT("copy: " + std::string(which) + " range of " + std::to_string(bytes) +
                                      " bytes at " + hexPointer(p) + " ends " +
                                      std::to_string(addr + bytes - (base + size)) + " bytes past its allocation");
    }
  }
  return Status::ok();
}

// Internal stream and join events of one device.
struct DeviceState {
  bool ready = false;
  Stream stream;     // runs copies joined from a caller's stream of another device
  Event user_ready;  // recorded on a caller's stream of this device
  Event done;        // recorded on `stream` when a joined copy is enqueued
};

// Staging resources of one ordered pair.
struct PairState {
  bool ready = false;
  Stream out;  // device-to-host, on src
  Stream in;   // host-to-device, on dst
  PinnedBuffer bounce[2];
  Event out_done[2];  // on src: bounce[k] holds its chunk
  Event in_done[2];   // on dst: bounce[k] has been drained
};

// Cached outcome of enabling peer access for an unordered pair.
struct LinkState {
  bool enabled = false;
  bool refused = false;
  uint64_t generation = 0;
  Status why;
};

constexpr int64_t kTeardownMs = 30000;

}  // namespace

struct PeerCopier::Impl {
  PeerCopierOptions options;
  int devices = 0;
  std::vector<int> sm_count;
  std::vector<char> bulk_capable;  // compute capability 9.0 or newer
  std::vector<char> bulk_ready;    // the bulk kernel's shared-memory limit is raised on this device
  mutable std::mutex mu;
  std::vector<DeviceState> dev;
  std::vector<PairState> pairs;
  std::vector<LinkState> links;

  ~Impl() {
    std::lock_guard<std::mutex> lock(mu);
    auto saved = ScopedContext::save();
    if (!synchronizeLocked(Deadline::afterMs(kTeardownMs)).isOk()) {
      // Never free pinned memory a copy may still be reading.
      for (auto& p : pairs) {
        for (auto& b : p.bounce)
          (void)b.release();
      }
    }
    // Streams and events are destroyed with their own device current: the driver expects a stream's context.
    for (int d = 0; d < devices; ++d) {
      bool holds = dev[d].stream || dev[d].user_ready || dev[d].done;
      for (int o = 0; o < devices; ++o) {
        holds = holds || pair(d, o).out || pair(d, o).out_done[0] || pair(d, o).out_done[1];
        holds = holds || pair(o, d).in || pair(o, d).in_done[0] || pair(o, d).in_done[1];
      }
      // A device this copier never used has no context to make current (and none is created for it).
      if (!holds) continue;
      auto guard = ScopedDevice::make(d);
      if (!guard.isOk()) continue;
      dev[d] = DeviceState{};
      for (int o = 0; o < devices; ++o) {
        PairState& out = pair(d, o);
        out.out.reset();
        for (auto& e : out.out_done)
          e.reset();
        PairState& in = pair(o, d);
        in.in.reset();
        for (auto& e : in.in_done)
          e.reset();
      }
    }
  }

  PairState& pair(int src, int dst) { return pairs[static_cast<size_t>(src) * devices + dst]; }
  LinkState& link(int a, int b) { return links[static_cast<size_t>(std::min(a, b)) * devices + std::max(a, b)]; }

  Status ensureDevice(int d) {
    DeviceState& s = dev[d];
    if (s.ready) return Status::ok();
    PEERLAB_ASSIGN_OR_RETURN(s.stream, createStream(d));
    PEERLAB_ASSIGN_OR_RETURN(s.user_ready, createEvent(d));
    PEERLAB_ASSIGN_OR_RETURN(s.done, createEvent(d));
    s.ready = true;
    return Status::ok();
  }

  size_t bounceBytes() const { return std::max<size_t>(4096, options.staging_chunk_bytes / 4096 * 4096); }

  Status ensurePair(int src, int dst) {
    PairState& p = pair(src, dst);
    if (p.ready) return Status::ok();
    PEERLAB_ASSIGN_OR_RETURN(p.out, createStream(src));
    PEERLAB_ASSIGN_OR_RETURN(p.in, createStream(dst));
    for (int k = 0; k < 2; ++k) {
      PEERLAB_ASSIGN_OR_RETURN(p.bounce[k], allocPinned(bounceBytes()));
      PEERLAB_ASSIGN_OR_RETURN(p.out_done[k], createEvent(src));
      PEERLAB_ASSIGN_OR_RETURN(p.in_done[k], createEvent(dst));
    }
    p.ready = true;
    return Status::ok();
  }

  Status ensurePeer(int src, int dst) {
    LinkState& l = link(src, dst);
    if (l.refused) return l.why;
    if (l.enabled && l.generation == peerAccessGeneration()) return Status::ok();
    Status st = enablePeerAccess(src, dst);
    if (st.isOk()) {
      l.enabled = true;
      l.generation = peerAccessGeneration();
    } else if (st.code() == StatusCode::kUnavailable) {
      l.refused = true;
      l.why = st;
    }
    return st;
  }

  // Runs `enqueue(stream)` on device `engine`, ordered with the caller's `user` stream of device `user_dev`.
  template <class F>
  Status onEngine(int engine, int user_dev, cudaStream_t user, F&& enqueue) {
    if (engine == user_dev) {
      PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaSetDevice(engine)));
      return enqueue(user);
    }
    PEERLAB_RETURN_IF_ERROR(ensureDevice(engine));
    PEERLAB_RETURN_IF_ERROR(ensureDevice(user_dev));
    DeviceState& e = dev[engine];
    DeviceState& u = dev[user_dev];
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaSetDevice(user_dev)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaEventRecord(u.user_ready.get(), user)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaSetDevice(engine)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaStreamWaitEvent(e.stream.get(), u.user_ready.get(), 0)));
    PEERLAB_RETURN_IF_ERROR(enqueue(e.stream.get()));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaEventRecord(e.done.get(), e.stream.get())));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaSetDevice(user_dev)));
    return PEERLAB_CUDA(cudaStreamWaitEvent(user, e.done.get(), 0));
  }

  Status runCopyEngine(void* dst, int dd, const void* src, int sd, size_t bytes, int user_dev, cudaStream_t user) {
    const int engine = (user_dev == sd || user_dev == dd) ? user_dev : dd;
    return onEngine(engine, user_dev, user, [&](cudaStream_t s) {
      if (sd == dd) return PEERLAB_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
      return PEERLAB_CUDA(cudaMemcpyPeerAsync(dst, dd, src, sd, bytes, s));
    });
  }

  // Raises the bulk kernel's dynamic shared-memory limit on `device` (current) once.
  Status ensureBulk(int device) {
    if (bulk_ready[device]) return Status::ok();
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaFuncSetAttribute(
        smBulkCopyKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kMaxBulkSmemKib << 10))));
    bulk_ready[device] = 1;
    return Status::ok();
  }

  Status runSm(int engine, void* dst, const void* src, size_t bytes, int user_dev, cudaStream_t user) {
    const VectorSplit sp = splitForVectors(reinterpret_cast<uintptr_t>(dst), reinterpret_cast<uintptr_t>(src), bytes);
    const SmKernel which = resolveSmKernel(options.sm, bulk_capable[engine] != 0, sp);
    const SmLaunch l = planSmLaunch(options.sm, sm_count[engine], sp.vecs, which);
    if (which == SmKernel::kBulk) {
      const SmBulkView view{static_cast<uint8_t*>(dst),
                            static_cast<const uint8_t*>(src),
                            sp.head,
                            16 * sp.vecs,
                            sp.tail,
                            l.chunk,
                            static_cast<uint32_t>(options.sm.bulk_stages),
                            kBulkTimeoutNs};
      return onEngine(engine, user_dev, user, [&](cudaStream_t s) {
        PEERLAB_RETURN_IF_ERROR(ensureBulk(engine));
        smBulkCopyKernel<<<l.blocks, l.threads, l.smem, s>>>(view);
        return PEERLAB_CUDA_LAUNCH("smBulkCopyKernel");
      });
    }
    const SmCopyView view{
        static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), sp.head, sp.vecs, sp.tail, sp.shift};
    const SmCopyFn kernel = pickKernel(options.sm, sp.shift);
    return onEngine(engine, user_dev, user, [&](cudaStream_t s) {
      kernel<<<l.blocks, l.threads, 0, s>>>(view);
      return PEERLAB_CUDA_LAUNCH("smCopyKernel");
    });
  }

  Status runStaged(void* dst, int dd, const void* src, int sd, size_t bytes, int user_dev, cudaStream_t user) {
    PEERLAB_RETURN_IF_ERROR(ensureDevice(user_dev));
    PEERLAB_RETURN_IF_ERROR(ensurePair(sd, dd));
    PairState& p = pair(sd, dd);
    DeviceState& u = dev[user_dev];
    const StagedPlan plan = stagedPlan(bytes, bounceBytes());
    auto* d = static_cast<uint8_t*>(dst);
    const auto* s = static_cast<const uint8_t*>(src);
    // Both internal streams start after the work already on the caller's stream.
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaSetDevice(user_dev)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaEventRecord(u.user_ready.get(), user)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaSetDevice(sd)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaStreamWaitEvent(p.out.get(), u.user_ready.get(), 0)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaSetDevice(dd)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaStreamWaitEvent(p.in.get(), u.user_ready.get(), 0)));
    for (size_t i = 0; i < plan.count; ++i) {
      const int k = static_cast<int>(i & 1);
      const size_t off = plan.offset(i);
      const size_t n = plan.size(i);
      // Refill bounce[k] only after the copy-in of its previous chunk (this copy's i - 2, or an earlier copy's)
      // drained it; a never-recorded event is already complete.
      PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaSetDevice(sd)));
      PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaStreamWaitEvent(p.out.get(), p.in_done[k].get(), 0)));
      PEERLAB_RETURN_IF_ERROR(
          PEERLAB_CUDA(cudaMemcpyAsync(p.bounce[k]->ptr, s + off, n, cudaMemcpyDeviceToHost, p.out.get())));
      PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaEventRecord(p.out_done[k].get(), p.out.get())));
      // The copy-in of chunk i overlaps the copy-out of chunk i + 1 into the other buffer.
      PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaSetDevice(dd)));
      PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaStreamWaitEvent(p.in.get(), p.out_done[k].get(), 0)));
      PEERLAB_RETURN_IF_ERROR(
          PEERLAB_CUDA(cudaMemcpyAsync(d + off, p.bounce[k]->ptr, n, cudaMemcpyHostToDevice, p.in.get())));
      PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaEventRecord(p.in_done[k].get(), p.in.get())));
    }
    // The last copy-in waited for every copy-out before it, so it marks the end of the whole copy.
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaSetDevice(user_dev)));
    return PEERLAB_CUDA(cudaStreamWaitEvent(user, p.in_done[(plan.count - 1) & 1].get(), 0));
  }

  StatusOr<CopyPath> copy(void* dst, int dd, const void* src, int sd, size_t bytes, cudaStream_t stream,
                          CopyPath path) {
    PEERLAB_RETURN_IF_ERROR(validateCopy(CopyRequest{dst, dd, src, sd, bytes, path}, devices));
    std::lock_guard<std::mutex> lock(mu);
    PEERLAB_ASSIGN_OR_RETURN(ScopedContext saved, ScopedContext::save());
    PEERLAB_ASSIGN_OR_RETURN(int user_dev, streamDevice(stream));
    if (options.check_pointers) {
      PEERLAB_RETURN_IF_ERROR(checkPointer("dst", dst, dd, bytes));
      PEERLAB_RETURN_IF_ERROR(checkPointer("src", src, sd, bytes));
    }
    const bool same = sd == dd;
    const Status peer = !same && path != CopyPath::kStaged ? ensurePeer(sd, dd) : Status::ok();
    PEERLAB_ASSIGN_OR_RETURN(CopyPath chosen, selectPath(path, same, peer));
    switch (chosen) {
      case CopyPath::kCopyEngine:
        PEERLAB_RETURN_IF_ERROR(runCopyEngine(dst, dd, src, sd, bytes, user_dev, stream));
        break;
      case CopyPath::kSmPull:
        PEERLAB_RETURN_IF_ERROR(runSm(dd, dst, src, bytes, user_dev, stream));
        break;
      case CopyPath::kSmPush:
        PEERLAB_RETURN_IF_ERROR(runSm(sd, dst, src, bytes, user_dev, stream));
        break;
      case CopyPath::kStaged:
        PEERLAB_RETURN_IF_ERROR(runStaged(dst, dd, src, sd, bytes, user_dev, stream));
        break;
      case CopyPath::kAuto:
        return PEERLAB_INTERNAL("copy: path selection returned auto");
    }
    return chosen;
  }

  Status prepare(int sd, int dd, CopyPath path) {
    for (auto [which, d] : {std::pair{"src", sd}, std::pair{"dst", dd}}) {
      if (d < 0 || d >= devices) {
        return PEERLAB_INVALID_ARGUMENT("prepare: " + std::string(which) + " device " + std::to_string(d) +
                                        " is not a visible device (" + std::to_string(devices) + " visible)");
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    PEERLAB_ASSIGN_OR_RETURN(ScopedContext saved, ScopedContext::save());
    PEERLAB_RETURN_IF_ERROR(ensureDevice(sd));
    PEERLAB_RETURN_IF_ERROR(ensureDevice(dd));
    if (sd == dd) return Status::ok();
    if (path == CopyPath::kStaged) return ensurePair(sd, dd);
    Status peer = ensurePeer(sd, dd);
    if (path == CopyPath::kAuto && peer.code() == StatusCode::kUnavailable) return ensurePair(sd, dd);
    return peer;
  }

  Status synchronizeLocked(Deadline deadline) {
    Status result = Status::ok();
    auto wait = [&](int device, const Stream& s) {
      if (!s) return;
      auto guard = ScopedDevice::make(device);
      Status st = guard.isOk() ? waitStream(s.get(), deadline, "peer copier internal stream") : guard.status();
      if (result.isOk() && !st.isOk()) result = st;
    };
    for (int d = 0; d < devices; ++d)
      wait(d, dev[d].stream);
    for (int s = 0; s < devices; ++s) {
      for (int d = 0; d < devices; ++d) {
        wait(s, pair(s, d).out);
        wait(d, pair(s, d).in);
      }
    }
    return result;
  }
};

PeerCopier::PeerCopier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PeerCopier::PeerCopier(PeerCopier&&) noexcept = default;
PeerCopier& PeerCopier::operator=(PeerCopier&&) noexcept = default;
PeerCopier::~PeerCopier() = default;

StatusOr<PeerCopier> PeerCopier::create(const PeerCopierOptions& options) {
  PEERLAB_RETURN_IF_ERROR(validateSmCopyConfig(options.sm));
  PEERLAB_ASSIGN_OR_RETURN(int count, ::peerlab::deviceCount());
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->devices = count;
  impl->sm_count.resize(count);
  impl->bulk_capable.assign(count, 0);
  impl->bulk_ready.assign(count, 0);
  for (int d = 0; d < count; ++d) {
    PEERLAB_RETURN_IF_ERROR(
        PEERLAB_CUDA(cudaDeviceGetAttribute(&impl->sm_count[d], cudaDevAttrMultiProcessorCount, d)));
    int major = 0;
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d)));
    impl->bulk_capable[d] = major >= 9 ? 1 : 0;
  }
  impl->dev.resize(count);
  impl->pairs.resize(static_cast<size_t>(count) * count);
  impl->links.resize(static_cast<size_t>(count) * count);
  return PeerCopier(std::move(impl));
}

StatusOr<CopyPath> PeerCopier::copy(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                    cudaStream_t stream, CopyPath path) {
  if (!impl_) return PEERLAB_INVALID_ARGUMENT("copy: PeerCopier was moved from");
  return impl_->copy(dst, dst_device, src, src_device, bytes, stream, path);
}

Status PeerCopier::prepare(int src_device, int dst_device, CopyPath path) {
  if (!impl_) return PEERLAB_INVALID_ARGUMENT("prepare: PeerCopier was moved from");
  return impl_->prepare(src_device, dst_device, path);
}

Status PeerCopier::setSmConfig(const SmCopyConfig& config) {
  if (!impl_) return PEERLAB_INVALID_ARGUMENT("setSmConfig: PeerCopier was moved from");
  PEERLAB_RETURN_IF_ERROR(validateSmCopyConfig(config));
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->options.sm = config;
  return Status::ok();
}

SmCopyConfig PeerCopier::smConfig() const {
  if (!impl_) return SmCopyConfig{};
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->options.sm;
}

int PeerCopier::smsFor(CopyPath path, int src_device, int dst_device, size_t bytes) const {
  if (!impl_ || (path != CopyPath::kSmPull && path != CopyPath::kSmPush)) return 0;
  const int engine = path == CopyPath::kSmPull ? dst_device : src_device;
  if (engine < 0 || engine >= impl_->devices) return 0;
  std::lock_guard<std::mutex> lock(impl_->mu);
  // As for 16-byte aligned src and dst.
  const VectorSplit sp = splitForVectors(0, 0, bytes);
  const SmKernel which = resolveSmKernel(impl_->options.sm, impl_->bulk_capable[engine] != 0, sp);
  return planSmLaunch(impl_->options.sm, impl_->sm_count[engine], sp.vecs, which).sms;
}

SmKernel PeerCopier::smKernelFor(CopyPath path, int src_device, int dst_device, const void* dst, const void* src,
                                 size_t bytes) const {
  if (!impl_ || (path != CopyPath::kSmPull && path != CopyPath::kSmPush)) return SmKernel::kAuto;
  const int engine = path == CopyPath::kSmPull ? dst_device : src_device;
  if (engine < 0 || engine >= impl_->devices) return SmKernel::kAuto;
  std::lock_guard<std::mutex> lock(impl_->mu);
  const VectorSplit sp = splitForVectors(reinterpret_cast<uintptr_t>(dst), reinterpret_cast<uintptr_t>(src), bytes);
  return resolveSmKernel(impl_->options.sm, impl_->bulk_capable[engine] != 0, sp);
}

Status PeerCopier::synchronize(Deadline deadline) {
  if (!impl_) return PEERLAB_INVALID_ARGUMENT("synchronize: PeerCopier was moved from");
  std::lock_guard<std::mutex> lock(impl_->mu);
  PEERLAB_ASSIGN_OR_RETURN(ScopedContext saved, ScopedContext::save());
  return impl_->synchronizeLocked(deadline);
}

int PeerCopier::deviceCount() const {
  return impl_ ? impl_->devices : 0;
}

}  // namespace peerlab::peer
