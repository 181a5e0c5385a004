// A stand-in for libcudart that finds its driver the way the real runtime does: dlopen the driver library,
// dlsym(handle, "cuGetProcAddress_v2"), then resolve every entry point through it. Linked by the test program
// instead of the real runtime, so the interposer's runtime hooks, its dlsym hook and its driver wrappers are all on
// the path, as in a real process.

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#undef cuGetProcAddress

#ifndef PEERLAB_FAKE_CUDA_PATH
#error "PEERLAB_FAKE_CUDA_PATH must name the fake driver library"
#endif

namespace {

using GpaV2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

struct Driver {
  GpaV2 gpa = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) primaryRetain = nullptr;
  decltype(&::cuCtxSetCurrent) ctxSetCurrent = nullptr;
  decltype(&::cuCtxGetDevice) ctxGetDevice = nullptr;
  decltype(&::cuDeviceCanAccessPeer) canAccessPeer = nullptr;
  decltype(&::cuDeviceGetP2PAttribute) p2pAttribute = nullptr;
  decltype(&::cuCtxEnablePeerAccess) enablePeer = nullptr;
  decltype(&::cuMemAlloc) memAlloc = nullptr;
  decltype(&::cuMemFree) memFree = nullptr;
  decltype(&::cuMemHostAlloc) memHostAlloc = nullptr;
  decltype(&::cuMemcpyAsync) memcpyAsync = nullptr;
  decltype(&::cuMemcpy) memcpySync = nullptr;
  decltype(&::cuMemcpyPeerAsync) memcpyPeerAsync = nullptr;
  decltype(&::cuMemcpyPeer) memcpyPeer = nullptr;
  decltype(&::cuStreamCreate) streamCreate = nullptr;
  decltype(&::cuStreamDestroy) streamDestroy = nullptr;
  decltype(&::cuStreamSynchronize) streamSynchronize = nullptr;
  decltype(&::cuStreamQuery) streamQuery = nullptr;
  decltype(&::cuIpcGetMemHandle) ipcGet = nullptr;
  decltype(&::cuIpcOpenMemHandle) ipcOpen = nullptr;
  decltype(&::cuIpcCloseMemHandle) ipcClose = nullptr;
};

template <class Fn>
void resolve(GpaV2 gpa, const char* name, Fn* out) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult q;
  // The ABIs of CUDA 12.0, as the prototypes called through (cuCtxGetDevice, not cuCtxGetDevice_v2).
  if (gpa(name, &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS) fn = nullptr;
  *out = reinterpret_cast<Fn>(fn);
}

const Driver& drv() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen(PEERLAB_FAKE_CUDA_PATH, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      std::fprintf(stderr, "fake cudart: %s\n", dlerror());
      std::abort();
    }
    d.gpa = reinterpret_cast<GpaV2>(dlsym(lib, "cuGetProcAddress_v2"));
    resolve(d.gpa, "cuDevicePrimaryCtxRetain", &d.primaryRetain);
    resolve(d.gpa, "cuCtxSetCurrent", &d.ctxSetCurrent);
    resolve(d.gpa, "cuCtxGetDevice", &d.ctxGetDevice);
    resolve(d.gpa, "cuDeviceCanAccessPeer", &d.canAccessPeer);
    resolve(d.gpa, "cuDeviceGetP2PAttribute", &d.p2pAttribute);
    resolve(d.gpa, "cuCtxEnablePeerAccess", &d.enablePeer);
    resolve(d.gpa, "cuMemAlloc", &d.memAlloc);
    resolve(d.gpa, "cuMemFree", &d.memFree);
    resolve(d.gpa, "cuMemHostAlloc", &d.memHostAlloc);
    resolve(d.gpa, "cuMemcpyAsync", &d.memcpyAsync);
    resolve(d.gpa, "cuMemcpy", &d.memcpySync);
    resolve(d.gpa, "cuMemcpyPeerAsync", &d.memcpyPeerAsync);
    resolve(d.gpa, "cuMemcpyPeer", &d.memcpyPeer);
    resolve(d.gpa, "cuStreamCreate", &d.streamCreate);
    resolve(d.gpa, "cuStreamDestroy", &d.streamDestroy);
    resolve(d.gpa, "cuStreamSynchronize", &d.streamSynchronize);
    resolve(d.gpa, "cuStreamQuery", &d.streamQuery);
    resolve(d.gpa, "cuIpcGetMemHandle", &d.ipcGet);
    resolve(d.gpa, "cuIpcOpenMemHandle", &d.ipcOpen);
    resolve(d.gpa, "cuIpcCloseMemHandle", &d.ipcClose);
    CUcontext ctx = nullptr;
    d.primaryRetain(&ctx, 0);
    d.ctxSetCurrent(ctx);
  });
  return d;
}

CUcontext primary(int device) {
  CUcontext ctx = nullptr;
  drv().primaryRetain(&ctx, device);
  return ctx;
}

cudaError_t rt(CUresult r) {
  return static_cast<cudaError_t>(r);
}
CUdeviceptr dp(const void* p) {
  return reinterpret_cast<CUdeviceptr>(p);
}

}  // namespace

extern "C" {

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device > 3) return cudaErrorInvalidDevice;
  return rt(drv().ctxSetCurrent(primary(device)));
}
cudaError_t cudaGetDevice(int* device) {
  CUdevice d = 0;
  const CUresult r = drv().ctxGetDevice(&d);
  *device = d;
  return rt(r);
}
cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  return rt(drv().canAccessPeer(can, device, peer));
}
cudaError_t cudaDeviceGetP2PAttribute(int* value, enum cudaDeviceP2PAttr attr, int src, int dst) {
  return rt(drv().p2pAttribute(value, static_cast<CUdevice_P2PAttribute>(attr), src, dst));
}
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
  return rt(drv().enablePeer(primary(peer), flags));
}
cudaError_t cudaMalloc(void** p, size_t bytes) {
  CUdeviceptr d = 0;
  const CUresult r = drv().memAlloc(&d, bytes);
  *p = reinterpret_cast<void*>(d);
  return rt(r);
}
cudaError_t cudaFree(void* p) {
  return rt(drv().memFree(dp(p)));
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  return rt(drv().memHostAlloc(p, bytes, 0));
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, enum cudaMemcpyKind, cudaStream_t s) {
  return rt(drv().memcpyAsync(dp(dst), dp(src), n, reinterpret_cast<CUstream>(s)));
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, enum cudaMemcpyKind) {
  return rt(drv().memcpySync(dp(dst), dp(src), n));
}
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_dev, const void* src, int src_dev, size_t n, cudaStream_t s) {
  return rt(
      drv().memcpyPeerAsync(dp(dst), primary(dst_dev), dp(src), primary(src_dev), n, reinterpret_cast<CUstream>(s)));
}
cudaError_t cudaMemcpyPeer(void* dst, int dst_dev, const void* src, int src_dev, size_t n) {
  return rt(drv().memcpyPeer(dp(dst), primary(dst_dev), dp(src), primary(src_dev), n));
}
cudaError_t cudaStreamCreate(cudaStream_t* s) {
  CUstream cs = nullptr;
  const CUresult r = drv().streamCreate(&cs, 0);
  *s = reinterpret_cast<cudaStream_t>(cs);
  return rt(r);
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  return rt(drv().streamDestroy(reinterpret_cast<CUstream>(s)));
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  return rt(drv().streamSynchronize(reinterpret_cast<CUstream>(s)));
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
  return rt(drv().streamQuery(reinterpret_cast<CUstream>(s)));
}
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* p) {
  CUipcMemHandle h;
  const CUresult r = drv().ipcGet(&h, dp(p));
  static_assert(sizeof(h) == sizeof(*handle));
  __builtin_memcpy(handle, &h, sizeof(h));
  return rt(r);
}
cudaError_t cudaIpcOpenMemHandle(void** p, cudaIpcMemHandle_t handle, unsigned int flags) {
  CUipcMemHandle h;
  __builtin_memcpy(&h, &handle, sizeof(h));
  CUdeviceptr d = 0;
  const CUresult r = drv().ipcOpen(&d, h, flags);
  *p = reinterpret_cast<void*>(d);
  return rt(r);
}
cudaError_t cudaIpcCloseMemHandle(void* p) {
  return rt(drv().ipcClose(dp(p)));
}
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int version,
                                             unsigned long long flags, enum cudaDriverEntryPointQueryResult* status) {
  CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  const CUresult r = drv().gpa(symbol, fn, static_cast<int>(version), flags, &q);
  if (status != nullptr) {
    *status = q == CU_GET_PROC_ADDRESS_SUCCESS ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  }
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorSymbolNotFound;
}

}  // extern "C"
