#pragma once
/// Machine health read through NVML: a sample of every GPU before and after the benchmarks, a watcher for XID events
/// and clock event reasons while they run, and per-GPU verdicts (ok, warn, fail, unsupported) with the numbers behind
/// them. Thresholds default to DCGM's and are read from the [health] section of reports/qualify.toml.
/// harness/health/README.md describes what is read and the rules.

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "harness/health/nvml.h"
#include "harness/report/report.h"
#include "reference/core/status.h"

namespace peerlab::health {

enum class Verdict { kOk, kWarn, kFail, kUnsupported };
/// "ok", "warn", "fail", "unsupported"
const char* verdictName(Verdict v);

/// The checks, in report order.
inline constexpr const char* kCheckNames[] = {"pcie_link", "pcie_errors", "nvlink_state",  "nvlink_errors",
                                              "fabric",    "ecc",         "retired_pages", "row_remap",
                                              "xid",       "clock_events"};

struct Thresholds {
  int pcie_min_gen = 3;                     ///< a current PCIe generation below this fails
  std::string pcie_gen_below_max = "warn";  ///< verdict for a generation under the maximum (but >= the minimum)
  std::string pcie_width_below_max = "fail";
  double pcie_max_replays = 80;                    ///< PCIe replays during the run above this fail
  double pcie_max_correctable = -1;                ///< correctable errors during the run above this warn; -1: no limit
  double nvlink_max_recovery = 0;                  ///< NVLink recovery errors during the run above this fail
  double nvlink_max_crc_per_s = 100;               ///< NVLink CRC (flit + data) errors per second above this warn
  double ecc_max_volatile_corrected = -1;          ///< volatile corrected errors above this warn; -1: no limit
  std::string ecc_aggregate_uncorrected = "warn";  ///< verdict for a past (aggregate) uncorrected error
  double retired_pages_max = 63;                   ///< this many retired pages or more fail
  double row_remap_max_uncorrected = 512;          ///< this many rows remapped for uncorrectable errors or more fail
  std::vector<std::string> clock_fail_reasons = {"hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"};
  std::vector<int> xid_ignore;  ///< XIDs that do not fail (none by default: DCGM fails any)
  double watch_poll_ms = 100;   ///< how often the watcher reads clock event reasons (and its event wait timeout)
  double wake_ms = 50;          ///< traffic before reading the PCIe link (GPUs drop the link at idle)
};

/// The [health] section of a qualify config (TOML, read with toml++). Unknown keys and values out of range are
/// `invalid_argument` naming the file, the key and the line; no [health] section gives the defaults.
StatusOr<Thresholds> parseThresholds(const std::string& toml_text, const std::string& name,
                                     const Thresholds& base = Thresholds{});

/// A value NVML gave, or why not.
template <class T>
struct Reading {
  std::optional<T> value;
  std::string why;  ///< "not supported", "function not found", ... when value is empty
  bool has() const { return value.has_value(); }
  const T& operator*() const { return *value; }
};

struct LinkSample {
  unsigned link = 0;
  bool up = false;
  std::optional<unsigned> version;
  std::optional<unsigned long long> replay, recovery, crc_flit, crc_data;
};

struct RemappedRows {
  unsigned corrected = 0, uncorrected = 0, pending = 0, failed = 0;
};

/// One GPU at one moment.
struct GpuSample {
  int gpu = 0;  ///< CUDA ordinal (or NVML index when no mapping is given)
  std::string bus_id;
  double t_s = 0;              ///< steady-clock seconds
  bool under_traffic = false;  ///< the PCIe link was read while a copy ran
  Reading<unsigned> pcie_gen, pcie_width, pcie_max_gen, pcie_max_width, pcie_gpu_max_gen;
  Reading<unsigned long long> pcie_replays, pcie_correctable;
  Reading<bool> nvlink;  ///< true when NVML answers for NVLink at all
  std::vector<LinkSample> links;
  Reading<nvml::GpuFabricInfo> fabric;
  Reading<bool> ecc_enabled;
  Reading<unsigned long long> vol_corrected, vol_uncorrected, agg_corrected, agg_uncorrected;
  Reading<unsigned long long> dram_agg_uncorrected, sram_agg_uncorrected;
  Reading<nvml::EccSramErrorStatus> sram;
  Reading<unsigned> retired_sbe, retired_dbe;
  Reading<bool> retired_pending;
  Reading<RemappedRows> remap;
  Reading<nvml::RowRemapperHistogram> remap_histogram;
  Reading<unsigned long long> clock_reasons;
};

struct XidEvent {
  int gpu = 0;
  unsigned long long xid = 0;
  double t_s = 0;
};

/// A stretch of time a GPU's clocks were held down by a reason in Thresholds::clock_fail_reasons.
struct ThrottleWindow {
  int gpu = 0;
  unsigned long long reasons = 0;
  double start_s = 0, end_s = 0;  ///< steady-clock seconds
};

/// What the watcher saw while the benchmarks ran.
struct WatchLog {
  bool ran = false;
  double start_s = 0, end_s = 0;
  std::string xid_why;  ///< why XID events could not be watched ("" when they were)
  std::vector<XidEvent> xids;
  std::string clocks_why;  ///< why clock reasons could not be read ("" when they were)
  std::vector<ThrottleWindow> windows;
  /// Per GPU (index as in the samples): seconds each reason bit was seen set, by bit.
  std::vector<std::vector<double>> reason_seconds;
  std::vector<int> gpus;
};

/// The machine as NVML alone shows it, without CUDA (no driver context, nothing the GPUs run): host name, driver
/// version, and every NVML GPU by NVML index with its UUID, bus id and name; CUDA's versions are left "not read".
/// `unavailable` when NVML cannot be loaded.
StatusOr<report::Fingerprint> nvmlFingerprint();

/// The UUIDs of the GPUs whose device minor numbers (/dev/nvidia<minor>) are `minors`, in PCI bus order; how many
/// NVML GPUs the machine has in `*total`. `invalid_argument` names a minor number no GPU has; `unavailable` without
/// NVML.
StatusOr<std::vector<std::string>> uuidsOfMinors(const std::vector<unsigned>& minors, size_t* total);

/// Runs traffic on a GPU around `read` so that the PCIe link is at its trained speed when read.
using TrafficHook = std::function<void(int gpu, const std::function<void()>& read)>;

/// Reads NVML for every GPU peerlab sees.
class Monitor {
 public:
  /// Loads NVML. `gpus` maps CUDA ordinals to bus ids (from the run's fingerprint); empty: every NVML device, by
  /// NVML index. `unavailable` when NVML cannot be loaded or initialised.
  static StatusOr<std::unique_ptr<Monitor>> open(const std::vector<std::pair<int, std::string>>& gpus = {});
  ~Monitor();

  /// One sample of every GPU; with a hook the PCIe link is read while it runs traffic.
  std::vector<GpuSample> sample(const TrafficHook& hook = nullptr, double wake_ms = 50);

  /// Starts the watcher thread: XID events, and clock event reasons every t.watch_poll_ms (throttle windows for
  /// t.clock_fail_reasons). It stops by itself after max_s.
  Status startWatch(const Thresholds& t, double max_s);
  /// Stops the watcher (returns within about watch_poll_ms) and returns what it saw.
  WatchLog stopWatch();

  const std::vector<int>& gpus() const { return ordinals_; }
  const nvml::Library& library() const { return *lib_; }

 private:
  Monitor() = default;
  void watchLoop(double poll_ms, double max_s, unsigned long long fail_mask);
  std::string why(nvml::Return r) const;

  std::shared_ptr<nvml::Library> lib_;
  std::vector<nvml::Device> devices_;
  std::vector<int> ordinals_;
  std::vector<std::string> bus_ids_;
  std::thread watcher_;
  std::atomic<bool> stop_{false};
  WatchLog log_;
};

struct CheckResult {
  int gpu = 0;
  std::string name;  ///< one of kCheckNames
  Verdict verdict = Verdict::kUnsupported;
  std::string detail;  ///< the numbers behind the verdict
};

/// Every check for every GPU from the samples before and after and the watch in between.
std::vector<CheckResult> evaluate(const std::vector<GpuSample>& before, const std::vector<GpuSample>& after,
                                  const WatchLog& watch, const Thresholds& t);

/// The checks of GPUs that cannot be read at all (no NVML): every one unsupported, with the reason.
std::vector<CheckResult> unsupportedAll(const std::vector<int>& gpus, const std::string& why);

/// Run-file rows: suite "health", impl "nvml", name the check, src the GPU, status the verdict, "detail".
std::vector<report::Result> toResults(const std::vector<CheckResult>& checks);

/// GPUs whose clocks were held down by a failing reason during the watch, and for each the reasons ("hw_thermal").
std::vector<std::pair<int, std::vector<std::string>>> throttledGpus(const WatchLog& watch, const Thresholds& t);

/// The watch as JSON for the run file (run.extra "health"): throttle windows relative to the watch start, XIDs.
nlohmann::json toJson(const WatchLog& watch, const Thresholds& t);

/// "Graphics engine exception" ... for the common XIDs; "" for others.
const char* xidMeaning(unsigned long long xid);
/// Names of the reason bits set ("hw_slowdown,hw_thermal").
std::string clockReasonNames(unsigned long long reasons);
/// The reason bit of a name in Thresholds::clock_fail_reasons; 0 for an unknown name.
unsigned long long clockReasonBit(const std::string& name);

}  // namespace peerlab::health
