// Copy faults: bitflip and lie corrupt bytes in stream order, drop_writes sends peer-bound copies to scratch,
// copy_hang stalls the stream until a timer, teardown or exit lets it go.
#include <algorithm>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "harness/faults/preload_internal.h"

namespace peerlab::faults::preload {

namespace {

// Pinned host slots for the read-modify-write that corrupts a byte in stream order.
struct FlipSlot {
  uint8_t value;
  uint8_t mask;
};
constexpr size_t kFlipSlots = 16384;
std::mutex g_pool_mu;
FlipSlot* g_flip_pool = nullptr;
std::atomic<size_t> g_flip_next{0};

FlipSlot* flipSlot(const Driver* d) {
  {
    std::lock_guard<std::mutex> lock(g_pool_mu);
    if (g_flip_pool == nullptr) {
      void* p = nullptr;
      if (d->memHostAlloc(&p, kFlipSlots * sizeof(FlipSlot), CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS) return nullptr;
      g_flip_pool = static_cast<FlipSlot*>(p);
    }
  }
  return &g_flip_pool[g_flip_next.fetch_add(1) % kFlipSlots];
}

void CUDA_CB xorSlot(void* user) {
  auto* slot = static_cast<FlipSlot*>(user);
  slot->value = static_cast<uint8_t>(slot->value ^ slot->mask);
}

struct Flip {
  size_t offset;
  uint8_t mask;
};

// XORs `mask` into each byte after the work already on the stream (async) or right away (sync copies).
bool corrupt(const Driver* d, CUstream stream, bool async, CUdeviceptr dst, const std::vector<Flip>& flips) {
  CtxGuard guard(d, streamContext(d, stream));
  for (const Flip& f : flips) {
    if (async) {
      FlipSlot* slot = flipSlot(d);
      if (slot == nullptr) return false;
      slot->mask = f.mask;
      const auto host = reinterpret_cast<CUdeviceptr>(&slot->value);
      if (d->memcpyAsync(host, dst + f.offset, 1, stream) != CUDA_SUCCESS) return false;
      if (d->launchHostFunc(stream, xorSlot, slot) != CUDA_SUCCESS) return false;
      if (d->memcpyAsync(dst + f.offset, host, 1, stream) != CUDA_SUCCESS) return false;
    } else {
      uint8_t value = 0;
      const auto host = reinterpret_cast<CUdeviceptr>(&value);
      if (d->memcpySync(host, dst + f.offset, 1) != CUDA_SUCCESS) return false;
      value = static_cast<uint8_t>(value ^ f.mask);
      if (d->memcpySync(dst + f.offset, host, 1) != CUDA_SUCCESS) return false;
    }
  }
  return true;
}

// Words copy_hang stalls streams on: mapped pinned host memory, let go by a plain store.
constexpr size_t kHangWords = 4096;
std::mutex g_hang_mu;
uint32_t* g_hang_pool = nullptr;
size_t g_hang_next = 0;
std::vector<uint32_t*> g_hang_pending;
std::atomic<int> g_hang_count{0};
bool g_hang_atexit = false;

void releaseWord(uint32_t* word) {
  __atomic_store_n(word, 1u, __ATOMIC_RELEASE);
}

void releaseAll(const char* why) {
  std::vector<uint32_t*> words;
  {
    std::lock_guard<std::mutex> lock(g_hang_mu);
    words.swap(g_hang_pending);
    g_hang_count.store(0);
  }
  for (uint32_t* w : words)
    releaseWord(w);
  if (!words.empty()) note("copy_hang", format("released %zu stalled copies at %s", words.size(), why));
}

void releaseAtExit() {
  releaseAll("exit");
}

// Allocates the hang pool once (zeroed, mapped for the device); g_hang_mu held. False when it cannot be had.
bool haveHangPool(const Driver* d) {
  if (g_hang_pool != nullptr) return true;
  void* p = nullptr;
  if (d->memHostAlloc(&p, kHangWords * sizeof(uint32_t), CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP) !=
      CUDA_SUCCESS) {
    return false;
  }
  std::memset(p, 0, kHangWords * sizeof(uint32_t));
  g_hang_pool = static_cast<uint32_t*>(p);
  return true;
}

uint32_t* newHangWord(const Driver* d) {
  std::lock_guard<std::mutex> lock(g_hang_mu);
  if (!haveHangPool(d) || g_hang_next >= kHangWords) return nullptr;
  return &g_hang_pool[g_hang_next++];
}

// Pinned memory cannot be allocated while a stream captures a graph (that would invalidate the capture): both pools
// are allocated at the first intercepted peer copy outside capture. False when they cannot be had yet.
bool ensurePools(const Driver* d, CUstream stream) {
  {
    std::lock_guard<std::mutex> a(g_pool_mu);
    std::lock_guard<std::mutex> b(g_hang_mu);
    if (g_flip_pool != nullptr && g_hang_pool != nullptr) return true;
  }
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (d->streamIsCapturing != nullptr && d->streamIsCapturing(stream, &capture) == CUDA_SUCCESS &&
      capture != CU_STREAM_CAPTURE_STATUS_NONE) {
    return false;
  }
  CtxGuard guard(d, streamContext(d, stream));
  if (flipSlot(d) == nullptr) return false;
  std::lock_guard<std::mutex> lock(g_hang_mu);
  return haveHangPool(d);
}

// Stalls `stream` until the word is let go. Returns false when the stall could not be enqueued.
bool stall(const Driver* d, CUstream stream) {
  CtxGuard guard(d, streamContext(d, stream));
  uint32_t* word = newHangWord(d);
  if (word == nullptr) return false;
  CUdeviceptr dword = 0;
  if (d->memHostGetDevicePointer(&dword, word, 0) != CUDA_SUCCESS) return false;
  if (d->streamWaitValue32(stream, dword, 1, CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS) return false;
  const FaultSpec& spec = config().spec;
  if (spec.release == Release::kTimer) {
    const int64_t ms = spec.ms;
    std::thread([word, ms] {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      releaseWord(word);
      note("copy_hang", format("released a stalled copy after %" PRId64 " ms", ms));
    }).detach();
  } else {
    std::lock_guard<std::mutex> lock(g_hang_mu);
    g_hang_pending.push_back(word);
    g_hang_count.fetch_add(1);
  }
  // Registered after the runtime initialized, so it runs before the runtime's own teardown at exit.
  std::lock_guard<std::mutex> lock(g_hang_mu);
  if (!g_hang_atexit) {
    g_hang_atexit = true;
    std::atexit(releaseAtExit);
  }
  return true;
}

// Scratch that drop_writes sends peer-bound copies to, one per device.
std::mutex g_scratch_mu;
std::map<int, std::pair<CUdeviceptr, size_t>> g_copy_scratch;

// A copy that touches a legacy IPC mapping whose owner is not known counts as going to this device.
constexpr int kIpcPeer = 1 << 16;

std::string deviceLabel(int device) {
  return device == kIpcPeer ? std::string("ipc peer") : std::to_string(device);
}

CUdeviceptr copyScratch(const Driver* d, CUcontext ctx, int device, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_scratch_mu);
  auto& slot = g_copy_scratch[device];
  if (slot.second >= bytes) return slot.first;
  CtxGuard guard(d, ctx);
  CUdeviceptr p = 0;
  const size_t size = std::max(bytes, size_t{1} << 20);
  if (d->memAlloc(&p, size) != CUDA_SUCCESS) return 0;
  // The previous, smaller scratch may still be the target of queued copies; it stays until the process exits.
  slot = {p, size};
  return p;
}

}  // namespace

bool copyFaultEngaged() {
  const Config& cfg = config();
  if (!cfg.engaged) return false;
  switch (cfg.spec.kind) {
    case FaultKind::kLie:
    case FaultKind::kBitflip:
    case FaultKind::kCopyHang:
    case FaultKind::kCopySlow:
      return true;
    case FaultKind::kDropWrites:
      return cfg.spec.drop != DropTarget::kIpc;
    default:
      return false;
  }
}

int copy(const CopyCall& call, const std::function<int(CUdeviceptr dst, int dst_device)>& real) {
  const Driver* d = driver();
  if (d == nullptr || call.bytes == 0) return real(call.dst, call.dst_device);
  const FaultSpec& spec = config().spec;
  int dst_dev = call.dst_device >= 0 ? call.dst_device : pointerDevice(d, call.dst);
  int src_dev = call.src_device >= 0 ? call.src_device : pointerDevice(d, call.src);
  if (dst_dev >= 0 && dst_dev == src_dev) {
    if (inIpcMapping(call.dst)) {
      dst_dev = kIpcPeer;
    } else if (inIpcMapping(call.src)) {
      src_dev = kIpcPeer;
    }
  }
  if (dst_dev < 0 || src_dev < 0 || dst_dev == src_dev) return real(call.dst, call.dst_device);
  CUstream stream = call.stream;
  if (stream == nullptr) stream = call.per_thread ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
  const int stream_dev = streamDevice(d, stream);
  const Side side = stream_dev == src_dev ? Side::kWrite : stream_dev == dst_dev ? Side::kRead : Side::kAny;
  if (spec.side != Side::kAny && side != spec.side) return real(call.dst, dst_dev);
  if (!pairMatches(src_dev, dst_dev)) return real(call.dst, dst_dev);
  // Dropped writes and slowed copies need neither pool (no flipped bytes, no hang word).
  if (spec.kind != FaultKind::kDropWrites && spec.kind != FaultKind::kCopySlow && !ensurePools(d, stream)) {
    note(spec.name.c_str(), "not applied: the first peer copy seen is inside graph capture");
    return real(call.dst, dst_dev);
  }
  const int64_t index = decide();
  if (index < 0) return real(call.dst, dst_dev);

  const char* side_name = side == Side::kWrite ? "write" : side == Side::kRead ? "read" : "?";
  const std::string where = format("copy %s->%s side %s, %zu bytes, %s", deviceLabel(src_dev).c_str(),
                                   deviceLabel(dst_dev).c_str(), side_name, call.bytes, call.api);
  switch (spec.kind) {
    case FaultKind::kBitflip: {
      const int r = real(call.dst, dst_dev);
      if (r != 0) return r;
      const uint64_t draw = mix64(spec.seed ^ mix64(static_cast<uint64_t>(index)));
      const size_t offset = spec.offset ? static_cast<size_t>(*spec.offset % call.bytes) : draw % call.bytes;
      const int bit = spec.bit >= 0 ? spec.bit : static_cast<int>(mix64(draw) % 8);
      if (corrupt(d, stream, call.async, call.dst, {{offset, static_cast<uint8_t>(1u << bit)}})) {
        note("bitflip", format("at 0x%llx offset %zu bit %d (%s)", static_cast<unsigned long long>(call.dst + offset),
                               offset, bit, where.c_str()));
      } else {
        note("bitflip", "could not be applied (" + where + ")");
      }
      return r;
    }
    case FaultKind::kLie: {
      const int r = real(call.dst, dst_dev);
      if (r != 0) return r;
      std::vector<Flip> flips;
      std::set<size_t> used;
      for (int k = 0; k < spec.flips && used.size() < call.bytes; ++k) {
        uint64_t draw = mix64(spec.seed ^ mix64(static_cast<uint64_t>(index) * 64 + static_cast<uint64_t>(k)));
        size_t offset = draw % call.bytes;
        while (!used.insert(offset).second)
          offset = (offset + 1) % call.bytes;
        flips.push_back({offset, static_cast<uint8_t>(mix64(draw) % 255 + 1)});
      }
      const bool ok = corrupt(d, stream, call.async, call.dst, flips);
      note("lie", format("%s %zu bytes from offset %zu (%s)", ok ? "corrupted" : "could not corrupt", flips.size(),
                         flips.empty() ? size_t{0} : flips[0].offset, where.c_str()));
      return r;
    }
    case FaultKind::kDropWrites: {
      const int scratch_dev = stream_dev >= 0 ? stream_dev : src_dev;
      const CUdeviceptr scratch = copyScratch(d, streamContext(d, stream), scratch_dev, call.bytes);
      if (scratch == 0) {
        note("drop_writes", "no scratch memory; copy not dropped (" + where + ")");
        return real(call.dst, dst_dev);
      }
      note("drop_writes", format("copy to 0x%llx landed in scratch 0x%llx on device %d (%s)",
                                 static_cast<unsigned long long>(call.dst), static_cast<unsigned long long>(scratch),
                                 scratch_dev, where.c_str()));
      return real(scratch, scratch_dev);
    }
    case FaultKind::kCopySlow: {
      const int r = real(call.dst, dst_dev);
      if (r != 0) return r;
      // The same bytes again, in stream order after the copy: the destination keeps the right data, the copy takes
      // `percent`% longer on the link it crosses.
      CtxGuard guard(d, streamContext(d, stream));
      size_t left = call.bytes * static_cast<size_t>(spec.percent) / 100;
      left = std::max<size_t>(left, 1);
      bool ok = true;
      while (left > 0 && ok) {
        const size_t n = std::min(left, call.bytes);
        ok = (call.async ? d->memcpyAsync(call.dst, call.src, n, stream) : d->memcpySync(call.dst, call.src, n)) ==
             CUDA_SUCCESS;
        left -= n;
      }
      note("copy_slow",
           format("%s %d%% of the bytes again (%s)", ok ? "copied" : "could not copy", spec.percent, where.c_str()));
      return r;
    }
    case FaultKind::kCopyHang: {
      if (!stall(d, stream)) {
        note("copy_hang", "could not stall the stream (" + where + ")");
        return real(call.dst, dst_dev);
      }
      note("copy_hang", "stalled (" + where + ")");
      return real(call.dst, dst_dev);
    }
    default:
      return real(call.dst, dst_dev);
  }
}

void teardown(const char* api) {
  if (g_hang_count.load(std::memory_order_relaxed) == 0) return;
  if (config().spec.release != Release::kTeardown) return;
  releaseAll(api);
}

}  // namespace peerlab::faults::preload
