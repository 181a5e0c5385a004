#include "harness/faults/preload_engine.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace peerlab::faults::preload {

namespace {

thread_local int t_runtime_depth = 0;

std::atomic<void*> g_real_dlsym{nullptr};
std::atomic<void*> g_real_dlopen{nullptr};
std::atomic<void*> g_real_dlclose{nullptr};
std::atomic<GpaV2Fn> g_gpa_v2{nullptr};
std::atomic<GpaV1Fn> g_gpa_v1{nullptr};

// glibc's definition of `name` after this library: libc's since glibc 2.34, libdl's (GLIBC_2.2.5) before.
void* nextGlibc(std::atomic<void*>& cache, const char* name) {
  void* fn = cache.load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = dlvsym(RTLD_NEXT, name, "GLIBC_2.34");
    if (fn == nullptr) fn = dlvsym(RTLD_NEXT, name, "GLIBC_2.2.5");
    cache.store(fn, std::memory_order_release);
  }
  return fn;
}

int processRank() {
  for (const char* var : {"PEERLAB_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') return std::atoi(v);
  }
  return -1;
}

Config loadConfig() {
  Config cfg;
  const char* verbose = std::getenv(kEnvVerbose);
  cfg.verbose = verbose != nullptr && std::strcmp(verbose, "0") != 0 && *verbose != '\0';
  cfg.rank = processRank();
  const char* text = std::getenv(kEnvFault);
  if (text == nullptr || *text == '\0') return cfg;
  auto spec = parseFaultSpec(text);
  if (!spec.isOk()) {
    std::fprintf(stderr, "peerlab-faults: %s=%s: %s; no fault injected\n", kEnvFault, text,
                 spec.status().message().c_str());
    return cfg;
  }
  cfg.spec = *spec;
  cfg.engaged = cfg.spec.needsInterposer() && (cfg.spec.rank < 0 || cfg.spec.rank == cfg.rank);
  return cfg;
}

}  // namespace

const Config& config() {
  static const Config cfg = loadConfig();
  return cfg;
}

bool engaged(FaultKind kind) {
  const Config& cfg = config();
  return cfg.engaged && cfg.spec.kind == kind;
}

DlsymFn realDlsym() {
  return reinterpret_cast<DlsymFn>(nextGlibc(g_real_dlsym, "dlsym"));
}

void* openLoaded(const char* file) {
  using DlopenFn = void* (*)(const char*, int);
  auto fn = reinterpret_cast<DlopenFn>(nextGlibc(g_real_dlopen, "dlopen"));
  return fn != nullptr ? fn(file, RTLD_LAZY | RTLD_NOLOAD) : nullptr;
}

void closeLoaded(void* handle) {
  using DlcloseFn = int (*)(void*);
  auto fn = reinterpret_cast<DlcloseFn>(nextGlibc(g_real_dlclose, "dlclose"));
  if (fn != nullptr && handle != nullptr) fn(handle);
}

void noteRealGpaV2(GpaV2Fn fn) {
  if (fn != nullptr) g_gpa_v2.store(fn, std::memory_order_release);
}
void noteRealGpaV1(GpaV1Fn fn) {
  if (fn != nullptr) g_gpa_v1.store(fn, std::memory_order_release);
}

GpaV2Fn realGpaV2() {
  GpaV2Fn fn = g_gpa_v2.load(std::memory_order_acquire);
  if (fn != nullptr) return fn;
  // Not looked up by the process yet: take it from the loaded driver, if any.
  DlsymFn dls = realDlsym();
  if (dls == nullptr) return nullptr;
  if (void* lib = openLoaded("libcuda.so.1")) {
    fn = reinterpret_cast<GpaV2Fn>(dls(lib, "cuGetProcAddress_v2"));
    closeLoaded(lib);
  }
  noteRealGpaV2(fn);
  return fn;
}

GpaV1Fn realGpaV1() {
  return g_gpa_v1.load(std::memory_order_acquire);
}

void* realEntryPoint(const char* name, int version) {
  void* fn = nullptr;
  CUresult r = CUDA_ERROR_NOT_FOUND;
  if (GpaV2Fn v2 = realGpaV2()) {
    CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    r = v2(name, &fn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &q);
    if (q != CU_GET_PROC_ADDRESS_SUCCESS) fn = nullptr;
  } else if (GpaV1Fn v1 = realGpaV1()) {
    r = v1(name, &fn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
  }
  return r == CUDA_SUCCESS ? fn : nullptr;
}

RuntimeScope::RuntimeScope() {
  ++t_runtime_depth;
}
RuntimeScope::~RuntimeScope() {
  --t_runtime_depth;
}
bool insideRuntimeCall() {
  return t_runtime_depth > 0;
}

namespace {

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

std::string jsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

int64_t realtimeNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::atomic<int> g_lines{0};
constexpr int kMaxLines = 64;

void writeStats(const char* action, const std::string& detail) {
  const char* path = std::getenv(kEnvStats);
  if (path == nullptr || *path == '\0') return;
  const Config& cfg = config();
  std::string line = "{\"pid\":" + std::to_string(getpid()) + ",\"rank\":" + std::to_string(cfg.rank) +
                     ",\"fault\":\"" + jsonEscape(cfg.spec.name) + "\",\"action\":\"" + jsonEscape(action) +
                     "\",\"t_ns\":" + std::to_string(realtimeNs()) + ",\"detail\":\"" + jsonEscape(detail) + "\"}\n";
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  // One write of one short line: appends from several processes do not interleave.
  ssize_t n = write(fd, line.data(), line.size());
  (void)n;
  close(fd);
}

}  // namespace

void note(const char* action, const std::string& detail) {
  const Config& cfg = config();
  if (cfg.verbose) {
    int line = g_lines.fetch_add(1);
    if (line < kMaxLines) {
      std::fprintf(stderr, "peerlab-faults: %s %s (pid %d, rank %d)\n", action, detail.c_str(), getpid(), cfg.rank);
    } else if (line == kMaxLines) {
      std::fprintf(stderr, "peerlab-faults: further actions are not logged (pid %d)\n", getpid());
    }
  }
  writeStats(action, detail);
}

namespace {

// Loads the configuration when the library is loaded, so that every process under the fault says so once.
__attribute__((constructor)) void announce() {
  const Config& cfg = config();
  if (cfg.spec.kind == FaultKind::kNone && std::getenv(kEnvFault) == nullptr) return;
  std::string detail = "fault " + cfg.spec.canonical() + (cfg.engaged ? "" : " (not engaged in this process)");
  note("loaded", detail);
}

// Eligible calls counted against after= and count=.
std::mutex g_decide_mu;
int64_t g_eligible = 0;
int64_t g_injected = 0;

// Returns the injection index (0-based) or -1 when this eligible call passes untouched.
int64_t decide() {
  const FaultSpec& spec = config().spec;
  std::lock_guard<std::mutex> lock(g_decide_mu);
  const int64_t seen = g_eligible++;
  if (seen < spec.after) return -1;
  if (spec.count >= 0 && g_injected >= spec.count) return -1;
  return g_injected++;
}

bool pairMatches(int a, int b) {
  const FaultSpec& spec = config().spec;
  return spec.pair_a < 0 || (a == spec.pair_a && b == spec.pair_b);
}

// Real driver entry points for the interposer's own work, resolved through the process's cuGetProcAddress.
struct Driver {
  decltype(&::cuCtxGetCurrent) ctxGetCurrent = nullptr;
  decltype(&::cuCtxPushCurrent) ctxPush = nullptr;
  decltype(&::cuCtxPopCurrent) ctxPop = nullptr;
  decltype(&::cuCtxGetDevice) ctxGetDevice = nullptr;
  decltype(&::cuStreamGetCtx) streamGetCtx = nullptr;
  decltype(&::cuStreamGetDevice) streamGetDevice = nullptr;  // CUDA >= 12.8; optional
  decltype(&::cuPointerGetAttribute) pointerGetAttribute = nullptr;
  decltype(&::cuMemcpyAsync) memcpyAsync = nullptr;
  decltype(&::cuMemcpy) memcpySync = nullptr;
  decltype(&::cuLaunchHostFunc) launchHostFunc = nullptr;
  decltype(&::cuMemHostAlloc) memHostAlloc = nullptr;
  decltype(&::cuMemHostGetDevicePointer) memHostGetDevicePointer = nullptr;
  decltype(&::cuMemAlloc) memAlloc = nullptr;
  decltype(&::cuMemFree) memFree = nullptr;
  decltype(&::cuMemGetAddressRange) memGetAddressRange = nullptr;
  decltype(&::cuStreamWaitValue32) streamWaitValue32 = nullptr;
  decltype(&::cuMemGetAllocationPropertiesFromHandle) memGetAllocationProperties = nullptr;
  decltype(&::cuMemCreate) memCreate = nullptr;
  decltype(&::cuMemRelease) memRelease = nullptr;
  decltype(&::cuStreamIsCapturing) streamIsCapturing = nullptr;
  bool ready = false;
};

std::mutex g_driver_mu;
Driver g_driver;

template <class Fn>
bool resolveInto(Fn* out, const char* name, bool required, int version = kClassicAbiVersion) {
  *out = reinterpret_cast<Fn>(realEntryPoint(name, version));
  return *out != nullptr || !required;
}

// nullptr until the driver can be reached.
const Driver* driver() {
  std::lock_guard<std::mutex> lock(g_driver_mu);
  if (g_driver.ready) return &g_driver;
  Driver d;
  bool ok = resolveInto(&d.ctxGetCurrent, "cuCtxGetCurrent", true) &&
            resolveInto(&d.ctxPush, "cuCtxPushCurrent", true) && resolveInto(&d.ctxPop, "cuCtxPopCurrent", true) &&
            resolveInto(&d.ctxGetDevice, "cuCtxGetDevice", true) &&
            resolveInto(&d.streamGetCtx, "cuStreamGetCtx", true) &&
            resolveInto(&d.streamGetDevice, "cuStreamGetDevice", false, 12080) &&
            resolveInto(&d.pointerGetAttribute, "cuPointerGetAttribute", true) &&
            resolveInto(&d.memcpyAsync, "cuMemcpyAsync", true) && resolveInto(&d.memcpySync, "cuMemcpy", true) &&
            resolveInto(&d.launchHostFunc, "cuLaunchHostFunc", true) &&
            resolveInto(&d.memHostAlloc, "cuMemHostAlloc", true) &&
            resolveInto(&d.memHostGetDevicePointer, "cuMemHostGetDevicePointer", true) &&
            resolveInto(&d.memAlloc, "cuMemAlloc", true) && resolveInto(&d.memFree, "cuMemFree", true) &&
            resolveInto(&d.memGetAddressRange, "cuMemGetAddressRange", true) &&
            resolveInto(&d.streamWaitValue32, "cuStreamWaitValue32", true) &&
            resolveInto(&d.memGetAllocationProperties, "cuMemGetAllocationPropertiesFromHandle", false) &&
            resolveInto(&d.memCreate, "cuMemCreate", false) && resolveInto(&d.memRelease, "cuMemRelease", false) &&
            resolveInto(&d.streamIsCapturing, "cuStreamIsCapturing", false);
  if (!ok) return nullptr;
  d.ready = true;
  g_driver = d;
  return &g_driver;
}

bool isSpecialStream(CUstream s) {
  return s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

// Makes `ctx` current for the scope (nothing when ctx is null or already current).
class CtxGuard {
 public:
  CtxGuard(const Driver* d, CUcontext ctx) : d_(d) {
    CUcontext cur = nullptr;
    if (ctx != nullptr && d_->ctxGetCurrent(&cur) == CUDA_SUCCESS && cur != ctx) {
      pushed_ = d_->ctxPush(ctx) == CUDA_SUCCESS;
    }
  }
  ~CtxGuard() {
    if (pushed_) {
      CUcontext popped = nullptr;
      d_->ctxPop(&popped);
    }
  }
  CtxGuard(const CtxGuard&) = delete;
  CtxGuard& operator=(const CtxGuard&) = delete;

 private:
  const Driver* d_;
  bool pushed_ = false;
};

CUcontext streamContext(const Driver* d, CUstream s) {
  CUcontext ctx = nullptr;
  if (isSpecialStream(s)) {
    if (d->ctxGetCurrent(&ctx) != CUDA_SUCCESS) return nullptr;
    return ctx;
  }
  if (d->streamGetCtx(s, &ctx) != CUDA_SUCCESS) return nullptr;
  return ctx;
}

int contextDevice(const Driver* d, CUcontext ctx) {
  if (ctx == nullptr) return -1;
  CtxGuard guard(d, ctx);
  CUdevice dev = -1;
  if (d->ctxGetDevice(&dev) != CUDA_SUCCESS) return -1;
  return static_cast<int>(dev);
}

int currentDevice(const Driver* d) {
  CUdevice dev = -1;
  if (d->ctxGetDevice(&dev) != CUDA_SUCCESS) return -1;
  return static_cast<int>(dev);
}

int streamDevice(const Driver* d, CUstream s) {
  if (d->streamGetDevice != nullptr) {
    CUdevice dev = -1;
    if (d->streamGetDevice(s, &dev) == CUDA_SUCCESS) return static_cast<int>(dev);
  }
  return contextDevice(d, streamContext(d, s));
}

// Ordinal of the device a pointer's memory lives on, -1 for host or unknown memory.
int pointerDevice(const Driver* d, CUdeviceptr p) {
  if (p == 0) return -1;
  unsigned int type = 0;
  if (d->pointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != CUDA_SUCCESS) return -1;
  if (type != CU_MEMORYTYPE_DEVICE) return -1;
  int ordinal = -1;
  if (d->pointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) != CUDA_SUCCESS) return -1;
  return ordinal;
}

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

uint32_t* newHangWord(const Driver* d) {
  std::lock_guard<std::mutex> lock(g_hang_mu);
  if (g_hang_pool == nullptr) {
    void* p = nullptr;
    if (d->memHostAlloc(&p, kHangWords * sizeof(uint32_t), CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP) !=
        CUDA_SUCCESS) {
      return nullptr;
    }
    std::memset(p, 0, kHangWords * sizeof(uint32_t));
    g_hang_pool = static_cast<uint32_t*>(p);
  }
  if (g_hang_next >= kHangWords) return nullptr;
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
  if (g_hang_pool == nullptr) {
    void* p = nullptr;
    if (d->memHostAlloc(&p, kHangWords * sizeof(uint32_t), CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP) !=
        CUDA_SUCCESS) {
      return false;
    }
    std::memset(p, 0, kHangWords * sizeof(uint32_t));
    g_hang_pool = static_cast<uint32_t*>(p);
  }
  return true;
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
std::map<CUdeviceptr, CUdeviceptr> g_ipc_scratch;  // pointer handed out -> scratch allocation
std::set<CUmemGenericAllocationHandle> g_imported;

// Legacy IPC mappings opened in this process while a copy fault is engaged: base -> end. The driver may report such
// a mapping under the ordinal of the device that opened it, so a copy into another process's memory would look
// device-local; copy() counts a copy that touches one as crossing devices (kIpcPeer when the owner is not known).
std::mutex g_ipc_maps_mu;
std::map<CUdeviceptr, CUdeviceptr> g_ipc_maps;
constexpr int kIpcPeer = 1 << 16;

void recordIpcMapping(const Driver* d, CUdeviceptr p) {
  CUdeviceptr base = 0;
  size_t size = 0;
  if (d == nullptr || p == 0 || d->memGetAddressRange(&base, &size, p) != CUDA_SUCCESS) return;
  std::lock_guard<std::mutex> lock(g_ipc_maps_mu);
  g_ipc_maps[base] = base + size;
}

bool inIpcMapping(CUdeviceptr p) {
  std::lock_guard<std::mutex> lock(g_ipc_maps_mu);
  auto it = g_ipc_maps.upper_bound(p);
  if (it == g_ipc_maps.begin()) return false;
  --it;
  return p >= it->first && p < it->second;
}

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

const char* layerName(Layer layer) {
  return layer == Layer::kRuntime ? "runtime" : "driver";
}

}  // namespace

void lieCanAccess(Layer layer, int* can_access, int device, int peer) {
  if (!engaged(FaultKind::kLie) || can_access == nullptr || device == peer) return;
  if (*can_access == 0)
    note("lie", format("can-access-peer %d->%d reported 1 (really 0, %s)", device, peer, layerName(layer)));
  *can_access = 1;
}

void lieP2PAttribute(Layer layer, int* value, int attribute, int src, int dst) {
  if (!engaged(FaultKind::kLie) || value == nullptr || src == dst) return;
  // Access supported (2), native atomics (3) and CUDA array access (4) have the same numbers in both APIs.
  if (attribute != 2 && attribute != 3 && attribute != 4) return;
  if (*value == 0) {
    note("lie", format("p2p attribute %d for %d->%d reported 1 (really 0, %s)", attribute, src, dst, layerName(layer)));
  }
  *value = 1;
}

int enablePeer(Layer layer, int current, int peer, const std::function<int()>& real) {
  const FaultSpec& spec = config().spec;
  if (engaged(FaultKind::kEnableError)) {
    bool match = true;
    if (spec.pair_a >= 0) {
      const bool forward = current == spec.pair_a && peer == spec.pair_b;
      const bool reverse = current == spec.pair_b && peer == spec.pair_a;
      match = spec.direction == Direction::kFirst    ? forward
              : spec.direction == Direction::kSecond ? reverse
                                                     : forward || reverse;
    } else if (spec.direction == Direction::kFirst) {
      match = current < peer;
    } else if (spec.direction == Direction::kSecond) {
      match = current > peer;
    }
    if (match && decide() >= 0) {
      if (spec.code == 704) {
        // "Already enabled" is reported after really enabling, so the state matches the answer.
        const int r = real();
        note("enable_error", format("enable %d->%d returned 704 (real result %d, access enabled, %s)", current, peer, r,
                                    layerName(layer)));
        return 704;
      }
      note("enable_error", format("enable %d->%d returned %d (%s)", current, peer, spec.code, layerName(layer)));
      return spec.code;
    }
    return real();
  }
  const int r = real();
  if (engaged(FaultKind::kLie) && r == 217) {
    note("lie", format("enable %d->%d reported success (really 217, %s)", current, peer, layerName(layer)));
    return 0;
  }
  return r;
}

bool copyFaultEngaged() {
  const Config& cfg = config();
  if (!cfg.engaged) return false;
  switch (cfg.spec.kind) {
    case FaultKind::kLie:
    case FaultKind::kBitflip:
    case FaultKind::kCopyHang:
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
  if (spec.kind != FaultKind::kDropWrites && !ensurePools(d, stream)) {
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

bool ipcFaultEngaged() {
  const Config& cfg = config();
  if (!cfg.engaged) return false;
  return cfg.spec.kind == FaultKind::kIpcOpenFail ||
         (cfg.spec.kind == FaultKind::kDropWrites && cfg.spec.drop != DropTarget::kCopy);
}

bool ipcOpenHooked() {
  return ipcFaultEngaged() || copyFaultEngaged();
}

int ipcOpen(Layer layer, CUdeviceptr* ptr, const std::function<int()>& real,
            const std::function<int(CUdeviceptr)>& real_close) {
  if (!ipcFaultEngaged()) {
    // A copy fault: the mapping is opened as asked, and remembered as another process's memory.
    const int r = real();
    if (r == 0 && ptr != nullptr) recordIpcMapping(driver(), *ptr);
    return r;
  }
  const FaultSpec& spec = config().spec;
  const bool paired = spec.pair_a >= 0;
  if (engaged(FaultKind::kIpcOpenFail) && spec.ipc == IpcKind::kVmm) return real();
  if (engaged(FaultKind::kIpcOpenFail) && !paired) {
    if (decide() < 0) return real();
    note("ipc_open_fail", format("IPC handle open returned %d (%s)", spec.code, layerName(layer)));
    return spec.code;
  }
  const int r = real();
  if (r != 0 || ptr == nullptr) return r;
  const Driver* d = driver();
  if (d == nullptr) return r;
  // pair=a-b: a opens (and writes through the mapping), b owns the memory.
  const int opener = currentDevice(d);
  const int owner = pointerDevice(d, *ptr);
  if (paired && (opener != spec.pair_a || owner != spec.pair_b)) return r;
  if (decide() < 0) return r;
  if (engaged(FaultKind::kIpcOpenFail)) {
    real_close(*ptr);
    *ptr = 0;
    note("ipc_open_fail",
         format("IPC handle open %d->%d returned %d (%s)", opener, owner, spec.code, layerName(layer)));
    return spec.code;
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  CUdeviceptr scratch = 0;
  if (d->memGetAddressRange(&base, &size, *ptr) != CUDA_SUCCESS || d->memAlloc(&scratch, size) != CUDA_SUCCESS) {
    note("drop_writes", "no scratch memory; IPC mapping kept");
    return r;
  }
  // The scratch starts as a copy of the owner's memory, so reads look plausible until the first write.
  d->memcpySync(scratch, base, size);
  const CUdeviceptr mapped = *ptr;
  real_close(mapped);
  {
    std::lock_guard<std::mutex> lock(g_scratch_mu);
    g_ipc_scratch[scratch + (mapped - base)] = scratch;
  }
  *ptr = scratch + (mapped - base);
  note("drop_writes", format("IPC mapping 0x%llx of device %d (%zu bytes) opened on device %d replaced by local "
                             "scratch 0x%llx (%s)",
                             static_cast<unsigned long long>(mapped), owner, size, opener,
                             static_cast<unsigned long long>(scratch), layerName(layer)));
  return r;
}

int ipcClose(CUdeviceptr ptr, const std::function<int()>& real) {
  {
    std::lock_guard<std::mutex> lock(g_ipc_maps_mu);
    g_ipc_maps.erase(ptr);
  }
  CUdeviceptr scratch = 0;
  {
    std::lock_guard<std::mutex> lock(g_scratch_mu);
    auto it = g_ipc_scratch.find(ptr);
    if (it != g_ipc_scratch.end()) {
      scratch = it->second;
      g_ipc_scratch.erase(it);
    }
  }
  if (scratch == 0) return real();
  if (const Driver* d = driver()) d->memFree(scratch);
  note("drop_writes", format("scratch 0x%llx freed at IPC close", static_cast<unsigned long long>(scratch)));
  return 0;
}

void exported(Layer layer, bool vmm, const char* api) {
  if (!engaged(FaultKind::kKillAfterExport)) return;
  const FaultSpec& spec = config().spec;
  if ((vmm && spec.ipc == IpcKind::kLegacy) || (!vmm && spec.ipc == IpcKind::kVmm)) return;
  if (decide() < 0) return;
  if (spec.ms == 0) {
    note("kill_after_export", format("SIGKILL after %s (%s)", api, layerName(layer)));
    kill(getpid(), SIGKILL);
    return;
  }
  note("kill_after_export", format("SIGKILL in %" PRId64 " ms after %s (%s)", spec.ms, api, layerName(layer)));
  const int64_t ms = spec.ms;
  std::thread([ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    note("kill_after_export", "SIGKILL now");
    kill(getpid(), SIGKILL);
  }).detach();
}

namespace {
// The device an allocation handle's memory lives on (the exporter's ordinal for an imported handle), -1 if unknown.
int handleDevice(const Driver* d, CUmemGenericAllocationHandle handle) {
  CUmemAllocationProp prop{};
  if (d->memGetAllocationProperties == nullptr || d->memGetAllocationProperties(&prop, handle) != CUDA_SUCCESS) {
    return -1;
  }
  return prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop.location.id : -1;
}
}  // namespace

int vmmImport(CUmemGenericAllocationHandle* handle, const std::function<int()>& real) {
  const FaultSpec& spec = config().spec;
  const bool paired = spec.pair_a >= 0;
  if (engaged(FaultKind::kIpcOpenFail)) {
    if (spec.ipc == IpcKind::kLegacy) return real();
    if (!paired) {
      if (decide() < 0) return real();
      note("ipc_open_fail", format("cuMemImportFromShareableHandle returned %d", spec.code));
      return spec.code;
    }
    // pair=a-b: a imports, b owns the memory.
    const int r = real();
    const Driver* d = driver();
    if (r != 0 || handle == nullptr || d == nullptr) return r;
    const int importer = currentDevice(d);
    const int owner = handleDevice(d, *handle);
    if (importer != spec.pair_a || owner != spec.pair_b || decide() < 0) return r;
    if (d->memRelease != nullptr) d->memRelease(*handle);
    *handle = 0;
    note("ipc_open_fail", format("cuMemImportFromShareableHandle %d->%d returned %d", importer, owner, spec.code));
    return spec.code;
  }
  const int r = real();
  if (r == 0 && engaged(FaultKind::kDropWrites) && handle != nullptr) {
    std::lock_guard<std::mutex> lock(g_scratch_mu);
    g_imported.insert(*handle);
  }
  return r;
}

int vmmMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags,
           const std::function<int(CUmemGenericAllocationHandle)>& real) {
  bool imported = false;
  if (engaged(FaultKind::kDropWrites)) {
    std::lock_guard<std::mutex> lock(g_scratch_mu);
    imported = g_imported.count(handle) != 0;
  }
  if (!imported) return real(handle);
  const Driver* d = driver();
  if (d == nullptr || d->memCreate == nullptr || d->memGetAllocationProperties == nullptr) return real(handle);
  const FaultSpec& spec = config().spec;
  const int device = currentDevice(d);
  const int owner = handleDevice(d, handle);
  if (spec.pair_a >= 0 && (device != spec.pair_a || owner != spec.pair_b)) return real(handle);
  CUmemAllocationProp prop{};
  if (device < 0 || d->memGetAllocationProperties(&prop, handle) != CUDA_SUCCESS || decide() < 0) return real(handle);
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  CUmemGenericAllocationHandle local = 0;
  if (d->memCreate(&local, size + offset, &prop, 0) != CUDA_SUCCESS) {
    note("drop_writes", "no scratch memory; VMM mapping kept");
    return real(handle);
  }
  const int r = real(local);
  // The mapping holds the scratch from here; it is freed when the program unmaps the range.
  d->memRelease(local);
  note("drop_writes", format("imported VMM mapping of device %d at 0x%llx (%zu bytes) backed by local scratch on "
                             "device %d",
                             owner, static_cast<unsigned long long>(ptr), size, device));
  return r;
}

bool signalFaultEngaged() {
  return engaged(FaultKind::kSignalWithhold) || engaged(FaultKind::kSignalLate);
}

namespace {
void CUDA_CB sleepHostFn(void* user) {
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(reinterpret_cast<uintptr_t>(user))));
}
}  // namespace

bool beforeStreamWrite(CUstream stream, uint64_t value, const char* api) {
  const FaultSpec& spec = config().spec;
  if (spec.value >= 0 && value != static_cast<uint64_t>(spec.value)) return false;
  if (decide() < 0) return false;
  if (spec.kind == FaultKind::kSignalWithhold) {
    note("signal_withhold", format("%s of value %llu dropped", api, static_cast<unsigned long long>(value)));
    return true;
  }
  const Driver* d = driver();
  if (d == nullptr) return false;
  CtxGuard guard(d, streamContext(d, stream));
  const bool ok =
      d->launchHostFunc(stream, sleepHostFn, reinterpret_cast<void*>(static_cast<uintptr_t>(spec.ms))) == CUDA_SUCCESS;
  note("signal_late", format("%s of value %llu %s by %" PRId64 " ms", api, static_cast<unsigned long long>(value),
                             ok ? "delayed" : "could not be delayed", spec.ms));
  return false;
}

void teardown(const char* api) {
  if (g_hang_count.load(std::memory_order_relaxed) == 0) return;
  if (config().spec.release != Release::kTeardown) return;
  releaseAll(api);
}

}  // namespace peerlab::faults::preload
