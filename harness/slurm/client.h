#pragma once
/// The one way peerlab talks to Slurm: a small client of typed calls (nodes, drains, reservations, jobs). The command
/// client runs scontrol, sbatch, squeue and scancel with argument vectors (never a shell string) under a deadline;
/// the stand-in (testing/fake_slurm.h) keeps a cluster in memory for the tests and the fleet simulation.
///
/// A call that fails (the command cannot run, exits non-zero, times out, or prints what does not parse) returns an
/// error, never an empty answer: the caller asks again later.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "reference/core/status.h"

namespace peerlab::slurm {

/// A node as Slurm shows it.
struct NodeInfo {
  std::string name;      ///< NodeName
  std::string hostname;  ///< NodeHostName
  std::string state;     ///< as scontrol prints it: "IDLE", "MIXED+DRAIN", "IDLE+NOT_RESPONDING", "DOWN+DRAIN"
  std::string reason;    ///< the reason without the "[user@time]" Slurm appends; "" when none
  int alloc_cpus = 0;

  /// The base state before the first '+': "IDLE", "ALLOCATED", "MIXED", "DOWN", ...
  std::string base() const;
  bool hasFlag(const std::string& flag) const;
  /// DRAIN set (draining or drained).
  bool drained() const { return hasFlag("DRAIN"); }
  /// Out of service by itself: base state DOWN, FAIL, FUTURE or UNKNOWN, or the FAIL/POWERED_DOWN flags. A node
  /// that is only NOT_RESPONDING (for a moment after a resume or a restart of slurmd) is not down.
  bool down() const;
  bool notResponding() const { return hasFlag("NOT_RESPONDING"); }
  /// Jobs run or are about to run on it: ALLOCATED, MIXED or COMPLETING, or CPUs allocated.
  bool busy() const;
};

/// A reservation.
struct Reservation {
  std::string name;
  std::vector<std::string> nodes;
  std::string flags;  ///< "MAINT,IGNORE_JOBS,SPEC_NODES"
  std::string users;
};

/// A job as squeue shows it.
struct JobInfo {
  std::string id;
  std::string name;
  std::string state;   ///< PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, ...
  std::string nodes;   ///< the node list ("" while pending)
  std::string reason;  ///< why pending
  /// Still in the queue: pending, configuring, running, completing, suspended, requeued, resizing.
  bool active() const;
  /// Started on its node: running or completing now, or ended after running (completed, failed, timeout, out of
  /// memory, node fail, preempted). A cancelled job may or may not have run: not counted.
  bool started() const;
};

/// What a batch job is: the argument vector it runs on its node, and where.
struct JobSpec {
  std::string name;         ///< --job-name
  std::string node;         ///< -w: the one node it runs on
  std::string reservation;  ///< --reservation ("" for none)
  std::string output;       ///< -o: the job's output file
  int time_limit_min = 0;   ///< --time
  bool exclusive = true;
  /// The job's program and its arguments, run as they are (exec, no shell in between).
  std::vector<std::string> argv;
  /// Variables the job gets, besides Slurm's own (SLURM_*): nothing else of the submitting process travels.
  std::map<std::string, std::string> env;
};

class Client {
 public:
  virtual ~Client() = default;
  /// The nodes named (every node when `names` is empty), in one call. A name Slurm does not know is an error.
  virtual StatusOr<std::vector<NodeInfo>> nodes(const std::vector<std::string>& names) = 0;
  /// The nodes of a partition, in Slurm's order.
  virtual StatusOr<std::vector<std::string>> partitionNodes(const std::string& partition) = 0;
  /// Drains `node` with `reason` (one line, no quotes).
  virtual Status drain(const std::string& node, const std::string& reason) = 0;
  /// Returns a drained node to service.
  virtual Status resume(const std::string& node) = 0;
  virtual StatusOr<std::vector<Reservation>> reservations() = 0;
  /// A maintenance reservation (MAINT, IGNORE_JOBS) of `nodes` from now until deleted, for `users`.
  virtual Status createReservation(const std::string& name, const std::vector<std::string>& nodes,
                                   const std::string& users) = 0;
  /// Deletes a reservation; one that does not exist is not an error.
  virtual Status deleteReservation(const std::string& name) = 0;
  /// Submits a batch job; returns its id.
  virtual StatusOr<std::string> submit(const JobSpec& job) = 0;
  /// Every job named `name` Slurm still knows (in the queue, or ended within MinJobAge), in one call.
  virtual StatusOr<std::vector<JobInfo>> jobsNamed(const std::string& name) = 0;
  /// Cancels a job; one that already ended is not an error.
  virtual Status cancel(const std::string& id) = 0;
  /// Calls made so far (each command run, or each request of the stand-in).
  virtual std::int64_t calls() const = 0;
};

/// How the command client runs Slurm's commands.
struct CommandOptions {
  std::string bin_dir;         ///< where scontrol, sbatch, squeue and scancel are ("": /usr/bin, /usr/local/bin, ...)
  std::string slurm_conf;      ///< SLURM_CONF for the commands ("": Slurm's default)
  double timeout_s = 30;       ///< deadline of one command
  std::string job_script_dir;  ///< where the job launcher script is written ("": a private temporary directory)
};

/// The client over scontrol, sbatch, squeue and scancel. Each command runs with an environment of its own (PATH,
/// SLURM_CONF, LANG=C) and nothing else of this process's.
std::unique_ptr<Client> makeCommandClient(const CommandOptions& options);

// The parsers of the commands' output, public for their tests.

/// `scontrol show node -o` (one node per line).
StatusOr<std::vector<NodeInfo>> parseNodes(const std::string& text);
/// `scontrol show reservation -o`.
StatusOr<std::vector<Reservation>> parseReservations(const std::string& text);
/// `squeue -h -t all -o "%i|%j|%T|%N|%r"`.
StatusOr<std::vector<JobInfo>> parseJobs(const std::string& text);
/// A reason as peerlab writes it to Slurm: one line of printable text without quotes, at most kMaxReasonBytes.
std::string cleanReason(const std::string& reason);
inline constexpr size_t kMaxReasonBytes = 200;

}  // namespace peerlab::slurm
