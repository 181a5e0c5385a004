// The runtime side of libpeerlab_faults.so: plain symbol hooks for the CUDA runtime API of a shared libcudart
// (peerlab, nccl-tests, PyTorch, most user programs). Each forwards to the next definition (dlsym(RTLD_NEXT), or the
// loaded libcudart when the runtime was loaded privately) inside a RuntimeScope, so the driver wrappers the runtime
// reaches underneath pass through and a fault is applied once per call. A runtime linked statically (as inside NCCL)
// is not reached here; its driver calls are (preload_driver.cc).

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>

#include <cstring>
#include <string>

#include "harness/faults/preload_engine.h"

extern "C" {
cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream);
}

namespace peerlab::faults::preload {
namespace {

struct Search {
  const char* symbol;
  void* found;
};

// A runtime loaded with RTLD_LOCAL is not after us in the global scope: look in every loaded libcudart.
int findInCudart(struct dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<Search*>(data);
  if (info->dlpi_name == nullptr || std::strstr(info->dlpi_name, "libcudart.so") == nullptr) return 0;
  void* handle = openLoaded(info->dlpi_name);
  if (handle == nullptr) return 0;
  search->found = realDlsym()(handle, search->symbol);
  closeLoaded(handle);
  return search->found != nullptr ? 1 : 0;
}

template <class Fn>
Fn next(const char* symbol) {
  DlsymFn real = realDlsym();
  void* fn = real != nullptr ? real(RTLD_NEXT, symbol) : nullptr;
  if (fn == nullptr) {
    Search search{symbol, nullptr};
    dl_iterate_phdr(findInCudart, &search);
    fn = search.found;
  }
  return reinterpret_cast<Fn>(fn);
}

#define PEERLAB_NEXT(fn)                               \
  static const auto real = next<decltype(&::fn)>(#fn); \
  if (real == nullptr) return cudaErrorInitializationError

CUdeviceptr dptr(const void* p) {
  return reinterpret_cast<CUdeviceptr>(p);
}

bool deviceToDevice(cudaMemcpyKind kind) {
  return kind == cudaMemcpyDeviceToDevice || kind == cudaMemcpyDefault;
}

int currentRuntimeDevice() {
  static const auto get_device = next<decltype(&::cudaGetDevice)>("cudaGetDevice");
  int dev = -1;
  if (get_device == nullptr) return -1;
  RuntimeScope scope;
  if (get_device(&dev) != cudaSuccess) return -1;
  return dev;
}

template <class Fn>
cudaError_t memcpyAsyncHook(Fn real, bool per_thread, const char* api, void* dst, const void* src, size_t count,
                            cudaMemcpyKind kind, cudaStream_t stream) {
  if (!deviceToDevice(kind) || !copyFaultEngaged()) {
    RuntimeScope scope;
    return real(dst, src, count, kind, stream);
  }
  CopyCall call{dptr(dst), dptr(src), count, -1, -1, reinterpret_cast<CUstream>(stream), true, per_thread, api};
  return static_cast<cudaError_t>(copy(call, [&](CUdeviceptr d, int) {
    RuntimeScope scope;
    return static_cast<int>(real(reinterpret_cast<void*>(d), src, count, kind, stream));
  }));
}

template <class Fn>
cudaError_t memcpyHook(Fn real, bool per_thread, const char* api, void* dst, const void* src, size_t count,
                       cudaMemcpyKind kind) {
  if (!deviceToDevice(kind) || !copyFaultEngaged()) {
    RuntimeScope scope;
    return real(dst, src, count, kind);
  }
  CopyCall call{dptr(dst), dptr(src), count, -1, -1, nullptr, false, per_thread, api};
  return static_cast<cudaError_t>(copy(call, [&](CUdeviceptr d, int) {
    RuntimeScope scope;
    return static_cast<int>(real(reinterpret_cast<void*>(d), src, count, kind));
  }));
}

}  // namespace
}  // namespace peerlab::faults::preload

using namespace peerlab::faults::preload;
using peerlab::faults::FaultKind;

extern "C" {

cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  PEERLAB_NEXT(cudaDeviceCanAccessPeer);
  cudaError_t r;
  {
    RuntimeScope scope;
    r = real(canAccessPeer, device, peerDevice);
  }
  if (r == cudaSuccess) lieCanAccess(Layer::kRuntime, canAccessPeer, device, peerDevice);
  return r;
}

cudaError_t cudaDeviceGetP2PAttribute(int* value, enum cudaDeviceP2PAttr attr, int srcDevice, int dstDevice) {
  PEERLAB_NEXT(cudaDeviceGetP2PAttribute);
  cudaError_t r;
  {
    RuntimeScope scope;
    r = real(value, attr, srcDevice, dstDevice);
  }
  if (r == cudaSuccess) lieP2PAttribute(Layer::kRuntime, value, static_cast<int>(attr), srcDevice, dstDevice);
  return r;
}

cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  PEERLAB_NEXT(cudaDeviceEnablePeerAccess);
  if (!engaged(FaultKind::kEnableError) && !engaged(FaultKind::kLie)) {
    RuntimeScope scope;
    return real(peerDevice, flags);
  }
  return static_cast<cudaError_t>(enablePeer(Layer::kRuntime, currentRuntimeDevice(), peerDevice, [&] {
    RuntimeScope scope;
    return static_cast<int>(real(peerDevice, flags));
  }));
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dstDevice, const void* src, int srcDevice, size_t count,
                                cudaStream_t stream) {
  PEERLAB_NEXT(cudaMemcpyPeerAsync);
  if (!copyFaultEngaged()) {
    RuntimeScope scope;
    return real(dst, dstDevice, src, srcDevice, count, stream);
  }
  CopyCall call{dptr(dst), dptr(src), count,
                dstDevice, srcDevice, reinterpret_cast<CUstream>(stream),
                true,      false,     "cudaMemcpyPeerAsync"};
  return static_cast<cudaError_t>(copy(call, [&](CUdeviceptr d, int d_dev) {
    RuntimeScope scope;
    return static_cast<int>(real(reinterpret_cast<void*>(d), d_dev, src, srcDevice, count, stream));
  }));
}

cudaError_t cudaMemcpyPeer(void* dst, int dstDevice, const void* src, int srcDevice, size_t count) {
  PEERLAB_NEXT(cudaMemcpyPeer);
  if (!copyFaultEngaged()) {
    RuntimeScope scope;
    return real(dst, dstDevice, src, srcDevice, count);
  }
  CopyCall call{dptr(dst), dptr(src), count, dstDevice, srcDevice, nullptr, false, false, "cudaMemcpyPeer"};
  return static_cast<cudaError_t>(copy(call, [&](CUdeviceptr d, int d_dev) {
    RuntimeScope scope;
    return static_cast<int>(real(reinterpret_cast<void*>(d), d_dev, src, srcDevice, count));
  }));
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream) {
  PEERLAB_NEXT(cudaMemcpyAsync);
  return memcpyAsyncHook(real, false, "cudaMemcpyAsync", dst, src, count, kind, stream);
}

cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  PEERLAB_NEXT(cudaMemcpyAsync_ptsz);
  return memcpyAsyncHook(real, true, "cudaMemcpyAsync", dst, src, count, kind, stream);
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  PEERLAB_NEXT(cudaMemcpy);
  return memcpyHook(real, false, "cudaMemcpy", dst, src, count, kind);
}

cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  PEERLAB_NEXT(cudaMemcpy_ptds);
  return memcpyHook(real, true, "cudaMemcpy", dst, src, count, kind);
}

cudaError_t cudaIpcOpenMemHandle(void** devPtr, cudaIpcMemHandle_t handle, unsigned int flags) {
  PEERLAB_NEXT(cudaIpcOpenMemHandle);
  if (!ipcOpenHooked() || devPtr == nullptr) {
    RuntimeScope scope;
    return real(devPtr, handle, flags);
  }
  static const auto real_close = next<decltype(&::cudaIpcCloseMemHandle)>("cudaIpcCloseMemHandle");
  CUdeviceptr p = 0;
  const int r = ipcOpen(
      Layer::kRuntime, &p,
      [&] {
        RuntimeScope scope;
        void* opened = nullptr;
        const cudaError_t e = real(&opened, handle, flags);
        p = dptr(opened);
        return static_cast<int>(e);
      },
      [&](CUdeviceptr q) {
        RuntimeScope scope;
        return real_close != nullptr ? static_cast<int>(real_close(reinterpret_cast<void*>(q))) : 0;
      });
  if (r == 0) *devPtr = reinterpret_cast<void*>(p);
  return static_cast<cudaError_t>(r);
}

cudaError_t cudaIpcCloseMemHandle(void* devPtr) {
  PEERLAB_NEXT(cudaIpcCloseMemHandle);
  teardown("cudaIpcCloseMemHandle");
  return static_cast<cudaError_t>(ipcClose(dptr(devPtr), [&] {
    RuntimeScope scope;
    return static_cast<int>(real(devPtr));
  }));
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* devPtr) {
  PEERLAB_NEXT(cudaIpcGetMemHandle);
  cudaError_t r;
  {
    RuntimeScope scope;
    r = real(handle, devPtr);
  }
  if (r == cudaSuccess) exported(Layer::kRuntime, false, "cudaIpcGetMemHandle");
  return r;
}

// Teardown calls let copy_hang stalls go (release=teardown).
cudaError_t cudaFree(void* devPtr) {
  PEERLAB_NEXT(cudaFree);
  teardown("cudaFree");
  RuntimeScope scope;
  return real(devPtr);
}

cudaError_t cudaFreeHost(void* ptr) {
  PEERLAB_NEXT(cudaFreeHost);
  teardown("cudaFreeHost");
  RuntimeScope scope;
  return real(ptr);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  PEERLAB_NEXT(cudaStreamDestroy);
  teardown("cudaStreamDestroy");
  RuntimeScope scope;
  return real(stream);
}

cudaError_t cudaDeviceReset(void) {
  PEERLAB_NEXT(cudaDeviceReset);
  teardown("cudaDeviceReset");
  RuntimeScope scope;
  return real();
}

}  // extern "C"
