#pragma once
/// Inside libpeerlab_faults.so: the active fault, the real driver entry points the interposer uses for its own work,
/// and the fault actions shared by the runtime hooks (preload_runtime.cc) and the driver entry-point wrappers
/// (preload_driver.cc). Nothing here links the CUDA runtime or libcuda: the runtime is reached with dlsym(RTLD_NEXT)
/// and the driver through the cuGetProcAddress the process itself looked up.

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "harness/faults/fault_spec.h"

namespace peerlab::faults::preload {

struct Config {
  FaultSpec spec;
  bool engaged = false;  ///< a fault the interposer acts on, and this process is the rank it names
  bool verbose = false;
  int rank = -1;  ///< PEERLAB_RANK (or the MPI launcher's rank), -1 when unset
};

/// The configuration from the environment, read once.
const Config& config();
/// True when the engaged fault is `kind`.
bool engaged(FaultKind kind);

/// glibc's dlsym, found with dlvsym so that the hook never calls itself.
using DlsymFn = void* (*)(void*, const char*);
DlsymFn realDlsym();

/// An object already loaded (dlopen with RTLD_NOLOAD through glibc's own dlopen, found with dlvsym; null when not
/// loaded) and its release. Never through a dlopen another tool interposes: such a tool (compute-sanitizer's
/// injection library) may call our dlsym from inside its dlopen, and calling it back there deadlocked the process.
void* openLoaded(const char* file);
void closeLoaded(void* handle);

/// The driver's cuGetProcAddress (5-argument and 4-argument ABIs), as the process looked them up.
using GpaV2Fn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using GpaV1Fn = CUresult (*)(const char*, void**, int, cuuint64_t);
void noteRealGpaV2(GpaV2Fn fn);
void noteRealGpaV1(GpaV1Fn fn);
GpaV2Fn realGpaV2();
GpaV1Fn realGpaV1();

/// The CUDA version whose ABIs the interposer's own prototypes have. cuGetProcAddress hands out the newest ABI of a
/// name for the version asked, and newer ones add parameters (cuStreamGetCtx -> cuStreamGetCtx_v2 from 12.5,
/// cuCtxGetDevice -> cuCtxGetDevice_v2 from 13.0): asking with CUDA_VERSION would call those through the old
/// prototypes.
constexpr int kClassicAbiVersion = 12000;
/// The real driver entry point `name` with the ABI it had in CUDA `version`; nullptr when there is none.
void* realEntryPoint(const char* name, int version = kClassicAbiVersion);

/// Marks the calling thread as inside a runtime hook's forwarded call: the driver wrappers the runtime reaches
/// underneath pass through, so a fault is applied once per user call.
class RuntimeScope {
 public:
  RuntimeScope();
  ~RuntimeScope();
  RuntimeScope(const RuntimeScope&) = delete;
  RuntimeScope& operator=(const RuntimeScope&) = delete;
};
bool insideRuntimeCall();

/// One line on stderr (PEERLAB_FAULTS_VERBOSE=1) and one JSON line in PEERLAB_FAULTS_STATS for an action taken.
void note(const char* action, const std::string& detail);
/// The line every process under the interposer prints once when it is loaded, verbose or not (and the stats line).
void announceLoaded(const std::string& detail);

/// Which API layer a hook belongs to (for messages).
enum class Layer { kRuntime, kDriver };

// Capability answers (lie).
void lieCanAccess(Layer layer, int* can_access, int device, int peer);
void lieP2PAttribute(Layer layer, int* value, int attribute, int src, int dst);

/// Peer enable: `current` enables access to `peer`. `real` performs the enable and returns its code.
int enablePeer(Layer layer, int current, int peer, const std::function<int()>& real);

/// A copy a hook intercepted. Devices are -1 when the hook does not know them (then pointers are queried).
struct CopyCall {
  CUdeviceptr dst = 0;
  CUdeviceptr src = 0;
  size_t bytes = 0;
  int dst_device = -1;
  int src_device = -1;
  CUstream stream = nullptr;
  bool async = true;
  bool per_thread = false;  ///< stream 0 means the per-thread default stream
  const char* api = "";
};
/// True when a copy fault is engaged (the hook then builds a CopyCall).
bool copyFaultEngaged();
/// Runs `real(dst, dst_device)` with the engaged copy fault applied: a destination redirected to scratch (then
/// dst_device is the scratch's device), a stall enqueued before, or corruption enqueued after.
int copy(const CopyCall& call, const std::function<int(CUdeviceptr dst, int dst_device)>& real);

/// Legacy IPC open: `real` opens and stores the mapping in *ptr; `real_close` closes a mapping.
bool ipcFaultEngaged();
/// True when the hooks must route legacy IPC opens through ipcOpen(): an IPC fault, or a copy fault (which needs to
/// know which mappings are another process's memory).
bool ipcOpenHooked();
int ipcOpen(Layer layer, CUdeviceptr* ptr, const std::function<int()>& real,
            const std::function<int(CUdeviceptr)>& real_close);
/// Legacy IPC close: frees a scratch mapping handed out by drop_writes instead of calling `real`.
int ipcClose(CUdeviceptr ptr, const std::function<int()>& real);
/// After a successful export (legacy or VMM): kill_after_export.
void exported(Layer layer, bool vmm, const char* api);
/// VMM import / map (drop_writes, ipc_open_fail).
int vmmImport(CUmemGenericAllocationHandle* handle, const std::function<int()>& real);
int vmmMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags,
           const std::function<int(CUmemGenericAllocationHandle)>& real);

/// Semaphore writes: returns true when the write must be dropped; enqueues the delay for signal_late.
bool signalFaultEngaged();
bool beforeStreamWrite(CUstream stream, uint64_t value, const char* api);

/// Called by teardown hooks (free, stream/context destruction): lets stalled copies go (copy_hang release=teardown).
void teardown(const char* api);

}  // namespace peerlab::faults::preload
