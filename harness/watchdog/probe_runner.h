#pragma once
/// The verified probe run contained: the parent (this process) never initializes CUDA. It starts two long-lived
/// workers before anything else - the owner (owns every destination buffer, runs the in-process methods and every
/// check) and the importer (the second process of the IPC methods) - each `peerlab probe-worker` re-executed under
/// the watchdog, and drives them with the binary protocol of harness/watchdog/probe_protocol.h over socketpairs.
///
/// Cells of one method and size are grouped into rounds in which no GPU is a source twice or a destination twice;
/// a round is one batch, its cells run concurrently and are answered one by one. The per-cell deadline restarts at
/// each answer. When a worker hangs, crashes, answers garbage or reports that its context is unusable, it is killed
/// and reaped, the unanswered cell gets the verdict (hang, or error with the reason) when it was alone, and when
/// several were unanswered each is run again alone on a fresh worker so that the verdict lands on the right cell.
/// A restarted owner also restarts the importer (its imports referred to the old owner's memory).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/report/report.h"
#include "harness/watchdog/watchdog.h"
#include "reference/core/status.h"
#include "reference/probe/backend.h"
#include "reference/probe/inject.h"
#include "reference/probe/probe.h"

namespace peerlab::probe {

/// The hidden subcommand a worker runs: `peerlab probe-worker`.
inline constexpr const char* kWorkerSubcommand = "probe-worker";

struct RunnerOptions {
  std::vector<std::string> worker_argv;  ///< the worker command, e.g. {"/path/to/peerlab", "probe-worker"}
  std::vector<std::string> worker_env;   ///< KEY=VALUE added to the workers' environment
  std::vector<Method> methods = std::vector<Method>(kAllMethods.begin(), kAllMethods.end());
  std::vector<uint64_t> sizes = {4096, 64ull << 20};
  std::vector<Pair> pairs;  ///< empty: every ordered pair of visible GPUs
  std::chrono::milliseconds cell_timeout{5000};
  std::chrono::milliseconds setup_timeout{60000};  ///< worker start: CUDA init, contexts, buffers, exports
  uint64_t run_seed = 1;
  int max_restarts = 32;
};

struct PhaseTime {
  std::string name;
  double ms = 0;
};

struct ProbeResult {
  std::vector<CellReport> cells;
  double wall_us = 0;       ///< from the start of the session to the last verdict
  int workers_started = 0;  ///< worker processes started, restarts included
  int owner_starts = 0;
  int importer_starts = 0;
  int restarts = 0;
  std::vector<PhaseTime> phases;         ///< where the parent's time went
  std::vector<Timing> owner_timings;     ///< inside the owner (its last start)
  std::vector<Timing> importer_timings;  ///< inside the importer (its last start)
};

class ProbeSession {
 public:
  /// Spawns the workers (the importer only when an IPC method is selected) and waits for the owner's inventory.
  /// Fails (`unavailable`) only when no worker can be started or it answers no inventory.
  static StatusOr<std::unique_ptr<ProbeSession>> start(RunnerOptions options);
  ~ProbeSession();
  ProbeSession(const ProbeSession&) = delete;
  ProbeSession& operator=(const ProbeSession&) = delete;

  /// The owner's inventory; Inventory::error is set when there is no usable CUDA device.
  const Inventory& inventory() const { return inventory_; }
  /// The selected cells (ids are indices), with seeds for this run; `invalid_argument` for a pair naming a GPU
  /// that is not visible.
  StatusOr<std::vector<CellSpec>> cells() const;
  /// Sets the workers up and probes every selected cell. Per-cell failures are verdicts; only a worker that
  /// cannot be started at all is an error.
  StatusOr<ProbeResult> run();
  /// Ends the workers (quit, then kill after a grace period) and reaps them; also done by the destructor.
  void stop();
  /// How long the last stop() took.
  double shutdownMs() const { return shutdown_ms_; }
  /// Worker processes started so far.
  int workersStarted() const;

 private:
  struct Impl;
  explicit ProbeSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  Inventory inventory_;
  double shutdown_ms_ = 0;
};

/// True when this process has the CUDA driver library mapped (/proc/self/maps): the probe's parent must never have.
bool cudaDriverLoadedHere();

/// {binary, "probe-worker"}.
std::vector<std::string> workerCommand(const std::string& peerlab_binary);

/// Worker side: serves the protocol on `channel` with `backend` until told to quit. Applies the faults of `inject`
/// that belong to the worker loop (crash, exit, garbage, payload). Returns the process exit code.
int serveWorker(watchdog::Channel& channel, Backend& backend, const InjectPlan& inject);
/// The body of `peerlab probe-worker`: attaches to the parent, builds the CUDA backend, serves.
int probeWorkerMain();

/// Context for the run file.
struct ReportContext {
  bool cached = false;
  std::string cached_created;
  uint64_t run_seed = 0;
  uint32_t timeout_ms = 0;
  uint32_t setup_timeout_ms = 0;
  /// What the probe was asked for (every argument a reproduction needs): methods by name, cell sizes, and --pairs as
  /// given ("" for every pair).
  std::vector<std::string> methods;
  std::vector<uint64_t> sizes;
  std::string pairs;
  int workers = 0;
  double wall_us = 0;
  bool parent_loaded_cuda = false;  ///< cudaDriverLoadedHere() in the parent, recorded for the run file
  std::string inject_spec;          ///< PEERLAB_PROBE_INJECT as given; "" when no fault was injected
  InjectPlan inject;                ///< its faults: the cells they match are marked in the run file
  std::string worker;               ///< the worker executable when it is not this peerlab (PEERLAB_PROBE_WORKER)
};
/// The run file: one result per cell (suite "probe", impl "peerlab.probe", name "<method>/<bytes>", status the
/// verdict, extra claimed / lie / path / first_bad / error) plus "matrix_wall"; the fingerprint comes from the
/// worker's inventory, never from CUDA in this process; "probe" holds the seed and every argument (methods, sizes,
/// pairs, timeouts) that reproduces the run. A probe with injected faults or another worker says so in its
/// fingerprint ("injected": {"probe_inject", "probe_worker", and the fault interposer where one is loaded}), and each
/// cell a fault matches carries "injected": "<fault kind>".
report::Run buildRunReport(const Inventory& inventory, const std::vector<CellReport>& cells,
                           const ReportContext& context);

}  // namespace peerlab::probe
