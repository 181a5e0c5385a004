#pragma once
/// The history store: runs and their results in SQLite or PostgreSQL, one versioned schema with ordered migrations.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "harness/history/database.h"
#include "harness/report/checks.h"
#include "harness/report/report.h"
#include "reference/core/status.h"

namespace peerlab::history {

/// One stored run (without its results).
struct RunInfo {
  std::int64_t id = 0;
  std::string content_hash;
  std::string host;
  std::string kind;  ///< machine kind ("h200-x4-nvswitch"): the run file's `kind`, or --kind at ingest; may be empty
  std::string
      node;  ///< node identity ("gpus-3fa2b81c04d9", report::NodeIdentity); "" for runs stored before it was kept
  std::string slurm_node;  ///< the Slurm NodeName it ran under; "" when it named none (or was stored before)
  /// What the run ran with that is not the machine's own (report::Injection::describe, and cells with injected
  /// faults); "" for a run of the machine itself (and runs stored before it was kept). Such a run is listed and
  /// marked, and never counted: not in a series, a fleet view, a node's latest run or a kind's latest verdict.
  std::string injected;
  std::string git_sha;
  std::string timestamp;  ///< as the run file gave it (display only: it may be anything the file said)
  std::string time;       ///< what runs are ordered by: `timestamp` in UTC ("2026-11-21T19:45:53Z") when it is a valid
                          ///< ISO 8601 time no later than `ingested_at` plus kClockSkewSeconds, else `ingested_at`
  std::string ingested_at;
  std::string tool;
  std::string driver;
  std::string cuda;
  std::string nccl;
  std::vector<std::string> gpus;  ///< GPU names in ordinal order
  int results = 0;
  std::string source;                                     ///< the file it was ingested from
  nlohmann::json expectations = nlohmann::json::array();  ///< the qualify plan's expected figures, if the run had one
  /// The checks engine's verdict at ingest ("PASS", "FAIL", or "EMPTY" when nothing was checked, never a pass) and its
  /// counts; "" and nullopt for runs stored before verdicts were kept.
  std::string verdict;
  std::optional<report::CheckCounts> checks;
  /// What the fleet page's node x check matrix shows, from the same checks: {"categories": {category: counts as in
  /// checksJson()}, "failures": [{"category", "name", "action"}] (the first kMaxStoredFailures failed checks)}; {} for
  /// runs stored before schema step 4. Read back through bounds: the keys above only, each of its type.
  nlohmann::json check_details = nlohmann::json::object();

  /// What series are grouped by: the kind, or the node (else the host) when the run names no kind.
  const std::string& machine() const { return !kind.empty() ? kind : nodeOrHost(); }
  /// The node that ran it: its identity, or the host name for runs stored before identities were kept.
  const std::string& nodeOrHost() const { return node.empty() ? host : node; }
  /// The counts as stored: {"verdict","total","passed","failed","warnings","unsupported","skipped"}, or {}.
  nlohmann::json checksJson() const;
};

/// A node's state in the scheduler, as `history node-state` recorded it (the Slurm sweep records every node it looks
/// at): fleet pages list drained nodes first, with the reason.
struct NodeState {
  std::string node;         ///< the Slurm NodeName (or, for a machine whose runs name none, its identity)
  std::string state;        ///< one of kNodeStates
  std::string reason;       ///< the scheduler's reason ("peerlab: nvlink_state GPU0: reset GPU, reseat NVLink")
  std::string recorded_at;  ///< UTC, when it was recorded
  std::string source;       ///< what recorded it ("peerlab-slurm-sweep")
  std::int64_t id = 0;      ///< the order of records made in the same second
  bool outOfService() const { return state != "in_service"; }
  /// Recorded later than `other`: by recorded_at, then id.
  bool after(const NodeState& other) const {
    return recorded_at != other.recorded_at ? recorded_at > other.recorded_at : id > other.id;
  }
};

/// The states a node can be recorded in: in service, drained (or draining) with a reason, down (not responding).
inline const std::vector<std::string> kNodeStates = {"in_service", "drained", "down"};
/// One record of what `peerlab slurm` did or is about to do to a node, written before it acts (an intent) and after
/// (a fact), so that a sweep killed at any point can be finished or undone (harness/slurm/journal.h reads them).
struct JournalEntry {
  std::int64_t id = 0;
  std::string sweep;   ///< the sweep's id; "" for a health check's or a gate's own drain
  std::string node;    ///< Slurm NodeName
  std::string step;    ///< one of kJournalSteps
  std::string job;     ///< Slurm job id, where one belongs to the step
  std::string reason;  ///< the drain reason the step sets or restores
  std::string detail;  ///< more, as JSON text (outcome, exit code, bundle)
  std::string recorded_at;
  std::string source;  ///< "sweep", "healthcheck", "gate", "recover"
};
/// The steps a journal entry may name.
inline const std::vector<std::string> kJournalSteps = {
    "claimed",   "reserve",  "reserved", "resume_for_job", "resumed_for_job", "submit",
    "submitted", "verdict",  "drain",    "drained",        "resume",          "resumed",
    "release",   "released", "done",     "recovered",      "spooled",         "ingested"};

/// A sweep's hold on a node (one sweep at a time per node). `holder` is "host pid start poll" of the sweep's process.
struct Claim {
  std::string node;
  std::string sweep;
  std::string holder;
  std::string claimed_at;
  std::string heartbeat_at;
};
struct ClaimOutcome {
  bool granted = false;
  std::vector<Claim> conflicts;   ///< held by a live sweep: nothing was claimed
  std::vector<Claim> taken_over;  ///< held by a sweep judged gone: now this sweep's (its journal is to be recovered)
};

/// Most failed checks a run's check_details names (the bundle has them all).
inline constexpr size_t kMaxStoredFailures = 20;
/// Longest node name and reason stored.
inline constexpr size_t kMaxNodeNameBytes = 255;
inline constexpr size_t kMaxNodeReasonBytes = 1024;

/// One stored result: the run file's fields plus the spread figures benchmarks write.
struct StoredResult {
  std::int64_t run_id = 0;
  report::Result result;  ///< `extra` is left empty
  std::optional<double> p10_us;
  std::optional<double> p90_us;
  std::optional<double> samples;  ///< the sample count
  std::string sample_values;      ///< the samples as a JSON array when the run file listed them, else ""
  /// False when the stored row names a GPU outside [0, kMaxGpus), ranks outside [1, kMaxGpus], a figure that is
  /// negative, not finite or beyond 1e15, a column of the wrong type or a text longer than the reader takes (those
  /// fields are then left empty): such a row is neither drawn nor analysed, and the store warns about it.
  bool valid = true;
  std::string invalid_reason;  ///< why not valid: "src 2000 is outside 0 .. 1023"
};

struct IngestOptions {
  std::string
      kind;  ///< overrides the run file's kind when not empty (checked against the run's hardware by the caller)
  std::string source;  ///< recorded with the run
};

struct IngestOutcome {
  std::int64_t run_id = 0;
  bool inserted = false;  ///< false: the same run was already stored
};

/// Largest GPU ordinal + 1 a stored result may name; results naming others are not drawn or analysed.
inline constexpr int kMaxGpus = 1024;
/// How far a run's timestamp may lie after its ingest time and still order it.
inline constexpr long kClockSkewSeconds = report::kTimestampSkewS;

/// "2026-11-21T19:45:53Z" for an ISO 8601 date-time (seconds, an optional fraction, and Z, +hh:mm, -hh:mm or no
/// zone for UTC) between the years 1970 and 9999; nullopt for anything else.
std::optional<std::string> normalizeTimestamp(const std::string& text);

/// The qualify plan's expectations keeping only well-formed ones: objects whose suite, impl, name, metric are strings,
/// src and dst integers in [0, kMaxGpus), min_bytes and gbps finite numbers (when present).
nlohmann::json sanitizeExpectations(const nlohmann::json& expectations);

/// The schema's migrations in order; step i brings the schema to version i + 1. The same SQL runs on both backends
/// except `%ID%`, the auto-numbered key column (INTEGER PRIMARY KEY / BIGINT GENERATED BY DEFAULT AS IDENTITY).
const std::vector<std::string>& schemaMigrations();

/// Content hash of a run: 128 bits (two FNV-1a 64) of its canonical JSON, so the same run written twice is one run.
std::string runContentHash(const report::Run& run);

class HistoryStore {
 public:
  /// Opens and migrates to the latest schema version; concurrent openers take turns. kCreate makes a missing store
  /// (`history ingest`); kExisting opens only a peerlab history that is there (a SQLite file or a PostgreSQL database
  /// holding the schema) and never creates, converts or writes anything but a schema migration; kReadOnly writes
  /// nothing at all (a store of an older schema is read as it is, its missing columns empty).
  static StatusOr<std::unique_ptr<HistoryStore>> open(const std::string& url, OpenMode mode = OpenMode::kCreate);

  /// Every stored row is read through bounds (text sizes, JSON size and depth, column types and ranges); a row that
  /// does not read is left out and named in one warning ("run 7 (content hash ...) left out: checks: nested deeper
  /// than the 64 levels allowed"), each once per store. `sink` sees each warning as it is made.
  void onWarning(std::function<void(const std::string&)> sink) { warning_sink_ = std::move(sink); }
  /// The warnings made so far (at most kMaxWarnings; the rest are counted in the last).
  const std::vector<std::string>& warnings() const { return warnings_; }
  static constexpr size_t kMaxWarnings = 100;

  int schemaVersion() const { return version_; }
  const char* dialect() const { return db_->dialect(); }

  /// Stores a run and its results in one transaction; a run already stored (same content hash) is not stored again.
  StatusOr<IngestOutcome> ingest(const report::Run& run, const IngestOptions& options = {});

  /// Every run, oldest first (`time`, then id).
  StatusOr<std::vector<RunInfo>> runs();
  /// Removes runs named by id ("12") or content hash (32 hex digits) with their results, all in one transaction:
  /// when one of them is not stored, nothing is removed (`invalid_argument` names it). Returns what was removed.
  StatusOr<std::vector<RunInfo>> remove(const std::vector<std::string>& runs);
  /// Every stored result, by run id then the order in its run file.
  Status forEachResult(const std::function<void(const StoredResult&)>& fn);
  /// The results of one run, in run-file order.
  Status forEachResultOfRun(std::int64_t run_id, const std::function<void(const StoredResult&)>& fn);
  /// Counts rows of `table` ("runs" or "results").
  StatusOr<std::int64_t> count(const std::string& table);

  /// Records a node's state (recorded_at is set to now). `invalid_argument` for a state outside kNodeStates, an empty
  /// or over-long node name or reason with control characters.
  Status recordNodeState(const NodeState& state);
  /// The latest recorded state of every node (by when it was recorded), by node name.
  StatusOr<std::vector<NodeState>> nodeStates();

  /// Appends to the journal of `peerlab slurm` (recorded_at: now, unless the entry has one) in its own transaction;
  /// returns its id.
  StatusOr<std::int64_t> appendJournal(const JournalEntry& entry);
  /// The journal, oldest first: every entry, or those of one node and/or one sweep ("" for any), after id `after`.
  StatusOr<std::vector<JournalEntry>> journal(const std::string& node = "", const std::string& sweep = "",
                                              std::int64_t after = 0);
  /// Claims `nodes` for `sweep` in one transaction: all of them, or none when a live sweep holds one (`stale` says
  /// whether a holder is gone; a gone holder's claim is taken over and listed).
  StatusOr<ClaimOutcome> claimNodes(const std::string& sweep, const std::string& holder,
                                    const std::vector<std::string>& nodes,
                                    const std::function<bool(const Claim&)>& stale);
  /// Every claim.
  StatusOr<std::vector<Claim>> claims();
  /// Marks `sweep` alive now (its claims' heartbeat).
  Status heartbeat(const std::string& sweep);
  /// Releases `sweep`'s claims on `nodes` (every node it holds when empty).
  Status releaseClaims(const std::string& sweep, const std::vector<std::string>& nodes = {});

 private:
  explicit HistoryStore(std::unique_ptr<Database> db) : db_(std::move(db)) {}
  Status migrate(OpenMode mode, const std::string& url);
  Status applyMigrations();
  Status readResults(const std::string& where, const std::vector<SqlValue>& params,
                     const std::function<void(const StoredResult&)>& fn);
  void warn(const std::string& key, const std::string& message);

  std::unique_ptr<Database> db_;
  int version_ = 0;
  bool read_only_ = false;
  std::function<void(const std::string&)> warning_sink_;
  std::vector<std::string> warnings_;
  std::set<std::string> warned_;
  size_t unshown_warnings_ = 0;
};

}  // namespace peerlab::history
