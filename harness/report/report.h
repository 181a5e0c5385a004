#pragma once
/// The run file every peerlab run writes (reports/schema/run.schema.json, schema_version 1): read, write, validate.

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "harness/report/machine.h"
#include "harness/report/plan_record.h"
#include "reference/core/status.h"

namespace peerlab::report {

inline constexpr int kSchemaVersion = 1;

struct GpuFingerprint {
  int ordinal = -1;
  std::string uuid;
  std::string bus_id;
  std::string name;
};

/// What a run ran with that is not the machine's own: stand-ins for parts of it (NVML, the topology, the probe's
/// worker) and faults injected on purpose (the fault interposer, PEERLAB_PROBE_INJECT). A run with any of them says
/// so on every output, is stored as injected, and never counts in a fleet view, trend, baseline or regression.
struct Injection {
  std::string fault;         ///< PEERLAB_FAULT: the fault interposer's spec ("copy_slow:percent=50")
  std::string interposer;    ///< the fault interposer (libpeerlab_faults.so) loaded or preloaded, its path
  std::string probe_inject;  ///< PEERLAB_PROBE_INJECT: the probe's own injected cell faults
  std::string probe_worker;  ///< a probe worker that is not peerlab itself (PEERLAB_PROBE_WORKER)
  std::string nvml;          ///< a stand-in NVML ($PEERLAB_NVML_LIBRARY naming peerlab's stand-in), its path
  std::string topology;      ///< a stand-in machine: the fixture PEERLAB_QUALIFY_STANDIN_TOPOLOGY names, no CUDA
  bool any() const {
    return !fault.empty() || !interposer.empty() || !probe_inject.empty() || !probe_worker.empty() || !nvml.empty() ||
           !topology.empty();
  }
  /// "fault copy_slow:percent=50 (interposer /opt/peerlab/lib/libpeerlab_faults.so), stand-in NVML
  /// (/x/libpeerlab_fake_nvml.so)"; "" when nothing was injected.
  std::string describe() const;
};

struct Fingerprint {
  std::string hostname;
  std::string driver;        ///< "580.159.04" (or the driver API version when the release is unknown)
  std::string cuda_runtime;  ///< "13.0"
  std::string nccl;          ///< "2.28.3"
  std::vector<GpuFingerprint> gpus;
  /// Stand-ins and injected faults ("injected" in the fingerprint, written only when there are any; files of earlier
  /// versions kept a probe's at the top level, read here as well).
  Injection injected;
};

/// One measured or verified result. Optional numbers are written as null.
struct Result {
  std::string suite;  ///< probe, peer_copy, peer_latency, zcopy, alltoallv, moe
  std::string name;   ///< "ce_write/4096", "uni", "uniform", "graph/skewed", "T=128", "matrix_wall"
  std::string impl;   ///< "peerlab.ce", "nccl.sendrecv_graph", ...
  std::optional<int> src;
  std::optional<int> dst;
  int ranks = 1;
  std::optional<double> bytes;
  std::optional<double> time_us;
  std::optional<double> algbw_gbps;
  std::optional<double> busbw_gbps;
  std::optional<double> wrong;                      ///< wrong elements found by the data check
  std::string status = "ok";                        ///< ok, skipped: why, failed: why, or the probe verdict
  std::optional<int> numa;                          ///< host NUMA node of the host memory used (host_copy)
  std::string detail;                               ///< numbers behind a verdict (health); written when not empty
  nlohmann::json extra = nlohmann::json::object();  ///< more keys (sms, claimed, first_bad, ...), merged on write
};

struct Run {
  int schema_version = kSchemaVersion;
  std::string tool;  ///< "peerlab 0.1.0"
  std::string git_sha;
  std::string timestamp;  ///< ISO 8601 UTC
  Fingerprint fingerprint;
  std::vector<Result> results;
  /// The kind the run is filed under ("kind", "kind_source", "kind_basis", "hardware_kind", "kind_given",
  /// "kind_overridden" in the file): the reader normalizes an alias of the hardware's kind to the canonical spelling
  /// and gives a run without a kind the hardware's.
  RunKind kind;
  /// The node it ran on ("node"); derived from the fingerprint when the file has none.
  NodeIdentity node;
  nlohmann::json extra = nlohmann::json::object();  ///< more top-level keys (plan, qualify, bench, ...)
  /// The validated view of extra["plan"] (fromJson fills it; a run assembled in memory calls attachPlan()).
  std::optional<RunPlan> plan;
};

nlohmann::json toJson(const Run& run);
nlohmann::json toJson(const Result& result);
nlohmann::json toJson(const Fingerprint& fp);
nlohmann::json toJson(const Injection& injected);

/// Limits of what a run file may hold; beyond them it is refused, never half read. The largest committed run (4x H100,
/// standard level: 1.6 MB, 51,000 JSON values) reads with 40 times room; a gzip bomb stops inflating at
/// kMaxRunFileBytes and a document of small values is refused by its count before it is parsed.
inline constexpr int kMaxJsonDepth = 64;
inline constexpr size_t kMaxRunFileBytes = size_t{64} << 20;  ///< the text, inflated where it is gzip-compressed
inline constexpr size_t kMaxRunJsonValues = 2'000'000;
inline constexpr size_t kMaxRunJsonMemory = size_t{160} << 20;  ///< the parsed document, estimated from its text
inline constexpr size_t kMaxResults = 500'000;
/// A run's timestamp may lie this far in the future (the clocks of a fleet kept by NTP disagree by far less), no
/// further: a copy of a run dated ahead would otherwise stand as its node's newest run.
inline constexpr int kTimestampSkewS = 300;

/// The one reader of run files (and of what probe and bench write): every key any part of peerlab reads is checked
/// for its type and range, optional keys too; GPU indices must lie within the GPUs the run lists (and kMaxGpus);
/// times, sizes and bandwidths must be finite and not negative (a time not zero); the timestamp must be ISO 8601 and
/// not in the future; strings are bounded and their control characters removed. `invalid_argument` names the JSON
/// path, what is wrong and the value. Keys peerlab does not read are kept as they are.
StatusOr<Run> fromJson(nlohmann::json doc);
/// fromJson's checks without keeping the run.
Status validate(const nlohmann::json& doc);
/// fromJson on text: also refuses, before parsing, nesting deeper than kMaxJsonDepth and more values or memory than
/// kMaxRunJsonValues and kMaxRunJsonMemory allow, and names where JSON breaks.
StatusOr<Run> runFromText(const std::string& text);

/// Reads a run file: missing file, unreadable file, truncated or malformed JSON, wrong schema version and every
/// refusal of fromJson give `invalid_argument` with one line naming the file, the JSON path and the value.
StatusOr<Run> readRun(const std::string& path);
/// A run file's text as stored, inflated where it is gzip-compressed; read through the one bounded reader
/// (readTextFile: a regular file, symlinks resolved) and bounded by kMaxRunFileBytes either way.
StatusOr<std::string> readRunText(const std::string& path);
/// Whether a file name is a run file's: *.json, or *.json.gz (gzip-compressed, as reports/ keeps them).
bool isRunFileName(const std::string& path);
/// A bundle's results: DIR/results.json, else DIR/results.json.gz; "" when it has neither.
std::string bundleResults(const std::string& dir);
/// Writes the run file atomically (temporary file + rename).
Status writeRun(const Run& run, const std::string& path);
/// Sets run.plan from run.extra["plan"] (validated), or clears it when there is none.
Status attachPlan(Run& run);
/// The hardware of a run: deriveKind of its plan's topology, else of its fingerprint's GPUs; empty when neither
/// lists a GPU.
DerivedKind hardwareOf(const Run& run);
/// What a page or bundle title says of the machine: "h200-x4-nvswitch, node gpus-3fa2b81c04d9 (host vm)"; the host
/// name alone for a run whose kind is unknown.
std::string machineTitle(const Run& run);

/// Seconds since the epoch of an ISO 8601 timestamp ("2026-11-21T08:12:33Z", fractions and +hh:mm allowed);
/// nullopt when it is not one.
std::optional<long long> parseIsoTimestamp(const std::string& text);
/// Removes control characters (C0, DEL and C1) so that text from a run file never drives a terminal.
std::string stripControl(const std::string& text);

/// The commit this binary was built from, stamped at build time ("unknown" outside a git work tree).
const char* buildGitSha();

/// A run with tool, timestamp and git sha filled (PEERLAB_GIT_SHA env, else the build's sha, else "unknown").
Run newRun();
/// ISO 8601 UTC timestamp for now.
std::string utcTimestamp();

/// What of the stand-ins a command uses (the fault interposer touches every command that calls CUDA).
struct InjectionUses {
  bool probe = false;  ///< the verified probe runs (its worker and PEERLAB_PROBE_INJECT)
  bool nvml = false;   ///< NVML is read (health)
};
/// The one detection of stand-ins and injected faults in this process: the fault interposer (loaded here, or named by
/// LD_PRELOAD or PEERLAB_FAULT for what this process starts), and where `uses` says the command uses them the probe's
/// worker and injected cells and a stand-in NVML (one that exports peerlab's stand-in marker).
Injection detectInjection(const InjectionUses& uses);

/// Collects the fingerprint: hostname, driver and runtime versions, NCCL version, visible GPUs (none on a GPU-less
/// machine; that is not an error), and detectInjection(uses).
Fingerprint collectFingerprint(const InjectionUses& uses = {});

/// Converts Google Benchmark JSON output (from peerlab benches, see bench/common/bench_util.h) into results.
StatusOr<std::vector<Result>> resultsFromGbench(const nlohmann::json& gbench);

}  // namespace peerlab::report
