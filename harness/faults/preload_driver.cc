// The driver side of libpeerlab_faults.so: dlsym, cuGetProcAddress (4- and 5-argument ABIs) and wrappers for the
// driver entry points a fault acts on. The CUDA runtime (shared or static, as inside NCCL) finds the driver with
// dlsym(libcuda, "cuGetProcAddress_v2") and resolves every other entry point through it; peerlab's own driver calls
// resolve the exact exported symbols (dlsym(libcuda, "cuStreamWriteValue32_v2")), which the dlsym hook wraps. Each
// entry point gets a
// wrapper per distinct real address (legacy and per-thread-stream variants differ), so a wrapper always forwards
// to exactly the function the caller asked for.

#include <cuda.h>
#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

#include "harness/faults/preload_engine.h"

// The 4-argument ABI keeps the plain name; cuda.h maps the plain name to the 5-argument _v2.
#undef cuGetProcAddress

extern "C" {
void* dlsym(void* handle, const char* symbol);
CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);
}

namespace peerlab::faults::preload {
namespace {

constexpr int kSlots = 8;

struct Slot {
  std::atomic<void*> real{nullptr};
  std::atomic<bool> per_thread{false};
};

struct Hook {
  const char* base;  ///< name given to cuGetProcAddress
  int min_version;   ///< cuGetProcAddress requests below this get an older ABI: those are not wrapped
  void* wrappers[kSlots];
  Slot slots[kSlots];
};

std::mutex g_slot_mu;

// The wrapper that forwards to `real`, allocating a slot for a new address. Out of slots: `real` itself.
void* wrapWith(Hook& hook, void* real, bool per_thread) {
  for (void* w : hook.wrappers) {
    if (w == real) return real;
  }
  for (int i = 0; i < kSlots; ++i) {
    if (hook.slots[i].real.load(std::memory_order_acquire) == real &&
        hook.slots[i].per_thread.load(std::memory_order_relaxed) == per_thread) {
      return hook.wrappers[i];
    }
  }
  std::lock_guard<std::mutex> lock(g_slot_mu);
  for (int i = 0; i < kSlots; ++i) {
    void* cur = hook.slots[i].real.load(std::memory_order_acquire);
    if (cur == real && hook.slots[i].per_thread.load(std::memory_order_relaxed) == per_thread) return hook.wrappers[i];
    if (cur == nullptr) {
      hook.slots[i].per_thread.store(per_thread, std::memory_order_relaxed);
      hook.slots[i].real.store(real, std::memory_order_release);
      return hook.wrappers[i];
    }
  }
  note("interposer", std::string("no free wrapper slot for ") + hook.base + "; calls through it are not intercepted");
  return real;
}

template <class Fn>
Fn realAt(const Hook& hook, int slot) {
  return reinterpret_cast<Fn>(hook.slots[slot].real.load(std::memory_order_acquire));
}
bool perThreadAt(const Hook& hook, int slot) {
  return hook.slots[slot].per_thread.load(std::memory_order_relaxed);
}

#define PEERLAB_SLOT_LIST(w)                                                                            \
  {                                                                                                     \
    reinterpret_cast<void*>(&w<0>), reinterpret_cast<void*>(&w<1>), reinterpret_cast<void*>(&w<2>),     \
        reinterpret_cast<void*>(&w<3>), reinterpret_cast<void*>(&w<4>), reinterpret_cast<void*>(&w<5>), \
        reinterpret_cast<void*>(&w<6>), reinterpret_cast<void*>(&w<7>)                                  \
  }

// cuda.h maps several names to _v2 / _ptsz; decltype(&::name) follows the mapping, which is the current ABI.
using CanAccessPeerFn = decltype(&::cuDeviceCanAccessPeer);
using P2PAttributeFn = decltype(&::cuDeviceGetP2PAttribute);
using CtxEnablePeerFn = decltype(&::cuCtxEnablePeerAccess);
using MemcpyPeerAsyncFn = decltype(&::cuMemcpyPeerAsync);
using MemcpyPeerFn = decltype(&::cuMemcpyPeer);
using MemcpyAsyncFn = decltype(&::cuMemcpyAsync);
using MemcpyFn = decltype(&::cuMemcpy);
using MemcpyDtoDAsyncFn = decltype(&::cuMemcpyDtoDAsync);
using MemcpyDtoDFn = decltype(&::cuMemcpyDtoD);
using IpcOpenFn = decltype(&::cuIpcOpenMemHandle);
using IpcCloseFn = decltype(&::cuIpcCloseMemHandle);
using IpcGetFn = decltype(&::cuIpcGetMemHandle);
using ExportFn = decltype(&::cuMemExportToShareableHandle);
using ImportFn = decltype(&::cuMemImportFromShareableHandle);
using MapFn = decltype(&::cuMemMap);
using WriteValue32Fn = decltype(&::cuStreamWriteValue32);
using WriteValue64Fn = decltype(&::cuStreamWriteValue64);
using BatchMemOpFn = decltype(&::cuStreamBatchMemOp);
using MemFreeFn = decltype(&::cuMemFree);
using MemFreeHostFn = decltype(&::cuMemFreeHost);
using StreamDestroyFn = decltype(&::cuStreamDestroy);
using CtxDestroyFn = decltype(&::cuCtxDestroy);
using MemReleaseFn = decltype(&::cuMemRelease);
using MemUnmapFn = decltype(&::cuMemUnmap);
using PrimaryReleaseFn = decltype(&::cuDevicePrimaryCtxRelease);
using PrimaryResetFn = decltype(&::cuDevicePrimaryCtxReset);

int ctxDeviceOf(CUcontext ctx);
int currentCtxDevice();

// ---- wrappers ----
// Each is a template on its slot: w_<name><S> forwards to slot S's real function.

extern Hook h_canAccess, h_p2pAttr, h_enable, h_peerAsync, h_peer, h_async, h_sync, h_dtodAsync, h_dtod, h_ipcOpen,
    h_ipcClose, h_ipcGet, h_export, h_import, h_map, h_write32, h_write64, h_batch, h_memFree, h_memFreeHost,
    h_streamDestroy, h_ctxDestroy, h_memRelease, h_memUnmap, h_primaryRelease, h_primaryReset;

template <int S>
CUresult w_canAccess(int* can, CUdevice dev, CUdevice peer) {
  const CUresult r = realAt<CanAccessPeerFn>(h_canAccess, S)(can, dev, peer);
  if (r == CUDA_SUCCESS && !insideRuntimeCall()) lieCanAccess(Layer::kDriver, can, dev, peer);
  return r;
}

template <int S>
CUresult w_p2pAttr(int* value, CUdevice_P2PAttribute attr, CUdevice src, CUdevice dst) {
  const CUresult r = realAt<P2PAttributeFn>(h_p2pAttr, S)(value, attr, src, dst);
  if (r == CUDA_SUCCESS && !insideRuntimeCall())
    lieP2PAttribute(Layer::kDriver, value, static_cast<int>(attr), src, dst);
  return r;
}

template <int S>
CUresult w_enable(CUcontext peer_ctx, unsigned int flags) {
  auto real = realAt<CtxEnablePeerFn>(h_enable, S);
  if (insideRuntimeCall() || !(engaged(FaultKind::kEnableError) || engaged(FaultKind::kLie))) {
    return real(peer_ctx, flags);
  }
  return static_cast<CUresult>(enablePeer(Layer::kDriver, currentCtxDevice(), ctxDeviceOf(peer_ctx),
                                          [&] { return static_cast<int>(real(peer_ctx, flags)); }));
}

template <int S>
CUresult w_peerAsync(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n,
                     CUstream stream) {
  auto real = realAt<MemcpyPeerAsyncFn>(h_peerAsync, S);
  if (insideRuntimeCall() || !copyFaultEngaged()) return real(dst, dst_ctx, src, src_ctx, n, stream);
  CopyCall call{dst, src, n, -1, -1, stream, true, perThreadAt(h_peerAsync, S), "cuMemcpyPeerAsync"};
  return static_cast<CUresult>(copy(call, [&](CUdeviceptr d, int) {
    // A destination redirected to scratch lives in the context of the stream's device, the source's for writes.
    return static_cast<int>(real(d, d == dst ? dst_ctx : src_ctx, src, src_ctx, n, stream));
  }));
}

template <int S>
CUresult w_peer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n) {
  auto real = realAt<MemcpyPeerFn>(h_peer, S);
  if (insideRuntimeCall() || !copyFaultEngaged()) return real(dst, dst_ctx, src, src_ctx, n);
  CopyCall call{dst, src, n, -1, -1, nullptr, false, perThreadAt(h_peer, S), "cuMemcpyPeer"};
  return static_cast<CUresult>(copy(call, [&](CUdeviceptr d, int) {
    return static_cast<int>(real(d, d == dst ? dst_ctx : src_ctx, src, src_ctx, n));
  }));
}

template <class Fn>
CUresult asyncCopy(Fn real, bool per_thread, const char* api, CUdeviceptr dst, CUdeviceptr src, size_t n,
                   CUstream stream) {
  if (insideRuntimeCall() || !copyFaultEngaged()) return real(dst, src, n, stream);
  CopyCall call{dst, src, n, -1, -1, stream, true, per_thread, api};
  return static_cast<CUresult>(
      copy(call, [&](CUdeviceptr d, int) { return static_cast<int>(real(d, src, n, stream)); }));
}

template <class Fn>
CUresult syncCopy(Fn real, bool per_thread, const char* api, CUdeviceptr dst, CUdeviceptr src, size_t n) {
  if (insideRuntimeCall() || !copyFaultEngaged()) return real(dst, src, n);
  CopyCall call{dst, src, n, -1, -1, nullptr, false, per_thread, api};
  return static_cast<CUresult>(copy(call, [&](CUdeviceptr d, int) { return static_cast<int>(real(d, src, n)); }));
}

template <int S>
CUresult w_async(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream) {
  return asyncCopy(realAt<MemcpyAsyncFn>(h_async, S), perThreadAt(h_async, S), "cuMemcpyAsync", dst, src, n, stream);
}
template <int S>
CUresult w_sync(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return syncCopy(realAt<MemcpyFn>(h_sync, S), perThreadAt(h_sync, S), "cuMemcpy", dst, src, n);
}
template <int S>
CUresult w_dtodAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream) {
  return asyncCopy(realAt<MemcpyDtoDAsyncFn>(h_dtodAsync, S), perThreadAt(h_dtodAsync, S), "cuMemcpyDtoDAsync", dst,
                   src, n, stream);
}
template <int S>
CUresult w_dtod(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return syncCopy(realAt<MemcpyDtoDFn>(h_dtod, S), perThreadAt(h_dtod, S), "cuMemcpyDtoD", dst, src, n);
}

CUresult realIpcClose(CUdeviceptr p);

template <int S>
CUresult w_ipcOpen(CUdeviceptr* ptr, CUipcMemHandle handle, unsigned int flags) {
  auto real = realAt<IpcOpenFn>(h_ipcOpen, S);
  if (insideRuntimeCall() || !ipcOpenHooked()) return real(ptr, handle, flags);
  return static_cast<CUresult>(ipcOpen(
      Layer::kDriver, ptr, [&] { return static_cast<int>(real(ptr, handle, flags)); },
      [](CUdeviceptr p) { return static_cast<int>(realIpcClose(p)); }));
}

template <int S>
CUresult w_ipcClose(CUdeviceptr ptr) {
  auto real = realAt<IpcCloseFn>(h_ipcClose, S);
  teardown("cuIpcCloseMemHandle");
  if (insideRuntimeCall()) return real(ptr);
  return static_cast<CUresult>(ipcClose(ptr, [&] { return static_cast<int>(real(ptr)); }));
}

template <int S>
CUresult w_ipcGet(CUipcMemHandle* handle, CUdeviceptr ptr) {
  const CUresult r = realAt<IpcGetFn>(h_ipcGet, S)(handle, ptr);
  if (r == CUDA_SUCCESS && !insideRuntimeCall()) exported(Layer::kDriver, false, "cuIpcGetMemHandle");
  return r;
}

template <int S>
CUresult w_export(void* shareable, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType type,
                  unsigned long long flags) {
  const CUresult r = realAt<ExportFn>(h_export, S)(shareable, handle, type, flags);
  if (r == CUDA_SUCCESS && !insideRuntimeCall()) exported(Layer::kDriver, true, "cuMemExportToShareableHandle");
  return r;
}

template <int S>
CUresult w_import(CUmemGenericAllocationHandle* handle, void* os_handle, CUmemAllocationHandleType type) {
  auto real = realAt<ImportFn>(h_import, S);
  if (insideRuntimeCall() || !ipcFaultEngaged()) return real(handle, os_handle, type);
  return static_cast<CUresult>(vmmImport(handle, [&] { return static_cast<int>(real(handle, os_handle, type)); }));
}

template <int S>
CUresult w_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
               unsigned long long flags) {
  auto real = realAt<MapFn>(h_map, S);
  if (insideRuntimeCall() || !engaged(FaultKind::kDropWrites)) return real(ptr, size, offset, handle, flags);
  return static_cast<CUresult>(vmmMap(ptr, size, offset, handle, flags, [&](CUmemGenericAllocationHandle h) {
    return static_cast<int>(real(ptr, size, offset, h, flags));
  }));
}

template <int S>
CUresult w_write32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  auto real = realAt<WriteValue32Fn>(h_write32, S);
  if (insideRuntimeCall() || !signalFaultEngaged()) return real(stream, addr, value, flags);
  if (beforeStreamWrite(stream, value, "cuStreamWriteValue32")) return CUDA_SUCCESS;
  return real(stream, addr, value, flags);
}

template <int S>
CUresult w_write64(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  auto real = realAt<WriteValue64Fn>(h_write64, S);
  if (insideRuntimeCall() || !signalFaultEngaged()) return real(stream, addr, value, flags);
  if (beforeStreamWrite(stream, value, "cuStreamWriteValue64")) return CUDA_SUCCESS;
  return real(stream, addr, value, flags);
}

template <int S>
CUresult w_batch(CUstream stream, unsigned int count, CUstreamBatchMemOpParams* params, unsigned int flags) {
  auto real = realAt<BatchMemOpFn>(h_batch, S);
  if (insideRuntimeCall() || !signalFaultEngaged() || params == nullptr) return real(stream, count, params, flags);
  std::vector<CUstreamBatchMemOpParams> kept;
  kept.reserve(count);
  for (unsigned int i = 0; i < count; ++i) {
    const CUstreamBatchMemOpParams& op = params[i];
    const bool write32 = op.operation == CU_STREAM_MEM_OP_WRITE_VALUE_32;
    const bool write64 = op.operation == CU_STREAM_MEM_OP_WRITE_VALUE_64;
    if ((write32 || write64) &&
        beforeStreamWrite(stream, write32 ? op.writeValue.value : op.writeValue.value64, "cuStreamBatchMemOp")) {
      continue;
    }
    kept.push_back(op);
  }
  if (kept.empty()) return CUDA_SUCCESS;
  return real(stream, static_cast<unsigned int>(kept.size()), kept.data(), flags);
}

// Teardown calls let copy_hang stalls go, so that a program that gave up on a stalled copy can clean up.
template <int S>
CUresult w_memFree(CUdeviceptr p) {
  teardown("cuMemFree");
  return realAt<MemFreeFn>(h_memFree, S)(p);
}
template <int S>
CUresult w_memFreeHost(void* p) {
  teardown("cuMemFreeHost");
  return realAt<MemFreeHostFn>(h_memFreeHost, S)(p);
}
template <int S>
CUresult w_streamDestroy(CUstream s) {
  teardown("cuStreamDestroy");
  return realAt<StreamDestroyFn>(h_streamDestroy, S)(s);
}
template <int S>
CUresult w_ctxDestroy(CUcontext c) {
  teardown("cuCtxDestroy");
  return realAt<CtxDestroyFn>(h_ctxDestroy, S)(c);
}
template <int S>
CUresult w_memRelease(CUmemGenericAllocationHandle h) {
  teardown("cuMemRelease");
  return realAt<MemReleaseFn>(h_memRelease, S)(h);
}
template <int S>
CUresult w_memUnmap(CUdeviceptr p, size_t size) {
  teardown("cuMemUnmap");
  return realAt<MemUnmapFn>(h_memUnmap, S)(p, size);
}
template <int S>
CUresult w_primaryRelease(CUdevice dev) {
  teardown("cuDevicePrimaryCtxRelease");
  return realAt<PrimaryReleaseFn>(h_primaryRelease, S)(dev);
}
template <int S>
CUresult w_primaryReset(CUdevice dev) {
  teardown("cuDevicePrimaryCtxReset");
  return realAt<PrimaryResetFn>(h_primaryReset, S)(dev);
}

Hook h_canAccess{"cuDeviceCanAccessPeer", 0, PEERLAB_SLOT_LIST(w_canAccess), {}};
Hook h_p2pAttr{"cuDeviceGetP2PAttribute", 0, PEERLAB_SLOT_LIST(w_p2pAttr), {}};
Hook h_enable{"cuCtxEnablePeerAccess", 0, PEERLAB_SLOT_LIST(w_enable), {}};
Hook h_peerAsync{"cuMemcpyPeerAsync", 0, PEERLAB_SLOT_LIST(w_peerAsync), {}};
Hook h_peer{"cuMemcpyPeer", 0, PEERLAB_SLOT_LIST(w_peer), {}};
Hook h_async{"cuMemcpyAsync", 0, PEERLAB_SLOT_LIST(w_async), {}};
Hook h_sync{"cuMemcpy", 0, PEERLAB_SLOT_LIST(w_sync), {}};
// Before 3.2 these took 32-bit sizes and pointers.
Hook h_dtodAsync{"cuMemcpyDtoDAsync", 3020, PEERLAB_SLOT_LIST(w_dtodAsync), {}};
Hook h_dtod{"cuMemcpyDtoD", 3020, PEERLAB_SLOT_LIST(w_dtod), {}};
Hook h_ipcOpen{"cuIpcOpenMemHandle", 0, PEERLAB_SLOT_LIST(w_ipcOpen), {}};
Hook h_ipcClose{"cuIpcCloseMemHandle", 0, PEERLAB_SLOT_LIST(w_ipcClose), {}};
Hook h_ipcGet{"cuIpcGetMemHandle", 0, PEERLAB_SLOT_LIST(w_ipcGet), {}};
Hook h_export{"cuMemExportToShareableHandle", 0, PEERLAB_SLOT_LIST(w_export), {}};
Hook h_import{"cuMemImportFromShareableHandle", 0, PEERLAB_SLOT_LIST(w_import), {}};
Hook h_map{"cuMemMap", 0, PEERLAB_SLOT_LIST(w_map), {}};
Hook h_write32{"cuStreamWriteValue32", 0, PEERLAB_SLOT_LIST(w_write32), {}};
Hook h_write64{"cuStreamWriteValue64", 0, PEERLAB_SLOT_LIST(w_write64), {}};
Hook h_batch{"cuStreamBatchMemOp", 0, PEERLAB_SLOT_LIST(w_batch), {}};
Hook h_memFree{"cuMemFree", 3020, PEERLAB_SLOT_LIST(w_memFree), {}};
Hook h_memFreeHost{"cuMemFreeHost", 0, PEERLAB_SLOT_LIST(w_memFreeHost), {}};
Hook h_streamDestroy{"cuStreamDestroy", 0, PEERLAB_SLOT_LIST(w_streamDestroy), {}};
Hook h_ctxDestroy{"cuCtxDestroy", 0, PEERLAB_SLOT_LIST(w_ctxDestroy), {}};
Hook h_memRelease{"cuMemRelease", 0, PEERLAB_SLOT_LIST(w_memRelease), {}};
Hook h_memUnmap{"cuMemUnmap", 0, PEERLAB_SLOT_LIST(w_memUnmap), {}};
Hook h_primaryRelease{"cuDevicePrimaryCtxRelease", 0, PEERLAB_SLOT_LIST(w_primaryRelease), {}};
Hook h_primaryReset{"cuDevicePrimaryCtxReset", 0, PEERLAB_SLOT_LIST(w_primaryReset), {}};

Hook* const kHooks[] = {&h_canAccess,      &h_p2pAttr,     &h_enable,        &h_peerAsync,  &h_peer,       &h_async,
                        &h_sync,           &h_dtodAsync,   &h_dtod,          &h_ipcOpen,    &h_ipcClose,   &h_ipcGet,
                        &h_export,         &h_import,      &h_map,           &h_write32,    &h_write64,    &h_batch,
                        &h_memFree,        &h_memFreeHost, &h_streamDestroy, &h_ctxDestroy, &h_memRelease, &h_memUnmap,
                        &h_primaryRelease, &h_primaryReset};

// Exported names a program may dlsym directly (libcuda keeps the old ABIs under the plain names of the functions
// whose ABI changed; those are left alone).
struct ExportedName {
  const char* name;
  Hook* hook;
  bool per_thread;
};
const ExportedName kExported[] = {
    {"cuDeviceCanAccessPeer", &h_canAccess, false},
    {"cuDeviceGetP2PAttribute", &h_p2pAttr, false},
    {"cuCtxEnablePeerAccess", &h_enable, false},
    {"cuMemcpyPeerAsync", &h_peerAsync, false},
    {"cuMemcpyPeerAsync_ptsz", &h_peerAsync, true},
    {"cuMemcpyPeer", &h_peer, false},
    {"cuMemcpyPeer_ptds", &h_peer, true},
    {"cuMemcpyAsync", &h_async, false},
    {"cuMemcpyAsync_ptsz", &h_async, true},
    {"cuMemcpy", &h_sync, false},
    {"cuMemcpy_ptds", &h_sync, true},
    {"cuMemcpyDtoDAsync_v2", &h_dtodAsync, false},
    {"cuMemcpyDtoDAsync_v2_ptsz", &h_dtodAsync, true},
    {"cuMemcpyDtoD_v2", &h_dtod, false},
    {"cuMemcpyDtoD_v2_ptds", &h_dtod, true},
    {"cuIpcOpenMemHandle", &h_ipcOpen, false},
    {"cuIpcOpenMemHandle_v2", &h_ipcOpen, false},
    {"cuIpcCloseMemHandle", &h_ipcClose, false},
    {"cuIpcGetMemHandle", &h_ipcGet, false},
    {"cuMemExportToShareableHandle", &h_export, false},
    {"cuMemImportFromShareableHandle", &h_import, false},
    {"cuMemMap", &h_map, false},
    {"cuStreamWriteValue32", &h_write32, false},
    {"cuStreamWriteValue32_v2", &h_write32, false},
    {"cuStreamWriteValue32_ptsz", &h_write32, true},
    {"cuStreamWriteValue32_v2_ptsz", &h_write32, true},
    {"cuStreamWriteValue64", &h_write64, false},
    {"cuStreamWriteValue64_v2", &h_write64, false},
    {"cuStreamWriteValue64_ptsz", &h_write64, true},
    {"cuStreamWriteValue64_v2_ptsz", &h_write64, true},
    {"cuStreamBatchMemOp", &h_batch, false},
    {"cuStreamBatchMemOp_v2", &h_batch, false},
    {"cuStreamBatchMemOp_ptsz", &h_batch, true},
    {"cuStreamBatchMemOp_v2_ptsz", &h_batch, true},
    {"cuMemFree_v2", &h_memFree, false},
    {"cuMemFreeHost", &h_memFreeHost, false},
    {"cuStreamDestroy", &h_streamDestroy, false},
    {"cuStreamDestroy_v2", &h_streamDestroy, false},
    {"cuCtxDestroy", &h_ctxDestroy, false},
    {"cuCtxDestroy_v2", &h_ctxDestroy, false},
    {"cuMemRelease", &h_memRelease, false},
    {"cuMemUnmap", &h_memUnmap, false},
    {"cuDevicePrimaryCtxRelease", &h_primaryRelease, false},
    {"cuDevicePrimaryCtxRelease_v2", &h_primaryRelease, false},
    {"cuDevicePrimaryCtxReset", &h_primaryReset, false},
    {"cuDevicePrimaryCtxReset_v2", &h_primaryReset, false},
};

// ---- helpers the wrappers use, on real entry points ----

using CtxGetCurrentFn = decltype(&::cuCtxGetCurrent);
using CtxGetDeviceFn = decltype(&::cuCtxGetDevice);
using CtxPushFn = decltype(&::cuCtxPushCurrent);
using CtxPopFn = decltype(&::cuCtxPopCurrent);

template <class Fn>
Fn resolveReal(const char* name) {
  return reinterpret_cast<Fn>(realEntryPoint(name));
}

int currentCtxDevice() {
  static const auto get_device = resolveReal<CtxGetDeviceFn>("cuCtxGetDevice");
  CUdevice dev = -1;
  if (get_device == nullptr || get_device(&dev) != CUDA_SUCCESS) return -1;
  return static_cast<int>(dev);
}

int ctxDeviceOf(CUcontext ctx) {
  static const auto push = resolveReal<CtxPushFn>("cuCtxPushCurrent");
  static const auto pop = resolveReal<CtxPopFn>("cuCtxPopCurrent");
  if (ctx == nullptr || push == nullptr || pop == nullptr || push(ctx) != CUDA_SUCCESS) return -1;
  const int dev = currentCtxDevice();
  CUcontext popped = nullptr;
  pop(&popped);
  return dev;
}

CUresult realIpcClose(CUdeviceptr p) {
  for (const Slot& s : h_ipcClose.slots) {
    if (void* fn = s.real.load(std::memory_order_acquire)) return reinterpret_cast<IpcCloseFn>(fn)(p);
  }
  static const auto close = resolveReal<IpcCloseFn>("cuIpcCloseMemHandle");
  return close != nullptr ? close(p) : CUDA_ERROR_NOT_INITIALIZED;
}

// ---- cuGetProcAddress and dlsym ----

void* wrapForGpa(const char* symbol, void* real, int version, cuuint64_t flags);

CUresult gpaV2Impl(const char* symbol, void** pfn, int version, cuuint64_t flags,
                   CUdriverProcAddressQueryResult* status) {
  CUresult r;
  if (GpaV2Fn real = realGpaV2()) {
    r = real(symbol, pfn, version, flags, status);
  } else if (GpaV1Fn v1 = realGpaV1()) {
    r = v1(symbol, pfn, version, flags);
    if (status != nullptr) {
      *status = r == CUDA_SUCCESS ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
  } else {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  if (r == CUDA_SUCCESS && symbol != nullptr && pfn != nullptr && *pfn != nullptr) {
    *pfn = wrapForGpa(symbol, *pfn, version, flags);
  }
  return r;
}

CUresult gpaV1Impl(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  CUresult r;
  if (GpaV1Fn real = realGpaV1()) {
    r = real(symbol, pfn, version, flags);
  } else if (GpaV2Fn v2 = realGpaV2()) {
    CUdriverProcAddressQueryResult q;
    r = v2(symbol, pfn, version, flags, &q);
  } else {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  if (r == CUDA_SUCCESS && symbol != nullptr && pfn != nullptr && *pfn != nullptr) {
    *pfn = wrapForGpa(symbol, *pfn, version, flags);
  }
  return r;
}

void* ownGpaV2() {
  return reinterpret_cast<void*>(&::cuGetProcAddress_v2);
}
void* ownGpaV1() {
  return reinterpret_cast<void*>(&::cuGetProcAddress);
}

// The process asked for cuGetProcAddress itself: remember the real one and hand out the wrapper.
void* wrapGpa(void* real, bool v2) {
  if (real == ownGpaV2() || real == ownGpaV1()) return real;
  if (v2) {
    noteRealGpaV2(reinterpret_cast<GpaV2Fn>(real));
    return ownGpaV2();
  }
  noteRealGpaV1(reinterpret_cast<GpaV1Fn>(real));
  return ownGpaV1();
}

void* wrapForGpa(const char* symbol, void* real, int version, cuuint64_t flags) {
  // cudaVersion >= 12000 gets the 5-argument ABI.
  if (std::strcmp(symbol, "cuGetProcAddress") == 0) return wrapGpa(real, version >= 12000);
  for (Hook* hook : kHooks) {
    if (std::strcmp(symbol, hook->base) == 0) {
      if (version < hook->min_version) return real;
      return wrapWith(*hook, real, (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0);
    }
  }
  return real;
}

void* wrapForDlsym(const char* symbol, void* real) {
  if (symbol[0] != 'c' || symbol[1] != 'u') return real;
  if (std::strcmp(symbol, "cuGetProcAddress_v2") == 0) return wrapGpa(real, true);
  if (std::strcmp(symbol, "cuGetProcAddress") == 0) return wrapGpa(real, false);
  for (const ExportedName& e : kExported) {
    if (std::strcmp(symbol, e.name) == 0) return wrapWith(*e.hook, real, e.per_thread);
  }
  return real;
}

// dlsym(RTLD_NEXT, ...) on behalf of `caller`: the first object after the caller's in load order that defines it.
void* dlsymNextFor(const void* caller, const char* symbol) {
  DlsymFn real = realDlsym();
  Dl_info info{};
  struct link_map* self = nullptr;
  if (dladdr1(caller, &info, reinterpret_cast<void**>(&self), RTLD_DL_LINKMAP) == 0 || self == nullptr) {
    return real(RTLD_NEXT, symbol);
  }
  for (struct link_map* l = self->l_next; l != nullptr; l = l->l_next) {
    const bool main_program = l->l_name == nullptr || l->l_name[0] == '\0';
    void* handle = openLoaded(main_program ? nullptr : l->l_name);
    if (handle == nullptr) continue;
    void* p = real(handle, symbol);
    closeLoaded(handle);
    if (p == nullptr) continue;
    Dl_info pinfo{};
    struct link_map* owner = nullptr;
    if (dladdr1(p, &pinfo, reinterpret_cast<void**>(&owner), RTLD_DL_LINKMAP) != 0 && owner == l) return p;
  }
  return nullptr;
}

}  // namespace
}  // namespace peerlab::faults::preload

using namespace peerlab::faults::preload;
using peerlab::faults::FaultKind;

extern "C" {

void* dlsym(void* handle, const char* symbol) {
  DlsymFn real = realDlsym();
  if (real == nullptr) return nullptr;
  void* p = handle == RTLD_NEXT ? dlsymNextFor(__builtin_return_address(0), symbol) : real(handle, symbol);
  if (p == nullptr) return p;
  return wrapForDlsym(symbol, p);
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbolStatus) {
  return gpaV2Impl(symbol, pfn, cudaVersion, flags, symbolStatus);
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return gpaV1Impl(symbol, pfn, cudaVersion, flags);
}

}  // extern "C"
