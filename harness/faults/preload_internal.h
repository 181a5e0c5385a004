#pragma once
// Shared by the parts of libpeerlab_faults.so (not installed, not used elsewhere): the log line format, the after= /
// count= / pair= selection, the real driver entry points the interposer uses for its own work, and the IPC mappings
// a copy fault must know about.

#include <cuda.h>

#include <cstdint>
#include <string>

#include "harness/faults/preload_engine.h"

namespace peerlab::faults::preload {

/// printf into a std::string (up to 511 characters).
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

/// The injection index (0-based) of this eligible call, or -1 when it passes untouched (after= and count=).
int64_t decide();
/// True when the fault names no pair, or names a->b.
bool pairMatches(int a, int b);

/// "runtime" or "driver".
const char* layerName(Layer layer);

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

/// The real driver entry points; nullptr until the driver can be reached.
const Driver* driver();

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

/// The context of a stream (the current one for the legacy and per-thread streams); nullptr when unknown.
CUcontext streamContext(const Driver* d, CUstream s);
/// Device ordinals, -1 when unknown.
int contextDevice(const Driver* d, CUcontext ctx);
int currentDevice(const Driver* d);
int streamDevice(const Driver* d, CUstream s);
/// Ordinal of the device a pointer's memory lives on, -1 for host or unknown memory.
int pointerDevice(const Driver* d, CUdeviceptr p);

/// Legacy IPC mappings opened in this process while a copy fault is engaged (see preload_ipc.cc).
void recordIpcMapping(const Driver* d, CUdeviceptr p);
void forgetIpcMapping(CUdeviceptr p);
bool inIpcMapping(CUdeviceptr p);

}  // namespace peerlab::faults::preload
