// Semaphore write faults: signal_withhold drops a write, signal_late delays it with a host sleep in the stream.
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <thread>

#include "harness/faults/preload_internal.h"

namespace peerlab::faults::preload {

bool signalFaultEngaged() {
  return engaged(FaultKind::kSignalWithhold) || engaged(FaultKind::kSignalLate);
}

namespace {
void CUDA_CB sleepHostFn(void* user) {
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(reinterpret_cast<uintptr_t>(user))));
}
}  // namespace

bool beforeStreamWrite(CUstream stream, uint64_t value, const char* api) {
  const FaultSpec& spec = config().spec;
  if (spec.value >= 0 && value != static_cast<uint64_t>(spec.value)) return false;
  if (decide() < 0) return false;
  if (spec.kind == FaultKind::kSignalWithhold) {
    note("signal_withhold", format("%s of value %llu dropped", api, static_cast<unsigned long long>(value)));
    return true;
  }
  const Driver* d = driver();
  if (d == nullptr) return false;
  CtxGuard guard(d, streamContext(d, stream));
  const bool ok =
      d->launchHostFunc(stream, sleepHostFn, reinterpret_cast<void*>(static_cast<uintptr_t>(spec.ms))) == CUDA_SUCCESS;
  note("signal_late", format("%s of value %llu %s by %" PRId64 " ms", api, static_cast<unsigned long long>(value),
                             ok ? "delayed" : "could not be delayed", spec.ms));
  return false;
}

}  // namespace peerlab::faults::preload
