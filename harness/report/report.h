#pragma once
/// The run file every peerlab run writes (reports/schema/run.schema.json, schema_version 1): read, write, validate.

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

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
  nlohmann::json extra = nlohmann::json::object();  ///< more top-level keys (kind, topology, probe matrix...)
};

nlohmann::json toJson(const Run& run);
nlohmann::json toJson(const Result& result);
nlohmann::json toJson(const Fingerprint& fp);

/// Checks a parsed document against schema version 1; the message names the first offending path.
Status validate(const nlohmann::json& doc);
/// Parses and validates; `invalid_argument` names what is wrong (schema version, missing key, type).
StatusOr<Run> fromJson(const nlohmann::json& doc);

/// Reads a run file: missing file, unreadable file, truncated or malformed JSON, wrong schema version each give
/// `invalid_argument` with one line naming the file and the reason.
StatusOr<Run> readRun(const std::string& path);
/// Writes the run file atomically (temporary file + rename).
Status writeRun(const Run& run, const std::string& path);

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
