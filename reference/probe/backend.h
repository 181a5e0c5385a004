#pragma once
/// What a probe worker does, without any I/O: the worker loop (harness/watchdog/probe_runner.h) decodes a request,
/// calls its Backend and sends the answer. makeCudaBackend() is the real one; tests substitute a stand-in.

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "reference/core/status.h"
#include "reference/probe/inject.h"
#include "reference/probe/probe.h"

namespace peerlab::probe {

/// Sent once per worker after its inventory.
struct SetupRequest {
  Role role = Role::kOwner;
  uint64_t max_bytes = 0;   ///< largest cell: each buffer is allocated once at this size and reused
  uint32_t timeout_ms = 0;  ///< the per-cell deadline (the worker's own backstop is derived from it)
  bool exports = false;     ///< owner: export the destination buffers for the IPC methods
};

/// Time a worker spent in one setup step.
struct Timing {
  std::string name;
  uint64_t us = 0;
};

/// What the owner exports for one destination GPU.
struct DeviceExport {
  bool legacy_ok = false;
  std::array<uint8_t, 64> legacy_handle{};  ///< cudaIpcMemHandle_t bytes
  std::string legacy_error;
  bool vmm_ok = false;  ///< a POSIX fd travels with the message, one per vmm_ok device, in device order
  uint64_t vmm_bytes = 0;
  std::string vmm_error;
};
struct Exports {
  std::vector<DeviceExport> devices;
  size_t vmmCount() const {
    size_t n = 0;
    for (const auto& d : devices)
      n += d.vmm_ok ? 1 : 0;
    return n;
  }
};

/// A worker's answer to setup or import. `error` non-empty: the worker cannot work at all.
struct ReadyReport {
  Role role = Role::kOwner;
  std::string error;
  std::vector<Timing> timings;
  Exports exports;       ///< owner only
  std::vector<int> fds;  ///< owner only: the VMM fds, still owned by the backend (sent with the message)
};

struct RunRequest {
  Phase phase = Phase::kLocal;
  uint32_t timeout_ms = 0;
  std::vector<CellSpec> cells;
};

/// Called once per finished cell; a non-ok return stops the batch (the parent is gone).
using EmitFn = std::function<Status(const CellResult&)>;

class Backend {
 public:
  virtual ~Backend() = default;
  /// Versions, GPUs and the driver's claims; creates no context. Never fails: Inventory::error says why not.
  virtual Inventory inventory() = 0;
  /// Contexts, buffers, streams, peer access and (owner) exports, each once.
  virtual ReadyReport setup(const SetupRequest& request) = 0;
  /// Importer: takes the owner's exports; owns `fds` (one per exported VMM allocation) from here on.
  virtual ReadyReport import(const Exports& exports, std::vector<int> fds) = 0;
  /// Runs a batch (cells of one round run concurrently) and emits each cell's result as it finishes. A non-ok
  /// return means this process must not be used again (a sticky CUDA error, its own deadline passed, the parent
  /// gone); cells not emitted by then stay unanswered.
  virtual Status run(const RunRequest& request, const EmitFn& emit) = 0;
};

/// The CUDA backend. `inject` carries the faults this process applies itself (corrupt, hang, error).
std::unique_ptr<Backend> makeCudaBackend(InjectPlan inject);
/// Versions, GPUs and the driver's claims, creating no context (what every backend's inventory() answers).
Inventory collectInventory();

/// The environment variable that makes `peerlab probe-worker` a transport worker: "nixl" or "ucx".
inline constexpr const char* kTransportWorkerEnv = "PEERLAB_PROBE_TRANSPORT";
/// The backend of a transport worker for `library` ("nixl" or "ucx"): the owner (bootstrap rank 0) offers a source
/// and a destination buffer on every GPU and checks writes; the importer (rank 1) initiates every transfer and
/// checks reads. The two meet over the local bootstrap the parent describes in their environment.
std::unique_ptr<Backend> makeTransportBackend(const std::string& library, InjectPlan inject);

}  // namespace peerlab::probe
