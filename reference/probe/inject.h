#pragma once
/// The probe's fault-injection seam: PEERLAB_PROBE_INJECT, read by the workers, makes chosen cells fail in a chosen
/// way on healthy hardware, so that every verdict path can be proven end to end.
///
///   PEERLAB_PROBE_INJECT="KIND:METHOD:SRC:DST[:BYTES][,...]"
///     corrupt  the destination's owner flips one 8-byte word (at bytes/2) before the check  -> corrupt
///     hang     the process that moves the data launches a kernel that spins past the deadline -> hang
///     crash    that process raises SIGSEGV when it receives the cell                         -> error
///     exit     that process exits with code 7 when it receives the cell                      -> error
///     error    that process reports a CUDA-style error for the cell                          -> error
///     garbage  that process answers the cell with bytes that are not a protocol message      -> error
///     payload  that process answers the cell with a wrong seed echo                           -> error
///   METHOD is a method name or "*", SRC and DST are ordinals or "*", BYTES limits the fault to one size.
/// The process that moves the data is the owner worker for the in-process methods and the importer worker for
/// ipc_legacy / ipc_vmm and the transport methods (nixl_*, ucx_*: the importer of the library's worker pair initiates,
/// a corrupt fault is carried out by the side that checks: the owner for a write, the importer for a read). Probes with
/// faults injected never read or write the cache.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reference/core/status.h"
#include "reference/probe/probe.h"

namespace peerlab::probe {

inline constexpr const char* kInjectEnv = "PEERLAB_PROBE_INJECT";

enum class FaultKind : uint8_t { kCorrupt, kHang, kCrash, kExit, kError, kGarbage, kPayload };
std::string_view faultName(FaultKind k);

/// The exit code of a worker told to exit by an `exit` fault.
inline constexpr int kInjectedExitCode = 7;

struct Fault {
  FaultKind kind = FaultKind::kError;
  std::optional<Method> method;  ///< nullopt: any method
  int src = -1;                  ///< -1: any
  int dst = -1;                  ///< -1: any
  uint64_t bytes = 0;            ///< 0: any size
  bool matches(const CellSpec& cell) const;
};

/// Roles of the two long-lived workers.
enum class Role : uint8_t {
  kOwner = 0,     ///< owns every destination buffer, runs the in-process methods and every check
  kImporter = 1,  ///< the second process of the IPC methods: imports the owner's exports and writes through them
};
/// Steps a worker is asked to run for a batch of cells.
enum class Phase : uint8_t {
  kLocal = 0,        ///< owner: poison, move the data in-process, check
  kPoison = 1,       ///< owner: poison the exported destination of an IPC cell
  kRemoteWrite = 2,  ///< importer: write the pattern through the imported mapping
  kCheck = 3,        ///< owner: check the exported destination of an IPC cell
};
std::string_view roleName(Role r);
std::string_view phaseName(Phase p);

/// True when a fault of `kind` on a cell of `method` is carried out by the worker in `role` during `phase`:
/// corrupt by the owner right before the check, every other kind by the process that moves the data.
bool faultAppliesHere(FaultKind kind, Role role, Phase phase, Method method);

class InjectPlan {
 public:
  InjectPlan() = default;
  explicit InjectPlan(std::vector<Fault> faults) : faults_(std::move(faults)) {}

  bool empty() const { return faults_.empty(); }
  const std::vector<Fault>& faults() const { return faults_; }
  /// The fault this worker must carry out for `cell` in `phase`, if any (the first that matches).
  std::optional<FaultKind> find(const CellSpec& cell, Role role, Phase phase) const;

 private:
  std::vector<Fault> faults_;
};

/// Parses "KIND:METHOD:SRC:DST[:BYTES]" items separated by commas; an empty text is an empty plan.
StatusOr<InjectPlan> parseInject(std::string_view text);
/// The plan in PEERLAB_PROBE_INJECT (empty when unset).
StatusOr<InjectPlan> injectFromEnvironment();

}  // namespace peerlab::probe
