#pragma once
/// Checking macros that turn CUDA runtime and driver results into a Status carrying file:line.

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "reference/core/driver.h"
#include "reference/core/status.h"

namespace peerlab::detail {

/// Status for a runtime-API result; on failure also clears the runtime's last error.
Status cudaStatus(cudaError_t err, const char* expr, const char* file, int line);
/// Status for a driver-API result.
Status cuStatus(CUresult res, const char* expr, const char* file, int line);
/// The error of a launch call that returns one (cudaLaunchKernelEx), else the runtime's pending launch error.
inline cudaError_t launchError(cudaError_t err) {
  return err != cudaSuccess ? err : cudaGetLastError();
}

}  // namespace peerlab::detail

namespace peerlab {

/// Code for a runtime error: `unavailable` for "no such capability here" errors, else `cuda_error`.
StatusCode codeForCudaError(cudaError_t err);
/// Code for a driver error, same mapping.
StatusCode codeForCuResult(CUresult res);
/// "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED (217): peer access is not supported between these two devices"
std::string describeCuResult(CUresult res);
/// "cudaErrorPeerAccessUnsupported (217): peer access is not supported between these two devices"
std::string describeCudaError(cudaError_t err);

}  // namespace peerlab

/// `PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemcpyAsync(...)));`
#define PEERLAB_CUDA(expr) ::peerlab::detail::cudaStatus((expr), #expr, __FILE__, __LINE__)
/// Status of the last kernel launch (cudaGetLastError), with `what` naming the kernel.
#define PEERLAB_CUDA_LAUNCH(what) ::peerlab::detail::cudaStatus(cudaGetLastError(), what, __FILE__, __LINE__)
/// Status of a launch call that returns its error (`PEERLAB_CUDA_LAUNCHED(launchKernel(...), "kernel")`).
#define PEERLAB_CUDA_LAUNCHED(expr, what) \
  ::peerlab::detail::cudaStatus(::peerlab::detail::launchError(expr), what, __FILE__, __LINE__)
/// `PEERLAB_RETURN_IF_ERROR(PEERLAB_CU(cuCtxGetCurrent, &ctx));` calls the driver through its resolved entry point.
#define PEERLAB_CU(fn, ...) \
  ::peerlab::detail::cuStatus(PEERLAB_DRIVER_CALL_NAMED(#fn, fn, __VA_ARGS__), #fn, __FILE__, __LINE__)
