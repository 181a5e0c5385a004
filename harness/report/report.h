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

struct Fingerprint {
  std::string hostname;
  std::string driver;        ///< "580.159.04" (or the driver API version when the release is unknown)
  std::string cuda_runtime;  ///< "13.0"
  std::string nccl;          ///< "2.28.3"
  std::vector<GpuFingerprint> gpus;
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

/// Limits of what a run file may hold; beyond them it is refused, never half read.
inline constexpr int kMaxJsonDepth = 64;
inline constexpr size_t kMaxRunFileBytes = size_t{512} << 20;
inline constexpr size_t kMaxResults = 500'000;
/// A run's timestamp may lie this far in the future (clocks of a fleet disagree a little), no further.
inline constexpr int kTimestampSkewS = 3600;

/// The one reader of run files (and of what probe and bench write): every key any part of peerlab reads is checked
/// for its type and range, optional keys too; GPU indices must lie within the GPUs the run lists (and kMaxGpus);
/// times, sizes and bandwidths must be finite and not negative (a time not zero); the timestamp must be ISO 8601 and
/// not in the future; strings are bounded and their control characters removed. `invalid_argument` names the JSON
/// path, what is wrong and the value. Keys peerlab does not read are kept as they are.
StatusOr<Run> fromJson(nlohmann::json doc);
/// fromJson's checks without keeping the run.
Status validate(const nlohmann::json& doc);
/// fromJson on text: also refuses nesting deeper than kMaxJsonDepth before parsing and names where JSON breaks.
StatusOr<Run> runFromText(const std::string& text);

/// Reads a run file: missing file, unreadable file, truncated or malformed JSON, wrong schema version and every
/// refusal of fromJson give `invalid_argument` with one line naming the file, the JSON path and the value.
StatusOr<Run> readRun(const std::string& path);
/// A run file's text as stored, inflated where it is gzip-compressed; bounded by kMaxRunFileBytes either way.
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

/// Collects the fingerprint: hostname, driver and runtime versions, NCCL version, visible GPUs (none on a GPU-less
/// machine; that is not an error).
Fingerprint collectFingerprint();

/// Converts Google Benchmark JSON output (from peerlab benches, see bench/common/bench_util.h) into results.
StatusOr<std::vector<Result>> resultsFromGbench(const nlohmann::json& gbench);

}  // namespace peerlab::report
