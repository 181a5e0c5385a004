// The real driver entry points the interposer uses for its own work, and what they tell about streams and pointers.
#include <cuda.h>

#include <mutex>

#include "harness/faults/preload_internal.h"

namespace peerlab::faults::preload {

namespace {

std::mutex g_driver_mu;
Driver g_driver;

template <class Fn>
bool resolveInto(Fn* out, const char* name, bool required, int version = kClassicAbiVersion) {
  *out = reinterpret_cast<Fn>(realEntryPoint(name, version));
  return *out != nullptr || !required;
}

bool isSpecialStream(CUstream s) {
  return s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

}  // namespace

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

int pointerDevice(const Driver* d, CUdeviceptr p) {
  if (p == 0) return -1;
  unsigned int type = 0;
  if (d->pointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != CUDA_SUCCESS) return -1;
  if (type != CU_MEMORYTYPE_DEVICE) return -1;
  int ordinal = -1;
  if (d->pointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) != CUDA_SUCCESS) return -1;
  return ordinal;
}

const char* layerName(Layer layer) {
  return layer == Layer::kRuntime ? "runtime" : "driver";
}

}  // namespace peerlab::faults::preload
