#pragma once
/// The rolling sweep: qualify a partition or a list of nodes through Slurm, at most a batch of them out of service at
/// once, each in a maintenance reservation of its own from the moment it is taken until its verdict is acted on;
/// bundles into the history; drains by verdict; every step journaled before it is taken; one sweep per node at a time.
/// And the recovery of what a killed sweep left: `peerlab slurm recover`, the start of the next sweep, the node's
/// next health check.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "harness/history/store.h"
#include "harness/slurm/client.h"
#include "harness/slurm/journal.h"
#include "harness/slurm/log.h"
#include "harness/slurm/outcome.h"
#include "harness/slurm/settings.h"

namespace peerlab::slurm {

/// Time as the sweep sees it: the real clock, or the fleet simulation's.
class Clock {
 public:
  virtual ~Clock() = default;
  /// Seconds from an arbitrary start.
  virtual double now() = 0;
  /// Waits `seconds` (or until interrupted(): SIGINT or SIGTERM).
  virtual void sleep(double seconds) = 0;
  virtual bool interrupted() { return false; }
};
/// The steady clock; sleeps wake on SIGINT and SIGTERM (process::InterruptScope).
std::unique_ptr<Clock> realClock();

/// The steps a sweep can be told to kill itself after (SIGKILL, as `kill -9` would), to test its recovery.
inline const std::vector<std::string> kCrashSteps = {"reserved", "resumed", "submitted", "running", "ended", "acted"};

struct SweepOptions {
  std::vector<std::string> nodes;  ///< the node set, in order, each once
  std::string what;                ///< "partition gpu" / "nodes gpu[01-04]", for the log
  int batch = 1;                   ///< most nodes out of service at once
  qualify::Level level = qualify::Level::kStandard;
  double timeout_s = 900;   ///< qualify's budget on a node
  double wait_s = 3600;     ///< how long a node's job may wait for the node's running jobs
  double poll_s = 30;       ///< one look at the sweep's jobs per this many seconds
  std::string bundle_root;  ///< the sweep's directory is made under it; a spool/ beside
  bool drain_outliers = false;
  bool dry_run = false;
  std::string crash_after;    ///< one of kCrashSteps: SIGKILL itself right after the first node passes that step
  std::string settings_path;  ///< passed to the jobs (`peerlab slurm job --settings`)
  std::string peerlab;        ///< the binary the jobs run on the nodes
  std::string user = "root";  ///< the reservations' user (the jobs run as this user)
  std::string sweep_id;       ///< "" : made from the time and a random number
  /// Called after each step of kCrashSteps (tests stop the sweep there as a kill would); unset: crash_after applies.
  std::function<void(const std::string& step)> on_step;
};

/// What the job of one node runs: the argument vector and its environment (JobSpec::argv, env).
using JobLauncher =
    std::function<JobSpec(const std::string& sweep, const std::string& node, const std::string& node_dir)>;

struct SweepCounts {
  int nodes = 0, passed = 0, failed = 0, unknown = 0, setup = 0, busy = 0, left_alone = 0, not_started = 0;
  int outliers_drained = 0;
  int max_out = 0;  ///< most nodes out of service (in the sweep's reservations) at once
  int spooled = 0;  ///< bundles spooled because the history stopped answering
};

struct SweepResult {
  int exit_code = 0;  ///< 0 every qualified node passed; 1 a node failed or was drained; 4 setup error
  SweepCounts counts;
  std::string summary;  ///< the last log line
  std::string sweep_id;
  std::string sweep_dir;
  double wall_s = 0;
  std::int64_t slurm_calls = 0;
};

/// Runs a sweep. The history is opened by the caller (database first: without it nothing is reserved); `store` may
/// go away mid-sweep (the recorder spools then).
class Sweep {
 public:
  Sweep(Client& slurm, history::HistoryStore& store, Clock& clock, Log& log, const Settings& settings,
        SweepOptions options, JobLauncher launcher);
  SweepResult run();

 private:
  struct NodeRun;
  void classify(std::vector<NodeRun>& runs);
  bool start(NodeRun& n);
  void poll(std::vector<NodeRun*>& active);
  void finish(NodeRun& n, const std::string& how);
  void abandon(NodeRun& n, const std::string& why);
  void putBack(NodeRun& n, const std::string& why);
  void release(NodeRun& n);
  void record(NodeRun& n, const std::string& step, const std::string& reason = "", const nlohmann::json& detail = {});
  void crashAfter(const std::string& step);
  void outliers(std::vector<NodeRun>& runs);
  std::string reservationName(const std::string& node) const;
  /// The node as Slurm shows it: from the one read of every ending node this round, else asked now.
  StatusOr<NodeInfo> nodeInfo(const std::string& node);

  Client& slurm_;
  history::HistoryStore& store_;
  Clock& clock_;
  Log& log_;
  const Settings& settings_;
  SweepOptions o_;
  JobLauncher launcher_;
  std::unique_ptr<Recorder> rec_;
  std::string id_;
  std::string dir_;
  int out_ = 0;
  SweepCounts counts_;
  std::map<std::string, NodeInfo> fresh_;
};

/// The reservation a sweep takes a node in, and its jobs' name: both name the sweep.
std::string sweepReservation(const std::string& sweep, const std::string& node);
std::string sweepJobName(const std::string& sweep);

struct RecoverOptions {
  std::vector<std::string> nodes;  ///< only these nodes' leftovers ("" : every node a gone sweep left)
  std::string sweep;               ///< only this sweep's
  bool force = false;              ///< take over claims whose holder still looks alive (it was killed elsewhere)
};
struct RecoverResult {
  int nodes = 0;    ///< nodes whose leftovers were finished or undone
  int refused = 0;  ///< nodes a live sweep holds
  bool ok = true;   ///< false when a Slurm call failed: ask again
  std::vector<std::string> lines;
};

/// Finishes or undoes what the sweeps of `claims` left on their nodes (see recoverLeftovers); `release` releases the
/// claims after (false: the caller has taken them over and keeps them).
RecoverResult recoverClaims(Client& slurm, Recorder& rec, history::HistoryStore& store, Log& log,
                            const std::vector<history::Claim>& claims, bool release);

/// Finishes or undoes what gone sweeps left: for every node a gone sweep holds, a job that ended with a verdict is
/// acted on (drain on fail), a running one is cancelled, a node resumed for its job without a verdict is drained
/// again with the reason it had (unless someone drained it since), the reservation is deleted, the node's state
/// recorded and its claim released. Nothing is recorded that did not happen.
RecoverResult recoverLeftovers(Client& slurm, Recorder& rec, history::HistoryStore& store, Log& log,
                               const RecoverOptions& options);

}  // namespace peerlab::slurm
