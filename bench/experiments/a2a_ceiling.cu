// How fast SM stores can move an all-to-all between the GPUs of one process, with nothing around the copy: no
// counts, no queue, no flags. Every GPU pushes `seg` bytes to every GPU (itself included, unless remote_only) at
// once; time per call is the slowest GPU's (events on each, started together behind a host-mapped gate).
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -I. bench/experiments/a2a_ceiling.cu -o a2a_ceiling && ./a2a_ceiling [MiB per rank]
//
// Layouts (the CTAs of a launch; 512 threads, 16-byte vectors, 8 loads in flight per thread before the stores):
//   split/L       L CTAs copy the local segment, the rest are split evenly between the peers, each a grid-stride loop
//   rotate        every CTA copies its share of every segment, peers in an order rotated by CTA
//   remote_only   split without the local segment (what the links alone allow)
//   pieces        split, but each CTA copies one contiguous piece of its segment (not a grid-stride loop)
//   queue/K       a work queue: per segment a counter of K-KiB chunks; CTAs start spread over the segments, thread 0
//                 draws the next chunk while the CTA copies the current one, a CTA barrier per chunk, and a CTA moves
//                 to the next segment when one runs dry
//   warpq/K       the same queue drawn per warp (no CTA barrier)
//   rotq/K/LN     queue/K, but every CTA but the first N starts on peer me+1 and moves on to me+2, ...: at each step a
//                 GPU sends to one peer and receives from one (the first N CTAs start on the local segment)
//   xorq/K/LN     the same with peer me^1, me^2, ...: each step pairs the GPUs both ways
//   .../ldcs, /cs queue with streaming loads (ld.global.cs), and streaming stores too (st.global.cs)
//   pullq/K       queue/K, but each GPU loads its segments from the peers' send buffers and stores locally (pull)
//   bulk/G/P/S/K  the Hopper bulk-copy engine (cp.async.bulk): G CTAs of P warps; lane 0 of each warp streams its
//                 K-KiB chunks (chunk j of all segments interleaved, j = warp, warp + all warps, ...) through S
//                 shared-memory stages: bulk load global -> shared (mbarrier), bulk store shared -> peer
//   bulkpull/...  the same, loading from the peer and storing locally
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/experiments/check.h"

constexpr int kMaxGpus = 8;
constexpr int kThreads = 512;
constexpr int kUnroll = 8;

struct Args {
  const uint4* src;      // this rank's send buffer: segment d at d * seg
  uint4* dst[kMaxGpus];  // every rank's receive buffer: this rank's segment at me * seg
  uint64_t seg_vecs;     // 16-byte vectors per segment
  int n;
  int me;
  int local_ctas;               // split: CTAs on the local segment (0: local skipped)
  int mode;                     // 0 split, 1 rotate, 2 pieces, 3 queue, 4 warp queue
  uint64_t chunk_vecs;          // queue: vectors per chunk
  unsigned long long* next;     // queue: next chunk of each segment (zeroed before the launch)
  const uint4* srcs[kMaxGpus];  // pull: every rank's send buffer
  int pull;                     // 1: load from the peer's send buffer, store into this rank's receive buffer
  int stages;                   // bulk: shared-memory stages per warp
  int order;  // queue: 0 CTAs start spread over the segments; 1 all start on peer me+1, then me+2, ...; 2 the same
              // with peer me^k (a perfect matching per step); for 1 and 2 the first local_ctas CTAs start locally
  int hint;   // 1: streaming loads (ld.global.cs), 2: streaming loads and stores (st.global.cs)
};

// Source and destination of this rank's part of the exchange with rank `peer`: push sends segment `peer` of the
// local send buffer to the peer's receive buffer; pull fetches the peer's segment for this rank into the local one.
__device__ __forceinline__ void segmentPair(const Args& a, int peer, const uint4** s, uint4** d) {
  if (a.pull) {
    *s = a.srcs[peer] + static_cast<uint64_t>(a.me) * a.seg_vecs;
    *d = a.dst[a.me] + static_cast<uint64_t>(peer) * a.seg_vecs;
  } else {
    *s = a.src + static_cast<uint64_t>(peer) * a.seg_vecs;
    *d = a.dst[peer] + static_cast<uint64_t>(a.me) * a.seg_vecs;
  }
}

// Vectors [lo, hi) from start in steps of stride, kUnroll loads in flight before the stores. kHint 1: streaming
// loads (ld.global.cs); 2: streaming loads and stores (st.global.cs); 0: plain.
template <int kHint = 0>
__device__ __forceinline__ void copyVecs(const uint4* __restrict__ s, uint4* __restrict__ d, uint64_t lo, uint64_t hi,
                                         uint64_t start, uint64_t stride) {
  auto load = [](const uint4* p) { return kHint == 0 ? *p : __ldcs(p); };
  auto store = [](uint4* p, const uint4& v) {
    if constexpr (kHint == 2) {
      __stcs(p, v);
    } else {
      *p = v;
    }
  };
  uint64_t c = lo + start;
  for (; c + (kUnroll - 1) * stride < hi; c += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      v[u] = load(s + c + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      store(d + c + u * stride, v[u]);
  }
  for (; c < hi; c += stride)
    d[c] = load(s + c);
}

// Static split: CTA b's segment (`dest`), its index among that segment's CTAs and how many they are. The first
// local_ctas CTAs take the local segment, the rest are dealt to the peers in turn.
__device__ void splitAssignment(const Args& a, int b, int g, int* dest, int* idx, int* cnt) {
  const int peers = a.n - 1;
  const int remote = g - a.local_ctas;
  if (b < a.local_ctas) {
    *dest = a.me;
    *idx = b;
    *cnt = a.local_ctas;
    return;
  }
  const int r = b - a.local_ctas;
  const int j = r % peers;  // peer index 0..peers-1
  *dest = (a.me + 1 + j) % a.n;
  *idx = r / peers;
  *cnt = remote / peers + (j < remote % peers ? 1 : 0);
}

__global__ void __launch_bounds__(kThreads, 1) push(Args a) {
  const int b = blockIdx.x;
  const int g = gridDim.x;
  if (a.mode == 3 || a.mode == 4) {
    const uint64_t chunks = (a.seg_vecs + a.chunk_vecs - 1) / a.chunk_vecs;
    const bool per_warp = a.mode == 4;
    const int lane = per_warp ? threadIdx.x % 32 : threadIdx.x;
    const int width = per_warp ? 32 : kThreads;
    const int unit = per_warp ? b * (kThreads / 32) + threadIdx.x / 32 : b;
    const int units = per_warp ? g * (kThreads / 32) : g;
    __shared__ unsigned long long s_c[kThreads / 32];
    __shared__ int s_j[kThreads / 32];
    const int slot = per_warp ? threadIdx.x / 32 : 0;
    // Job k of this unit's sequence; job j is the segment of peer (me + j) % n, or me ^ j in order 2.
    const int first = a.order == 0 ? unit % a.n : (b < a.local_ctas ? 0 : 1);
    int tries = 0;
    int job = first;
    auto draw = [&]() {
      unsigned long long c = atomicAdd(&a.next[job], 1ull);
      while (c >= chunks) {
        if (++tries >= a.n) return false;
        job = (first + tries) % a.n;
        c = atomicAdd(&a.next[job], 1ull);
      }
      s_c[slot] = c;
      s_j[slot] = job;
      return true;
    };
    (void)units;
    for (;;) {
      if (lane == 0 && !draw()) s_j[slot] = -1;
      if (per_warp) {
        __syncwarp();
      } else {
        __syncthreads();
      }
      const int j = s_j[slot];
      const uint64_t c = s_c[slot];
      if (per_warp) {
        __syncwarp();
      } else {
        __syncthreads();
      }
      if (j < 0) break;
      const uint4* s = nullptr;
      uint4* d = nullptr;
      segmentPair(a, a.order == 2 ? (a.me ^ j) : (a.me + j) % a.n, &s, &d);
      const uint64_t lo = c * a.chunk_vecs;
      const uint64_t hi = lo + a.chunk_vecs < a.seg_vecs ? lo + a.chunk_vecs : a.seg_vecs;
      if (a.hint == 0) {
        copyVecs(s, d, lo, hi, lane, width);
      } else if (a.hint == 1) {
        copyVecs<1>(s, d, lo, hi, lane, width);
      } else {
        copyVecs<2>(s, d, lo, hi, lane, width);
      }
    }
    return;
  }
  if (a.mode == 2) {
    int dest, idx, cnt;
    splitAssignment(a, b, g, &dest, &idx, &cnt);
    const uint64_t per = (a.seg_vecs + cnt - 1) / cnt;
    const uint64_t lo = per * idx < a.seg_vecs ? per * idx : a.seg_vecs;
    const uint64_t hi = lo + per < a.seg_vecs ? lo + per : a.seg_vecs;
    const uint4* s = a.src + static_cast<uint64_t>(dest) * a.seg_vecs;
    uint4* d = a.dst[dest] + static_cast<uint64_t>(a.me) * a.seg_vecs;
    copyVecs(s, d, lo, hi, threadIdx.x, kThreads);
    return;
  }
  if (a.mode == 0) {
    // Which segment this CTA works on, and its place among that segment's CTAs.
    int dest, idx, cnt;
    splitAssignment(a, b, g, &dest, &idx, &cnt);
    const uint4* s = a.src + static_cast<uint64_t>(dest) * a.seg_vecs;
    uint4* d = a.dst[dest] + static_cast<uint64_t>(a.me) * a.seg_vecs;
    copyVecs(s, d, 0, a.seg_vecs, static_cast<uint64_t>(idx) * kThreads + threadIdx.x,
             static_cast<uint64_t>(cnt) * kThreads);
  } else {
    for (int k = 0; k < a.n; ++k) {
      const int dest = (a.me + b + k) % a.n;
      if (dest == a.me && a.local_ctas == 0) continue;
      const uint4* s = a.src + static_cast<uint64_t>(dest) * a.seg_vecs;
      uint4* d = a.dst[dest] + static_cast<uint64_t>(a.me) * a.seg_vecs;
      copyVecs(s, d, 0, a.seg_vecs, static_cast<uint64_t>(b) * kThreads + threadIdx.x,
               static_cast<uint64_t>(g) * kThreads);
    }
  }
}

__device__ __forceinline__ uint32_t smemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Bulk-copy all-to-all: lane 0 of every warp streams chunks through its stages (see the header comment).
__global__ void bulk(Args a) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  if (threadIdx.x % 32 != 0) return;
  const uint32_t chunk = static_cast<uint32_t>(a.chunk_vecs * 16);
  uint8_t* buf = smem + static_cast<uint64_t>(warp) * a.stages * chunk;
  uint64_t* bars =
      reinterpret_cast<uint64_t*>(smem + static_cast<uint64_t>(warps) * a.stages * chunk) + warp * a.stages;
  for (int i = 0; i < a.stages; ++i)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smemAddr(bars + i)));
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  const uint64_t seg = a.seg_vecs * 16;
  const uint64_t per_seg = (seg + chunk - 1) / chunk;
  const uint64_t total = per_seg * a.n;
  const uint64_t pipes = static_cast<uint64_t>(gridDim.x) * warps;
  const uint64_t pipe = static_cast<uint64_t>(blockIdx.x) * warps + warp;
  if (pipe >= total) return;
  const uint64_t mine = (total - pipe + pipes - 1) / pipes;
  // Chunk i of this pipe: its source, destination and length.
  auto at = [&](uint64_t i, const uint8_t** s, uint8_t** d) {
    const uint64_t j = pipe + i * pipes;
    const uint4* sv = nullptr;
    uint4* dv = nullptr;
    segmentPair(a, static_cast<int>((a.me + j % a.n) % a.n), &sv, &dv);
    const uint64_t off = (j / a.n) * chunk;
    *s = reinterpret_cast<const uint8_t*>(sv) + off;
    *d = reinterpret_cast<uint8_t*>(dv) + off;
    return static_cast<uint32_t>(seg - off < chunk ? seg - off : chunk);
  };
  auto load = [&](uint64_t i) {
    const uint8_t* s = nullptr;
    uint8_t* d = nullptr;
    const uint32_t len = at(i, &s, &d);
    const int st = static_cast<int>(i % a.stages);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smemAddr(bars + st)), "r"(len)
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smemAddr(buf + static_cast<uint64_t>(st) * chunk)),
                 "l"(s), "r"(len), "r"(smemAddr(bars + st))
                 : "memory");
  };
  for (uint64_t i = 0; i < mine && i < static_cast<uint64_t>(a.stages); ++i)
    load(i);
  for (uint64_t i = 0; i < mine; ++i) {
    const int st = static_cast<int>(i % a.stages);
    const uint32_t parity = static_cast<uint32_t>((i / a.stages) & 1);
    uint32_t done = 0;
    while (!done) {
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                   : "=r"(done)
                   : "r"(smemAddr(bars + st)), "r"(parity)
                   : "memory");
    }
    const uint8_t* s = nullptr;
    uint8_t* d = nullptr;
    const uint32_t len = at(i, &s, &d);
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(d),
                 "r"(smemAddr(buf + static_cast<uint64_t>(st) * chunk)), "r"(len)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    // The stage of chunk i - 1 is free once its store has read it: refill it with chunk i - 1 + stages.
    if (i >= 1 && i - 1 + a.stages < mine) {
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      load(i - 1 + a.stages);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

__global__ void gateKernel(volatile uint32_t* gate, uint32_t want) {
  const long long t0 = clock64();
  while (*gate < want && clock64() - t0 < 4'000'000'000ll) {
  }
}

__global__ void fill(uint4* p, uint64_t n, uint32_t seed) {
  for (uint64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = make_uint4(static_cast<uint32_t>(i) ^ seed, seed, static_cast<uint32_t>(i >> 32), ~seed);
}

// Counts vectors of the receive buffer that differ from what rank s wrote (segment s holds rank s's segment me).
__global__ void check(const uint4* p, uint64_t seg_vecs, int me, int n, unsigned long long* wrong, bool skip_local) {
  unsigned long long w = 0;
  for (uint64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < seg_vecs * n; i += gridDim.x * blockDim.x) {
    const uint64_t s = i / seg_vecs;
    if (skip_local && static_cast<int>(s) == me) continue;
    const uint64_t src_index = static_cast<uint64_t>(me) * seg_vecs + (i - s * seg_vecs);
    const uint32_t seed = 0x9E37u * (static_cast<uint32_t>(s) + 1);
    const uint4 want =
        make_uint4(static_cast<uint32_t>(src_index) ^ seed, seed, static_cast<uint32_t>(src_index >> 32), ~seed);
    const uint4 v = p[i];
    w += (v.x != want.x || v.y != want.y || v.z != want.z || v.w != want.w) ? 1 : 0;
  }
  if (w) atomicAdd(wrong, w);
}

int main(int argc, char** argv) {
  const uint64_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 128;
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  n = std::min(n, kMaxGpus);
  const uint64_t per_rank = mib << 20;
  const uint64_t seg = per_rank / n / 16 * 16;
  const uint64_t seg_vecs = seg / 16;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::vector<uint4*> src(n), dst(n);
  std::vector<cudaStream_t> st(n);
  std::vector<cudaEvent_t> e0(n), e1(n);
  uint32_t* gate = nullptr;
  CK(cudaHostAlloc(&gate, 4, cudaHostAllocMapped | cudaHostAllocPortable));
  *gate = 0;
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    for (int p = 0; p < n; ++p)
      if (p != d) CK(cudaDeviceEnablePeerAccess(p, 0));
    CK(cudaMalloc(&src[d], seg * n));
    CK(cudaMalloc(&dst[d], seg * n));
    fill<<<264, 512>>>(src[d], seg_vecs * n, 0x9E37u * (d + 1));
    CK(cudaStreamCreateWithFlags(&st[d], cudaStreamNonBlocking));
    CK(cudaEventCreate(&e0[d]));
    CK(cudaEventCreate(&e1[d]));
  }
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaDeviceSynchronize());
  }
  std::printf("%d GPUs, %llu MiB per rank (%llu bytes per segment), %d SMs\n", n, static_cast<unsigned long long>(mib),
              static_cast<unsigned long long>(seg), sms);
  struct Layout {
    std::string name;
    int mode;
    int local_ctas;
    int grid;
    uint64_t chunk_kib = 0;
    int pull = 0;
    int warps = 0;   // bulk: warps (pipelines) per CTA
    int stages = 0;  // bulk: stages per warp
    int order = 0;
    int hint = 0;
  };
  auto queueLayout = [sms](const char* name, int kib, int order, int local_ctas, int hint) {
    Layout l{name, 3, local_ctas, sms, static_cast<uint64_t>(kib)};
    l.order = order;
    l.hint = hint;
    return l;
  };
  auto bulkLayout = [](int grid, int warps, int stages, int kib, int pull) {
    const std::string name = std::string(pull ? "bulkpull/" : "bulk/") + std::to_string(grid) + "/" +
                             std::to_string(warps) + "/" + std::to_string(stages) + "/" + std::to_string(kib);
    return Layout{name, 5, 1, grid, static_cast<uint64_t>(kib), pull, warps, stages};
  };
  std::vector<Layout> layouts = {{"queue/64", 3, 1, sms, 64},
                                 queueLayout("queue/16", 16, 0, 1, 0),
                                 queueLayout("rotq/64/L0", 64, 1, 0, 0),
                                 queueLayout("rotq/64/L12", 64, 1, 12, 0),
                                 queueLayout("rotq/16/L12", 16, 1, 12, 0),
                                 queueLayout("xorq/64/L12", 64, 2, 12, 0),
                                 queueLayout("xorq/16/L12", 16, 2, 12, 0),
                                 queueLayout("xorq/64/L33", 64, 2, 33, 0),
                                 queueLayout("queue/64/ldcs", 64, 0, 1, 1),
                                 queueLayout("queue/64/cs", 64, 0, 1, 2),
                                 queueLayout("xorq/64/L12/ldcs", 64, 2, 12, 1),
                                 {"pullq/16", 3, 1, sms, 16, 1},
                                 bulkLayout(sms, 2, 4, 16, 0),
                                 {"queue/64", 3, 1, sms, 64}};
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaFuncSetAttribute(bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10));
  }
  unsigned long long* next[kMaxGpus] = {};
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaMalloc(&next[d], kMaxGpus * sizeof(unsigned long long)));
  }
  uint32_t want = 0;
  for (const Layout& l : layouts) {
    std::vector<double> us;
    for (int it = 0; it < 12; ++it) {
      ++want;
      for (int d = 0; d < n; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaMemsetAsync(dst[d], 0, seg * n, st[d]));
        CK(cudaMemsetAsync(next[d], 0, kMaxGpus * sizeof(unsigned long long), st[d]));
        CK(cudaStreamSynchronize(st[d]));
      }
      for (int d = 0; d < n; ++d) {
        CK(cudaSetDevice(d));
        gateKernel<<<1, 1, 0, st[d]>>>(gate, want);
        CK(cudaEventRecord(e0[d], st[d]));
        Args a{};
        a.src = src[d];
        for (int p = 0; p < n; ++p)
          a.dst[p] = dst[p];
        a.seg_vecs = seg_vecs;
        a.n = n;
        a.me = d;
        a.local_ctas = l.local_ctas;
        a.mode = l.mode;
        a.chunk_vecs = l.chunk_kib * 1024 / 16;
        a.next = next[d];
        for (int p = 0; p < n; ++p)
          a.srcs[p] = src[p];
        a.pull = l.pull;
        a.stages = l.stages;
        a.order = l.order;
        a.hint = l.hint;
        if (l.mode == 5) {
          const size_t smem = static_cast<size_t>(l.warps) * l.stages * (l.chunk_kib * 1024 + 8);
          bulk<<<l.grid, 32 * l.warps, smem, st[d]>>>(a);
        } else {
          push<<<l.grid, kThreads, 0, st[d]>>>(a);
        }
        CK(cudaGetLastError());
        CK(cudaEventRecord(e1[d], st[d]));
      }
      *reinterpret_cast<volatile uint32_t*>(gate) = want;
      double worst = 0;
      for (int d = 0; d < n; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaStreamSynchronize(st[d]));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0[d], e1[d]));
        worst = std::max(worst, ms * 1000.0);
      }
      if (it >= 2) us.push_back(worst);
    }
    unsigned long long total_wrong = 0;
    for (int d = 0; d < n; ++d) {
      CK(cudaSetDevice(d));
      unsigned long long* w = nullptr;
      CK(cudaMallocManaged(&w, 8));
      *w = 0;
      check<<<264, 512>>>(dst[d], seg_vecs, d, n, w, l.local_ctas == 0);
      CK(cudaDeviceSynchronize());
      total_wrong += *w;
      CK(cudaFree(w));
    }
    std::sort(us.begin(), us.end());
    const double med = us[us.size() / 2];
    const double remote_bytes = static_cast<double>(seg) * (n - 1);
    std::printf("%-20s grid %4d  %8.1f us (min %8.1f)  %6.1f GB/s per direction over the links  wrong vectors %llu\n",
                l.name.c_str(), l.grid, med, us.front(), remote_bytes / med / 1e3, total_wrong);
  }
  return 0;
}
