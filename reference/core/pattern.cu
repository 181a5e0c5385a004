#include "reference/core/pattern.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "reference/core/check.h"
#include "reference/core/scoped.h"
#include "reference/core/wait.h"

namespace peerlab {

uint64_t patternSeed(uint64_t run, int src, int dst, uint64_t salt) {
  uint64_t s = mix64(run);
  s = mix64(s ^ (static_cast<uint64_t>(static_cast<uint32_t>(src)) << 32 | static_cast<uint32_t>(dst)));
  return mix64(s ^ salt);
}

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "pattern words are stored little endian");

// Host passes over large buffers run on several threads, each over a chunk of at least this many bytes (a multiple of
// 64, so that no element of 1 to 16 bytes straddles two chunks).
constexpr size_t kHostChunk = size_t{8} << 20;
constexpr unsigned kHostThreads = 16;

// Runs fn(begin, end) over [0, bytes) in chunks on up to kHostThreads threads; a thread that cannot be started runs
// its chunk on the caller's.
template <typename Fn>
void forChunks(size_t bytes, Fn&& fn) {
  const unsigned hw = std::max(1u, std::min(kHostThreads, std::thread::hardware_concurrency()));
  const size_t parts = std::min<size_t>(hw, (bytes + kHostChunk - 1) / kHostChunk);
  if (parts <= 1) {
    fn(size_t{0}, bytes);
    return;
  }
  const size_t step = (bytes / parts + 63) / 64 * 64;
  std::vector<std::thread> threads;
  threads.reserve(parts);
  size_t begin = 0;
  for (size_t p = 0; p < parts && begin < bytes; ++p) {
    const size_t end = p + 1 == parts ? bytes : std::min(bytes, begin + step);
    try {
      threads.emplace_back([&fn, begin, end] { fn(begin, end); });
    } catch (...) {
      fn(begin, end);
    }
    begin = end;
  }
  for (std::thread& t : threads)
    t.join();
}

// Pattern bytes (offset + i) for i in [begin, end) into d[i], complemented when `invert`: a whole 8-byte word per
// step where the pattern's words line up, bytes at the edges.
void writeRange(uint8_t* d, size_t begin, size_t end, uint64_t seed, uint64_t offset, bool invert) {
  const uint64_t mseed = mix64(seed);
  const uint8_t flip = invert ? 0xff : 0;
  size_t i = begin;
  for (; i < end && ((offset + i) & 7) != 0; ++i)
    d[i] = static_cast<uint8_t>(patternByte(seed, offset + i) ^ flip);
  for (; i + 8 <= end; i += 8) {
    uint64_t w = mix64(mseed ^ ((offset + i) >> 3));
    if (invert) w = ~w;
    std::memcpy(d + i, &w, 8);
  }
  for (; i < end; ++i)
    d[i] = static_cast<uint8_t>(patternByte(seed, offset + i) ^ flip);
}

// Wrong elements of [begin, end): a whole word compared per step, bytes only where a word differs.
PatternCheck checkRange(const uint8_t* s, size_t begin, size_t end, uint64_t seed, size_t elem_bytes, uint64_t offset) {
  PatternCheck r;
  const uint64_t mseed = mix64(seed);
  uint64_t last_bad_elem = UINT64_MAX;
  auto checkByte = [&](size_t b) {
    if (s[b] == patternByte(seed, offset + b)) return;
    if (r.first_bad == UINT64_MAX) r.first_bad = b;
    const uint64_t e = b / elem_bytes;
    if (e != last_bad_elem) {
      ++r.wrong;
      last_bad_elem = e;
    }
  };
  size_t i = begin;
  for (; i < end && ((offset + i) & 7) != 0; ++i)
    checkByte(i);
  for (; i + 8 <= end; i += 8) {
    uint64_t got;
    std::memcpy(&got, s + i, 8);
    if (got == mix64(mseed ^ ((offset + i) >> 3))) continue;
    for (size_t b = i; b < i + 8; ++b)
      checkByte(b);
  }
  for (; i < end; ++i)
    checkByte(i);
  return r;
}

}  // namespace

void fillPatternHost(void* dst, size_t bytes, uint64_t seed, uint64_t offset) {
  auto* d = static_cast<uint8_t*>(dst);
  forChunks(bytes, [&](size_t b, size_t e) { writeRange(d, b, e, seed, offset, false); });
}

void poisonPatternHost(void* dst, size_t bytes, uint64_t seed, uint64_t offset) {
  auto* d = static_cast<uint8_t*>(dst);
  forChunks(bytes, [&](size_t b, size_t e) { writeRange(d, b, e, seed, offset, true); });
}

PatternCheck checkPatternHost(const void* p, size_t bytes, uint64_t seed, size_t elem_bytes, uint64_t offset) {
  const auto* s = static_cast<const uint8_t*>(p);
  if (elem_bytes == 0) elem_bytes = 1;
  PatternCheck total;
  total.elements = (bytes + elem_bytes - 1) / elem_bytes;
  std::mutex mu;
  forChunks(bytes, [&](size_t b, size_t e) {
    const PatternCheck c = checkRange(s, b, e, seed, elem_bytes, offset);
    std::lock_guard<std::mutex> lock(mu);
    total.wrong += c.wrong;
    total.first_bad = std::min(total.first_bad, c.first_bad);
  });
  return total;
}

namespace {

constexpr int kThreads = 256;

// Pattern bytes [logical, logical + 16) as four little-endian 32-bit words.
__device__ __forceinline__ uint4 expectedChunk(uint64_t seed, uint64_t logical, bool invert) {
  const uint64_t mseed = mix64(seed);
  const uint64_t w0 = logical >> 3;
  const unsigned shift = static_cast<unsigned>(logical & 7) * 8;
  uint64_t a = mix64(mseed ^ w0), b = mix64(mseed ^ (w0 + 1));
  uint64_t lo, hi;
  if (shift == 0) {
    lo = a;
    hi = b;
  } else {
    uint64_t c = mix64(mseed ^ (w0 + 2));
    lo = (a >> shift) | (b << (64 - shift));
    hi = (b >> shift) | (c << (64 - shift));
  }
  if (invert) {
    lo = ~lo;
    hi = ~hi;
  }
  return make_uint4(static_cast<uint32_t>(lo), static_cast<uint32_t>(lo >> 32), static_cast<uint32_t>(hi),
                    static_cast<uint32_t>(hi >> 32));
}

__device__ __forceinline__ uint8_t chunkByte(const uint4& v, int i) {
  uint32_t w = i < 4 ? v.x : i < 8 ? v.y : i < 12 ? v.z : v.w;
  return static_cast<uint8_t>(w >> ((i & 3) * 8));
}

// Chunks are 16 bytes of the region, counted from its start; a 16-byte-aligned region moves whole vectors.
__global__ void fillKernel(uint8_t* dst, uint64_t bytes, uint64_t seed, uint64_t offset, bool invert) {
  const uint64_t chunks = (bytes + 15) / 16;
  const bool aligned = (reinterpret_cast<uintptr_t>(dst) & 15) == 0;
  for (uint64_t c = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; c < chunks;
       c += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint64_t base = c * 16;
    uint4 v = expectedChunk(seed, offset + base, invert);
    if (aligned && base + 16 <= bytes) {
      *reinterpret_cast<uint4*>(dst + base) = v;
    } else {
      const int n = static_cast<int>(bytes - base < 16 ? bytes - base : 16);
      for (int i = 0; i < n; ++i)
        dst[base + i] = chunkByte(v, i);
    }
  }
}

__global__ void checkKernel(const uint8_t* p, uint64_t bytes, uint64_t seed, uint64_t offset, uint32_t elem_bytes,
                            unsigned long long* counters) {
  const uint64_t chunks = (bytes + 15) / 16;
  const bool aligned = (reinterpret_cast<uintptr_t>(p) & 15) == 0;
  unsigned long long wrong = 0;
  unsigned long long first = ~0ull;
  for (uint64_t c = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; c < chunks;
       c += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint64_t base = c * 16;
    const uint4 want = expectedChunk(seed, offset + base, false);
    const int n = static_cast<int>(bytes - base < 16 ? bytes - base : 16);
    uint32_t badMask = 0;
    if (aligned && n == 16) {
      const uint4 got = __ldcg(reinterpret_cast<const uint4*>(p + base));
      const uint32_t x[4] = {got.x ^ want.x, got.y ^ want.y, got.z ^ want.z, got.w ^ want.w};
      for (int i = 0; i < 16; ++i)
        badMask |= ((x[i >> 2] >> ((i & 3) * 8)) & 0xff) ? (1u << i) : 0u;
    } else {
      for (int i = 0; i < n; ++i)
        badMask |= (p[base + i] != chunkByte(want, i)) ? (1u << i) : 0u;
    }
    if (badMask) {
      first = min(first, static_cast<unsigned long long>(base + __ffs(badMask) - 1));
      // An element is wrong when any of its bytes is (16 is a multiple of every element size).
      const uint32_t emask = (elem_bytes >= 32) ? 0xffffffffu : ((1u << elem_bytes) - 1);
      for (uint32_t e = 0; e < 16; e += elem_bytes)
        wrong += (badMask >> e) & emask ? 1 : 0;
    }
  }
  // Warp reduction, then one atomic per warp.
  for (int o = 16; o > 0; o >>= 1) {
    wrong += __shfl_down_sync(0xffffffffu, wrong, o);
    first = min(first, __shfl_down_sync(0xffffffffu, first, o));
  }
  if ((threadIdx.x & 31) == 0 && wrong) {
    atomicAdd(&counters[0], wrong);
    atomicMin(&counters[1], first);
  }
}

__global__ void resetCounters(unsigned long long* counters) {
  counters[0] = 0;
  counters[1] = ~0ull;
  counters[2] = 0;
}

__global__ void addElements(unsigned long long* counters, unsigned long long n) {
  counters[2] += n;
}

Status launchFill(void* dst, size_t bytes, uint64_t seed, cudaStream_t stream, uint64_t offset, bool invert) {
  if (bytes == 0) return Status::ok();
  if (dst == nullptr) return PEERLAB_INVALID_ARGUMENT("fillPattern: null destination");
  int device = -1;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaStreamGetDevice(stream, &device)));
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device));
  const uint64_t chunks = (bytes + 15) / 16;
  fillKernel<<<gridForDevice(device, chunks, kThreads), kThreads, 0, stream>>>(static_cast<uint8_t*>(dst), bytes, seed,
                                                                               offset, invert);
  return PEERLAB_CUDA_LAUNCH("fillKernel");
}

}  // namespace

int gridForDevice(int device, uint64_t work_items, int threads_per_block, int blocks_per_sm) {
  static std::mutex mu;
  static std::array<int, 256> sms{};
  int count = 0;
  if (device >= 0 && device < static_cast<int>(sms.size())) {
    std::lock_guard<std::mutex> lock(mu);
    if (sms[device] == 0) {
      if (cudaDeviceGetAttribute(&sms[device], cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
        (void)cudaGetLastError();
        sms[device] = 1;
      }
    }
    count = sms[device];
  }
  if (count <= 0) count = 1;
  const uint64_t needed = (work_items + threads_per_block - 1) / threads_per_block;
  const uint64_t cap = static_cast<uint64_t>(count) * blocks_per_sm;
  return static_cast<int>(std::max<uint64_t>(1, std::min(needed, cap)));
}

Status fillPattern(void* dst, size_t bytes, uint64_t seed, cudaStream_t stream, uint64_t offset) {
  return launchFill(dst, bytes, seed, stream, offset, false);
}

Status poisonPattern(void* dst, size_t bytes, uint64_t seed, cudaStream_t stream, uint64_t offset) {
  return launchFill(dst, bytes, seed, stream, offset, true);
}

StatusOr<PatternChecker> PatternChecker::create(int device) {
  PEERLAB_ASSIGN_OR_RETURN(DeviceBuffer counters, allocDevice(device, 3 * sizeof(unsigned long long)));
  PEERLAB_ASSIGN_OR_RETURN(PinnedBuffer host, allocPinned(3 * sizeof(unsigned long long)));
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device));
  resetCounters<<<1, 1>>>(counters->as<unsigned long long>());
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA_LAUNCH("resetCounters"));
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaDeviceSynchronize()));
  return PatternChecker(device, std::move(counters), std::move(host));
}

Status PatternChecker::enqueue(const void* p, size_t bytes, uint64_t seed, cudaStream_t stream, size_t elem_bytes,
                               uint64_t offset) {
  if (elem_bytes == 0 || elem_bytes > 16 || (elem_bytes & (elem_bytes - 1)) != 0) {
    return PEERLAB_INVALID_ARGUMENT("pattern check: element size " + std::to_string(elem_bytes) +
                                    " is not 1, 2, 4, 8 or 16");
  }
  if (bytes == 0) return Status::ok();
  if (p == nullptr) return PEERLAB_INVALID_ARGUMENT("pattern check: null pointer");
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device_));
  const uint64_t chunks = (bytes + 15) / 16;
  auto* counters = counters_->as<unsigned long long>();
  checkKernel<<<gridForDevice(device_, chunks, kThreads), kThreads, 0, stream>>>(
      static_cast<const uint8_t*>(p), bytes, seed, offset, static_cast<uint32_t>(elem_bytes), counters);
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA_LAUNCH("checkKernel"));
  addElements<<<1, 1, 0, stream>>>(counters, (bytes + elem_bytes - 1) / elem_bytes);
  return PEERLAB_CUDA_LAUNCH("addElements");
}

StatusOr<PatternCheck> PatternChecker::collect(cudaStream_t stream, Deadline deadline) {
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device_));
  auto* counters = counters_->as<unsigned long long>();
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(
      cudaMemcpyAsync(host_->ptr, counters, 3 * sizeof(unsigned long long), cudaMemcpyDeviceToHost, stream)));
  resetCounters<<<1, 1, 0, stream>>>(counters);
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA_LAUNCH("resetCounters"));
  PEERLAB_RETURN_IF_ERROR(waitStream(stream, deadline, "pattern check"));
  const auto* h = host_->as<unsigned long long>();
  PatternCheck r;
  r.wrong = h[0];
  r.first_bad = h[1];
  r.elements = h[2];
  return r;
}

StatusOr<PatternCheck> checkPattern(const void* p, size_t bytes, uint64_t seed, int device, cudaStream_t stream,
                                    Deadline deadline, size_t elem_bytes, uint64_t offset) {
  PEERLAB_ASSIGN_OR_RETURN(PatternChecker checker, PatternChecker::create(device));
  PEERLAB_RETURN_IF_ERROR(checker.enqueue(p, bytes, seed, stream, elem_bytes, offset));
  return checker.collect(stream, deadline);
}

}  // namespace peerlab
