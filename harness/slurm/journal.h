#pragma once
/// The journal of what `peerlab slurm` does to nodes, and the rules read from it: every intent is written to the
/// history before the action and every fact after it, so that a process killed at any point leaves a record the next
/// sweep, `peerlab slurm recover` or the node's next health check finishes or undoes. Where the history cannot be
/// reached, entries and bundles go to a spool directory (JSON lines) and are replayed into the history later.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/history/store.h"
#include "harness/slurm/log.h"
#include "reference/core/status.h"

namespace peerlab::slurm {

/// Whether peerlab's own record says it drained the node with `slurm_reason`: the newest of the node's drain and
/// resume facts ("drained", "resumed", "resumed_for_job") is "drained" with exactly that reason. A reason an admin set,
/// whatever its text, has no such record.
bool ownsDrain(const std::vector<history::JournalEntry>& node_journal, const std::string& slurm_reason);

/// This process as a claim holder: "<host> <pid> <start ticks> <poll seconds>".
std::string holderId(double poll_s);
/// Whether a claim's holder is gone: on this host, its process is not running (or is another process by now); on
/// another host, its heartbeat is older than three of its polls plus a minute. `now_utc` as the store writes times
/// (report::utcTimestamp()).
bool holderGone(const history::Claim& claim, const std::string& now_utc);

/// Writes journal entries and ingests bundles: into the history while it answers, else into the spool. Once a write
/// to the history fails, every later one goes to the spool (historyLost()).
class Recorder {
 public:
  /// `store` may be null (no history configured): everything is spooled. `spool_dir` "" : nothing can be spooled.
  Recorder(history::HistoryStore* store, std::string spool_dir, std::string source, Log& log);

  /// Records an entry; an error only when neither the history nor the spool took it.
  Status record(history::JournalEntry entry);
  /// Ingests a run file (a bundle's results.json) into the history, or spools its path. Returns the run id stored
  /// (0 when spooled); `invalid_argument` for a run file the history refuses (not spooled: it never will be taken).
  StatusOr<std::int64_t> ingest(const std::string& run_file, const std::string& kind = "");
  /// Records a node's state (in_service, drained, down) in the history; spooled like the rest.
  Status recordState(const history::NodeState& state);

  bool historyLost() const { return lost_; }
  /// From now on everything goes to the spool (a write to the history failed elsewhere).
  void markLost(const Status& why) { lose(why); }
  const std::string& lostReason() const { return lost_reason_; }
  /// Bundles spooled so far.
  int spooledBundles() const { return spooled_bundles_; }
  /// The journal of one node as the history holds it plus what this process spooled for it, oldest first.
  std::vector<history::JournalEntry> nodeJournal(const std::string& node);
  history::HistoryStore* store() { return lost_ ? nullptr : store_; }
  const std::string& spoolFile() const { return spool_file_; }

 private:
  Status spool(const nlohmann::json& record);
  void lose(const Status& why);

  history::HistoryStore* store_;
  std::string spool_dir_;
  std::string spool_file_;
  std::string source_;
  Log& log_;
  bool lost_ = false;
  std::string lost_reason_;
  int spooled_bundles_ = 0;
  std::vector<history::JournalEntry> spooled_;
};

/// Replays every spool file of `spool_dir` into the history: journal entries (with their times), node states and
/// bundles (ingest is idempotent), file by file; a file is removed once all of it is in. Returns how many bundles
/// were ingested; files that cannot be read are named in the log and left.
StatusOr<int> replaySpool(const std::string& spool_dir, history::HistoryStore& store, Log& log);

}  // namespace peerlab::slurm
