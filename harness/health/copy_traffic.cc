#include "harness/health/copy_traffic.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "reference/core/check.h"
#include "reference/core/deadline.h"
#include "reference/core/driver.h"
#include "reference/core/memory.h"
#include "reference/core/scoped.h"
#include "reference/core/wait.h"

namespace peerlab::health {
namespace {

constexpr size_t kCopyBytes = size_t{64} << 20;
constexpr int64_t kDeadlineMs = 20000;

// Runs `read` on a second thread while this one keeps two copies in flight.
Status copyAround(int gpu, const std::function<void()>& read) {
  PEERLAB_ASSIGN_OR_RETURN(ScopedDevice scoped, ScopedDevice::make(gpu));
  PEERLAB_ASSIGN_OR_RETURN(Stream stream, createStream(gpu));
  PEERLAB_ASSIGN_OR_RETURN(DeviceBuffer dst, allocDevice(gpu, kCopyBytes));
  PEERLAB_ASSIGN_OR_RETURN(PinnedBuffer src, allocPinned(kCopyBytes));
  PEERLAB_ASSIGN_OR_RETURN(Event previous, createEvent(gpu));
  PEERLAB_ASSIGN_OR_RETURN(Event latest, createEvent(gpu));
  const Deadline deadline = Deadline::afterMs(kDeadlineMs);
  auto enqueue = [&](Event& done) -> Status {
    PEERLAB_RETURN_IF_ERROR(
        PEERLAB_CUDA(cudaMemcpyAsync(dst.get().ptr, src.get().ptr, kCopyBytes, cudaMemcpyHostToDevice, stream.get())));
    return PEERLAB_CUDA(cudaEventRecord(done.get(), stream.get()));
  };
  PEERLAB_RETURN_IF_ERROR(enqueue(previous));
  PEERLAB_RETURN_IF_ERROR(enqueue(latest));
  std::atomic<bool> done{false};
  std::thread reader([&] {
    read();
    done = true;
  });
  Status st = Status::ok();
  while (!done && st.isOk()) {
    // Wait for the older copy, then queue another behind the newer one.
    st = waitEvent(previous.get(), deadline, "health: wake copy");
    if (st.isOk()) {
      std::swap(previous, latest);
      st = enqueue(latest);
    }
  }
  reader.join();
  Status drained = waitStream(stream.get(), deadline, "health: wake copies");
  PEERLAB_RETURN_IF_ERROR(st);
  return drained;
}

}  // namespace

TrafficHook copyTraffic(std::string* error) {
  return [error](int gpu, const std::function<void()>& read) {
    // A primary context the copies create is released after them: in exclusive-process mode a context held here
    // would keep the benchmark processes off the GPU.
    CUdevice dev = 0;
    unsigned flags = 0;
    int active = 1;
    const bool known = PEERLAB_DRIVER_CALL(cuDeviceGet, &dev, gpu) == CUDA_SUCCESS &&
                       PEERLAB_DRIVER_CALL(cuDevicePrimaryCtxGetState, dev, &flags, &active) == CUDA_SUCCESS;
    // When the copies cannot start, `read` does not run here and the caller reads at idle.
    Status st = copyAround(gpu, read);
    if (!st.isOk() && error) {
      // GPUs are sampled on threads of their own.
      static std::mutex mu;
      std::lock_guard<std::mutex> lock(mu);
      *error += (error->empty() ? "" : "; ") + ("GPU " + std::to_string(gpu) + ": " + st.message());
    }
    if (known && !active) (void)PEERLAB_DRIVER_CALL(cuDevicePrimaryCtxReset, dev);
  };
}

}  // namespace peerlab::health
