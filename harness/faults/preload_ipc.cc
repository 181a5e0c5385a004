// IPC faults: ipc_open_fail on legacy and VMM imports, drop_writes on IPC mappings (local scratch behind them),
// kill_after_export; and the record of legacy IPC mappings that copy faults consult.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "harness/faults/preload_internal.h"

namespace peerlab::faults::preload {

namespace {

// drop_writes on IPC: pointer handed out -> scratch allocation, and the VMM handles imported.
std::mutex g_ipc_scratch_mu;
std::map<CUdeviceptr, CUdeviceptr> g_ipc_scratch;
std::set<CUmemGenericAllocationHandle> g_imported;

// Legacy IPC mappings opened in this process while a copy fault is engaged: base -> end. The driver may report such
// a mapping under the ordinal of the device that opened it, so a copy into another process's memory would look
// device-local; copy() counts a copy that touches one as crossing devices (kIpcPeer when the owner is not known).
std::mutex g_ipc_maps_mu;
std::map<CUdeviceptr, CUdeviceptr> g_ipc_maps;

}  // namespace

void recordIpcMapping(const Driver* d, CUdeviceptr p) {
  CUdeviceptr base = 0;
  size_t size = 0;
  if (d == nullptr || p == 0 || d->memGetAddressRange(&base, &size, p) != CUDA_SUCCESS) return;
  std::lock_guard<std::mutex> lock(g_ipc_maps_mu);
  g_ipc_maps[base] = base + size;
}

bool inIpcMapping(CUdeviceptr p) {
  std::lock_guard<std::mutex> lock(g_ipc_maps_mu);
  auto it = g_ipc_maps.upper_bound(p);
  if (it == g_ipc_maps.begin()) return false;
  --it;
  return p >= it->first && p < it->second;
}

void forgetIpcMapping(CUdeviceptr p) {
  std::lock_guard<std::mutex> lock(g_ipc_maps_mu);
  g_ipc_maps.erase(p);
}

bool ipcFaultEngaged() {
  const Config& cfg = config();
  if (!cfg.engaged) return false;
  return cfg.spec.kind == FaultKind::kIpcOpenFail ||
         (cfg.spec.kind == FaultKind::kDropWrites && cfg.spec.drop != DropTarget::kCopy);
}

bool ipcOpenHooked() {
  return ipcFaultEngaged() || copyFaultEngaged();
}

int ipcOpen(Layer layer, CUdeviceptr* ptr, const std::function<int()>& real,
            const std::function<int(CUdeviceptr)>& real_close) {
  if (!ipcFaultEngaged()) {
    // A copy fault: the mapping is opened as asked, and remembered as another process's memory.
    const int r = real();
    if (r == 0 && ptr != nullptr) recordIpcMapping(driver(), *ptr);
    return r;
  }
  const FaultSpec& spec = config().spec;
  const bool paired = spec.pair_a >= 0;
  if (engaged(FaultKind::kIpcOpenFail) && spec.ipc == IpcKind::kVmm) return real();
  if (engaged(FaultKind::kIpcOpenFail) && !paired) {
    if (decide() < 0) return real();
    note("ipc_open_fail", format("IPC handle open returned %d (%s)", spec.code, layerName(layer)));
    return spec.code;
  }
  const int r = real();
  if (r != 0 || ptr == nullptr) return r;
  const Driver* d = driver();
  if (d == nullptr) return r;
  // pair=a-b: a opens (and writes through the mapping), b owns the memory.
  const int opener = currentDevice(d);
  const int owner = pointerDevice(d, *ptr);
  if (paired && (opener != spec.pair_a || owner != spec.pair_b)) return r;
  if (decide() < 0) return r;
  if (engaged(FaultKind::kIpcOpenFail)) {
    real_close(*ptr);
    *ptr = 0;
    note("ipc_open_fail",
         format("IPC handle open %d->%d returned %d (%s)", opener, owner, spec.code, layerName(layer)));
    return spec.code;
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  CUdeviceptr scratch = 0;
  if (d->memGetAddressRange(&base, &size, *ptr) != CUDA_SUCCESS || d->memAlloc(&scratch, size) != CUDA_SUCCESS) {
    note("drop_writes", "no scratch memory; IPC mapping kept");
    return r;
  }
  // The scratch starts as a copy of the owner's memory, so reads look plausible until the first write.
  d->memcpySync(scratch, base, size);
  const CUdeviceptr mapped = *ptr;
  real_close(mapped);
  {
    std::lock_guard<std::mutex> lock(g_ipc_scratch_mu);
    g_ipc_scratch[scratch + (mapped - base)] = scratch;
  }
  *ptr = scratch + (mapped - base);
  note("drop_writes", format("IPC mapping 0x%llx of device %d (%zu bytes) opened on device %d replaced by local "
                             "scratch 0x%llx (%s)",
                             static_cast<unsigned long long>(mapped), owner, size, opener,
                             static_cast<unsigned long long>(scratch), layerName(layer)));
  return r;
}

int ipcClose(CUdeviceptr ptr, const std::function<int()>& real) {
  forgetIpcMapping(ptr);
  CUdeviceptr scratch = 0;
  {
    std::lock_guard<std::mutex> lock(g_ipc_scratch_mu);
    auto it = g_ipc_scratch.find(ptr);
    if (it != g_ipc_scratch.end()) {
      scratch = it->second;
      g_ipc_scratch.erase(it);
    }
  }
  if (scratch == 0) return real();
  if (const Driver* d = driver()) d->memFree(scratch);
  note("drop_writes", format("scratch 0x%llx freed at IPC close", static_cast<unsigned long long>(scratch)));
  return 0;
}

void exported(Layer layer, bool vmm, const char* api) {
  if (!engaged(FaultKind::kKillAfterExport)) return;
  const FaultSpec& spec = config().spec;
  if ((vmm && spec.ipc == IpcKind::kLegacy) || (!vmm && spec.ipc == IpcKind::kVmm)) return;
  if (decide() < 0) return;
  if (spec.ms == 0) {
    note("kill_after_export", format("SIGKILL after %s (%s)", api, layerName(layer)));
    kill(getpid(), SIGKILL);
    return;
  }
  note("kill_after_export", format("SIGKILL in %" PRId64 " ms after %s (%s)", spec.ms, api, layerName(layer)));
  const int64_t ms = spec.ms;
  std::thread([ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    note("kill_after_export", "SIGKILL now");
    kill(getpid(), SIGKILL);
  }).detach();
}

namespace {
// The device an allocation handle's memory lives on (the exporter's ordinal for an imported handle), -1 if unknown.
int handleDevice(const Driver* d, CUmemGenericAllocationHandle handle) {
  CUmemAllocationProp prop{};
  if (d->memGetAllocationProperties == nullptr || d->memGetAllocationProperties(&prop, handle) != CUDA_SUCCESS) {
    return -1;
  }
  return prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop.location.id : -1;
}
}  // namespace

int vmmImport(CUmemGenericAllocationHandle* handle, const std::function<int()>& real) {
  const FaultSpec& spec = config().spec;
  const bool paired = spec.pair_a >= 0;
  if (engaged(FaultKind::kIpcOpenFail)) {
    if (spec.ipc == IpcKind::kLegacy) return real();
    if (!paired) {
      if (decide() < 0) return real();
      note("ipc_open_fail", format("cuMemImportFromShareableHandle returned %d", spec.code));
      return spec.code;
    }
    // pair=a-b: a imports, b owns the memory.
    const int r = real();
    const Driver* d = driver();
    if (r != 0 || handle == nullptr || d == nullptr) return r;
    const int importer = currentDevice(d);
    const int owner = handleDevice(d, *handle);
    if (importer != spec.pair_a || owner != spec.pair_b || decide() < 0) return r;
    if (d->memRelease != nullptr) d->memRelease(*handle);
    *handle = 0;
    note("ipc_open_fail", format("cuMemImportFromShareableHandle %d->%d returned %d", importer, owner, spec.code));
    return spec.code;
  }
  const int r = real();
  if (r == 0 && engaged(FaultKind::kDropWrites) && handle != nullptr) {
    std::lock_guard<std::mutex> lock(g_ipc_scratch_mu);
    g_imported.insert(*handle);
  }
  return r;
}

int vmmMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags,
           const std::function<int(CUmemGenericAllocationHandle)>& real) {
  bool imported = false;
  if (engaged(FaultKind::kDropWrites)) {
    std::lock_guard<std::mutex> lock(g_ipc_scratch_mu);
    imported = g_imported.count(handle) != 0;
  }
  if (!imported) return real(handle);
  const Driver* d = driver();
  if (d == nullptr || d->memCreate == nullptr || d->memGetAllocationProperties == nullptr) return real(handle);
  const FaultSpec& spec = config().spec;
  const int device = currentDevice(d);
  const int owner = handleDevice(d, handle);
  if (spec.pair_a >= 0 && (device != spec.pair_a || owner != spec.pair_b)) return real(handle);
  CUmemAllocationProp prop{};
  if (device < 0 || d->memGetAllocationProperties(&prop, handle) != CUDA_SUCCESS || decide() < 0) return real(handle);
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  CUmemGenericAllocationHandle local = 0;
  if (d->memCreate(&local, size + offset, &prop, 0) != CUDA_SUCCESS) {
    note("drop_writes", "no scratch memory; VMM mapping kept");
    return real(handle);
  }
  const int r = real(local);
  // The mapping holds the scratch from here; it is freed when the program unmaps the range.
  d->memRelease(local);
  note("drop_writes", format("imported VMM mapping of device %d at 0x%llx (%zu bytes) backed by local scratch on "
                             "device %d",
                             owner, static_cast<unsigned long long>(ptr), size, device));
  return r;
}

}  // namespace peerlab::faults::preload
