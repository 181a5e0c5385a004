#pragma once
/// Host <-> device copies of one GPU, the way nvbandwidth's host testcases issue them: by the copy engine
/// (cudaMemcpyAsync of pinned or pageable memory), by SM kernels that load or store pinned host memory through its
/// mapping, and a dependent-load chain through host memory for the latency. Every call only enqueues on `stream`
/// (a stream of the GPU doing the work) except chaseLatency, which waits with a deadline.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "reference/core/deadline.h"
#include "reference/core/status.h"

namespace peerlab::host {

enum class Direction { kHostToDevice, kDeviceToHost };
/// "h2d" / "d2h", the run file's names.
std::string_view directionName(Direction d);

/// Copy engine: cudaMemcpyAsync of the direction's kind. `host` may be pinned or pageable (a pageable copy is staged
/// by the driver and returns only once the source has been read).
Status copyEngine(void* device_ptr, void* host_ptr, size_t bytes, Direction dir, cudaStream_t stream);

/// Grid of an SM copy: a few blocks per SM, never more than the 16-byte vectors need.
struct SmLaunch {
  int blocks = 0;
  int threads = 0;
};
SmLaunch planSmLaunch(int sm_count, size_t bytes, int threads = 512, int blocks_per_sm = 4);

/// SM copy: a kernel on the stream's GPU loads host memory (h2d) or stores into it (d2h) through the mapping of
/// pinned `host_ptr` (registered or cudaHostAlloc'd). Any alignment; 16-byte vectors where both sides allow.
/// `invalid_argument` when `host_ptr` is not pinned host memory.
Status smCopy(void* device_ptr, void* host_ptr, size_t bytes, Direction dir, cudaStream_t stream);

/// Dependent loads: the chain's node order when `bytes` of host memory hold one 8-byte pointer every `stride`
/// bytes, visited in address order (nvbandwidth's host_device_latency_sm). Returns the node count (0 when
/// bytes < stride or stride < 8 or not a multiple of 8).
size_t chaseNodes(size_t bytes, size_t stride);
/// Writes the chain into pinned `host_ptr`: node i points (by its device address) to node (i + 1) % nodes.
Status buildChase(void* host_ptr, size_t bytes, size_t stride);
/// One thread of `device` walks `loads` dependent pointers from the chain's first node (after one untimed pass);
/// returns nanoseconds per load. Waits for the GPU until `deadline`.
StatusOr<double> chaseLatency(const void* host_ptr, size_t bytes, size_t stride, uint32_t loads, int device,
                              cudaStream_t stream, Deadline deadline);

/// Peak DRAM bandwidth of `device` in GB/s from its memory bus width and clock (2 transfers per clock):
/// width_bits / 8 x clock_khz x 1e3 x 2 / 1e9. `unavailable` when the driver reports no clock or width.
StatusOr<double> memoryPeakGbps(int device);
/// The same from the numbers, for tests and fixtures.
double memoryPeakGbps(int bus_width_bits, int clock_khz);

/// Whether this build's kernels can run on `device`: `unavailable` with one line naming the GPU's compute
/// capability and the architectures built when the binary holds no image (SASS or PTX) for it.
Status checkKernelImage(int device);
/// checkKernelImage for each of `devices`, for a process that leaves the GPUs to child processes: the primary
/// context each check creates is reset afterwards (cudaDeviceReset), so the caller holds no GPU memory and no
/// exclusive-process slot. The first failure is returned.
Status checkKernelImagesAndRelease(const std::vector<int>& devices);
/// The CUDA architectures this library was compiled for ("75;80;...;120+PTX", from the build).
std::string_view builtArchitectures();

}  // namespace peerlab::host
