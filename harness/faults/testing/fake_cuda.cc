// A host-memory stand-in for libcuda, for testing the interposer on machines without a GPU. It exports
// cuGetProcAddress (4 arguments) and cuGetProcAddress_v2 (5 arguments) and the driver functions the interposer and
// the test program use. "Device" memory is host memory tagged with a device ordinal; streams are queues that run
// each operation as soon as every earlier wait on the stream is satisfied; VMM allocations are memfd files, mapped
// with mmap so that two mappings of one allocation share bytes like the real thing.

#include <cuda.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#undef cuGetProcAddress

namespace {

constexpr int kDevices = 4;

struct FakeCtx {
  int device;
};
FakeCtx g_ctx[kDevices] = {{0}, {1}, {2}, {3}};

thread_local std::deque<CUcontext> t_ctx_stack;

CUcontext currentCtx() {
  return t_ctx_stack.empty() ? nullptr : t_ctx_stack.back();
}
int currentDevice() {
  CUcontext c = currentCtx();
  return c == nullptr ? -1 : reinterpret_cast<FakeCtx*>(c)->device;
}

struct Region {
  size_t size;
  int device;  // -1: host
  bool freeable;
};

std::recursive_mutex g_mu;
std::map<uintptr_t, Region> g_regions;
std::map<std::string, int> g_counters;
bool g_peer_enabled[kDevices][kDevices] = {};

void count(const char* what) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  ++g_counters[what];
}

const Region* regionOf(uintptr_t p, uintptr_t* base) {
  auto it = g_regions.upper_bound(p);
  if (it == g_regions.begin()) return nullptr;
  --it;
  if (p >= it->first + it->second.size) return nullptr;
  if (base != nullptr) *base = it->first;
  return &it->second;
}

struct Op {
  // A wait when addr != nullptr; otherwise an action.
  volatile uint32_t* addr = nullptr;
  uint32_t value = 0;
  std::function<void()> action;
};

struct FakeStream {
  int device;
  std::deque<Op> ops;
};

FakeStream g_default_streams[kDevices] = {{0, {}}, {1, {}}, {2, {}}, {3, {}}};

FakeStream* streamOf(CUstream s) {
  if (s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
    const int dev = currentDevice();
    return &g_default_streams[dev < 0 ? 0 : dev];
  }
  return reinterpret_cast<FakeStream*>(s);
}

// Runs operations from the front while nothing waits.
void progress(FakeStream* st) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  while (!st->ops.empty()) {
    Op& op = st->ops.front();
    if (op.addr != nullptr) {
      if (static_cast<int32_t>(__atomic_load_n(op.addr, __ATOMIC_ACQUIRE) - op.value) < 0) return;
      st->ops.pop_front();
      continue;
    }
    auto action = std::move(op.action);
    st->ops.pop_front();
    action();
  }
}

void enqueue(CUstream s, Op op) {
  FakeStream* st = streamOf(s);
  {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    st->ops.push_back(std::move(op));
  }
  progress(st);
}

void enqueueAction(CUstream s, std::function<void()> fn) {
  Op op;
  op.action = std::move(fn);
  enqueue(s, std::move(op));
}

CUresult syncStream(FakeStream* st) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    progress(st);
    {
      std::lock_guard<std::recursive_mutex> lock(g_mu);
      if (st->ops.empty()) return CUDA_SUCCESS;
    }
    if (std::chrono::steady_clock::now() > deadline) return CUDA_ERROR_LAUNCH_TIMEOUT;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// VMM: allocations are memfd files.
struct VmmAlloc {
  int fd;
  size_t size;
  int device;
};
std::map<CUmemGenericAllocationHandle, VmmAlloc> g_vmm;
CUmemGenericAllocationHandle g_next_handle = 1;
std::map<ino_t, int> g_inode_device;

bool p2pAllowed() {
  const char* v = std::getenv("PEERLAB_FAKE_P2P");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace

extern "C" {

int peerlab_fake_counter(const char* name) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  auto it = g_counters.find(name);
  return it == g_counters.end() ? 0 : it->second;
}

CUresult cuInit(unsigned int) {
  return CUDA_SUCCESS;
}
CUresult cuDriverGetVersion(int* v) {
  *v = CUDA_VERSION;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetCount(int* n) {
  *n = kDevices;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  if (dev < 0 || dev >= kDevices) return CUDA_ERROR_INVALID_DEVICE;
  *ctx = reinterpret_cast<CUcontext>(&g_ctx[dev]);
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease(CUdevice) {
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxReset(CUdevice) {
  return CUDA_SUCCESS;
}
CUresult cuCtxDestroy(CUcontext) {
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* ctx) {
  *ctx = currentCtx();
  return CUDA_SUCCESS;
}
CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (t_ctx_stack.empty()) {
    t_ctx_stack.push_back(ctx);
  } else {
    t_ctx_stack.back() = ctx;
  }
  return CUDA_SUCCESS;
}
CUresult cuCtxPushCurrent(CUcontext ctx) {
  t_ctx_stack.push_back(ctx);
  return CUDA_SUCCESS;
}
CUresult cuCtxPopCurrent(CUcontext* ctx) {
  if (t_ctx_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx != nullptr) *ctx = t_ctx_stack.back();
  t_ctx_stack.pop_back();
  return CUDA_SUCCESS;
}
CUresult cuCtxGetDevice(CUdevice* dev) {
  const int d = currentDevice();
  if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
  *dev = d;
  return CUDA_SUCCESS;
}

CUresult cuDeviceCanAccessPeer(int* can, CUdevice dev, CUdevice peer) {
  if (dev < 0 || dev >= kDevices || peer < 0 || peer >= kDevices) return CUDA_ERROR_INVALID_DEVICE;
  *can = p2pAllowed() && dev != peer ? 1 : 0;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attr, CUdevice src, CUdevice dst) {
  if (src < 0 || src >= kDevices || dst < 0 || dst >= kDevices) return CUDA_ERROR_INVALID_DEVICE;
  *value = attr == CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK ? 0 : (p2pAllowed() && src != dst ? 1 : 0);
  return CUDA_SUCCESS;
}
CUresult cuCtxEnablePeerAccess(CUcontext peer_ctx, unsigned int) {
  const int cur = currentDevice();
  if (cur < 0 || peer_ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const int peer = reinterpret_cast<FakeCtx*>(peer_ctx)->device;
  if (!p2pAllowed()) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  if (g_peer_enabled[cur][peer]) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  g_peer_enabled[cur][peer] = true;
  count("enabled");
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc(CUdeviceptr* p, size_t bytes) {
  const int dev = currentDevice();
  if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  void* mem = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (mem == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  g_regions[reinterpret_cast<uintptr_t>(mem)] = {bytes, dev, true};
  *p = reinterpret_cast<CUdeviceptr>(mem);
  count("allocs");
  return CUDA_SUCCESS;
}
CUresult cuMemFree(CUdeviceptr p) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  auto it = g_regions.find(static_cast<uintptr_t>(p));
  if (it == g_regions.end() || !it->second.freeable) return CUDA_ERROR_INVALID_VALUE;
  g_regions.erase(it);
  std::free(reinterpret_cast<void*>(p));
  count("frees");
  return CUDA_SUCCESS;
}
CUresult cuMemHostAlloc(void** pp, size_t bytes, unsigned int) {
  void* mem = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (mem == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  std::memset(mem, 0, bytes);
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  g_regions[reinterpret_cast<uintptr_t>(mem)] = {bytes, -1, false};
  *pp = mem;
  return CUDA_SUCCESS;
}
CUresult cuMemFreeHost(void*) {
  return CUDA_SUCCESS;
}
CUresult cuMemHostGetDevicePointer(CUdeviceptr* d, void* p, unsigned int) {
  *d = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}
CUresult cuMemGetAddressRange(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  uintptr_t b = 0;
  const Region* r = regionOf(static_cast<uintptr_t>(p), &b);
  if (r == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (base != nullptr) *base = b;
  if (size != nullptr) *size = r->size;
  return CUDA_SUCCESS;
}
CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr p) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  const Region* r = regionOf(static_cast<uintptr_t>(p), nullptr);
  if (r == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (attr == CU_POINTER_ATTRIBUTE_MEMORY_TYPE) {
    *static_cast<unsigned int*>(data) = r->device >= 0 ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    return CUDA_SUCCESS;
  }
  if (attr == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) {
    *static_cast<int*>(data) = r->device >= 0 ? r->device : 0;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuStreamCreate(CUstream* s, unsigned int) {
  const int dev = currentDevice();
  if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  *s = reinterpret_cast<CUstream>(new FakeStream{dev, {}});
  return CUDA_SUCCESS;
}
CUresult cuStreamDestroy(CUstream s) {
  // Like the driver: the stream's pending work still completes.
  FakeStream* st = streamOf(s);
  syncStream(st);
  count("stream_destroys");
  return CUDA_SUCCESS;
}
CUresult cuStreamGetCtx(CUstream s, CUcontext* ctx) {
  *ctx = reinterpret_cast<CUcontext>(&g_ctx[streamOf(s)->device]);
  return CUDA_SUCCESS;
}
// The newer ABIs cuGetProcAddress hands out for the same names from CUDA 12.5 and 13.0: a caller that asks by name
// with a newer version but calls through the old prototype passes garbage for the added parameter.
CUresult cuStreamGetCtx_v2(CUstream s, CUcontext* ctx, CUgreenCtx* green) {
  *ctx = reinterpret_cast<CUcontext>(&g_ctx[streamOf(s)->device]);
  if (green != nullptr) *green = nullptr;
  return CUDA_SUCCESS;
}
CUresult cuCtxGetDevice_v2(CUdevice* dev, CUcontext ctx) {
  if (ctx == nullptr) return cuCtxGetDevice(dev);
  for (FakeCtx& c : g_ctx) {
    if (reinterpret_cast<CUcontext>(&c) == ctx) {
      *dev = c.device;
      return CUDA_SUCCESS;
    }
  }
  count("abi_mismatches");
  return CUDA_ERROR_INVALID_CONTEXT;
}
CUresult cuStreamGetDevice(CUstream s, CUdevice* dev) {
  *dev = streamOf(s)->device;
  return CUDA_SUCCESS;
}
CUresult cuStreamQuery(CUstream s) {
  FakeStream* st = streamOf(s);
  progress(st);
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  return st->ops.empty() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult cuStreamSynchronize(CUstream s) {
  return syncStream(streamOf(s));
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  count("copies");
  enqueueAction(s, [=] { std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n); });
  return CUDA_SUCCESS;
}
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  cuMemcpyAsync(dst, src, n, nullptr);
  return syncStream(streamOf(nullptr));
}
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n, CUstream s) {
  return cuMemcpyAsync(dst, src, n, s);
}
CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n) {
  return cuMemcpy(dst, src, n);
}
CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return cuMemcpyAsync(dst, src, n, s);
}
CUresult cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return cuMemcpy(dst, src, n);
}

CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void* user) {
  enqueueAction(s, [=] { fn(user); });
  return CUDA_SUCCESS;
}
CUresult cuStreamWaitValue32(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int) {
  Op op;
  op.addr = reinterpret_cast<volatile uint32_t*>(addr);
  op.value = value;
  enqueue(s, std::move(op));
  return CUDA_SUCCESS;
}
CUresult cuStreamWriteValue32(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int) {
  count("write32");
  enqueueAction(s, [=] { __atomic_store_n(reinterpret_cast<uint32_t*>(addr), value, __ATOMIC_RELEASE); });
  return CUDA_SUCCESS;
}
CUresult cuStreamWriteValue64(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int) {
  count("write64");
  enqueueAction(s, [=] { __atomic_store_n(reinterpret_cast<uint64_t*>(addr), value, __ATOMIC_RELEASE); });
  return CUDA_SUCCESS;
}
CUresult cuStreamBatchMemOp(CUstream s, unsigned int n, CUstreamBatchMemOpParams* ops, unsigned int) {
  for (unsigned int i = 0; i < n; ++i) {
    if (ops[i].operation == CU_STREAM_MEM_OP_WRITE_VALUE_32) {
      cuStreamWriteValue32(s, ops[i].writeValue.address, ops[i].writeValue.value, 0);
    } else if (ops[i].operation == CU_STREAM_MEM_OP_WAIT_VALUE_32) {
      cuStreamWaitValue32(s, ops[i].waitValue.address, ops[i].waitValue.value, 0);
    }
  }
  return CUDA_SUCCESS;
}

// Legacy IPC inside one process: the handle carries the pointer; opening hands back the same memory.
CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr p) {
  std::memset(handle, 0, sizeof(*handle));
  std::memcpy(handle->reserved, &p, sizeof(p));
  count("ipc_get");
  return CUDA_SUCCESS;
}
// PEERLAB_FAKE_IPC_ORDINAL=opener: the mapping is a copy of the owner's memory reported under the opening device's
// ordinal, as a driver may report another process's memory (writes through it do not reach the owner).
CUresult cuIpcOpenMemHandle(CUdeviceptr* p, CUipcMemHandle handle, unsigned int) {
  CUdeviceptr owner = 0;
  std::memcpy(&owner, handle.reserved, sizeof(owner));
  count("ipc_open");
  const char* mode = std::getenv("PEERLAB_FAKE_IPC_ORDINAL");
  if (mode == nullptr || std::strcmp(mode, "opener") != 0) {
    *p = owner;
    return CUDA_SUCCESS;
  }
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  const Region* r = regionOf(static_cast<uintptr_t>(owner), nullptr);
  if (r == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const size_t size = r->size;
  if (CUresult e = cuMemAlloc(p, size); e != CUDA_SUCCESS) return e;
  std::memcpy(reinterpret_cast<void*>(*p), reinterpret_cast<const void*>(owner), size);
  return CUDA_SUCCESS;
}
CUresult cuIpcCloseMemHandle(CUdeviceptr) {
  count("ipc_close");
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                     unsigned long long) {
  const int fd = memfd_create("peerlab-fake-vmm", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  struct stat st {};
  fstat(fd, &st);
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  g_inode_device[st.st_ino] = prop->location.id;
  *handle = g_next_handle++;
  g_vmm[*handle] = {fd, size, prop->location.id};
  count("vmm_creates");
  return CUDA_SUCCESS;
}
CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  auto it = g_vmm.find(handle);
  if (it == g_vmm.end()) return CUDA_ERROR_INVALID_VALUE;
  close(it->second.fd);
  g_vmm.erase(it);
  count("vmm_releases");
  return CUDA_SUCCESS;
}
CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  auto it = g_vmm.find(handle);
  if (it == g_vmm.end()) return CUDA_ERROR_INVALID_VALUE;
  std::memset(prop, 0, sizeof(*prop));
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = it->second.device;
  return CUDA_SUCCESS;
}
CUresult cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType,
                                      unsigned long long) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  auto it = g_vmm.find(handle);
  if (it == g_vmm.end()) return CUDA_ERROR_INVALID_VALUE;
  *static_cast<int*>(shareable) = dup(it->second.fd);
  count("vmm_exports");
  return CUDA_SUCCESS;
}
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle,
                                        CUmemAllocationHandleType) {
  const int fd = dup(static_cast<int>(reinterpret_cast<intptr_t>(os_handle)));
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  *handle = g_next_handle++;
  g_vmm[*handle] = {fd, static_cast<size_t>(st.st_size), g_inode_device[st.st_ino]};
  count("vmm_imports");
  return CUDA_SUCCESS;
}
CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t, CUdeviceptr, unsigned long long) {
  void* p = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  *ptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  munmap(reinterpret_cast<void*>(ptr), size);
  return CUDA_SUCCESS;
}
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  auto it = g_vmm.find(handle);
  if (it == g_vmm.end()) return CUDA_ERROR_INVALID_HANDLE;
  void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, it->second.fd,
                 static_cast<off_t>(offset));
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  g_regions[static_cast<uintptr_t>(ptr)] = {size, it->second.device, false};
  count("vmm_maps");
  return CUDA_SUCCESS;
}
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  g_regions.erase(static_cast<uintptr_t>(ptr));
  count("vmm_unmaps");
  return CUDA_SUCCESS;
}
CUresult cuMemSetAccess(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) {
  return CUDA_SUCCESS;
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status);

CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  CUdriverProcAddressQueryResult q;
  return cuGetProcAddress_v2(symbol, pfn, version, flags, &q);
}

#define PEERLAB_FAKE_ENTRY(name) \
  { #name, reinterpret_cast < void*>(&name) }

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t,
                             CUdriverProcAddressQueryResult* status) {
  count("gpa_calls");
  struct Entry {
    const char* name;
    void* fn;
  };
  static const Entry entries[] = {
      PEERLAB_FAKE_ENTRY(cuInit),
      PEERLAB_FAKE_ENTRY(cuDriverGetVersion),
      PEERLAB_FAKE_ENTRY(cuDeviceGetCount),
      PEERLAB_FAKE_ENTRY(cuDevicePrimaryCtxRetain),
      PEERLAB_FAKE_ENTRY(cuDevicePrimaryCtxRelease),
      PEERLAB_FAKE_ENTRY(cuDevicePrimaryCtxReset),
      PEERLAB_FAKE_ENTRY(cuCtxDestroy),
      PEERLAB_FAKE_ENTRY(cuCtxGetCurrent),
      PEERLAB_FAKE_ENTRY(cuCtxSetCurrent),
      PEERLAB_FAKE_ENTRY(cuCtxPushCurrent),
      PEERLAB_FAKE_ENTRY(cuCtxPopCurrent),
      PEERLAB_FAKE_ENTRY(cuCtxGetDevice),
      PEERLAB_FAKE_ENTRY(cuDeviceCanAccessPeer),
      PEERLAB_FAKE_ENTRY(cuDeviceGetP2PAttribute),
      PEERLAB_FAKE_ENTRY(cuCtxEnablePeerAccess),
      PEERLAB_FAKE_ENTRY(cuMemAlloc),
      PEERLAB_FAKE_ENTRY(cuMemFree),
      PEERLAB_FAKE_ENTRY(cuMemHostAlloc),
      PEERLAB_FAKE_ENTRY(cuMemFreeHost),
      PEERLAB_FAKE_ENTRY(cuMemHostGetDevicePointer),
      PEERLAB_FAKE_ENTRY(cuMemGetAddressRange),
      PEERLAB_FAKE_ENTRY(cuPointerGetAttribute),
      PEERLAB_FAKE_ENTRY(cuStreamCreate),
      PEERLAB_FAKE_ENTRY(cuStreamDestroy),
      PEERLAB_FAKE_ENTRY(cuStreamGetCtx),
      PEERLAB_FAKE_ENTRY(cuStreamGetDevice),
      PEERLAB_FAKE_ENTRY(cuStreamQuery),
      PEERLAB_FAKE_ENTRY(cuStreamSynchronize),
      PEERLAB_FAKE_ENTRY(cuMemcpyAsync),
      PEERLAB_FAKE_ENTRY(cuMemcpy),
      PEERLAB_FAKE_ENTRY(cuMemcpyPeerAsync),
      PEERLAB_FAKE_ENTRY(cuMemcpyPeer),
      PEERLAB_FAKE_ENTRY(cuMemcpyDtoDAsync),
      PEERLAB_FAKE_ENTRY(cuMemcpyDtoD),
      PEERLAB_FAKE_ENTRY(cuLaunchHostFunc),
      PEERLAB_FAKE_ENTRY(cuStreamWaitValue32),
      PEERLAB_FAKE_ENTRY(cuStreamWriteValue32),
      PEERLAB_FAKE_ENTRY(cuStreamWriteValue64),
      PEERLAB_FAKE_ENTRY(cuStreamBatchMemOp),
      PEERLAB_FAKE_ENTRY(cuIpcGetMemHandle),
      PEERLAB_FAKE_ENTRY(cuIpcOpenMemHandle),
      PEERLAB_FAKE_ENTRY(cuIpcCloseMemHandle),
      PEERLAB_FAKE_ENTRY(cuMemCreate),
      PEERLAB_FAKE_ENTRY(cuMemRelease),
      PEERLAB_FAKE_ENTRY(cuMemGetAllocationPropertiesFromHandle),
      PEERLAB_FAKE_ENTRY(cuMemExportToShareableHandle),
      PEERLAB_FAKE_ENTRY(cuMemImportFromShareableHandle),
      PEERLAB_FAKE_ENTRY(cuMemAddressReserve),
      PEERLAB_FAKE_ENTRY(cuMemAddressFree),
      PEERLAB_FAKE_ENTRY(cuMemMap),
      PEERLAB_FAKE_ENTRY(cuMemUnmap),
      PEERLAB_FAKE_ENTRY(cuMemSetAccess),
      {"cuGetProcAddress", nullptr},
  };
  // Like the driver, the newest ABI of a name for the version asked, and nothing for a version before the name.
  if (std::strcmp(symbol, "cuStreamGetCtx") == 0 && version >= 12050) {
    *pfn = reinterpret_cast<void*>(&cuStreamGetCtx_v2);
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  if (std::strcmp(symbol, "cuCtxGetDevice") == 0 && version >= 13000) {
    *pfn = reinterpret_cast<void*>(&cuCtxGetDevice_v2);
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  if (std::strcmp(symbol, "cuStreamGetDevice") == 0 && version < 12080) {
    *pfn = nullptr;
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    return CUDA_ERROR_NOT_FOUND;
  }
  for (const Entry& e : entries) {
    if (std::strcmp(e.name, symbol) == 0) {
      void* fn = e.fn;
      if (fn == nullptr) {
        fn = version >= 12000 ? reinterpret_cast<void*>(&cuGetProcAddress_v2)
                              : reinterpret_cast<void*>(&cuGetProcAddress);
      }
      *pfn = fn;
      if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  }
  *pfn = nullptr;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

}  // extern "C"
