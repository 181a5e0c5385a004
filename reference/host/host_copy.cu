#include "reference/host/host_copy.h"

#include <algorithm>
#include <string>
#include <type_traits>

#include "reference/core/check.h"
#include "reference/core/device_time.cuh"
#include "reference/core/devices.h"
#include "reference/core/memory.h"
#include "reference/core/scoped.h"
#include "reference/core/wait.h"
#include "reference/host/host_memory.h"

#ifndef PEERLAB_CUDA_ARCHITECTURES
#define PEERLAB_CUDA_ARCHITECTURES "unknown"
#endif

namespace peerlab::host {
namespace {

// Bytes [0, head) and [head + 16 * vecs, head + 16 * vecs + tail) go byte by byte; the middle as 16-byte vectors.
// vecs == 0 and head == bytes when the two sides are not equally aligned.
struct SmCopyView {
  uint8_t* dst;
  const uint8_t* src;
  uint64_t head;
  uint64_t vecs;
  uint64_t tail;
};
static_assert(std::is_trivially_copyable_v<SmCopyView>);

constexpr int kUnroll = 4;

// Grid-stride; each thread keeps kUnroll 16-byte loads in flight before its stores (a PCIe read takes ~1 us).
__global__ void __launch_bounds__(1024) smHostCopyKernel(SmCopyView v) {
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t nthreads = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  auto* dst = reinterpret_cast<uint4*>(v.dst + v.head);
  const auto* src = reinterpret_cast<const uint4*>(v.src + v.head);
  const uint64_t step = nthreads * kUnroll;
  uint64_t i = tid;
  for (; i + (kUnroll - 1) * nthreads < v.vecs; i += step) {
    uint4 r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      r[u] = src[i + u * nthreads];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      dst[i + u * nthreads] = r[u];
  }
  for (; i < v.vecs; i += nthreads)
    dst[i] = src[i];
  for (uint64_t b = tid; b < v.head; b += nthreads)
    v.dst[b] = v.src[b];
  const uint64_t tail_at = v.head + 16 * v.vecs;
  for (uint64_t b = tid; b < v.tail; b += nthreads)
    v.dst[tail_at + b] = v.src[tail_at + b];
}

struct ChaseResult {
  uint64_t ns;
  uint64_t last;
};

// One thread: an untimed pass over the chain, then `loads` timed dependent loads (no L1 allocation, so each step
// crosses the bus).
__global__ void chaseKernel(const uint64_t* start, uint32_t warmup, uint32_t loads, ChaseResult* out) {
  const uint64_t* p = start;
  for (uint32_t i = 0; i < warmup; ++i) {
    uint64_t nxt;
    asm volatile("ld.global.L1::no_allocate.u64 %0, [%1];" : "=l"(nxt) : "l"(p));
    p = reinterpret_cast<const uint64_t*>(nxt);
  }
  if (reinterpret_cast<uintptr_t>(p) == 1) __trap();  // the timer starts after the last warm-up load returned
  const uint64_t t0 = globalTimerNs();
  for (uint32_t i = 0; i < loads; ++i) {
    uint64_t nxt;
    asm volatile("ld.global.L1::no_allocate.u64 %0, [%1];" : "=l"(nxt) : "l"(p));
    p = reinterpret_cast<const uint64_t*>(nxt);
  }
  if (reinterpret_cast<uintptr_t>(p) == 1) __trap();
  out->ns = globalTimerNs() - t0;
  out->last = reinterpret_cast<uint64_t>(p);
}

__global__ void probeKernel() {}

StatusOr<int> streamDevice(cudaStream_t stream) {
  int device = -1;
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaGetDevice(&device)));
  } else {
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaStreamGetDevice(stream, &device)));
  }
  return device;
}

Status checkPinned(const void* p, const char* what) {
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, p);
  if (err != cudaSuccess || attr.type != cudaMemoryTypeHost) {
    (void)cudaGetLastError();
    return PEERLAB_INVALID_ARGUMENT(std::string(what) +
                                    ": host pointer is not pinned host memory (register it or use "
                                    "allocHost)");
  }
  return Status::ok();
}

}  // namespace

std::string_view directionName(Direction d) {
  return d == Direction::kHostToDevice ? "h2d" : "d2h";
}

Status copyEngine(void* device_ptr, void* host_ptr, size_t bytes, Direction dir, cudaStream_t stream) {
  if (bytes == 0) return Status::ok();
  if (!device_ptr || !host_ptr) return PEERLAB_INVALID_ARGUMENT("copyEngine: null pointer");
  if (dir == Direction::kHostToDevice) {
    return PEERLAB_CUDA(cudaMemcpyAsync(device_ptr, host_ptr, bytes, cudaMemcpyHostToDevice, stream));
  }
  return PEERLAB_CUDA(cudaMemcpyAsync(host_ptr, device_ptr, bytes, cudaMemcpyDeviceToHost, stream));
}

SmLaunch planSmLaunch(int sm_count, size_t bytes, int threads, int blocks_per_sm) {
  SmLaunch l;
  l.threads = std::clamp(threads, 32, 1024);
  const uint64_t vecs = (static_cast<uint64_t>(bytes) + 15) / 16;
  const uint64_t needed = std::max<uint64_t>(1, (vecs + l.threads - 1) / static_cast<uint64_t>(l.threads));
  const uint64_t cap = static_cast<uint64_t>(std::max(1, sm_count)) * static_cast<uint64_t>(std::max(1, blocks_per_sm));
  l.blocks = static_cast<int>(std::min(needed, cap));
  return l;
}

Status smCopy(void* device_ptr, void* host_ptr, size_t bytes, Direction dir, cudaStream_t stream) {
  if (bytes == 0) return Status::ok();
  if (!device_ptr || !host_ptr) return PEERLAB_INVALID_ARGUMENT("smCopy: null pointer");
  PEERLAB_RETURN_IF_ERROR(checkPinned(host_ptr, "smCopy"));
  PEERLAB_ASSIGN_OR_RETURN(void* mapped, deviceAddress(host_ptr));
  PEERLAB_ASSIGN_OR_RETURN(int device, streamDevice(stream));
  int sms = 0;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)));
  const bool h2d = dir == Direction::kHostToDevice;
  auto* dst = static_cast<uint8_t*>(h2d ? device_ptr : mapped);
  const auto* src = static_cast<const uint8_t*>(h2d ? mapped : device_ptr);
  SmCopyView v{dst, src, bytes, 0, 0};
  const uintptr_t head = (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16;
  if (reinterpret_cast<uintptr_t>(src) % 16 == reinterpret_cast<uintptr_t>(dst) % 16 && head < bytes) {
    v.head = head;
    v.vecs = (bytes - head) / 16;
    v.tail = bytes - head - 16 * v.vecs;
  }
  const SmLaunch l = planSmLaunch(sms, v.vecs > 0 ? 16 * v.vecs : bytes);
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device));
  smHostCopyKernel<<<l.blocks, l.threads, 0, stream>>>(v);
  return PEERLAB_CUDA_LAUNCH("smHostCopyKernel");
}

size_t chaseNodes(size_t bytes, size_t stride) {
  if (stride < 8 || stride % 8 != 0 || bytes < stride) return 0;
  return bytes / stride;
}

Status buildChase(void* host_ptr, size_t bytes, size_t stride) {
  const size_t nodes = chaseNodes(bytes, stride);
  if (nodes == 0) {
    return PEERLAB_INVALID_ARGUMENT("buildChase: " + std::to_string(bytes) + " bytes with stride " +
                                    std::to_string(stride) + " hold no chain");
  }
  PEERLAB_RETURN_IF_ERROR(checkPinned(host_ptr, "buildChase"));
  PEERLAB_ASSIGN_OR_RETURN(void* mapped, deviceAddress(host_ptr));
  auto* base = static_cast<uint8_t*>(host_ptr);
  const auto dbase = reinterpret_cast<uint64_t>(mapped);
  for (size_t i = 0; i < nodes; ++i) {
    const uint64_t next = dbase + ((i + 1) % nodes) * stride;
    *reinterpret_cast<uint64_t*>(base + i * stride) = next;
  }
  return Status::ok();
}

StatusOr<double> chaseLatency(const void* host_ptr, size_t bytes, size_t stride, uint32_t loads, int device,
                              cudaStream_t stream, Deadline deadline) {
  const size_t nodes = chaseNodes(bytes, stride);
  if (nodes == 0 || loads == 0) return PEERLAB_INVALID_ARGUMENT("chaseLatency: empty chain or no loads");
  PEERLAB_ASSIGN_OR_RETURN(void* mapped, deviceAddress(host_ptr));
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device));
  PEERLAB_ASSIGN_OR_RETURN(PinnedBuffer out, allocPinned(sizeof(ChaseResult)));
  *out->as<ChaseResult>() = ChaseResult{0, 0};
  PEERLAB_ASSIGN_OR_RETURN(void* out_dev, deviceAddress(out->ptr));
  const auto warmup = static_cast<uint32_t>(std::min<size_t>(nodes, 1u << 20));
  chaseKernel<<<1, 1, 0, stream>>>(static_cast<const uint64_t*>(mapped), warmup, loads,
                                   static_cast<ChaseResult*>(out_dev));
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA_LAUNCH("chaseKernel"));
  Status waited = waitStream(stream, deadline, "host latency chase");
  if (!waited.isOk()) {
    // The kernel may still read `out`: keep it until the stream drains.
    releaseWhenIdle(std::make_shared<PinnedBuffer>(std::move(out)), {stream}, device);
    return waited;
  }
  const ChaseResult r = *out->as<ChaseResult>();
  return static_cast<double>(r.ns) / loads;
}

double memoryPeakGbps(int bus_width_bits, int clock_khz) {
  if (bus_width_bits <= 0 || clock_khz <= 0) return 0;
  return bus_width_bits / 8.0 * clock_khz * 1e3 * 2 / 1e9;
}

StatusOr<double> memoryPeakGbps(int device) {
  int width = 0;
  int clock = 0;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaDeviceGetAttribute(&width, cudaDevAttrGlobalMemoryBusWidth, device)));
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaDeviceGetAttribute(&clock, cudaDevAttrMemoryClockRate, device)));
  const double peak = memoryPeakGbps(width, clock);
  if (peak <= 0) {
    return PEERLAB_UNAVAILABLE("device " + std::to_string(device) + " reports memory bus width " +
                               std::to_string(width) + " bits, clock " + std::to_string(clock) + " kHz");
  }
  return peak;
}

std::string_view builtArchitectures() {
  return PEERLAB_CUDA_ARCHITECTURES;
}

Status checkKernelImage(int device) {
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device));
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, probeKernel);
  if (err == cudaSuccess) return Status::ok();
  (void)cudaGetLastError();
  int major = 0, minor = 0;
  (void)cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  (void)cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  (void)cudaGetLastError();
  const std::string what = "GPU " + std::to_string(device) + " (compute capability " + std::to_string(major) + "." +
                           std::to_string(minor) + ")";
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction) {
    return PEERLAB_UNAVAILABLE("these binaries hold no kernel image for " + what + ": built for CUDA architectures " +
                               std::string(builtArchitectures()) +
                               "; rebuild with -DCMAKE_CUDA_ARCHITECTURES=native (or add " + std::to_string(major) +
                               std::to_string(minor) + ")");
  }
  return PEERLAB_UNAVAILABLE("cannot load kernels on " + what + ": " + describeCudaError(err));
}

Status checkKernelImagesAndRelease(const std::vector<int>& devices) {
  Status first = Status::ok();
  for (int d : devices) {
    Status st = checkKernelImage(d);
    if (first.isOk() && !st.isOk()) first = st;
  }
  // Nothing else of this process uses the GPUs: drop the contexts the checks created.
  for (int d : devices) {
    if (cudaSetDevice(d) == cudaSuccess) (void)cudaDeviceReset();
    (void)cudaGetLastError();
  }
  return first;
}

}  // namespace peerlab::host
