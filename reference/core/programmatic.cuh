#pragma once
/// Programmatic dependent launch (compute capability 9.0 and up). A kernel launched with
/// cudaLaunchAttributeProgrammaticStreamSerialization may be scheduled while the kernel before it in the stream is
/// still running, once every CTA of that kernel has called releaseDependents() (or exited). Its CTAs must call
/// awaitPriorGrids() before they touch memory the earlier kernel (or anything before it) writes or reads: it returns
/// once that kernel has completed and its memory is visible. Back-to-back launches then overlap one kernel's launch
/// and prologue with the tail of the one before, instead of paying the launch gap in between.
///
/// Both device calls are no-ops in a kernel launched without the attribute, and compile to nothing below sm_90.

#include <cuda_runtime_api.h>

#include <utility>

namespace peerlab {

/// Waits until the grids this one depends on have completed and their memory is visible.
__device__ __forceinline__ void awaitPriorGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// Lets the next kernel in the stream (when launched with the attribute) be scheduled now; it still waits for this
/// grid's completion in its own awaitPriorGrids().
__device__ __forceinline__ void releaseDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/// Launches `kernel<<<grid, block, 0, stream>>>(args...)`, with programmatic stream serialization when
/// `programmatic` (the kernel must then call awaitPriorGrids() before touching memory). Capturable in a CUDA graph
/// (the edge from the kernel before becomes a programmatic one).
template <typename... Params, typename... Args>
cudaError_t launchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, bool programmatic,
                         Args&&... args) {
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = programmatic ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

/// Whether kernels on `device` can be launched programmatically (compute capability 9.0 and up); false when the
/// attribute cannot be read.
inline bool programmaticLaunchSupported(int device) {
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return major >= 9;
}

}  // namespace peerlab
